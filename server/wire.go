package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
)

// extenderArgsWire is ExtenderArgs with the pod left as JSON, for
// decodePod. Same field names, no tags, as ExtenderArgs: encoding/json
// matches them as it matches ExtenderArgs' (case-insensitively).
type extenderArgsWire struct {
	Pod       json.RawMessage
	Nodes     *v1.NodeList
	NodeNames *[]string
	// names holds NodeNames when the scanner read them (interned, with
	// their numbers: nodenames.go); nil when encoding/json did.
	names *nameBuffers
}

// bodyBuffers recycles request bodies: a names-only request for 5000
// nodes is about 80 KiB.
var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

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
	buf := bodyBuffers.Get().(*bytes.Buffer)
	buf.Reset()
	release = func() {
		if buf.Cap() <= 4<<20 { // a huge body is not kept for the next one
			bodyBuffers.Put(buf)
		}
	}
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
// that does not decode, on data after the object. It never accepts a body
// that encoding/json refuses, or reads one differently (FuzzScanExtenderArgs).
func scanExtenderArgs(b []byte) (extenderArgsWire, bool) {
	var wire extenderArgsWire
	sc := scanner{b: b}
	sc.space()
	if !sc.consume('{') {
		return wire, false
	}
	sc.space()
	if sc.consume('}') {
		return wire, sc.end()
	}
	var seen [3]bool
	for {
		sc.space()
		key, ok := sc.plainString()
		if !ok {
			return wire, false
		}
		sc.space()
		if !sc.consume(':') {
			return wire, false
		}
		sc.space()
		field := -1
		for j, name := range [...]string{"Pod", "Nodes", "NodeNames"} {
			if strings.EqualFold(key, name) {
				field = j
			}
		}
		if field >= 0 {
			if seen[field] {
				return wire, false
			}
			seen[field] = true
		}
		start := sc.i
		switch field {
		case 0:
			if !sc.value(0) {
				return wire, false
			}
			wire.Pod = b[start:sc.i]
		case 1:
			if !sc.value(0) {
				return wire, false
			}
			if raw := b[start:sc.i]; string(raw) != "null" {
				wire.Nodes = &v1.NodeList{}
				if json.Unmarshal(raw, wire.Nodes) != nil {
					return wire, false
				}
			}
		case 2:
			if !sc.nodeNames(&wire) {
				return wire, false
			}
		default:
			if !sc.value(0) {
				return wire, false
			}
		}
		sc.space()
		switch {
		case sc.consume(','):
		case sc.consume('}'):
			return wire, sc.end()
		default:
			return wire, false
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
	buf := nameBuffersPool.Get().(*nameBuffers)
	spans, ok := sc.nameSpans(buf.spans[:0])
	buf.spans = spans
	if !ok {
		nameBuffersPool.Put(buf)
		return false
	}
	buf.names = resize(buf.names, len(spans)) // never nil: an empty list is []
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
