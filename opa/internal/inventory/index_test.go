package inventory

import (
	"fmt"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// TestIndexLetsOldNodesGo: the index is built by a request large enough,
// serves its generation only, never goes back to an older generation, and
// an outdated one is dropped by the next small request rather than keeping
// replaced Nodes alive.
func TestIndexLetsOldNodesGo(t *testing.T) {
	nodes := func(n int) ast.Object {
		obj := ast.NewObject()
		for i := range n {
			name := fmt.Sprintf("n%02d", i)
			obj.Insert(ast.StringTerm(name), ast.ObjectTerm(ast.Item(ast.StringTerm("metadata"),
				ast.ObjectTerm(ast.Item(ast.StringTerm("name"), ast.StringTerm(name))))))
		}
		obj.Insert(ast.StringTerm("odd"), ast.StringTerm("not a Node object"))
		return obj
	}
	gen := func(n int) ast.Value { return ast.InternedTerm(n).Value }
	var c IndexCache

	for _, step := range []struct {
		name       string
		gen        int
		candidates int
		want       int // generation of the index held after the step; 0: none
		served     bool
	}{
		{name: "small request, nothing built", gen: 1, candidates: 2},
		{name: "large request builds", gen: 1, candidates: minIndexedCandidates, want: 1, served: true},
		{name: "small request of the same generation is served", gen: 1, candidates: 2, want: 1, served: true},
		{name: "a request of an older generation never replaces it", gen: 0, candidates: minIndexedCandidates, want: 1, served: true},
		{name: "small request of a newer generation drops it", gen: 2, candidates: 2},
		{name: "large request of the newer generation builds", gen: 2, candidates: minIndexedCandidates, want: 2, served: true},
	} {
		idx := c.Of(gen(step.gen), nodes(minIndexedCandidates), step.candidates)
		if (idx != nil) != step.served {
			t.Fatalf("%s: served %v, want %v", step.name, idx != nil, step.served)
		}
		if idx != nil {
			if idx.Node("n00") == nil || idx.Node("odd") != nil || idx.Node("absent") != nil {
				t.Fatalf("%s: the index holds the wrong Nodes: %v", step.name, idx.byName)
			}
		}
		held := c.cur.Load()
		switch {
		case step.want == 0 && held != nil:
			t.Fatalf("%s: the outdated index (generation %v) is still held", step.name, held.generation)
		case step.want != 0 && (held == nil || held.generation.Compare(gen(step.want)) != 0):
			t.Fatalf("%s: held %+v, want generation %d", step.name, held, step.want)
		}
	}
	if c.Of(nil, nodes(1), minIndexedCandidates) != nil || c.Of(gen(3), nil, minIndexedCandidates) != nil {
		t.Fatal("an index without a generation or Nodes")
	}
}
