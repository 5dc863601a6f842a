package lookup

import (
	"github.com/open-policy-agent/opa/v1/ast"
)

// What a change to a review can move. The replicas of a ReplicaSet reach
// the engine one after the other, their reviews alike but for a few
// values (the name, the uid, the token volume's name in the volumes and
// in each container's mounts), and a replica's keys are the values at a
// few hundred paths. A Differ finds where two reviews differ, a
// ReadIndex which plans read a value such a difference can move; every
// other plan reads the same value in both reviews, and its value from
// the first stands for the second's. A difference below a value a plan
// reads whole (an element it keys whole, a list through Keys or Shape)
// moves it, so the index errs only towards looking up again.

// Step is one step of a path below a review: an object's key, or an
// array's index (Index >= 0, Key nil).
type Step struct {
	Key   *ast.Term
	Index int
}

// Differ finds where two values differ (Diff). Its buffers serve one
// Diff after another: keep one per goroutine (the engine keeps one per
// request's buffers), and Reset it before it is put away.
type Differ struct {
	path  []Step
	steps []Step // the paths found, one after the other
	ends  []int  // where each ends in steps
	paths [][]Step
	limit int
	over  bool
	// visit is member as a method value, made once (one passed to Until
	// each time is an allocation each time); other is the object walked
	// beside Until's.
	visit func(k, v *ast.Term) bool
	other ast.Object
	// unshared counts the objects and arrays found equal by comparing
	// them: values the two did not share.
	unshared int
}

// Diff gives the paths below which a and b differ, at most limit of them
// (ok false past it): a path ends where the two values differ in kind,
// in their objects' keys or their arrays' lengths, or are different
// scalars; below it nothing is compared. Values the two share (a term
// both reviews were decoded to) and equal values (by their hashes, then
// compared) are not walked. The paths are valid until the next Diff.
func (d *Differ) Diff(a, b ast.Value, limit int) (paths [][]Step, ok bool) {
	d.path, d.steps, d.ends = d.path[:0], d.steps[:0], d.ends[:0]
	d.limit, d.over, d.unshared = limit, false, 0
	if d.visit == nil {
		d.visit = d.member
	}
	d.walk(a, b)
	d.other = nil
	if d.over {
		return nil, false
	}
	// The paths are cut from one buffer, once it has stopped growing.
	d.paths = d.paths[:0]
	from := 0
	for _, end := range d.ends {
		d.paths = append(d.paths, d.steps[from:end:end])
		from = end
	}
	return d.paths, true
}

// Unshared is how many objects and arrays the last Diff found equal by
// comparing them, not sharing them: a review kept from a pod whose
// decoding shared little with later ones (a workload's first pod, read
// before its parts were seen twice) is worth replacing.
func (d *Differ) Unshared() int { return d.unshared }

// Reset drops what d refers to.
func (d *Differ) Reset() {
	clear(d.steps[:cap(d.steps)])
	clear(d.path[:cap(d.path)])
	clear(d.paths[:cap(d.paths)])
	d.other = nil
}

func (d *Differ) differs() {
	if len(d.ends) == d.limit {
		d.over = true
		return
	}
	d.steps = append(d.steps, d.path...)
	d.ends = append(d.ends, len(d.steps))
}

func (d *Differ) walk(a, b ast.Value) {
	if d.over {
		return
	}
	switch x := a.(type) {
	case ast.Object:
		y, ok := b.(ast.Object)
		if d.walksBelow(x, y, ok) {
			outer := d.other
			d.other = y
			x.Until(d.visit)
			d.other = outer
		}
	case *ast.Array:
		y, ok := b.(*ast.Array)
		if d.walksBelow(x, y, ok) {
			for i := range x.Len() {
				d.path = append(d.path, Step{Index: i})
				d.walk(x.Elem(i).Value, y.Elem(i).Value)
				d.path = d.path[:len(d.path)-1]
			}
		}
	default:
		if b == nil || ast.Compare(a, b) != 0 {
			d.differs()
		}
	}
}

// composite is an object or an array.
type composite interface {
	ast.Value
	Len() int
}

// walksBelow reports whether x and y (ok: y is of x's kind) are walked
// element by element: not when they are one value or equal ones, nor
// when they differ in kind or length (they differ whole).
func (d *Differ) walksBelow(x, y composite, ok bool) bool {
	switch {
	case ok && x == y:
		return false
	case ok && x.Hash() == y.Hash() && x.Compare(y) == 0:
		d.unshared++
		return false
	case !ok || x.Len() != y.Len():
		d.differs()
		return false
	}
	return true
}

// member walks the value under k of the object beside (d.other).
func (d *Differ) member(k, v *ast.Term) bool {
	w := d.other.Get(k)
	if w == nil {
		d.differs() // the keys differ: the objects, whole
		return true
	}
	d.path = append(d.path, Step{Key: k, Index: -1})
	outer := d.other
	d.walk(v.Value, w.Value)
	d.other = outer
	d.path = d.path[:len(d.path)-1]
	return d.over
}

