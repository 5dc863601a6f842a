package inventory

import (
	"fmt"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// TestIndexAdvances: the writer's index serves its generation only, and
// after every kind of write (Nodes changed, added, removed; none; all
// re-cut; a generation it missed)
// finds exactly the Node objects the store holds, as an index built anew
// would.
func TestIndexAdvances(t *testing.T) {
	node := func(name string, v int) *ast.Term {
		return ast.ObjectTerm(ast.Item(ast.StringTerm("metadata"), ast.ObjectTerm(
			ast.Item(ast.StringTerm("name"), ast.StringTerm(name)),
			ast.Item(ast.StringTerm("labels"), ast.ObjectTerm(ast.Item(ast.StringTerm("v"), ast.IntNumberTerm(v)))))))
	}
	model := map[string]int{} // the store's Nodes, as each label
	set := func(name string, v int) { model[name] = v }
	for i := range 400 {
		set(fmt.Sprintf("n%03d", i), 0)
	}
	// store is the Nodes object the store holds: unchanged Nodes keep
	// their values from write to write, as in the store.
	values := map[string]*ast.Term{}
	store := func() ast.Object {
		obj := ast.NewObject(ast.Item(ast.StringTerm("odd"), ast.StringTerm("not a Node object")))
		for name, v := range model {
			if t := values[name]; t == nil || !t.Equal(node(name, v)) {
				values[name] = node(name, v)
			}
			obj.Insert(ast.StringTerm(name), values[name])
		}
		return obj
	}
	names := func(from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, fmt.Sprintf("n%03d", i))
		}
		return out
	}
	var c IndexCache
	gen := uint64(0)
	for _, step := range []struct {
		name  string
		write func() []string // changes store, returns the names written
		whole bool
		skip  bool // the commit's Advance is missed
	}{
		{name: "the first index", write: func() []string { return nil }},
		{name: "labels changed", write: func() []string {
			set("n001", 1)
			set("n002", 1)
			return []string{"n001", "n002"}
		}},
		{name: "a Node removed, one added", write: func() []string {
			delete(model, "n003")
			set("new", 1)
			return []string{"n003", "new"}
		}},
		{name: "another kind changed", write: func() []string { return nil }},
		{name: "the removed Node back", write: func() []string {
			set("n003", 2)
			return []string{"n003"}
		}},
		{name: "a generation missed", skip: true, write: func() []string {
			set("n004", 3)
			return []string{"n004"}
		}},
		{name: "after the miss, built anew", write: func() []string {
			set("n005", 3)
			return []string{"n005"}
		}},
		{name: "every Node cut anew", whole: true, write: func() []string {
			for _, n := range names(0, 400) {
				set(n, 4)
			}
			return nil
		}},
		{name: "many changed", write: func() []string {
			for _, n := range names(0, 90) {
				set(n, 5)
			}
			return names(0, 90)
		}},
		{name: "then one removed", write: func() []string {
			delete(model, "n100")
			return []string{"n100"}
		}},
	} {
		prev := gen
		written := step.write()
		gen++
		if c.Of(GenerationValue(gen)) != nil {
			t.Fatalf("%s: an index for generation %d before its Advance", step.name, gen)
		}
		if step.skip {
			continue
		}
		nodes := store()
		c.Advance(GenerationValue(prev), GenerationValue(gen), nodes, written, step.whole)
		idx := c.Of(GenerationValue(gen))
		if idx == nil {
			t.Fatalf("%s: no index for generation %d", step.name, gen)
		}
		if c.Of(GenerationValue(prev)) != nil {
			t.Fatalf("%s: the index serves generation %d too", step.name, prev)
		}
		want := build(GenerationValue(gen), nodes)
		for _, name := range append(names(0, 400), "new", "odd", "absent") {
			got, exp := idx.Node(name), want.Node(name)
			if (got == nil) != (exp == nil) || got != nil && got.Compare(exp) != 0 {
				t.Fatalf("%s: Node(%s) = %v, want %v", step.name, name, got, exp)
			}
		}
	}
	if c.Of(nil) != nil {
		t.Fatal("an index for no generation")
	}
}
