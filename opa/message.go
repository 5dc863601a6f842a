package opa

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/lookup"
)

// Values that only reach messages (analysis.MessagePath) are evaluated as
// placeholders and put back afterwards. A placeholder is
// "opaph<process token>_<index>_": the token is random per process, so no
// pod or node can carry one; the index names one path in the engine's
// registry, so that one placeholder review serves every constraint that
// prints the same paths. Placeholders are letters, digits and '_': %v, %s,
// %q and JSON leave them as they are.

// pathIndex numbers paths by their rendering, for the engine's life: the
// same path, the same number. It only grows: a path is a few bytes, and
// templates reuse the same paths.
type pathIndex struct {
	mu  sync.Mutex
	ids map[string]int
}

func (x *pathIndex) id(key string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.ids == nil {
		x.ids = map[string]int{}
	}
	id, ok := x.ids[key]
	if !ok {
		id = len(x.ids)
		x.ids[key] = id
	}
	return id
}

// placeholders is the engine's registry of printed paths.
type placeholders struct {
	prefix string
	paths  pathIndex
	// byElement are the paths of element i of the list a path through
	// analysis.Each names (its own index), found without rendering them.
	mu        sync.Mutex
	byElement map[[2]int]elementSlot
}

type elementSlot struct {
	index int
	text  string
}

func newPlaceholders() *placeholders {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &placeholders{prefix: "opaph" + hex.EncodeToString(b[:]) + "_", byElement: map[[2]int]elementSlot{}}
}

// ofElement is of for element i of the list the printed path each names
// (concrete builds that element's path, on first need only).
func (ph *placeholders) ofElement(each, i int, concrete func() []*ast.Term) (int, string) {
	ph.mu.Lock()
	e, ok := ph.byElement[[2]int{each, i}]
	ph.mu.Unlock()
	if ok {
		return e.index, e.text
	}
	idx, text := ph.of(analysis.Input, concrete())
	ph.mu.Lock()
	ph.byElement[[2]int{each, i}] = elementSlot{idx, text}
	ph.mu.Unlock()
	return idx, text
}

// of gives the placeholder index and text of a path (root-qualified).
func (ph *placeholders) of(root analysis.Root, path []*ast.Term) (int, string) {
	i := ph.paths.id(strconv.Itoa(int(root)) + analysis.PathString(path))
	return i, ph.text(i)
}

func (ph *placeholders) text(i int) string { return ph.prefix + strconv.Itoa(i) + "_" }

// msgSlot is one printed path of a bound constraint.
type msgSlot struct {
	path  []*ast.Term // below the input (review...) or the node
	quote bool
	index int
	text  string
	// plan reads path in the pod's review (nil for the node's paths).
	plan *lookup.InputPlan
	// absent are the objects (paths below input) the template looks up by
	// keys built from the value (analysis.MessagePath.Absent).
	absent [][]*ast.Term
}

// keptPrinted explains, for explain, which of the pod's values bc prints
// stayed in the key and why: the tests walkMsgs makes, with their reasons.
func (r *request) keptPrinted(bc *boundConstraint) []string {
	var out []string
	for i := range bc.podMsgs {
		m := &bc.podMsgs[i]
		if len(m.path) == 0 || !m.path[0].Equal(lookup.ReviewKey) {
			continue
		}
		j := analysis.EachAt(m.path)
		if j < 0 {
			if why := r.keptWhy(m, r.podReview.Value, m.path[1:]); why != "" {
				out = append(out, "input"+analysis.PathString(m.path)+": "+why)
			}
			continue
		}
		arr, ok := lookup.Input(r.podReview, m.path[:j]).Value.(*ast.Array)
		if !ok || arr.Len() > maxEachPlaceholders {
			continue // the list is keyed as lookup reads it (not printed value by value)
		}
		for k := 0; k < arr.Len(); k++ {
			if why := r.keptWhy(m, arr.Elem(k).Value, m.path[j+1:]); why != "" {
				concrete := append(append(append([]*ast.Term(nil), m.path[:j]...), ast.InternedTerm(k)), m.path[j+1:]...)
				out = append(out, "input"+analysis.PathString(concrete)+": "+why)
			}
		}
	}
	return out
}

