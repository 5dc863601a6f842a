package inventory

import (
	"fmt"
	"slices"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/memo"
)

// TestIndexAdvances: the writer's index serves its generation only, and
// after every kind of write (Nodes changed, added, removed; none; all
// re-cut; a generation it missed) finds exactly the Node objects the store
// holds, as an index built anew would: by name, and by the requests'
// numbers, whose slots it fills on first need and carries over but for
// the Nodes written, and whose numbering may start over before or after
// the index is made.
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
	nums := memo.NewNames(1000)
	renumber := func() { // numbers enough new names to start the numbering over
		_, gen := nums.Size()
		for i := 0; ; i++ {
			if _, g := nums.Size(); g != gen {
				return
			}
			nums.IDs([]string{fmt.Sprintf("gone-%d-%d", gen, i)}, make([]int32, 1))
		}
	}
	gen := uint64(0)
	for _, step := range []struct {
		name  string
		write func() []string // changes store, returns the names written
		whole bool
		skip  bool // the commit's Advance is missed
		// renumberBefore and renumberAfter start the numbering over
		// before the Advance, or after it (before the lookups).
		renumberBefore, renumberAfter bool
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
		{name: "numbering started over before the write", renumberBefore: true, write: func() []string {
			set("n006", 6)
			return []string{"n006"}
		}},
		{name: "numbering started over after the write", renumberAfter: true, write: func() []string {
			set("n007", 6)
			return []string{"n007"}
		}},
		{name: "relabelled after both", write: func() []string {
			set("n001", 7)
			set("n100", 7)
			return []string{"n001", "n100"}
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
		if step.renumberBefore {
			renumber()
		}
		c.Advance(GenerationValue(prev), GenerationValue(gen), nodes, written, step.whole, nums)
		if step.renumberAfter {
			renumber()
		}
		idx := c.Of(GenerationValue(gen))
		if idx == nil {
			t.Fatalf("%s: no index for generation %d", step.name, gen)
		}
		if c.Of(GenerationValue(prev)) != nil {
			t.Fatalf("%s: the index serves generation %d too", step.name, prev)
		}
		want := build(GenerationValue(gen), nodes)
		all := append(names(0, 400), "new", "odd", "absent")
		ids := make([]int32, len(all))
		numGen := nums.IDs(all, ids)
		for pass := range 2 { // the first fills the numbered slots
			for i, name := range all {
				exp := want.Node(name)
				for how, got := range []ast.Value{idx.Node(name), idx.NodeNumbered(name, ids[i], numGen)} {
					if (got == nil) != (exp == nil) || got != nil && got.Compare(exp) != 0 {
						t.Fatalf("%s, pass %d: lookup %d of %s = %v, want %v", step.name, pass, how, name, got, exp)
					}
				}
			}
		}
		filled := 0
		for i := range idx.byNum {
			if idx.byNum[i].state.Load() != slotEmpty {
				filled++
			}
		}
		// Slots filled in the step before and carried over are read, not
		// filled again: a stale one fails the lookups above.
		if wantFilled := len(all); step.renumberAfter {
			if idx.numGen == numGen {
				t.Fatalf("%s: the index takes numbers of another numbering", step.name)
			}
		} else if filled != wantFilled || idx.numGen != numGen {
			t.Fatalf("%s: %d numbered slots filled, want %d (one per name looked up)", step.name, filled, wantFilled)
		}
	}
	if c.Of(nil) != nil {
		t.Fatal("an index for no generation")
	}
}

// TestIndexSlotsForNodesNumberedLater: an index made before any call
// numbered its Nodes (a still cluster, loaded then asked) keeps a slot
// for every one of them, numbered in any order afterwards, beyond the
// slack for names it does not know.
func TestIndexSlotsForNodesNumberedLater(t *testing.T) {
	const n = 3 * numberedSlack
	nodes := ast.NewObject()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("node-%05d", i)
		nodes.Insert(ast.StringTerm(names[i]), ast.ObjectTerm(ast.Item(ast.StringTerm("i"), ast.IntNumberTerm(i))))
	}
	nums := memo.NewNames(10 * n)
	var c IndexCache
	c.Advance(nil, GenerationValue(1), nodes, nil, true, nums)
	idx := c.Of(GenerationValue(1))
	// Calls number names the index does not know first, then its Nodes
	// from the last to the first.
	unknown := make([]string, numberedSlack/2)
	for i := range unknown {
		unknown[i] = fmt.Sprintf("gone-%d", i)
	}
	nums.IDs(unknown, make([]int32, len(unknown)))
	slices.Reverse(names)
	ids := make([]int32, n)
	gen := nums.IDs(names, ids)
	for i, name := range names {
		want := nodes.Get(ast.StringTerm(name)).Value
		if got := idx.NodeNumbered(name, ids[i], gen); got == nil || got.Compare(want) != 0 {
			t.Fatalf("NodeNumbered(%s) = %v, want %v", name, got, want)
		}
		if int(ids[i]) >= len(idx.byNum) || idx.byNum[ids[i]].state.Load() != slotFilled {
			t.Fatalf("%s (number %d of %d slots) found by name, not kept by number", name, ids[i], len(idx.byNum))
		}
	}
}
