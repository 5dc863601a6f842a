package verdict

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/gatekeeper"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/lookup"
)

// MaxEachPlaceholders bounds the elements of one list that get their own
// placeholder: past it, the list's printed values stay in the key (and
// the engine's registry of placeholders stays small).
const MaxEachPlaceholders = 64

// PathIndex numbers paths by their rendering, for the engine's life: the
// same path, the same number. It only grows: a path is a few bytes, and
// templates reuse the same paths.
type PathIndex struct {
	mu  sync.Mutex
	ids map[string]int
}

func (x *PathIndex) ID(key string) int {
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
type Placeholders struct {
	Prefix string
	paths  PathIndex
	// byElement are the paths of element i of the list a path through
	// analysis.Each names (its own index), found without rendering them.
	mu        sync.Mutex
	byElement map[[2]int]elementSlot
}

type elementSlot struct {
	index int
	text  string
}

func NewPlaceholders() *Placeholders {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Placeholders{Prefix: "opaph" + hex.EncodeToString(b[:]) + "_", byElement: map[[2]int]elementSlot{}}
}

// ofElement is of for element i of the list the printed path each names
// (concrete builds that element's path, on first need only).
func (ph *Placeholders) OfElement(each, i int, concrete func() []*ast.Term) (int, string) {
	ph.mu.Lock()
	e, ok := ph.byElement[[2]int{each, i}]
	ph.mu.Unlock()
	if ok {
		return e.index, e.text
	}
	idx, text := ph.Of(analysis.Input, concrete())
	ph.mu.Lock()
	ph.byElement[[2]int{each, i}] = elementSlot{idx, text}
	ph.mu.Unlock()
	return idx, text
}

// of gives the placeholder index and text of a path (root-qualified).
func (ph *Placeholders) Of(root analysis.Root, path []*ast.Term) (int, string) {
	i := ph.paths.ID(strconv.Itoa(int(root)) + analysis.PathString(path))
	return i, ph.Text(i)
}

func (ph *Placeholders) Text(i int) string { return ph.Prefix + strconv.Itoa(i) + "_" }

// MsgSlot is one printed path of a bound constraint.
type MsgSlot struct {
	Path []*ast.Term // below the input (review...) or the node
	// Quote and Trim are analysis.MessagePath's.
	Quote, Trim bool
	Index       int
	Text        string
	// plan reads path in the pod's review (nil for the node's paths).
	Plan *lookup.InputPlan
	// absent are the objects (paths below input) the template looks up by
	// keys built from the value (analysis.MessagePath.Absent).
	Absent [][]*ast.Term
	// Distinct: the values get placeholders only while pairwise distinct
	// (analysis.MessagePath.Distinct).
	Distinct bool
}

// substitutable reports whether a real value can stand where the
// placeholder was: a string; one that %q prints as "value" when a flow
// quotes it; and a non-empty one with no space at either end when the
// message is trimmed (CEL's: trim also holds quote, as a CEL message must
// be one line; an empty value at an end would let trimming reach the
// text beside it, and could leave the message empty).
func Substitutable(t *ast.Term, quote, trim bool) (string, bool) {
	if t == nil {
		return "", false
	}
	s, ok := t.Value.(ast.String)
	if !ok {
		return "", false
	}
	if (quote || trim) && !quotesAsIs(string(s)) {
		return "", false
	}
	if trim && (s == "" || strings.TrimSpace(string(s)) != string(s)) {
		return "", false
	}
	return string(s), true
}

// SubstitutableAt is substitutable for the value at path in v, and also
// requires the path to lead to it through objects and array indexes, where
// SetPath can put the placeholder.
func SubstitutableAt(v ast.Value, path []*ast.Term, quote, trim bool) (string, bool) {
	for i := range path {
		t := Child(v, path[i])
		if t == nil {
			return "", false
		}
		v = t.Value
	}
	return Substitutable(ast.NewTerm(v), quote, trim)
}

// child is v[key] for an object, or an array and an integer index (the
// elements of a path through analysis.Each); nil otherwise.
func Child(v ast.Value, key *ast.Term) *ast.Term {
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

// quotesAsIs reports whether strconv.Quote(s) is s between quotes: s is
// valid UTF-8 of printable runes (strconv.IsPrint) with no quote or
// backslash. It asks without quoting: a new replica's answer asked it of
// each printed value, and the quoted copies were a fortieth of what a
// cycle allocated.
func quotesAsIs(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f || c == '"' || c == '\\' {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || !strconv.IsPrint(r) {
			return false
		}
		i += size
	}
	return true
}

// PlaceholderKey stands in a memo key for "a substitutable value was
// here": a set, which no JSON value can be.
var PlaceholderKey = ast.SetTerm(ast.StringTerm("placeholder"))

// binding is one placeholder and the real value it stands for, also as
// it is written inside a JSON string (for details).
type Binding struct {
	index int
	value string
	json  string
	plain bool // value is plain text (isPlain)
}

// NewBinding binds placeholder index to value. A denied node's name is
// bound for each column that prints it, so the common case (printable
// ASCII with nothing JSON or HTML escapes) is one pass over value.
func NewBinding(index int, value string) Binding {
	plain, html := classify(value)
	b := Binding{index: index, value: value, json: value, plain: plain}
	if !plain || html {
		b.json = marshalInner(value)
	}
	return b
}

// classify reports whether s is plain (isPlain) and whether it holds a
// character encoding/json escapes as HTML (<, > or &), in one pass.
func classify(s string) (plain, html bool) {
	plain = true
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e || c == '"' || c == '\\':
			plain = false
		case c == '<' || c == '>' || c == '&':
			html = true
		}
	}
	return plain, html
}

