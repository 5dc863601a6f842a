package opa

import (
	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/policyset"
)

// inventoryTerms appends to terms what keys bc's verdicts on the
// inventory beyond the candidate node: the generations of the kinds it
// reads, or the whole inventory's when it may read any kind.
func (r *memoKeys) inventoryTerms(terms []*ast.Term, bc *policyset.BoundConstraint) []*ast.Term {
	if bc.InvAny {
		return append(terms, r.invGen)
	}
	for _, k := range bc.InvKinds {
		t := zeroGeneration
		if r.kindGens != nil {
			if g := r.kindGens.Get(k); g != nil {
				t = g
			}
		}
		terms = append(terms, t)
	}
	return terms
}

var zeroGeneration = ast.InternedTerm(0)
