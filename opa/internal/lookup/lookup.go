package lookup

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/memo"
)

var (
	// ReviewKey is the input's review: the root of every path read per
	// request.
	ReviewKey = ast.StringTerm("review")
	// Undefined stands for "nothing at this path" in memo keys: an
	// empty set, which no JSON value can be.
	Undefined = ast.SetTerm()
)

// InputPlan reads a path of the input {review, parameters}: paths other
// than review.* are constant or absent for a constraint.
type InputPlan struct {
	// cond: the path began with When; members are its alternatives (any
	// one holding is enough), condAny when one's list is not the review's
	// (the condition is then taken to hold).
	cond    bool
	condAny bool
	members []memberPlan
	// condID numbers the When among those of every plan (Tables), its
	// place in Lists: the reads below one comprehension share its When.
	condID int
	// notReview: the path (after When) is not below review.
	notReview bool
	body      *lookupPlan
}

// memberPlan reads one member of a When: the list (below review) and the
// filter its element must pass.
type memberPlan struct {
	list   *lookupPlan
	filter []*lookupPlan
}

// Tables are what the plans of one engine share: the numbers of the paths
// they read through a request's Lists (a slice indexed by them) and of
// their Whens, which grow with the distinct paths of the policies the
// engine ever compiled, never with requests; and the arrays their keys
// hold (Array). Plans compiled with other Tables share none of it. Safe
// for concurrent use. Nil Tables compile the plans of one-off lookups
// (Input, At), which read no Lists and intern nothing.
type Tables struct {
	lists, conds pathIDs
	arrays       *arrayInterner
}

// NewTables are empty tables, whose interned arrays are bounded.
func NewTables() *Tables {
	return &Tables{
		lists:  pathIDs{ids: map[string]int{}},
		conds:  pathIDs{ids: map[string]int{}},
		arrays: newArrayInterner(8192, 4<<20),
	}
}

// Array is the term of the array of elems, one for equal arrays (elems
// may be the caller's buffer). The replicas of a ReplicaSet read the same
// images, names, flags and security contexts call after call, and each
// array made anew was a quarter of a replica's garbage.
func (t *Tables) Array(elems []*ast.Term) *ast.Term {
	if t == nil {
		return ast.ArrayTerm(slices.Clone(elems)...)
	}
	return t.arrays.Array(elems)
}

// CompileInput plans path (an input path, possibly beginning with When).
func (t *Tables) CompileInput(path []*ast.Term) *InputPlan {
	p := &InputPlan{}
	if members, rest, ok := analysis.Condition(path); ok {
		p.cond = true
		for _, m := range members {
			if len(m.List) == 0 || !m.List[0].Equal(ReviewKey) {
				p.condAny = true
				continue
			}
			p.members = append(p.members, memberPlan{list: t.compilePlan(m.List[1:]), filter: t.compileFilter(m.Filter)})
		}
		if t != nil {
			p.condID = t.conds.of(path[:len(path)-len(rest)])
		}
		path = rest
	}
	if len(path) == 0 || !path[0].Equal(ReviewKey) {
		p.notReview = true
		return p
	}
	p.body = t.compilePlan(path[1:])
	return p
}

// Then is the value at the plan's path in the input whose review is
// review: notReadKey where its When does not hold, Undefined where
// nothing is there; leaf as lookupPlan.Then's.
func (p *InputPlan) Then(review *ast.Term, leaf func(ast.Value) *ast.Term) *ast.Term {
	return p.ThenWith(review, leaf, nil)
}

// ThenWith is Then with lists, when not nil, holding the review's lists
// (Lists): review must be the same for every call with the same lists.
func (p *InputPlan) ThenWith(review *ast.Term, leaf func(ast.Value) *ast.Term, lists *Lists) *ast.Term {
	if p.cond && !p.condAny && !p.holdsWith(review, lists) {
		return notReadKey
	}
	if p.notReview {
		return Undefined
	}
	return p.body.lookupRoot(review.Value, leaf, lists)
}