// isPlain reports whether s is printable ASCII without quote or backslash:
// text that a JSON string holds as it is (PlainWriter).
func isPlain(s string) bool {
	plain, _ := classify(s)
	return plain
}

// JSONInner is value as encoding/json writes it between the quotes (HTML
// characters escaped, as json.Marshal does for details).
func JSONInner(value string) string {
	if plain, html := classify(value); plain && !html {
		return value // what encoding/json writes inside the quotes: no copy to keep
	}
	return marshalInner(value)
}

func marshalInner(value string) string {
	enc, _ := json.Marshal(value)
	return string(enc[1 : len(enc)-1])
}

// bindings are the substitutions of one answer.
type Bindings []Binding

func (b Bindings) lookup(i int) (*Binding, bool) {
	for k := range b {
		if b[k].index == i {
			return &b[k], true
		}
	}
	return nil, false
}

// Text is a message or details evaluated with placeholders, cut at them:
// lits[0] hole[0] lits[1] ... lits[n]. Cut once when the result is made,
// filled once per answer.
type Text struct {
	lits  []string
	holes []int
	// plain[k]: lits[k] is plain text (IsPlain), found once here rather
	// than on every answer that writes it.
	plain []bool
}

// cut splits s at the placeholders of ph; nil when it holds none.
func (ph *Placeholders) Cut(s string) *Text {
	if !strings.Contains(s, ph.Prefix) {
		return nil
	}
	t := &Text{}
	for {
		i := strings.Index(s, ph.Prefix)
		if i < 0 {
			break
		}
		rest := s[i+len(ph.Prefix):]
		j := strings.IndexByte(rest, '_')
		idx, err := strconv.Atoi(rest[:max(j, 0)])
		if j < 0 || err != nil {
			// Not one of ours after all: keep it as text.
			t.lits = append(t.lits, s[:i+len(ph.Prefix)])
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
func (ph *Placeholders) Fill(t *Text, b, b2 Bindings, inJSON bool) string {
	var sb strings.Builder
	n := 0
	for _, l := range t.lits {
		n += len(l)
	}
	sb.Grow(n + 32*len(t.holes))
	ph.FillTo(&sb, t, b, b2, inJSON)
	return sb.String()
}

// FillTo is fill writing into sb (which the caller sizes, if it can).
func (ph *Placeholders) FillTo(sb MessageWriter, t *Text, b, b2 Bindings, inJSON bool) {
	pw, _ := sb.(PlainWriter)
	for k, l := range t.lits {
		WriteText(sb, pw, l, t.plain[k])
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
			_, _ = sb.WriteString(ph.Text(t.holes[k]))
		case inJSON:
			_, _ = sb.WriteString(x.json)
		default:
			WriteText(sb, pw, x.value, x.plain)
		}
	}
}

// substitute puts real values into results evaluated with placeholders.
// Results without placeholders are returned as they are; results that
// become equal are merged again, as the violation set would have (a list
// keeps its order and duplicates).
func (ph *Placeholders) Substitute(res []Result, b Bindings) []Result {
	if len(b) == 0 || !AnyHoles(res) {
		return res
	}
	out := make([]Result, len(res))
	for i, x := range res {
		if x.MsgText != nil {
			x.Msg = ph.Fill(x.MsgText, b, nil, false)
			x.MsgPlain = isPlain(x.Msg)
			x.MsgText = nil
		}
		if x.DetailsText != nil {
			x.Details = []byte(ph.Fill(x.DetailsText, b, nil, true))
			x.DetailsText = nil
		}
		out[i] = x
	}
	if len(out) > 1 && !out[0].Listed {
		SortResults(out)
		out = slices.CompactFunc(out, func(a, b Result) bool {
			return a.Msg == b.Msg && string(a.Details) == string(b.Details) && a.Err == b.Err
		})
	}
	return out
}

// SetPath returns v with the value at path replaced by t, sharing every
// value it does not change. ok is false when the path does not lead
// through objects to an existing value.
func SetPath(v ast.Value, path []*ast.Term, t *ast.Term) (ast.Value, bool) {
	if len(path) == 0 {
		return t.Value, true
	}
	c := Child(v, path[0])
	if c == nil {
		return nil, false
	}
	nv, ok := SetPath(c.Value, path[1:], t)
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
	return gatekeeper.ReplaceKey(v.(ast.Object), path[0], ast.NewTerm(nv)), true
}
