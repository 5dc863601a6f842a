package opa

import (
	"fmt"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/gatekeeper"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/inventory"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/lookup"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/policyset"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/verdict"
)

// candidates fills the request's node slots: request nodes converted, the
// others looked up in the inventory.
func (r *candidateSlots) candidates(cands []Candidate) error {
	r.scratch = r.e.pools.scratch.Get()
	r.scratch.grow(len(cands))
	r.slots = r.scratch.slots
	inventoryNodes, _ := r.e.inv.Value(r.ctx, r.txn, inventory.NodesPath).(ast.Object)
	index := r.e.nodeIndex.Of(r.invGen.Value)
	r.cands.numberSlots(cands)
	nameKey := &ast.Term{} // one lookup key for all candidates
	known := func(i int, name string) ast.Value {
		if index != nil {
			return index.NodeNumbered(name, r.slotNums[i], r.numGen)
		}
		if inventoryNodes != nil {
			nameKey.Value = ast.String(name)
			if t := inventoryNodes.Get(nameKey); t != nil {
				if _, ok := t.Value.(ast.Object); ok {
					return t.Value
				}
			}
		}
		return nil
	}
	for i, c := range cands {
		s := &r.slots[i]
		s.name = c.Name
		if c.Object == nil && c.JSON == nil {
			s.value = known(i, c.Name)
			continue
		}
		var err error
		if s.value, s.fromRequest, err = r.cands.requestNode(c, known(i, c.Name)); err != nil {
			return err
		}
		r.override = true
	}
	if r.override {
		// The request's nodes stand for the inventory's Nodes, one per
		// name: a name given twice with two Nodes that differ in what the
		// policy set reads would judge one candidate on the other's Node
		// wherever a template reads the Nodes by name.
		nodes := ast.NewObject()
		for _, s := range r.slots {
			key := ast.StringTerm(s.name)
			if t := nodes.Get(key); t != nil && s.value != nil && t.Value.Compare(s.value) != 0 {
				return fmt.Errorf("candidate %q given twice with different Nodes: a request judges one Node per name", s.name)
			}
			if s.value != nil {
				nodes.Insert(key, ast.NewTerm(s.value))
			}
		}
		r.nodes = ast.NewTerm(nodes)
	}
	return nil
}

// numberSlots numbers the candidates' names (memo.Names, for the node
// classes and the node index) into r.slotNums, under r.numGen.
func (r *candidateSlots) numberSlots(cands []Candidate) {
	names := r.scratch.names
	for i, c := range cands {
		names[i] = c.Name
	}
	r.slotNums = r.scratch.slotNums
	r.numGen = r.e.names.IDs(names, r.slotNums)
}

// requestNode is the value a Node sent with the request stands for: cut to
// what the request's policy set reads of a candidate (so that converting
// it costs what the policies read, not the whole Node), and the
// inventory's own value when that is equal: a Node the inventory holds as
// the scheduler sent it then shares the inventory Node's remembered node
// classes, and costs a class lookup, not a projection or an evaluation.
// fromRequest reports that the value is the request's own.
func (r *candidateSlots) requestNode(c Candidate, known ast.Value) (ast.Value, bool, error) {
	var v ast.Value
	if c.Object != nil {
		content := r.snap.NodeView().Cut(inventory.WithoutManagedFields(gatekeeper.WithTypeMeta(c.Object, schema.GroupVersionKind{Version: "v1", Kind: "Node"})))
		var err error
		if v, err = ast.InterfaceToValue(content); err != nil {
			return nil, false, fmt.Errorf("convert node %s: %w", c.Name, err)
		}
		if _, ok := v.(ast.Object); !ok {
			return nil, false, fmt.Errorf("node %s is not an object", c.Name)
		}
	} else {
		obj, err := r.snap.NodeView().CutJSON(c.JSON)
		if err != nil {
			return nil, false, fmt.Errorf("read node %s: %w", c.Name, err)
		}
		v = obj
	}
	if known != nil && known.Compare(v) == 0 {
		return known, false, nil
	}
	return v, true, nil
}

type nodeSlot struct {
	name  string
	value ast.Value // nil: unknown node
	// fromRequest: the node came with the request, not from the inventory.
	fromRequest bool
	// review is the pod's review with spec.nodeName set to this node,
	// built on first need.
	review *ast.Term
}

