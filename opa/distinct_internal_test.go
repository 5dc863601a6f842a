package opa

import (
	"fmt"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// TestDistinct: equal keys are found among few and many, equal as Rego
// compares object keys (1 and 1.0 are one key), whatever their type.
func TestDistinct(t *testing.T) {
	terms := func(n int, dup bool) []*ast.Term {
		var out []*ast.Term
		for i := range n {
			out = append(out, ast.StringTerm(fmt.Sprintf("c-%d", i)))
		}
		if dup {
			out = append(out, ast.StringTerm("c-0"))
		}
		return out
	}
	cases := []struct {
		name string
		keys []*ast.Term
		want bool
	}{
		{"none", nil, true},
		{"few distinct", terms(3, false), true},
		{"few with a repeat", terms(3, true), false},
		{"many distinct", terms(100, false), true},
		{"many with a repeat", terms(100, true), false},
		{"a string and a number that print alike", []*ast.Term{ast.StringTerm("1"), ast.IntNumberTerm(1)}, true},
		{"many, a string and a number that print alike", append(terms(20, false), ast.StringTerm("1"), ast.IntNumberTerm(1)), true},
		{"numbers equal as keys, written apart", []*ast.Term{ast.NumberTerm("1"), ast.NumberTerm("1.0")}, false},
		{"many, numbers equal as keys, written apart", append(terms(20, false), ast.NumberTerm("1"), ast.NumberTerm("1.0")), false},
	}
	for _, tc := range cases {
		if got := distinct(tc.keys); got != tc.want {
			t.Errorf("%s: distinct = %v, want %v", tc.name, got, tc.want)
		}
	}
}
