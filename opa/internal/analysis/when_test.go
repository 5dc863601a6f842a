package analysis

import (
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// TestWhenAny: a condition with several members reads back as written,
// renders each member, and leaves the path after it as Unconditioned.
func TestWhenAny(t *testing.T) {
	s := ast.StringTerm
	volumes := []*ast.Term{s("review"), s("object"), s("spec"), s("volumes")}
	old := []*ast.Term{s("review"), s("oldObject"), s("spec"), s("volumes")}
	hostPath := [][]*ast.Term{{s("hostPath"), Shape}}
	rest := []*ast.Term{s("review"), s("object"), s("spec"), s("containers"), Each, s("name")}
	p := append([]*ast.Term{WhenAny([]Member{{List: volumes, Filter: hostPath}, {List: old}})}, rest...)

	members, got, ok := Condition(p)
	if !ok || len(members) != 2 || len(members[0].Filter) != 1 || members[1].Filter != nil || !ast.NewTerm(ast.NewArray(got...)).Equal(ast.NewTerm(ast.NewArray(rest...))) {
		t.Fatalf("Condition = %v, %v, %v", members, got, ok)
	}
	if u := Unconditioned(p); len(u) != len(rest) {
		t.Errorf("Unconditioned = %v", u)
	}
	want := "(if .review.object.spec.volumes[_ where .hostPath.(shape)] or .review.oldObject.spec.volumes[_]) .review.object.spec.containers[_].name"
	if s := PathString(p); s != want {
		t.Errorf("PathString =\n %s, want\n %s", s, want)
	}
	a := &Result{InputPaths: [][]*ast.Term{p}}
	if d := a.Describe(); len(d) != 1 || d[0] != "input.review.object.spec.containers[_].name (if input.review.object.spec.volumes[_ where .hostPath.(shape)] or input.review.oldObject.spec.volumes[_] has one)" {
		t.Errorf("Describe = %q", d)
	}
	if _, _, ok := Condition(rest); ok {
		t.Error("a path without When has a condition")
	}
}
