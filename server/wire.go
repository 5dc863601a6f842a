package server

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/freelist"
)

// extenderArgsWire is ExtenderArgs with the pod and the Nodes' items left
// as JSON, for decodePod and the engine (opa.Candidate.JSON). Same field
// names, no tags, as ExtenderArgs: encoding/json matches them as it
// matches ExtenderArgs' (case-insensitively).
type extenderArgsWire struct {
	Pod       json.RawMessage
	Nodes     *nodeListWire
	NodeNames *[]string
	// names holds NodeNames when the scanner read them (interned, with
	// their numbers: nodenames.go); nil when encoding/json did.
	names *nameBuffers
}

// nodeListWire is a v1.NodeList whose items stay JSON, as the scheduler
// sent them: a kubelet's Node is 10 KB of JSON, which decoded into a typed
// Node and converted to the engine's values cost more than the policies
// that judge it (the engine reads only what its policy set reads of a
// Node: inventory.View.CutJSON). Its list metadata is typed, and echoed in
// the answer.
type nodeListWire struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []json.RawMessage `json:"items"`
	// names are the items' metadata.name when the scanner read them on
	// its way (one per item, "" when it could not tell: nodeItemName
	// reads those); nil when encoding/json read the list.
	names []string
}

// bodyBuffers recycles request bodies: a names-only request for 5000
// nodes is about 80 KiB, one with the full Nodes of 1000 kubelets about
// 10 MB. Read into a new buffer, doubled from the start, such a body cost
// the service a fifth of its CPU in that mode (the copies, and zeroing
// each new buffer), so buffers up to keptBodyBytes are kept. Names-only
// bodies' buffers (up to listedBodyBytes) stay in a free list, for any
// processor and through collections (package freelist says why); larger
// ones, full Nodes' megabytes, in a pool that lets them go after two
// collections without use. The buffer holds what the body holds after
// white space is dropped (limitBodies), so a padded body does not make its
// buffer big.
var (
	bodyBuffers      = freelist.List[*bytes.Buffer]{Max: 4}
	largeBodyBuffers sync.Pool
)

const (
	// listedBodyBytes bounds the body buffers kept in bodyBuffers: a
	// names-only request for 40,000 nodes.
	listedBodyBytes = 1 << 20
	// keptBodyBytes bounds those kept at all.
	keptBodyBytes = 16 << 20
)

// takeBody gives a body buffer, emptied: one kept before, or a new one.
func takeBody() *bytes.Buffer {
	buf := bodyBuffers.Get()
	if buf == nil {
		buf, _ = largeBodyBuffers.Get().(*bytes.Buffer)
	}
	if buf == nil {
		return new(bytes.Buffer)
	}
	buf.Reset()
	return buf
}

// keepBody keeps buf for a later request, by its size.
func keepBody(buf *bytes.Buffer) {
	switch {
	case buf.Cap() <= listedBodyBytes:
		bodyBuffers.Put(buf)
	case buf.Cap() <= keptBodyBytes: // a huge body is not kept for the next one
		largeBodyBuffers.Put(buf)
	}
}

// decodeExtenderArgs reads the ExtenderArgs of filter and prioritize.
// encoding/json spends most of a large request on scanning the node names
// (1.5 ms for 5000): scanExtenderArgs reads the envelope itself, and
// anything it is not sure of goes to encoding/json, whose values and error
// messages stay the reference. wire.Pod points into the body: it is valid
// until release is called.
func (s *Server) decodeExtenderArgs(w http.ResponseWriter, r *http.Request) (wire extenderArgsWire, release func(), rerr *requestError) {
	const what = "ExtenderArgs"
	release = func() {}
	if r.Body == nil || r.Body == http.NoBody {
		return wire, release, badRequest("empty request body: expected a JSON %s", what)
	}
	buf := takeBody()
	release = func() { keepBody(buf) }
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, s.maxBodyBytes)); err != nil {
		return wire, release, s.describeDecodeError(err, what)
	}
	if wire, ok := scanExtenderArgs(buf.Bytes()); ok {
		return wire, release, nil
	}
	return wire, release, s.decodeFrom(bytes.NewReader(buf.Bytes()), &wire, what)
}

