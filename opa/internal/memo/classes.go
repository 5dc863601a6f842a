package memo

import (
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Classes gives each node the class of its projection onto the node paths
// one constraint reads: nodes whose projections are equal share a class,
// and so share memo results. Class ids are never reused, so a reset only
// costs memo misses.
//
// Nodes are remembered by name together with the value they were
// classified as: an update replaces the value (and the memory it held),
// never adds to it. Nodes sent in a request are new values every time and
// are not remembered at all.
type Classes struct {
	mu     sync.RWMutex
	byName map[string]named
	byKey  map[int][]classEntry
	next   int
	max    int
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

// NewClasses makes an empty table that holds at most max names and max
// distinct projections before it starts over.
func NewClasses(max int) *Classes {
	return &Classes{byName: map[string]named{}, byKey: map[int][]classEntry{}, next: 1, max: max}
}

// Known sets ids[i] (and aux[i]) to the class of (names[i], values[i])
// when that node, as that value, was classified already, and to 0 for the
// others. remember reports which slots may be looked up at all.
func (c *Classes) Known(names []string, values []ast.Value, remember func(i int) bool, ids []int, aux []any) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for i := range names {
		ids[i], aux[i] = 0, nil
		if values[i] == nil || !remember(i) {
			continue
		}
		if n, ok := c.byName[names[i]]; ok && n.value == values[i] {
			ids[i], aux[i] = n.id, n.aux
		}
	}
}

// Of returns the class of a node; project computes its projection on a
// miss, and aux what the caller wants remembered with it (the node's
// printed values). remember is false for nodes that came with a request.
func (c *Classes) Of(name string, value ast.Value, remember bool, project func() (*ast.Array, any)) (int, any) {
	if remember {
		c.mu.RLock()
		n, ok := c.byName[name]
		c.mu.RUnlock()
		if ok && n.value == value {
			return n.id, n.aux
		}
	}
	key, aux := project()
	h := key.Hash()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.byName) >= c.max || len(c.byKey) >= c.max {
		c.byName = map[string]named{}
		c.byKey = map[int][]classEntry{}
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
	if remember {
		c.byName[name] = named{value: value, id: id, aux: aux}
	}
	return id, aux
}

// Len reports how many node names are remembered.
func (c *Classes) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.byName)
}
