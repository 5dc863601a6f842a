package opa

import (
	"slices"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/lookup"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/policyset"
)

// memoOK reports whether bc's verdicts may come from the memo. Nodes sent
// with a request stand in for the inventory's Nodes: a template that
// reads Nodes other than the candidate sees the request's, which no key
// holds; one that reads other kinds keys on their generations as ever.
func (r *memoKeys) memoOK(bc *policyset.BoundConstraint) bool {
	a := bc.Analysis
	return !r.e.opts.DisableMemo && !a.Nondeterministic && !(r.override && a.OtherNodes) && keysDistinct(r.podReview, a.DistinctKeys)
}

func (r *memoKeys) entry(bc *policyset.BoundConstraint, key []*ast.Term) *memoEntry {
	return r.e.memo.Find(bc.Owner, key)
}

// podKey is the pod's part of a memo key: the values at the input paths
// the template reads, the printed paths (a marker where the placeholder
// stands, the value where it could not), and the inventory generation if
// the template reads more of the inventory than the candidate node.
func (r *memoKeys) podKey(bc *policyset.BoundConstraint, review *ast.Term, pod *podView) *ast.Array {
	return ast.NewArray(slices.Clone(r.keys.keyTerms(bc, review, pod))...)
}

// keyTerms are podKey's elements, in the request's buffer: valid until
// the next call (memo.Find copies what it keeps).
func (r *memoKeys) keyTerms(bc *policyset.BoundConstraint, review *ast.Term, pod *podView) []*ast.Term {
	b := r.buffers()
	terms := b.key[:0]
	for k, plan := range bc.KeyPlans {
		if h := bc.KeyHelpers[k]; h != nil {
			terms = append(terms, r.helpers.helperKey(h, review))
			continue
		}
		terms = append(terms, r.keys.keyValue(bc.KeyPathIDs[k], review, plan))
	}
	terms = append(terms, pod.key...)
	if bc.Analysis.InventoryOther {
		terms = r.keys.inventoryTerms(terms, bc)
	}
	b.key = terms
	return terms
}

// keyValue is the value at path in review: looked up once per request in
// the pod's own review (the constraints of a library read the same paths,
// containers[_].image in a dozen of them), every time in a node's.
func (r *memoKeys) keyValue(id int, review *ast.Term, plan *lookup.InputPlan) *ast.Term {
	if review != r.podReview {
		return plan.Then(review, nil)
	}
	b := r.buffers()
	slot := b.keyCache.At(id)
	if *slot == nil {
		*slot = plan.ThenWith(review, nil, &b.lists)
	}
	return *slot
}