// scanExtenderArgs reads a well-formed ExtenderArgs the way encoding/json
// does, or reports false: on malformed JSON, on keys with escapes or
// non-ASCII bytes (encoding/json folds some of those onto field names), on
// a field given twice, on node names that need unquoting, on a Nodes list
// with list metadata other than {} (kube-scheduler sends none), on data
// after the object. It never accepts a body
// that encoding/json refuses, or reads one differently (FuzzScanExtenderArgs).
func scanExtenderArgs(b []byte) (extenderArgsWire, bool) {
	var wire extenderArgsWire
	sc := scanner{b: b}
	sc.space()
	var seen [3]bool
	ok := sc.object(func(key string) bool {
		field := -1
		for j, name := range [...]string{"Pod", "Nodes", "NodeNames"} {
			if strings.EqualFold(key, name) {
				field = j
			}
		}
		if field >= 0 {
			if seen[field] {
				return false
			}
			seen[field] = true
		}
		start := sc.i
		switch field {
		case 0:
			if !sc.value(0) {
				return false
			}
			wire.Pod = b[start:sc.i]
			return true
		case 1:
			return sc.nodeList(&wire)
		case 2:
			return sc.nodeNames(&wire)
		}
		return sc.value(0)
	})
	return wire, ok && sc.end()
}

// nodeList reads Nodes: null, or a list whose items are JSON values (their
// spans in the body), with no list metadata but an empty object (what
// kube-scheduler sends); anything else goes to encoding/json.
func (sc *scanner) nodeList(wire *extenderArgsWire) bool {
	if sc.literal("null") {
		return true
	}
	list := &nodeListWire{}
	var seen [2]bool
	ok := sc.object(func(key string) bool {
		switch {
		case strings.EqualFold(key, "items") && !seen[0]:
			seen[0] = true
			return sc.items(list)
		case strings.EqualFold(key, "metadata") && !seen[1]:
			seen[1] = true
			return sc.object(func(string) bool { return false }) // {} only
		case strings.EqualFold(key, "items"), strings.EqualFold(key, "metadata"),
			strings.EqualFold(key, "kind"), strings.EqualFold(key, "apiVersion"):
			return false
		}
		return sc.value(1)
	})
	if ok {
		wire.Nodes = list
	}
	return ok
}

// items reads the items of a NodeList: null, or an array of JSON values
// kept as their spans in the body.
func (sc *scanner) items(list *nodeListWire) bool {
	if sc.literal("null") {
		return true
	}
	if !sc.consume('[') {
		return false
	}
	list.Items = []json.RawMessage{}
	sc.space()
	if sc.consume(']') {
		return true
	}
	for {
		sc.space()
		start := sc.i
		name, ok := sc.nodeItem()
		if !ok {
			return false
		}
		list.Items = append(list.Items, sc.b[start:sc.i:sc.i])
		list.names = append(list.names, name)
		sc.space()
		switch {
		case sc.consume(','):
		case sc.consume(']'):
			return true
		default:
			return false
		}
	}
}

// nodeItem reads an item of a NodeList, and on its way the Node's
// metadata.name when it is plain: keys without escapes, the name a plain
// string ("" otherwise: nodeItemName reads it from the item). One pass
// over the item: reading the name apart would be a second one.
func (sc *scanner) nodeItem() (name string, ok bool) {
	if sc.i >= len(sc.b) || sc.b[sc.i] != '{' {
		return "", sc.value(2)
	}
	ok = sc.object(func(key string) bool {
		if key != "metadata" {
			return sc.value(3)
		}
		name = "" // the last metadata is the one read
		if sc.i < len(sc.b) && sc.b[sc.i] == '{' {
			var ok bool
			name, ok = sc.metadataName()
			return ok
		}
		return sc.value(3)
	})
	return name, ok
}

// metadataName reads a Node's metadata object, and its name when plain.
func (sc *scanner) metadataName() (name string, ok bool) {
	ok = sc.object(func(key string) bool {
		start := sc.i
		if !sc.value(4) {
			return false
		}
		if key == "name" {
			name = ""
			if v := sc.b[start:sc.i]; len(v) > 2 && v[0] == '"' {
				inner := scanner{b: v}
				if s, plain := inner.plainString(); plain && inner.i == len(v) {
					name = s
				}
			}
		}
		return true
	})
	return name, ok
}

// object reads an object whose keys are plain strings (anything else is
// false: encoding/json reads such a body), handing each key to member,
// which reads its value.
func (sc *scanner) object(member func(key string) bool) bool {
	if !sc.consume('{') {
		return false
	}
	sc.space()
	if sc.consume('}') {
		return true
	}
	for {
		sc.space()
		key, plain := sc.plainString()
		if !plain {
			return false
		}
		sc.space()
		if !sc.consume(':') {
			return false
		}
		sc.space()
		if !member(key) {
			return false
		}
		sc.space()
		switch {
		case sc.consume(','):
		case sc.consume('}'):
			return true
		default:
			return false
		}
	}
}

