package memo

import (
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Names numbers node names densely, once per request for all constraints,
// so that each constraint's Classes is a slice indexed by number rather
// than a map hashed by name. When it holds max names it starts over under
// a new generation, and every Classes drops what it remembered by number.
type Names struct {
	mu  sync.RWMutex
	ids map[string]int32
	gen uint64
	max int
}

// NewNames makes an empty numbering of at most max names.
func NewNames(max int) *Names { return &Names{ids: map[string]int32{}, max: max} }

// IDs sets out[i] to the number of names[i], numbering new names, and
// returns the numbering's generation.
func (n *Names) IDs(names []string, out []int32) uint64 {
	n.mu.RLock()
	missing := false
	for i, name := range names {
		id, ok := n.ids[name]
		if !ok {
			missing = true
			id = -1
		}
		out[i] = id
	}
	gen := n.gen
	n.mu.RUnlock()
	if !missing {
		return gen
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.ids)+len(names) > n.max {
		n.ids = map[string]int32{}
		n.gen++
	}
	for i, name := range names {
		id, ok := n.ids[name]
		if !ok {
			id = int32(len(n.ids))
			n.ids[name] = id
		}
		out[i] = id
	}
	return n.gen
}

// Size is how many names are numbered, and the numbering's generation.
func (n *Names) Size() (int, uint64) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return len(n.ids), n.gen
}

// Numbered is the number of name, if it has one, and the numbering's
// generation; it numbers nothing.
func (n *Names) Numbered(name string) (num int32, gen uint64, ok bool) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	num, ok = n.ids[name]
	return num, n.gen, ok
}

// Classes gives each node the class of its projection onto the node paths
// one constraint reads: nodes whose projections are equal share a class,
// and so share memo results. Class ids are never reused, so a reset only
// costs memo misses.
//
// Nodes are remembered by number (see Names) together with the value they
// were classified as: an update replaces the value (and the memory it
// held), never adds to it. Nodes sent in a request are new values every
// time and are not remembered at all.
type Classes struct {
	mu    sync.RWMutex
	byID  []named
	gen   uint64
	byKey map[int][]classEntry
	next  int
	max   int
}

type named struct {
	value ast.Value
	id    int
	aux   any
}

type classEntry struct {
	key *ast.Array
	id  int
}

// NewClasses makes an empty table that holds at most max distinct
// projections before it starts over.
func NewClasses(max int) *Classes {
	return &Classes{byKey: map[int][]classEntry{}, next: 1, max: max}
}

// Known sets ids[i] (and aux[i]) to the class of node number nums[i] when
// that node, as values[i], was classified already under numbering gen, and
// to 0 for the others. remember reports which slots may be looked up.
func (c *Classes) Known(gen uint64, nums []int32, values []ast.Value, remember func(i int) bool, ids []int, aux []any) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for i := range nums {
		// Each element written once: while the collector marks, a write of
		// aux's pointers costs a barrier.
		id, a := 0, any(nil)
		if gen == c.gen && values[i] != nil && remember(i) && int(nums[i]) < len(c.byID) {
			if n := &c.byID[nums[i]]; n.value == values[i] {
				id, a = n.id, n.aux
			}
		}
		ids[i], aux[i] = id, a
	}
}

// Of returns the class of node number num (numbering gen); project
// computes its projection on a miss, and aux what the caller wants
// remembered with it (the node's printed values). remember is false for
// nodes that came with a request.
func (c *Classes) Of(gen uint64, num int32, value ast.Value, remember bool, project func() (*ast.Array, any)) (int, any) {
	if remember {
		c.mu.RLock()
		if gen == c.gen && int(num) < len(c.byID) {
			if n := c.byID[num]; n.value == value {
				c.mu.RUnlock()
				return n.id, n.aux
			}
		}
		c.mu.RUnlock()
	}
	key, aux := project()
	h := key.Hash()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.byKey) >= c.max {
		c.byKey = map[int][]classEntry{}
		c.byID = nil
	}
	id := 0
	for _, e := range c.byKey[h] {
		if e.key.Compare(key) == 0 {
			id = e.id
			break
		}
	}
	if id == 0 {
		id = c.next
		c.next++
		c.byKey[h] = append(c.byKey[h], classEntry{key: key, id: id})
	}
	if remember && num >= 0 {
		if gen != c.gen {
			c.byID, c.gen = nil, gen
		}
		if int(num) >= len(c.byID) {
			c.byID = append(c.byID, make([]named, int(num)+1-len(c.byID))...)
		}
		c.byID[num] = named{value: value, id: id, aux: aux}
	}
	return id, aux
}

// Len reports how many nodes are remembered.
func (c *Classes) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := 0
	for i := range c.byID {
		if c.byID[i].value != nil {
			n++
		}
	}
	return n
}
