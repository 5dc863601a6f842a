package opa

import (
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
)

// scratch is a request's per-candidate working memory: its node slots and
// the node classes' buffers, one element per candidate. At 5000 candidates
// they are about 600 KB per request that nothing keeps once the answer is
// made, so requests reuse them (scratchPool) instead of handing them to
// the garbage collector. What the answer keeps (Placement.Nodes, the
// columns' cells) is never taken from here.
type scratch struct {
	slots      []nodeSlot
	names      []string
	slotValues []ast.Value
	slotNums   []int32
	classIDs   []int
	classAux   []any
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// grow gives s's slices n elements each, zeroed.
func (s *scratch) grow(n int) {
	s.slots = resize(s.slots, n)
	s.names = resize(s.names, n)
	s.slotValues = resize(s.slotValues, n)
	s.slotNums = resize(s.slotNums, n)
	s.classIDs = resize(s.classIDs, n)
	s.classAux = resize(s.classAux, n)
}

func resize[T any](xs []T, n int) []T {
	if cap(xs) < n {
		return make([]T, n)
	}
	xs = xs[:n]
	clear(xs)
	return xs
}

// release clears what s refers to (nodes, reviews, printed values: the
// pool must not keep them alive) and returns it to the pool.
func (s *scratch) release() {
	clear(s.slots)
	clear(s.names)
	clear(s.slotValues)
	clear(s.classAux)
	scratchPool.Put(s)
}