// nodeNames reads NodeNames: null, or an array of plain strings, interned
// (nodenames.go) into recycled lists.
func (sc *scanner) nodeNames(wire *extenderArgsWire) bool {
	if sc.literal("null") {
		return true
	}
	if !sc.consume('[') {
		return false
	}
	buf := nameBuffersPool.Get()
	spans, ok := sc.nameSpans(buf.spans[:0])
	buf.spans = spans
	if !ok {
		nameBuffersPool.Put(buf)
		return false
	}
	buf.names = extend(buf.names, len(spans)) // intern writes every name
	buf.ids = resize(buf.ids, len(spans))
	internedNames.intern(sc.b, spans, buf.names, buf.ids)
	wire.NodeNames, wire.names = &buf.names, buf
	return true
}

// nameSpans appends to spans where each name of the array is, up to and
// including its closing bracket; false when an element is not a plain
// string or the array is malformed.
func (sc *scanner) nameSpans(spans []nameSpan) ([]nameSpan, bool) {
	sc.space()
	if sc.consume(']') {
		return spans, true
	}
	for {
		sc.space()
		start, end, ok := sc.plainSpan()
		if !ok {
			return spans, false
		}
		spans = append(spans, nameSpan{start, end})
		sc.space()
		switch {
		case sc.consume(','):
		case sc.consume(']'):
			return spans, true
		default:
			return spans, false
		}
	}
}

// resize gives xs n elements, zeroed, in its own array when it has room
// (opa's has its twin; this one never gives nil, which a list answered as
// [] must not be).
func resize[T any](xs []T, n int) []T {
	if cap(xs) < n || xs == nil {
		return make([]T, n)
	}
	xs = xs[:n]
	clear(xs)
	return xs
}

// extend gives xs n elements, never nil, without clearing them: for a
// list its caller writes whole. While the collector marks, clearing a list
// of pointers costs a write barrier per element.
func extend[T any](xs []T, n int) []T {
	if cap(xs) < n || xs == nil {
		return make([]T, n)
	}
	return xs[:n]
}

// scanner checks JSON as encoding/json's grammar has it. Its maxDepth is
// encoding/json's.
type scanner struct {
	b []byte
	i int
}

const maxDepth = 10000

func (sc *scanner) space() {
	for sc.i < len(sc.b) {
		switch sc.b[sc.i] {
		case ' ', '\t', '\n', '\r':
			sc.i++
		default:
			return
		}
	}
}

func (sc *scanner) consume(c byte) bool {
	if sc.i < len(sc.b) && sc.b[sc.i] == c {
		sc.i++
		return true
	}
	return false
}

func (sc *scanner) end() bool {
	sc.space()
	return sc.i == len(sc.b)
}

func (sc *scanner) literal(word string) bool {
	if len(sc.b)-sc.i >= len(word) && string(sc.b[sc.i:sc.i+len(word)]) == word {
		sc.i += len(word)
		return true
	}
	return false
}

// plainString reads a string of printable ASCII without escapes.
func (sc *scanner) plainString() (string, bool) {
	start, end, ok := sc.plainSpan()
	if !ok {
		return "", false
	}
	return string(sc.b[start:end]), true
}

// plainSpan is plainString's content as offsets into the body.
func (sc *scanner) plainSpan() (start, end int, ok bool) {
	if !sc.consume('"') {
		return 0, 0, false
	}
	start = sc.i
	for ; sc.i < len(sc.b); sc.i++ {
		switch c := sc.b[sc.i]; {
		case c == '"':
			end = sc.i
			sc.i++
			return start, end, true
		case !plainJSON[c]:
			return 0, 0, false
		}
	}
	return 0, 0, false
}

// value skips one JSON value.
func (sc *scanner) value(depth int) bool {
	if sc.i >= len(sc.b) {
		return false
	}
	switch c := sc.b[sc.i]; {
	case c == '{' || c == '[':
		return depth < maxDepth && sc.composite(depth+1)
	case c == '"':
		return sc.str()
	case c == '-' || (c >= '0' && c <= '9'):
		return sc.number()
	default:
		return sc.literal("true") || sc.literal("false") || sc.literal("null")
	}
}

// composite skips an object or an array.
func (sc *scanner) composite(depth int) bool {
	closing, object := byte(']'), sc.b[sc.i] == '{'
	if object {
		closing = '}'
	}
	sc.i++
	sc.space()
	if sc.consume(closing) {
		return true
	}
	for {
		sc.space()
		if object {
			if !sc.str() {
				return false
			}
			sc.space()
			if !sc.consume(':') {
				return false
			}
			sc.space()
		}
		if !sc.value(depth) {
			return false
		}
		sc.space()
		switch {
		case sc.consume(','):
		case sc.consume(closing):
			return true
		default:
			return false
		}
	}
}

