package opa

import (
	"context"
	"sort"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"
)

// A template that reads data.inventory beyond the candidate node keys its
// verdicts on the inventory's state. Keyed on the whole inventory's
// generation, every Node heartbeat of a living cluster (twenty a second
// at 5000 nodes) would void its verdicts, though it reads only, say,
// Namespaces. So the engine counts a generation per kind of inventory
// object, bumped only by a write that changes what the store holds, and
// such a template keys on the generations of the kinds its rules can
// reach. A read the kind of which is not fixed (data.inventory.cluster[gv]
// with gv a variable, data.inventory whole, data[x]) keys on the whole
// inventory's generation, as before.

// kindGenerationsPath holds the generation of each kind of inventory
// object ("v1/Namespace"), read in the request's transaction.
var kindGenerationsPath = storage.Path{"opa_scheduler_extender", "kind_generations"}

// inventoryReads is what a template's rules can read of data.inventory:
// the kinds (inventoryKey form), or any kind.
type inventoryReads struct {
	kinds []string
	any   bool
}

// inventoryReadsOf walks every reference of rules (a template and its
// libraries: the only code it can run) and lists the inventory kinds they
// can reach. Over-approximate: any reference into data that cannot be
// pinned to a kind reads any kind.
func inventoryReadsOf(rules []*ast.Rule) inventoryReads {
	kinds := map[string]bool{}
	var out inventoryReads
	for _, rule := range rules {
		ast.WalkRefs(rule, func(r ast.Ref) bool {
			kind, reads, anyKind := inventoryKindOf(r)
			switch {
			case anyKind:
				out.any = true
			case reads:
				kinds[kind] = true
			}
			return false
		})
	}
	for k := range kinds {
		out.kinds = append(out.kinds, k)
	}
	sort.Strings(out.kinds)
	return out
}

// inventoryKindOf says what a reference reads of the inventory: nothing
// (not rooted at data.inventory), one kind, or possibly any.
//
//	data.inventory.cluster[gv][Kind]...        kind gv/Kind
//	data.inventory.namespace[ns][gv][Kind]...  kind gv/Kind, whatever ns
func inventoryKindOf(r ast.Ref) (kind string, reads, anyKind bool) {
	if len(r) == 0 || !r[0].Equal(ast.DefaultRootDocument) {
		return "", false, false
	}
	if len(r) < 2 {
		return "", true, true // data itself
	}
	top, ok := r[1].Value.(ast.String)
	if !ok {
		return "", true, true // data[x]
	}
	if top != "inventory" {
		return "", false, false // the template's own rules and its libraries
	}
	at := func(i int) (string, bool) {
		if i >= len(r) {
			return "", false
		}
		s, ok := r[i].Value.(ast.String)
		return string(s), ok
	}
	scope, ok := at(2)
	var gv, k string
	var okGV, okKind bool
	switch {
	case ok && scope == "cluster":
		gv, okGV = at(3)
		k, okKind = at(4)
	case ok && scope == "namespace":
		gv, okGV = at(4)
		k, okKind = at(5)
	}
	if !okGV || !okKind {
		return "", true, true
	}
	return gv + "/" + k, true, false
}

// keyKinds are the kinds whose generations key bc's verdicts: the kinds
// its template reads, less the Nodes when it reads only the candidate
// node (keyed by its node class, not by the Nodes' generation).
func keyKinds(reads inventoryReads, otherNodes bool) []*ast.Term {
	var out []*ast.Term
	for _, k := range reads.kinds {
		if k == nodeKind && !otherNodes {
			continue
		}
		out = append(out, ast.StringTerm(k))
	}
	return out
}

// nodeKind is the Nodes' inventoryKey.
const nodeKind = "v1/Node"

// readKindGenerations reads the kinds' generations in txn (nil when the
// store holds none yet).
func (e *Engine) readKindGenerations(ctx context.Context, txn storage.Transaction) ast.Object {
	obj, _ := e.readValue(ctx, txn, kindGenerationsPath).(ast.Object)
	return obj
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
