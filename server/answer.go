package server

import (
	"encoding/json"
	"strconv"
	"sync/atomic"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/freelist"
)

// filterAnswer is an ExtenderFilterResult written without reflection. At
// 5000 candidates the answer holds a message per denied node; encoding/json
// would sort the FailedNodesMap keys and walk it by reflection, which cost
// as much as evaluating the policy. The bytes decode to the same
// extenderv1.ExtenderFilterResult (field names as the struct's, which has
// no json tags; every field present), keys in the request's order.
type filterAnswer struct {
	nodes     *nodeListWire
	nodeNames *[]string
	// failed and unresolvable are nil when the request had none, which
	// is written as null, as encoding/json writes a nil map.
	failed       []failedNode
	unresolvable []failedNode
}

// filterBuffers are a filter call's per-node lists (the passed nodes,
// the denied ones, the names answered), reused by later calls: at 5000
// candidates they are a few hundred KB per call that the answer, once
// written, no longer needs.
type filterBuffers struct {
	passed       []int
	unresolvable []failedNode
	names        []string
}

var filterBuffersPool = freelist.List[*filterBuffers]{New: func() *filterBuffers { return new(filterBuffers) }}

// release drops what the lists refer to (placements, names) and returns
// them to the pool.
func (b *filterBuffers) release() {
	clear(b.unresolvable)
	clear(b.names)
	b.passed, b.unresolvable, b.names = b.passed[:0], b.unresolvable[:0], b.names[:0]
	filterBuffersPool.Put(b)
}

// failedNode is one FailedNodes entry: reason, or the deny message of
// node index of placement when placement is set (written straight into
// the answer).
type failedNode struct {
	name      string
	reason    string
	placement *opa.Placement
	index     int
}

// scoreAnswer is prioritize's HostPriorityList, written without
// reflection and without the list: each node's score is read from the
// answer as its entry is written (for 5000 hosts the list was a tenth of
// the call's allocations, encoding/json's walk a tenth of its time). The
// bytes are encoding/json's for the list (TestScoreAnswerIsEncodingJSON).
type scoreAnswer struct {
	names []string // the request's, one per p.Nodes
	p     *opa.Placement
}

// score is node i's: Placement.Score (0..10, lowered by warn violations);
// unknown and denied nodes score 0 (denied nodes only reach prioritize
// when the extender is configured without filter).
func (a scoreAnswer) score(i int) int64 {
	if a.p.Nodes[i].Unknown || a.p.Denied(i) {
		return extenderv1.MinExtenderPriority
	}
	return clampScore(a.p.Score(i))
}

func (a scoreAnswer) appendJSON(b []byte, s *answerSpill) ([]byte, error) {
	b = append(b, '[')
	for i := range a.p.Nodes {
		if i > 0 {
			b = append(s.check(b), ',')
		}
		b = append(b, `{"Host":`...)
		b = appendJSONString(b, a.names[i])
		b = append(b, `,"Score":`...)
		b = strconv.AppendInt(b, a.score(i), 10)
		b = append(b, '}')
	}
	return append(b, "]\n"...), nil
}

// appendJSON appends the answer and the newline json.Encoder ends with.
func (a *filterAnswer) appendJSON(b []byte, s *answerSpill) ([]byte, error) {
	b = append(b, `{"Nodes":`...)
	if a.nodes == nil {
		b = append(b, "null"...)
	} else {
		var err error
		if b, err = appendNodeList(b, a.nodes, s); err != nil {
			return nil, err
		}
	}
	b = append(b, `,"NodeNames":`...)
	if a.nodeNames == nil || *a.nodeNames == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, n := range *a.nodeNames {
			if i > 0 {
				b = append(s.check(b), ',')
			}
			b = appendJSONString(b, n)
		}
		b = append(b, ']')
	}
	b = append(b, `,"FailedNodes":`...)
	b = appendFailed(b, a.failed, s)
	b = append(b, `,"FailedAndUnresolvableNodes":`...)
	b = appendFailed(b, a.unresolvable, s)
	// Errors are answered by filterError, never by a filterAnswer.
	return append(b, `,"Error":""}`+"\n"...), nil
}

