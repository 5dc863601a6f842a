package opa

import (
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/lookup"
)

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
	for _, answers := range [][]*ast.Term{{yes, lookup.Undefined}, {ast.ArrayTerm(yes)}, {yes, no, yes, no, yes}, {ast.NullTerm()}} {
		if got := internedAnswers(answers); got != nil {
			t.Errorf("%v: made %v, want none", answers, got)
		}
	}
}