// holdsWith is holds, its answer kept in lists (when not nil) for the
// other plans of the review with the same When.
func (p *InputPlan) holdsWith(review *ast.Term, lists *Lists) bool {
	if lists == nil {
		return p.holds(review, nil)
	}
	c := slotAt(&lists.conds, p.condID)
	if *c == condUnknown {
		*c = condFails
		if p.holds(review, lists) {
			*c = condHolds
		}
	}
	return *c == condHolds
}

// A When's answer in Lists.
const (
	condUnknown int8 = iota
	condHolds
	condFails
)

// holds reports whether some member of the When holds.
func (p *InputPlan) holds(review *ast.Term, lists *Lists) bool {
	for i := range p.members {
		if p.members[i].hasMember(review, lists) {
			return true
		}
	}
	return false
}

// hasMember reports whether the member's list has an element whose values
// at every filter path hold, or is not a list (whatever that reads, the
// condition is taken to hold).
func (m *memberPlan) hasMember(review *ast.Term, lists *Lists) bool {
	t := m.list.lookupRoot(review.Value, nil, lists)
	arr, ok := t.Value.(*ast.Array)
	if !ok {
		return t != Undefined
	}
	for i := range arr.Len() {
		if passes(arr.Elem(i).Value, m.filter) {
			return true
		}
	}
	return false
}

// Input finds path in the input {review, parameters}.
func Input(review *ast.Term, path []*ast.Term) *ast.Term {
	return (*Tables)(nil).Input(review, path)
}

// Input is lookup.Input, the arrays it makes interned in t.
func (t *Tables) Input(review *ast.Term, path []*ast.Term) *ast.Term {
	return t.inputThen(review, path, nil)
}

// inputThen is Input with Then's leaf. A path below review without
// markers is read without a plan.
func (t *Tables) inputThen(review *ast.Term, path []*ast.Term, leaf func(ast.Value) *ast.Term) *ast.Term {
	if len(path) > 0 && path[0].Equal(ReviewKey) && plain(path[1:]) {
		return valueAt(review.Value, path[1:], leaf)
	}
	return t.CompileInput(path).Then(review, leaf)
}

// notReadKey is, in a key, the value of a conditional path
// (analysis.When) whose condition does not hold: the template cannot read
// it. No JSON value is a variable, so it equals no value read.
var notReadKey = ast.VarTerm("$notread")

type planKind uint8

const (
	planValue planKind = iota // the value at keys
	planEach                  // list, then each element
	planKeys                  // the keys of the object at list
	planShape                 // the kind of value at list
)

// lookupPlan reads a path below a value (no When).
type lookupPlan struct {
	kind   planKind
	tables *Tables
	// id is one more than the number of a planValue's path among those
	// of every plan (Tables), its place in Lists: given the first time
	// the plan reads a list through Lists (0 until then).
	id atomic.Int32
	// keys are a planValue's steps (object keys, array indexes, set
	// members).
	keys []*ast.Term
	// list is the path before the first Each (planEach), before Keys
	// (planKeys) or before Shape (planShape).
	list *lookupPlan
	// filter are an EachWhere's guards, below the element; rest reads
	// below each element (nil: the element itself); isLen: the path
	// ends in Each then Len.
	filter []*lookupPlan
	rest   *lookupPlan
	isLen  bool
}

// compilePlan plans path.
func (t *Tables) compilePlan(path []*ast.Term) *lookupPlan {
	if j := analysis.EachAt(path); j >= 0 {
		p := &lookupPlan{kind: planEach, tables: t, list: t.compilePlan(path[:j]), filter: t.compileFilter(analysis.EachFilter(path[j]))}
		switch rest := path[j+1:]; {
		case len(rest) == 1 && analysis.IsLen(rest[0]):
			p.isLen = true
		case len(rest) > 0:
			p.rest = t.compilePlan(rest)
		}
		return p
	}
	if n := len(path) - 1; n >= 0 && analysis.IsKeys(path[n]) {
		return &lookupPlan{kind: planKeys, tables: t, list: t.compilePlan(path[:n])}
	}
	if n := len(path) - 1; n >= 0 && analysis.IsShape(path[n]) {
		return &lookupPlan{kind: planShape, tables: t, list: t.compilePlan(path[:n])}
	}
	return &lookupPlan{kind: planValue, tables: t, keys: path}
}

