package opa

import (
	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/inventory"
)

// What the policy set reads of data.inventory, as the engine keeps and keys
// on it: the store keeps each Node cut to what the constraints read of the
// candidate (package internal/inventory), and a template that reads other
// kinds keys its verdicts on the generations of those kinds.

// viewOf is the union of what the bound constraints read of the
// candidate node: what the store keeps of each Node.
func viewOf(constraints []*boundConstraint) inventory.View {
	var paths, exists [][]*ast.Term
	for _, bc := range constraints {
		a := bc.analysis
		if a.OtherNodes || a.Nondeterministic {
			return inventory.Whole
		}
		paths = append(paths, a.NodePaths...)
		exists = append(exists, a.NodeExists...)
		for _, m := range a.Messages {
			if m.Root == analysis.Node {
				paths = append(paths, m.Path)
			}
		}
	}
	return inventory.NewView(paths, exists)
}

// inventoryTerms appends to terms what keys bc's verdicts on the
// inventory beyond the candidate node: the generations of the kinds it
// reads, or the whole inventory's when it may read any kind.
func (r *request) inventoryTerms(terms []*ast.Term, bc *boundConstraint) []*ast.Term {
	if bc.invAny {
		return append(terms, r.invGen)
	}
	for _, k := range bc.invKinds {
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