// keptWhy is why the value at path below v gets no placeholder ("" when
// it gets one): walkMsgs' tests, in order.
func (r *request) keptWhy(m *msgSlot, v ast.Value, path []*ast.Term) string {
	if s, ok := substitutableAt(v, path, m.quote); ok {
		if r.absentFrom(m, s) {
			return ""
		}
		keys := make([]string, len(m.absent))
		for i, p := range m.absent {
			keys[i] = "input" + analysis.PathString(p)
		}
		return "it is empty or a key of " + strings.Join(keys, " or ") + " holds it"
	}
	for _, k := range path {
		t := child(v, k)
		if t == nil {
			return "" // missing: keyed as such, a class all such pods share
		}
		v = t.Value
	}
	if _, ok := v.(ast.String); !ok {
		return "not a string"
	}
	return "printed with %q, which escapes it"
}

// absentFrom reports whether s, a value about to get a placeholder, is in
// no key of the objects at m.absent in the pod's review, and no
// placeholder is either: a lookup there by a key built from it then
// misses with the real value and with the placeholder alike
// (opa/internal/analysis/lookupkey.go). The empty string is in every key.
func (r *request) absentFrom(m *msgSlot, s string) bool {
	if len(m.absent) == 0 {
		return true
	}
	if s == "" {
		return false
	}
	for _, p := range m.absent {
		if len(p) == 0 || !p[0].Equal(lookup.ReviewKey) {
			return false // the analysis gives objects of the review only
		}
		obj, ok := lookup.Input(r.podReview, p).Value.(ast.Object)
		if !ok {
			continue // not an object (or missing): the lookup misses either way
		}
		held := obj.Until(func(k, _ *ast.Term) bool {
			ks, isStr := k.Value.(ast.String)
			return isStr && (strings.Contains(string(ks), s) || strings.Contains(string(ks), r.e.ph.prefix))
		})
		if held {
			return false
		}
	}
	return true
}

// substitutable reports whether a real value can stand where the
// placeholder was: a string, and one that %q prints as "value" when a
// flow quotes it.
func substitutable(t *ast.Term, quote bool) (string, bool) {
	if t == nil {
		return "", false
	}
	s, ok := t.Value.(ast.String)
	if !ok {
		return "", false
	}
	if quote && strconv.Quote(string(s)) != `"`+string(s)+`"` {
		return "", false
	}
	return string(s), true
}

// substitutableAt is substitutable for the value at path in v, and also
// requires the path to lead to it through objects and array indexes, where
// setPath can put the placeholder.
func substitutableAt(v ast.Value, path []*ast.Term, quote bool) (string, bool) {
	for i := range path {
		t := child(v, path[i])
		if t == nil {
			return "", false
		}
		v = t.Value
	}
	return substitutable(ast.NewTerm(v), quote)
}

// child is v[key] for an object, or an array and an integer index (the
// elements of a path through analysis.Each); nil otherwise.
func child(v ast.Value, key *ast.Term) *ast.Term {
	switch x := v.(type) {
	case ast.Object:
		return x.Get(key)
	case *ast.Array:
		if i, ok := arrayIndex(x, key); ok {
			return x.Elem(i)
		}
	}
	return nil
}

func arrayIndex(arr *ast.Array, key *ast.Term) (int, bool) {
	n, ok := key.Value.(ast.Number)
	if !ok {
		return 0, false
	}
	i, ok := n.Int()
	return i, ok && i >= 0 && i < arr.Len()
}

// placeholderKey stands in a memo key for "a substitutable value was
// here": a set, which no JSON value can be.
var placeholderKey = ast.SetTerm(ast.StringTerm("placeholder"))