// nodeClasses gives the class of every known candidate for bc, in one
// pass under one read lock for the inventory nodes already classified.
func (r *candidateSlots) nodeClasses(bc *policyset.BoundConstraint, p *Placement) []int {
	if r.slotValues == nil {
		r.slotValues = r.scratch.slotValues
		for i, s := range r.slots {
			r.slotValues[i] = s.value
		}
	}
	ids, aux := r.scratch.classIDs, r.scratch.classAux // Known writes every element
	r.classAux = aux
	remember := func(i int) bool { return !r.slots[i].fromRequest }
	bc.Classes.Known(r.numGen, r.slotNums, r.slotValues, remember, ids, aux)
	for i := range r.slots {
		if ids[i] == 0 && !p.Nodes[i].Unknown {
			s := &r.slots[i]
			ids[i], aux[i] = bc.Classes.Of(r.numGen, r.slotNums[i], s.value, !s.fromRequest, func() (*ast.Array, any) { return r.cands.project(bc, s.name, s.value) })
		}
	}
	return ids
}

// printed gives node i's printed values for bc (remembered with its
// class), nil when bc prints none.
func (r *candidateSlots) printed(bc *policyset.BoundConstraint, i int, subst bool) *nodePrinted {
	if !subst {
		return nil
	}
	if printed, _ := r.classAux[i].(*nodePrinted); printed != nil {
		return printed
	}
	_, printed := r.cands.project(bc, r.slots[i].name, r.slots[i].value)
	return printed
}

// project is a node's part of bc's memo key: the values at the node paths
// the template reads, whether the paths it only tests are true, and for
// printed values a marker where a placeholder can stand, else the value.
// It also gives the printed values themselves.
func (r *candidateSlots) project(bc *policyset.BoundConstraint, name string, node ast.Value) (*ast.Array, *nodePrinted) {
	var printed *nodePrinted
	a := bc.Analysis
	terms := make([]*ast.Term, 0, len(a.NodePaths)+len(a.NodeExists)+len(bc.NodeMsgs)+1)
	for _, path := range a.NodePaths {
		terms = append(terms, r.e.reg.Lookup.At(node, path))
	}
	for _, path := range a.NodeExists {
		terms = append(terms, ast.InternedTerm(lookup.Truthy(r.e.reg.Lookup.At(node, path))))
	}
	for _, m := range bc.NodeMsgs {
		t := r.e.reg.Lookup.At(node, m.Path)
		if v, ok := verdict.SubstitutableAt(node, m.Path, m.Quote, m.Trim); ok {
			t = verdict.PlaceholderKey
			printed = printed.withValue(verdict.NewBinding(m.Index, v))
		}
		terms = append(terms, t)
	}
	if m := bc.NameMsg; m != nil {
		t := ast.StringTerm(name)
		if _, ok := verdict.Substitutable(t, m.Quote, m.Trim); ok {
			t = verdict.PlaceholderKey
			printed = printed.withValue(verdict.NewBinding(m.Index, name))
		}
		terms = append(terms, t)
	}
	return ast.NewArray(terms...), r.e.printed.shared(printed)
}

// nothingPrinted stands for the printed values of every node a constraint
// prints nothing of: the node classes remember one per node and
// constraint, and a value of its own each was tens of thousands of
// objects for the collector to mark at 5000 Nodes. Never written to.
var nothingPrinted = &nodePrinted{}

// printedOnce holds an engine's nodePrinted of one printed value, shared
// by every constraint that prints that value at that place: most print the
// node's name, and one object per node and constraint was 5 MiB of the
// live heap with 5000 Nodes and the realistic set (a nodePrinted is never
// written to once made). Bounded: past maxPrintedOnce values it starts
// over, so that the names of Nodes long gone (a cluster that scales) hold
// at most a few MiB; objects the node classes hold stay theirs.
type printedOnce struct {
	mu sync.Mutex
	m  map[verdict.Binding]*nodePrinted
}

const maxPrintedOnce = 1 << 15

// shared is pr, or the nodePrinted of the same single value already made.
func (o *printedOnce) shared(pr *nodePrinted) *nodePrinted {
	switch {
	case pr == nil:
		return nothingPrinted
	case len(pr.bindings) != 1:
		return pr
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if same := o.m[pr.bindings[0]]; same != nil {
		return same
	}
	if o.m == nil || len(o.m) >= maxPrintedOnce {
		o.m = make(map[verdict.Binding]*nodePrinted)
	}
	o.m[pr.bindings[0]] = pr
	return pr
}

// nodePrinted are a node's values printed by one constraint, ready to be
// put into its results: computed once per Node value, with its class.
type nodePrinted struct {
	bindings verdict.Bindings
	// inline holds the first bindings: a constraint prints one or two
	// values of a node, and the node classes keep one nodePrinted per node
	// and constraint, so one object each rather than two for the collector.
	inline [2]verdict.Binding
}

// withValue is pr with x printed too; a nil pr is made on the first
// value (most constraints print none of a node).
func (pr *nodePrinted) withValue(x verdict.Binding) *nodePrinted {
	if pr == nil {
		pr = &nodePrinted{}
		pr.bindings = pr.inline[:0]
	}
	pr.bindings = append(pr.bindings, x)
	return pr
}