func (t *Tables) compileFilter(filter [][]*ast.Term) []*lookupPlan {
	if len(filter) == 0 {
		return nil
	}
	out := make([]*lookupPlan, len(filter))
	for i, f := range filter {
		out[i] = t.compilePlan(f)
	}
	return out
}

// Then is the value at the plan's path below v, Undefined where
// there is none. A path through Each gives the array of each element's
// value at the rest (Undefined where an element has none; true for
// Len; only the elements that pass an EachWhere's guards), or, when the
// value at the list is not an array, that value whole (Whole); a
// path ending in Keys the array, in Rego's order, of the keys of an
// object whose values are defined and not false (any other value whole);
// a path ending in Shape the kind of value there (Undefined where none).
// leaf, when not nil, gives the key of each value found at the end of the
// path in place of the value itself: the answer of a helper on it
// (analysis.Helper, helper.go).
func (p *lookupPlan) lookupThen(v ast.Value, leaf func(ast.Value) *ast.Term) *ast.Term {
	if v == nil {
		return Undefined
	}
	switch p.kind {
	case planEach:
		return p.each(v, leaf)
	case planKeys:
		return lookupKeys(p.list.lookupThen(v, nil))
	case planShape:
		return shapeOf(p.list.lookupThen(v, nil))
	}
	return valueAt(v, p.keys, leaf)
}

// valueAt is the value at keys (a path without markers) below v, or
// leaf's key of it.
func valueAt(v ast.Value, keys []*ast.Term, leaf func(ast.Value) *ast.Term) *ast.Term {
	if v == nil {
		return Undefined
	}
	if len(keys) == 0 {
		if leaf != nil {
			return leaf(v)
		}
		return ast.NewTerm(v)
	}
	found := findTerm(v, keys)
	if found == nil {
		return Undefined
	}
	if leaf != nil {
		return leaf(found.Value)
	}
	return found
}

// lookupRoot is lookupThen on the review's value v, with the values at
// the lists of paths through Each, Keys and Shape taken from lists (nil:
// looked up).
func (p *lookupPlan) lookupRoot(v ast.Value, leaf func(ast.Value) *ast.Term, lists *Lists) *ast.Term {
	if lists == nil || v == nil {
		return p.lookupThen(v, leaf)
	}
	switch p.kind {
	case planEach:
		return p.eachOf(p.list.listRoot(v, lists), leaf)
	case planKeys:
		return lookupKeys(p.list.listRoot(v, lists))
	case planShape:
		return shapeOf(p.list.listRoot(v, lists))
	}
	return valueAt(v, p.keys, leaf)
}

// listRoot is the value at the plan's path below the review's value v,
// kept in lists for the request's other plans.
func (p *lookupPlan) listRoot(v ast.Value, lists *Lists) *ast.Term {
	if p.kind != planValue {
		return p.lookupRoot(v, nil, lists)
	}
	id := int(p.id.Load()) - 1
	if id < 0 {
		id = p.tables.lists.of(p.keys)
		p.id.Store(int32(id + 1))
	}
	slot := lists.vals.At(id)
	if *slot == nil {
		*slot = valueAt(v, p.keys, nil)
	}
	return *slot
}

func (p *lookupPlan) each(v ast.Value, leaf func(ast.Value) *ast.Term) *ast.Term {
	return p.eachOf(p.list.lookupThen(v, nil), leaf)
}

// eachOf is each for the value t at the plan's list.
func (p *lookupPlan) eachOf(t *ast.Term, leaf func(ast.Value) *ast.Term) *ast.Term {
	arr, ok := t.Value.(*ast.Array)
	if !ok {
		if t == Undefined {
			return t
		}
		return Whole(t)
	}
	var small [16]*ast.Term
	elems := small[:0]
	for i := range arr.Len() {
		el := arr.Elem(i).Value
		if !passes(el, p.filter) {
			continue
		}
		switch {
		case p.isLen:
			elems = append(elems, ast.InternedTerm(true))
		case p.rest == nil && leaf == nil:
			elems = append(elems, arr.Elem(i)) // the element whole, as it is
		case p.rest == nil:
			elems = append(elems, leaf(el))
		default:
			elems = append(elems, p.rest.lookupThen(el, leaf))
		}
	}
	return p.tables.Array(elems)
}