// binding is one placeholder and the real value it stands for, also as
// it is written inside a JSON string (for details).
type binding struct {
	index int
	value string
	json  string
	plain bool // value is plain text (isPlain)
}

func newBinding(index int, value string) binding {
	return binding{index: index, value: value, json: jsonInner(value), plain: isPlain(value)}
}

// isPlain reports whether s is printable ASCII without quote or backslash:
// text that a JSON string holds as it is (PlainWriter).
func isPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// jsonInner is value as encoding/json writes it between the quotes (HTML
// characters escaped, as json.Marshal does for details).
func jsonInner(value string) string {
	if isPlain(value) && !strings.ContainsAny(value, "<>&") {
		return value // what encoding/json writes inside the quotes: no copy to keep
	}
	enc, _ := json.Marshal(value)
	return string(enc[1 : len(enc)-1])
}

// bindings are the substitutions of one answer.
type bindings []binding

func (b bindings) lookup(i int) (*binding, bool) {
	for k := range b {
		if b[k].index == i {
			return &b[k], true
		}
	}
	return nil, false
}

// text is a message or details evaluated with placeholders, cut at them:
// lits[0] hole[0] lits[1] ... lits[n]. Cut once when the result is made,
// filled once per answer.
type text struct {
	lits  []string
	holes []int
	// plain[k]: lits[k] is plain text (isPlain), found once here rather
	// than on every answer that writes it.
	plain []bool
}

// cut splits s at the placeholders of ph; nil when it holds none.
func (ph *placeholders) cut(s string) *text {
	if !strings.Contains(s, ph.prefix) {
		return nil
	}
	t := &text{}
	for {
		i := strings.Index(s, ph.prefix)
		if i < 0 {
			break
		}
		rest := s[i+len(ph.prefix):]
		j := strings.IndexByte(rest, '_')
		idx, err := strconv.Atoi(rest[:max(j, 0)])
		if j < 0 || err != nil {
			// Not one of ours after all: keep it as text.
			t.lits = append(t.lits, s[:i+len(ph.prefix)])
			t.holes = append(t.holes, -1)
			s = rest
			continue
		}
		t.lits = append(t.lits, s[:i])
		t.holes = append(t.holes, idx)
		s = rest[j+1:]
	}
	t.lits = append(t.lits, s)
	t.plain = make([]bool, len(t.lits))
	for k, l := range t.lits {
		t.plain[k] = isPlain(l)
	}
	return t
}

// fill writes the text with the values bound in b or b2 (JSON-escaped
// with inJSON); a placeholder neither binds stays as it was.
func (ph *placeholders) fill(t *text, b, b2 bindings, inJSON bool) string {
	var sb strings.Builder
	n := 0
	for _, l := range t.lits {
		n += len(l)
	}
	sb.Grow(n + 32*len(t.holes))
	ph.fillTo(&sb, t, b, b2, inJSON)
	return sb.String()
}

// fillTo is fill writing into sb (which the caller sizes, if it can).
func (ph *placeholders) fillTo(sb MessageWriter, t *text, b, b2 bindings, inJSON bool) {
	pw, _ := sb.(PlainWriter)
	for k, l := range t.lits {
		writeText(sb, pw, l, t.plain[k])
		if k == len(t.holes) {
			break
		}
		if t.holes[k] < 0 {
			continue
		}
		x, ok := b.lookup(t.holes[k])
		if !ok {
			x, ok = b2.lookup(t.holes[k])
		}
		switch {
		case !ok:
			_, _ = sb.WriteString(ph.text(t.holes[k]))
		case inJSON:
			_, _ = sb.WriteString(x.json)
		default:
			writeText(sb, pw, x.value, x.plain)
		}
	}
}

// writeText writes s, as plain text when it is and w takes it so.
func writeText(w MessageWriter, pw PlainWriter, s string, plain bool) {
	if plain && pw != nil {
		pw.WritePlain(s)
		return
	}
	_, _ = w.WriteString(s)
}