// str skips a string: no control byte, only JSON's escapes; other bytes
// (invalid UTF-8 too) as encoding/json takes them.
func (sc *scanner) str() bool {
	if !sc.consume('"') {
		return false
	}
	for sc.i < len(sc.b) {
		// Most strings hold no escape: up to the next quote at once.
		rest := sc.b[sc.i:]
		q := bytes.IndexByte(rest, '"')
		if q < 0 {
			return false
		}
		j := escapeOrControl(rest[:q])
		if j < 0 {
			sc.i += q + 1
			return true
		}
		sc.i += j
		c := sc.b[sc.i]
		sc.i++
		switch {
		case c == '"':
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if sc.i >= len(sc.b) {
				return false
			}
			e := sc.b[sc.i]
			sc.i++
			switch e {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(sc.b)-sc.i < 4 {
					return false
				}
				for _, h := range sc.b[sc.i : sc.i+4] {
					if !isHex(h) {
						return false
					}
				}
				sc.i += 4
			default:
				return false
			}
		}
	}
	return false
}

// escapeOrControl is the index of the first backslash or control byte of
// b, or -1: eight bytes at a time (a byte is < 0x20 when subtracting 0x20
// borrows into its top bit, which it did not have; a backslash is a zero
// byte after xor with 0x5c).
func escapeOrControl(b []byte) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		y := x ^ (ones * '\\')
		if ((x-ones*0x20)&^x|(y-ones)&^y)&highs != 0 {
			break
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c < 0x20 || c == '\\' {
			return i
		}
	}
	return -1
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// number skips -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?.
func (sc *scanner) number() bool {
	sc.consume('-')
	digits := func() bool {
		start := sc.i
		for sc.i < len(sc.b) && sc.b[sc.i] >= '0' && sc.b[sc.i] <= '9' {
			sc.i++
		}
		return sc.i > start
	}
	if !sc.consume('0') && !digits() {
		return false
	}
	if sc.consume('.') && !digits() {
		return false
	}
	if sc.consume('e') || sc.consume('E') {
		if !sc.consume('+') {
			sc.consume('-')
		}
		if !digits() {
			return false
		}
	}
	return true
}

// nodeItemName reads the metadata.name of a Node sent as JSON (valid JSON:
// the body was read whole), as the engine sees the Node: keys matched
// exactly, the last of a key given twice. problem, when the item has no
// name, says why.
func nodeItemName(raw []byte) (name, problem string) {
	md, kind := member(raw, "metadata")
	switch {
	case kind == memberNotObject:
		return "", "is not a JSON object"
	case kind == memberMissing:
		return "", "has no metadata.name"
	}
	v, kind := member(md, "name")
	switch {
	case kind == memberNotObject:
		return "", "has a metadata that is not a JSON object"
	case kind == memberMissing:
		return "", "has no metadata.name"
	}
	sc := scanner{b: v}
	if s, ok := sc.plainString(); ok && sc.i == len(v) {
		name = s
	} else if err := json.Unmarshal(v, &name); err != nil {
		return "", "has a metadata.name that is not a string"
	}
	if name == "" {
		return "", "has no metadata.name"
	}
	return name, ""
}

// memberKind is what member found.
type memberKind int

const (
	memberFound memberKind = iota
	memberMissing
	memberNotObject
)

// member is the value of key in the JSON object obj (valid JSON), the
// last when given twice.
func member(obj []byte, key string) ([]byte, memberKind) {
	sc := scanner{b: obj}
	sc.space()
	if !sc.consume('{') {
		return nil, memberNotObject
	}
	var v []byte
	kind := memberMissing
	sc.space()
	if sc.consume('}') {
		return nil, memberMissing
	}
	for {
		sc.space()
		at := sc.i
		k, plain := sc.plainString()
		if !plain { // a key with escapes: its text decoded
			sc.i = at
			if !sc.str() || json.Unmarshal(obj[at:sc.i], &k) != nil {
				return nil, memberNotObject
			}
		}
		sc.space()
		sc.consume(':')
		sc.space()
		start := sc.i
		if !sc.value(0) {
			return nil, memberNotObject
		}
		if k == key {
			v, kind = obj[start:sc.i], memberFound
		}
		sc.space()
		if !sc.consume(',') {
			return v, kind
		}
	}
}
