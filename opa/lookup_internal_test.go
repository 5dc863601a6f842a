package opa

import (
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// TestFindTerm: findTerm finds what ast.Value.Find finds, and nothing
// where it finds nothing.
func TestFindTerm(t *testing.T) {
	v := ast.MustParseTerm(`{"a": {"b": [10, {"c": "x"}, null], "s": {"k", 1}}, "n": 1, "e": {}}`).Value
	paths := []string{
		`["a"]`, `["a", "b"]`, `["a", "b", 0]`, `["a", "b", 1, "c"]`, `["a", "b", 2]`, `["a", "b", 3]`,
		`["a", "b", -1]`, `["a", "b", 1.5]`, `["a", "b", "0"]`, `["a", "s", "k"]`, `["a", "s", 1]`, `["a", "s", "z"]`,
		`["n"]`, `["n", "x"]`, `["e"]`, `["e", "x"]`, `["missing"]`, `["a", "b", 1, "c", "d"]`, `[1]`,
	}
	for _, ps := range paths {
		arr := ast.MustParseTerm(ps).Value.(*ast.Array)
		path := make([]*ast.Term, arr.Len())
		for i := range path {
			path[i] = arr.Elem(i)
		}
		want, err := v.Find(ast.Ref(path))
		got := findTerm(v, path)
		switch {
		case err != nil && got != nil:
			t.Errorf("%s: found %v, Find finds nothing (%v)", ps, got, err)
		case err == nil && (got == nil || got.Value.Compare(want) != 0):
			t.Errorf("%s: found %v, Find finds %v", ps, got, want)
		}
	}
}

// TestInternedAnswers: the made answer arrays equal the arrays of the
// same answers, and lists that are not short lists of booleans get none.
func TestInternedAnswers(t *testing.T) {
	yes, no := ast.InternedTerm(true), ast.InternedTerm(false)
	for _, answers := range [][]*ast.Term{{}, {yes}, {no}, {no, yes}, {yes, yes, no, no}, {no, no, no, yes}} {
		got := internedAnswers(answers)
		if want := ast.ArrayTerm(answers...); got == nil || !got.Equal(want) {
			t.Errorf("%v: made %v", want, got)
		}
	}
	for _, answers := range [][]*ast.Term{{yes, undefinedTerm}, {ast.ArrayTerm(yes)}, {yes, no, yes, no, yes}, {ast.NullTerm()}} {
		if got := internedAnswers(answers); got != nil {
			t.Errorf("%v: made %v, want none", answers, got)
		}
	}
}