// substitute puts real values into results evaluated with placeholders.
// Results without placeholders are returned as they are; results that
// become equal are merged again, as the violation set would have.
func (ph *placeholders) substitute(res []result, b bindings) []result {
	if len(b) == 0 || !anyHoles(res) {
		return res
	}
	out := make([]result, len(res))
	for i, x := range res {
		if x.msgText != nil {
			x.msg = ph.fill(x.msgText, b, nil, false)
			x.msgPlain = isPlain(x.msg)
			x.msgText = nil
		}
		if x.detailsText != nil {
			x.details = []byte(ph.fill(x.detailsText, b, nil, true))
			x.detailsText = nil
		}
		out[i] = x
	}
	if len(out) > 1 {
		sortResults(out)
		out = slices.CompactFunc(out, func(a, b result) bool {
			return a.msg == b.msg && string(a.details) == string(b.details) && a.err == b.err
		})
	}
	return out
}

// setPath returns v with the value at path replaced by t, sharing every
// value it does not change. ok is false when the path does not lead
// through objects to an existing value.
func setPath(v ast.Value, path []*ast.Term, t *ast.Term) (ast.Value, bool) {
	if len(path) == 0 {
		return t.Value, true
	}
	c := child(v, path[0])
	if c == nil {
		return nil, false
	}
	nv, ok := setPath(c.Value, path[1:], t)
	if !ok {
		return nil, false
	}
	if arr, isArray := v.(*ast.Array); isArray {
		i, _ := arrayIndex(arr, path[0])
		elems := make([]*ast.Term, arr.Len())
		for k := range elems {
			elems[k] = arr.Elem(k)
		}
		elems[i] = ast.NewTerm(nv)
		return ast.NewArray(elems...), true
	}
	return replaceKey(v.(ast.Object), path[0], ast.NewTerm(nv)), true
}

// denyPiece is a part of a column's deny message for one of its results
// ("[<constraint>] " and the message), joined for the whole column: the
// literal parts and the pod's printed values, which are the same on every
// node, as one text; then, when hole >= 0, the node's printed value there.
// Written per denied node, a message of ten parts is two or three pieces.
type denyPiece struct {
	text  string
	plain bool
	hole  int // -1: none
}

// denyPieces joins "[<constraint>] " and t filled with the pod's values
// pod into pieces, leaving the holes pod does not fill to each node.
func denyPieces(constraint string, t *text, pod bindings) []denyPiece {
	var out []denyPiece
	var cur strings.Builder
	plain := true
	add := func(s string, p bool) {
		cur.WriteString(s)
		plain = plain && p
	}
	add("[", true)
	add(constraint, isPlain(constraint))
	add("] ", true)
	for k, l := range t.lits {
		add(l, t.plain[k])
		if k == len(t.holes) {
			break
		}
		h := t.holes[k]
		if h < 0 {
			continue
		}
		if x, ok := pod.lookup(h); ok {
			add(x.value, x.plain)
			continue
		}
		out = append(out, denyPiece{text: cur.String(), plain: plain, hole: h})
		cur.Reset()
		plain = true
	}
	return append(out, denyPiece{text: cur.String(), plain: plain, hole: -1})
}

// writeDenyPieces writes pieces with node's printed values in their holes
// (a value node lacks is written as its placeholder, as fillTo does).
func (ph *placeholders) writeDenyPieces(w MessageWriter, pw PlainWriter, pieces []denyPiece, node bindings) {
	for i := range pieces {
		pc := &pieces[i]
		writeText(w, pw, pc.text, pc.plain)
		if pc.hole < 0 {
			continue
		}
		if x, ok := node.lookup(pc.hole); ok {
			writeText(w, pw, x.value, x.plain)
		} else {
			_, _ = w.WriteString(ph.text(pc.hole))
		}
	}
}
