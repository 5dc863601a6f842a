package policyset

import (
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/drivers"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/gatekeeper"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/inventory"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/lookup"
)

// Snapshot is one consistent policy set: immutable once built, swapped
// whole by the engine.
type Snapshot struct {
	Generation uint64
	// Compiled are the drivers' compiled templates, by engine.
	Compiled    map[string]drivers.Compiled
	Templates   map[string]*CompiledTemplate // by kind
	Constraints []*BoundConstraint           // sorted by key
	// view is what its constraints read of a candidate Node (NodeView).
	viewOnce sync.Once
	view     inventory.View
	// keyReads index the key paths of its constraints (KeyReads).
	keyReadsOnce sync.Once
	keyReads     *lookup.ReadIndex
}

// StoreCompiler is the compiler of the policies the store holds with this
// policy set (drivers.StoreCompiled), or nil.
func (s *Snapshot) StoreCompiler() *ast.Compiler {
	for _, c := range s.Compiled {
		if sc, ok := c.(drivers.StoreCompiled); ok {
			return sc.StoreCompiler()
		}
	}
	return nil
}

// NodeView is what the policy set's constraints read of a candidate Node:
// a request's own Nodes are cut to it.
func (s *Snapshot) NodeView() inventory.View {
	s.viewOnce.Do(func() { s.view = ViewOf(s.Constraints) })
	return s.view
}

// KeyReads indexes what the key paths a request caches (KeyPathIDs, and
// the helpers' RawIDs) read of a pod's review, by their numbers.
func (s *Snapshot) KeyReads() *lookup.ReadIndex {
	s.keyReadsOnce.Do(func() {
		x := lookup.NewReadIndex()
		for _, bc := range s.Constraints {
			for k, id := range bc.KeyPathIDs {
				if id >= 0 {
					x.Add(id, bc.KeyPlans[k])
				}
			}
			for _, h := range bc.KeyHelpers {
				if h == nil {
					continue
				}
				for i, id := range h.RawIDs {
					x.Add(id, h.RawPlans[i])
				}
			}
		}
		s.keyReads = x
	})
	return s.keyReads
}

// CompiledTemplate is a template in force and its code's Program, with
// what the fast path asks of it on every request kept at hand.
type CompiledTemplate struct {
	Template *gatekeeper.Template
	Program  drivers.Program
	// analysis is the template's, without any constraint's parameters.
	Analysis *analysis.Result
	// guards are the conditions each violation rule begins with (nil:
	// some rule has none): a pod failing one of every rule's is not
	// evaluated (the engine's request.guardFails).
	Guards [][]analysis.Guard
	// invReads are the inventory kinds its code can reach.
	invReads inventory.Reads
}

// NewCompiledTemplate keeps what the fast path asks of prog at hand.
func NewCompiledTemplate(t *gatekeeper.Template, prog drivers.Program) *CompiledTemplate {
	return &CompiledTemplate{Template: t, Program: prog, Analysis: prog.Analyze(nil), Guards: prog.Guards(), invReads: prog.InventoryReads()}
}

// ViewOf is the union of what the bound constraints read of the
// candidate node: what the store keeps of each Node.
func ViewOf(constraints []*BoundConstraint) inventory.View {
	var paths, exists [][]*ast.Term
	for _, bc := range constraints {
		a := bc.Analysis
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