// ReadIndex holds what plans read of a review, by their numbers, in a
// tree of the paths they read: a node's ids read the whole value there
// (a change below moves them); its shapeIDs read through it as a list: an
// array's length (its elements through the each child), any other value
// whole. Built once per policy set; read by any number of goroutines.
type ReadIndex struct {
	root readNode
	has  []bool // by number
}

type readNode struct {
	keys     map[string]*readNode
	indexes  map[int]*readNode
	each     *readNode // every element of an array
	ids      []int
	shapeIDs []int
}

// NewReadIndex is an empty index.
func NewReadIndex() *ReadIndex { return &ReadIndex{} }

// Has reports whether a plan is indexed under id: only such a plan's
// value may be taken from another review.
func (x *ReadIndex) Has(id int) bool { return id >= 0 && id < len(x.has) && x.has[id] }

// Add indexes p under id (0 or more). A number names one path, so a
// second Add of it adds nothing.
func (x *ReadIndex) Add(id int, p *InputPlan) {
	if x.Has(id) {
		return
	}
	if id >= len(x.has) {
		x.has = append(x.has, make([]bool, id+1-len(x.has))...)
	}
	x.has[id] = true
	if p.cond && !p.condAny {
		for i := range p.members {
			m := &p.members[i]
			x.addList(id, &x.root, m.list, m.filter, nil, m.filter == nil)
		}
	}
	if !p.notReview {
		x.add(id, &x.root, p.body)
	}
}

// add indexes what p reads below n.
func (x *ReadIndex) add(id int, n *readNode, p *lookupPlan) {
	switch p.kind {
	case planValue:
		n = n.walk(p.keys)
		n.ids = append(n.ids, id)
	case planEach:
		x.addList(id, n, p.list, p.filter, p.rest, p.rest == nil && !p.isLen)
	default: // Keys and Shape read the value at their list whole
		x.add(id, n, p.list)
	}
}

// addList indexes a read through the list at list below n: its kind and
// length, and for each element the filter's paths, rest's, or (whole)
// the element itself.
func (x *ReadIndex) addList(id int, n *readNode, list *lookupPlan, filter []*lookupPlan, rest *lookupPlan, whole bool) {
	if list.kind != planValue {
		x.add(id, n, list) // a list that is itself read through a marker: whole
		return
	}
	ln := n.walk(list.keys)
	ln.shapeIDs = append(ln.shapeIDs, id)
	if ln.each == nil {
		ln.each = &readNode{}
	}
	for _, f := range filter {
		x.add(id, ln.each, f)
	}
	switch {
	case whole:
		ln.each.ids = append(ln.each.ids, id)
	case rest != nil:
		x.add(id, ln.each, rest)
	}
}

// walk is the node at keys below n, made as needed: an integer key
// names an array's element (and an object's nothing: JSON's keys are
// strings).
func (n *readNode) walk(keys []*ast.Term) *readNode {
	for _, k := range keys {
		if i, ok := arrayIndex(k); ok {
			if n.indexes == nil {
				n.indexes = map[int]*readNode{}
			}
			next := n.indexes[i]
			if next == nil {
				next = &readNode{}
				n.indexes[i] = next
			}
			n = next
			continue
		}
		if n.keys == nil {
			n.keys = map[string]*readNode{}
		}
		s := keyString(k)
		next := n.keys[s]
		if next == nil {
			next = &readNode{}
			n.keys[s] = next
		}
		n = next
	}
	return n
}

func arrayIndex(k *ast.Term) (int, bool) {
	num, ok := k.Value.(ast.Number)
	if !ok {
		return 0, false
	}
	return num.Int()
}

// keyString names an object's key in the index: a string as itself, any
// other key as Rego writes it (after a NUL, which no string key the
// index compares with holds first).
func keyString(k *ast.Term) string {
	if s, ok := k.Value.(ast.String); ok {
		return string(s)
	}
	return "\x00" + k.String()
}

// Touched appends to ids the number of each plan whose value a
// difference at path (one of Diff's) can move: those reading a value
// that holds path, and every plan below path. A number may be appended
// more than once.
func (x *ReadIndex) Touched(path []Step, ids []int) []int {
	return x.root.touched(path, ids)
}

func (n *readNode) touched(path []Step, ids []int) []int {
	for n != nil {
		ids = append(ids, n.ids...)
		if len(path) == 0 {
			return n.below(ids)
		}
		s := path[0]
		path = path[1:]
		if s.Index >= 0 {
			if n.each != nil {
				ids = n.each.touched(path, ids)
			}
			n = n.indexes[s.Index]
			continue
		}
		// A read through a list that finds no array there keys the
		// value whole (lookup.Whole): a change below an object's key
		// moves it.
		ids = append(ids, n.shapeIDs...)
		n = n.keys[keyString(s.Key)]
	}
	return ids
}

// below appends every plan that reads at n or under it.
func (n *readNode) below(ids []int) []int {
	ids = append(ids, n.ids...)
	ids = append(ids, n.shapeIDs...)
	for _, c := range n.keys {
		ids = c.below(ids)
	}
	for _, c := range n.indexes {
		ids = c.below(ids)
	}
	if n.each != nil {
		ids = n.each.below(ids)
	}
	return ids
}
