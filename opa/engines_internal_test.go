package opa

import (
	"context"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/verdict"
	"github.com/open-policy-agent/opa/v1/ast"
)

// TestTwoEnginesShareNothing: the memory one engine reuses (its answers'
// lists, its interned key arrays, its printed values) never reaches
// another engine in the same process.
func TestTwoEnginesShareNothing(t *testing.T) {
	ctx := context.Background()
	a, err := New(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	b, err := New(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)

	elems := []*ast.Term{ast.StringTerm("nginx:1.27"), ast.StringTerm("busybox")}
	if a.reg.Lookup.Array(elems) != a.reg.Lookup.Array(elems) {
		t.Error("an engine does not intern its key arrays")
	}
	if a.reg.Lookup.Array(elems) == b.reg.Lookup.Array(elems) {
		t.Error("two engines share an interned key array")
	}

	first := a.pools.newPlacement(3)
	nodes := &first.Nodes[0]
	first.Release()
	if again := a.pools.newPlacement(3); &again.Nodes[0] != nodes {
		t.Error("an engine does not reuse its answers' lists")
	}
	if other := b.pools.newPlacement(3); &other.Nodes[0] == nodes {
		t.Error("one engine's answer took another engine's list")
	}

	name := (*nodePrinted)(nil).withValue(verdict.NewBinding(0, "node-a"))
	if a.printed.shared(name) == b.printed.shared((*nodePrinted)(nil).withValue(verdict.NewBinding(0, "node-a"))) {
		t.Error("two engines share a printed value")
	}
	if a.workers == b.workers {
		t.Error("two engines share their evaluation workers")
	}
}
