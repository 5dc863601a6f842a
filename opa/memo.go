package opa

import (
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
)

// memo remembers a constraint's verdicts by the values its template can
// read (see analysis.go), in two levels: the pod's part of the key (the
// input paths the template reads), then the node's class (nodes whose
// projections onto the node paths the template reads are equal share a
// class). Keys are compared exactly, never by hash alone. It is bounded:
// when full it starts over, which costs a few evaluations and never a
// wrong answer.
type memo struct {
	mu      sync.RWMutex
	entries map[int][]*podEntry
	n, max  int
}

type podEntry struct {
	key *ast.Array
	mu  sync.RWMutex
	// byClass holds verdicts per node class; class 0 is "no node" (the
	// template does not read the node).
	byClass map[int][]result
}

func newMemo(max int) *memo { return &memo{entries: map[int][]*podEntry{}, max: max} }

// entry finds or creates the entry of a pod key.
func (m *memo) entry(key *ast.Array) *podEntry {
	h := key.Hash()
	m.mu.RLock()
	for _, e := range m.entries[h] {
		if e.key.Compare(key) == 0 {
			m.mu.RUnlock()
			return e
		}
	}
	m.mu.RUnlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.entries[h] {
		if e.key.Compare(key) == 0 {
			return e
		}
	}
	if m.n >= m.max {
		m.entries = map[int][]*podEntry{}
		m.n = 0
	}
	e := &podEntry{key: key, byClass: map[int][]result{}}
	m.entries[h] = append(m.entries[h], e)
	m.n++
	return e
}

func (e *podEntry) get(class int) ([]result, bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	r, ok := e.byClass[class]
	return r, ok
}

func (e *podEntry) put(class int, res []result) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.byClass[class] = res
}

// nodeClasses gives each Node object the class of its projection onto
// the node paths a constraint reads. Class ids are never reused, so a
// reset can only cost memo misses.
type nodeClasses struct {
	mu    sync.RWMutex
	byPtr map[ast.Value]int
	byKey map[int][]classEntry
	next  int
}

type classEntry struct {
	key *ast.Array
	id  int
}

const maxNodeClassCache = 1 << 17

func newNodeClasses() *nodeClasses {
	return &nodeClasses{byPtr: map[ast.Value]int{}, byKey: map[int][]classEntry{}, next: 1}
}

// known sets ids[i] to the class of each inventory node in slots already
// classified, and to 0 (no class) for the others.
func (c *nodeClasses) known(slots []nodeSlot, ids []int) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for i := range slots {
		ids[i] = 0
		if s := &slots[i]; s.value != nil && !s.fromRequest {
			ids[i] = c.byPtr[s.value]
		}
	}
}

// of returns node's class; project computes its projection on a miss.
// Node values are immutable once in the inventory (an update stores a new
// value), so caching by identity is exact. Nodes sent in a request are new
// values every time: remember is false for them, so that they are not
// kept alive by the cache.
func (c *nodeClasses) of(node ast.Value, remember bool, project func(ast.Value) *ast.Array) int {
	if remember {
		c.mu.RLock()
		id, ok := c.byPtr[node]
		c.mu.RUnlock()
		if ok {
			return id
		}
	}
	key := project(node)
	h := key.Hash()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.byPtr) >= maxNodeClassCache || len(c.byKey) >= maxNodeClassCache {
		c.byPtr = map[ast.Value]int{}
		c.byKey = map[int][]classEntry{}
	}
	for _, e := range c.byKey[h] {
		if e.key.Compare(key) == 0 {
			if remember {
				c.byPtr[node] = e.id
			}
			return e.id
		}
	}
	id := c.next
	c.next++
	c.byKey[h] = append(c.byKey[h], classEntry{key: key, id: id})
	if remember {
		c.byPtr[node] = id
	}
	return id
}