// appendNodeList writes a NodeList as v1.NodeList's JSON has it (type
// meta, metadata, items), its items as the request sent them.
func appendNodeList(b []byte, l *nodeListWire, s *answerSpill) ([]byte, error) {
	head, err := json.Marshal(struct {
		metav1.TypeMeta `json:",inline"`
		metav1.ListMeta `json:"metadata,omitempty"`
	}{l.TypeMeta, l.ListMeta})
	if err != nil {
		return nil, err
	}
	b = append(b, head[:len(head)-1]...) // its members: metadata is always one
	b = append(b, `,"items":`...)
	if l.Items == nil {
		return append(b, "null}"...), nil
	}
	b = append(b, '[')
	for i, item := range l.Items {
		if i > 0 {
			b = append(s.check(b), ',')
		}
		b = append(b, item...)
	}
	return append(b, "]}"...), nil
}

func appendFailed(b []byte, nodes []failedNode, s *answerSpill) []byte {
	if nodes == nil {
		return append(b, "null"...)
	}
	// One writer for every message of the answer: the messages are
	// written into the answer as they are escaped, never built first.
	w := &jsonStringWriter{b: b}
	w.b = append(w.b, '{')
	for i := range nodes {
		if i > 0 {
			w.b = append(s.check(w.b), ',')
		}
		n := &nodes[i]
		w.b = appendJSONString(w.b, n.name)
		w.b = append(w.b, ':', '"')
		if n.placement == nil {
			w.b = appendJSONStringBody(w.b, n.reason)
		} else {
			n.placement.WriteDenyMessage(w, n.index)
		}
		w.b = append(w.b, '"')
	}
	return append(w.b, '}')
}

// jsonStringWriter appends what it is given to b escaped as the inside of
// a JSON string (an opa.MessageWriter).
type jsonStringWriter struct{ b []byte }

func (w *jsonStringWriter) WriteString(s string) (int, error) {
	w.b = appendJSONStringBody(w.b, s)
	return len(s), nil
}

// WritePlain appends s as it is: plain text needs no escaping.
func (w *jsonStringWriter) WritePlain(s string) { w.b = append(w.b, s...) }

var _ opa.PlainWriter = (*jsonStringWriter)(nil)

func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	b = appendJSONStringBody(b, s)
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// appendJSONStringBody escapes s as encoding/json does with
// SetEscapeHTML(false): quote, backslash and control characters escaped
// (\n, \r, \t, \b, \f by name, the rest as \u00XX), invalid UTF-8 replaced by
// U+FFFD, and U+2028 and U+2029 escaped (JavaScript line terminators).
func appendJSONStringBody(b []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		// Deny messages are mostly plain ASCII: skip such bytes with one
		// table lookup each, and look closer only where one may need care.
		for i < len(s) && plainJSON[s[i]] {
			i++
		}
		if i == len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(b, s[start:]...)
}

// plainJSON marks the bytes JSON writes as they are: printable ASCII
// other than quote and backslash.
var plainJSON = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// answerPool recycles answer buffers: a 5000-node filter answer is about
// 700 KB. The buffers stay in a free list, for any processor and through
// collections (package freelist says why). A buffer smaller than the
// larger answers of its kind written lately is replaced by one of their
// size, not grown to it by doubling from a small one: growth by doubling
// was 2 MB of garbage per buffer.
type answerPool struct {
	pool freelist.List[*[]byte]
	// large is the length of the larger answers written lately: the
	// largest, decaying by a sixteenth with each smaller one (answers of
	// one kind vary with how many nodes are denied).
	large atomic.Int64
}

func (p *answerPool) get() *[]byte {
	want := p.large.Load()
	if bp := p.pool.Get(); bp != nil && int64(cap(*bp)) >= want {
		return bp
	}
	b := make([]byte, 0, max(64<<10, want+want/8))
	return &b
}

func (p *answerPool) put(bp *[]byte, used int) {
	for {
		old := p.large.Load()
		next := max(int64(used), old-old/16)
		if next == old || p.large.CompareAndSwap(old, next) {
			break
		}
	}
	if cap(*bp) <= maxPooledAnswer { // full-node answers (megabytes) are not kept
		*bp = (*bp)[:0]
		p.pool.Put(bp)
	}
}

// answerBuffers are the answers' buffers; filterAnswerBuffers filter's
// (pooledAnswer).
var answerBuffers, filterAnswerBuffers answerPool

func (a *filterAnswer) buffers() *answerPool { return &filterAnswerBuffers }
