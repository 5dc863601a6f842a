package inventory

import (
	"sort"

	"github.com/open-policy-agent/opa/v1/ast"
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

// Reads is what a template's rules can read of data.inventory:
// the kinds (Key form), or any kind.
type Reads struct {
	Kinds []string
	Any   bool
}

// ReadsOf walks every reference of rules (a template and its
// libraries: the only code it can run) and lists the inventory kinds they
// can reach. Over-approximate: any reference into data that cannot be
// pinned to a kind reads any kind.
func ReadsOf(rules []*ast.Rule) Reads {
	kinds := map[string]bool{}
	var out Reads
	for _, rule := range rules {
		ast.WalkRefs(rule, func(r ast.Ref) bool {
			kind, reads, anyKind := kindOf(r)
			switch {
			case anyKind:
				out.Any = true
			case reads:
				kinds[kind] = true
			}
			return false
		})
	}
	for k := range kinds {
		out.Kinds = append(out.Kinds, k)
	}
	sort.Strings(out.Kinds)
	return out
}

// kindOf says what a reference reads of the inventory: nothing
// (not rooted at data.inventory), one kind, or possibly any.
//
//	data.inventory.cluster[gv][Kind]...        kind gv/Kind
//	data.inventory.namespace[ns][gv][Kind]...  kind gv/Kind, whatever ns
func kindOf(r ast.Ref) (kind string, reads, anyKind bool) {
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

// KeyKinds are the kinds whose generations key bc's verdicts: the kinds
// its template reads, less the Nodes when it reads only the candidate
// node (keyed by its node class, not by the Nodes' generation).
func KeyKinds(reads Reads, otherNodes bool) []*ast.Term {
	var out []*ast.Term
	for _, k := range reads.Kinds {
		if k == NodeKind && !otherNodes {
			continue
		}
		out = append(out, ast.StringTerm(k))
	}
	return out
}
