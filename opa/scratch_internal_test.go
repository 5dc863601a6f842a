package opa

import (
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// TestScratchGrowsZeroed: a request's scratch comes back zeroed over the
// length it asks for, whatever the requests before it left, though grow
// clears only the lists release does not (zeroed): shorter, then longer
// again, after a request that filled every element.
func TestScratchGrowsZeroed(t *testing.T) {
	fill := func(s *scratch) {
		for i := range s.slots {
			s.slots[i] = nodeSlot{name: "n", value: ast.String("v"), fromRequest: true}
			s.names[i], s.slotValues[i], s.slotNums[i], s.classIDs[i], s.classAux[i] = "n", ast.String("v"), 7, 7, 7
		}
	}
	check := func(s *scratch, n int) {
		t.Helper()
		if len(s.slots) != n {
			t.Fatalf("grow(%d) gave %d slots", n, len(s.slots))
		}
		for i := range n {
			if s.slots[i] != (nodeSlot{}) || s.names[i] != "" || s.slotValues[i] != nil || s.slotNums[i] != 0 || s.classIDs[i] != 0 || s.classAux[i] != nil {
				t.Fatalf("grow(%d): element %d is not zero", n, i)
			}
		}
	}
	pools := newPools()
	for _, n := range []int{100, 40, 100, 300, 5} {
		s := pools.scratch.Get()
		s.grow(n)
		check(s, n)
		fill(s)
		s.release(&pools.scratch)
	}
}