// arrayInterner gives one term for arrays whose elements compare equal as
// Rego compares values (ast.Compare), which is how the memo compares
// keys: a key holding the interned array finds the entry the array made
// anew would find. Terms are immutable, so one serves every reader. It
// holds at most maxArrays arrays and about maxBytes of their values
// (memo.Size; values shared with the pods' decoding table, as a
// ReplicaSet's containers' are, count as if they were not), and starts
// over past either bound, so that it never keeps a one-off pod's values
// alive for long.
type arrayInterner struct {
	mu                  sync.RWMutex
	byHash              map[int][]*ast.Term
	n, bytes            int
	maxArrays, maxBytes int
}

func newArrayInterner(maxArrays, maxBytes int) *arrayInterner {
	return &arrayInterner{byHash: map[int][]*ast.Term{}, maxArrays: maxArrays, maxBytes: maxBytes}
}

// maxInternedSize bounds one kept array's values (memo.Size): a larger
// array is made anew every time.
const maxInternedSize = 4 << 10

// array is the term of the array of elems (elems may be the caller's
// buffer: a new array copies it).
func (in *arrayInterner) Array(elems []*ast.Term) *ast.Term {
	h := 0
	for _, e := range elems {
		h += e.Value.Hash() // an ast.Array's hash: equal arrays hash alike
	}
	in.mu.RLock()
	t := in.find(h, elems)
	in.mu.RUnlock()
	if t != nil {
		return t
	}
	t = ast.ArrayTerm(slices.Clone(elems)...)
	size := memo.Size(t.Value)
	if size > maxInternedSize {
		return t
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if found := in.find(h, elems); found != nil {
		return found
	}
	if in.n >= in.maxArrays || in.bytes+size > in.maxBytes {
		clear(in.byHash)
		in.n, in.bytes = 0, 0
	}
	in.byHash[h] = append(in.byHash[h], t)
	in.n++
	in.bytes += size
	return t
}

func (in *arrayInterner) find(h int, elems []*ast.Term) *ast.Term {
	for _, t := range in.byHash[h] {
		if arr := t.Value.(*ast.Array); arr.Len() == len(elems) && sameElems(arr, elems) {
			return t
		}
	}
	return nil
}

func sameElems(arr *ast.Array, elems []*ast.Term) bool {
	for i, e := range elems {
		if x := arr.Elem(i); x != e && ast.Compare(x.Value, e.Value) != 0 {
			return false
		}
	}
	return true
}

// passes reports whether el's values at every filter path hold.
func passes(el ast.Value, filter []*lookupPlan) bool {
	for _, f := range filter {
		if !Truthy(f.lookupThen(el, nil)) {
			return false
		}
	}
	return true
}

func Truthy(t *ast.Term) bool {
	return t != Undefined && t.Value.Compare(ast.Boolean(false)) != 0
}

// At is the value at path below v (lookupPlan.Then's), without a leaf.
func At(v ast.Value, path []*ast.Term) *ast.Term { return (*Tables)(nil).At(v, path) }

// At is lookup.At, the arrays it makes interned in t. A path without
// markers is read without a plan.
func (t *Tables) At(v ast.Value, path []*ast.Term) *ast.Term {
	if plain(path) {
		return valueAt(v, path, nil)
	}
	return t.compilePlan(path).lookupThen(v, nil)
}

// plain reports whether path holds no Each and does not end in Keys.
func plain(path []*ast.Term) bool {
	return analysis.EachAt(path) < 0 && (len(path) == 0 || (!analysis.IsKeys(path[len(path)-1]) && !analysis.IsShape(path[len(path)-1])))
}

// findTerm is the term at path (not empty) below v (nil if there is none), found as
// v.Find finds its value (object keys, array indexes, set members), but
// without making a term for it: keys are looked up for every constraint
// of every request.
func findTerm(v ast.Value, path []*ast.Term) *ast.Term {
	var t *ast.Term
	for _, k := range path {
		switch x := v.(type) {
		case ast.Object:
			t = x.Get(k)
		case *ast.Array:
			num, ok := k.Value.(ast.Number)
			if !ok {
				return nil
			}
			i, ok := num.Int()
			if !ok || i < 0 || i >= x.Len() {
				return nil
			}
			t = x.Elem(i)
		case ast.Set:
			if !x.Contains(k) {
				return nil
			}
			t = k
		default:
			return nil
		}
		if t == nil {
			return nil
		}
		v = t.Value
	}
	return t
}

// Whole is, in a key, a value found where a path through
// analysis.Each expected an array, or analysis.Keys an object: it is keyed
// whole, as the call term $whole(value), which no JSON value, element-wise
// array or key list can be, so that it never equals what another review
// reads there.
func Whole(t *ast.Term) *ast.Term { return ast.CallTerm(wholeMarker, t) }

var wholeMarker = ast.VarTerm("$whole")

// shapes are the keys of Shape paths, one term per kind of value.
var shapes = map[string]*ast.Term{}

func init() {
	for _, k := range []string{"null", "boolean", "number", "string", "array", "object", "set"} {
		shapes[k] = ast.StringTerm(k)
	}
}

// shapeOf is the value of path/Shape, t the value at path.
func shapeOf(t *ast.Term) *ast.Term {
	if t == Undefined {
		return t
	}
	if s, ok := shapes[ast.ValueName(t.Value)]; ok {
		return s
	}
	return Whole(t)
}

// lookupKeys is the value of path/Keys, t the value at path: the array,
// in Rego's order, of the keys of an object whose values are defined and
// not false, or, for any other value, that value whole (Whole).
func lookupKeys(t *ast.Term) *ast.Term {
	obj, ok := t.Value.(ast.Object)
	if !ok {
		if t == Undefined {
			return t
		}
		return Whole(t)
	}
	keys := make([]*ast.Term, 0, obj.Len())
	obj.Foreach(func(k, v *ast.Term) { // sorted: one order for equal key sets
		if Truthy(v) {
			keys = append(keys, k)
		}
	})
	return ast.ArrayTerm(keys...)
}

// Lists holds one review's values at the paths that paths through Each,
// Keys and Shape begin with: a library's constraints read a hundred paths
// below spec.containers, and each would look the list up from the root.
// It holds the answers of the Whens too: a CEL comprehension's body reads
// a dozen paths, each under the When of its range. One request's, reset
// between reviews; not safe for concurrent use.
type Lists struct {
	vals Slots
	// conds are the Whens' answers, by condID.
	conds []int8
}

// Reset forgets the values, keeping the room.
func (l *Lists) Reset() {
	l.vals.Reset()
	l.conds = l.conds[:0]
}

// Slots are terms by number (a path's, say), for one request: At grows
// them on demand, Reset forgets them and keeps the room.
type Slots []*ast.Term

// At is the place of term id (nil until set).
func (s *Slots) At(id int) **ast.Term { return slotAt((*[]*ast.Term)(s), id) }

// slotAt is the place of id in *s, grown with zero values to hold it.
func slotAt[T any](s *[]T, id int) *T {
	if n := len(*s); id >= n {
		*s = slices.Grow(*s, id+1-n)[:id+1]
		clear((*s)[n:])
	}
	return &(*s)[id]
}

// Reset forgets the terms, keeping the room.
func (s *Slots) Reset() {
	clear(*s)
	*s = (*s)[:0]
}

// pathIDs numbers paths, from 0.
type pathIDs struct {
	mu  sync.Mutex
	ids map[string]int
}

func (p *pathIDs) of(path []*ast.Term) int {
	k := analysis.PathString(path)
	p.mu.Lock()
	defer p.mu.Unlock()
	id, ok := p.ids[k]
	if !ok {
		id = len(p.ids)
		p.ids[k] = id
	}
	return id
}
