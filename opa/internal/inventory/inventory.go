package inventory

import (
	"context"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/compact"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/policy"
)

// Inventory reads and writes data.inventory in the engine's store. Its
// writing methods (Init, Cut, Write, Bump, Committed) are called by one
// writer at a time, the engine's write lock held, inside the writer's store
// transaction; Value and KindGenerations read in any transaction.
type Inventory struct {
	store storage.Store
	// nodesRaw holds every Node whole, as deflated JSON, while the store
	// keeps them cut; view is what the store keeps (view.go).
	nodesRaw map[string][]byte
	codec    *compact.Codec // encodes nodesRaw; see nodeCodec
	view     View
	shared   *sharedValues // the values Nodes hold alike (shared.go)
	// generation is the whole inventory's generation, as committed.
	generation uint64
}

// New is the inventory of store, which Init prepares.
func New(store storage.Store) *Inventory {
	return &Inventory{store: store, nodesRaw: map[string][]byte{}, view: unknown, shared: newSharedValues(defaultSharedLimits)}
}

// Init writes the empty inventory and its generations.
func (i *Inventory) Init(ctx context.Context) error {
	if err := storage.WriteOne(ctx, i.store, storage.AddOp, storage.Path{"inventory"}, ast.NewObject()); err != nil {
		return fmt.Errorf("initialise inventory: %w", err)
	}
	if err := storage.WriteOne(ctx, i.store, storage.AddOp, GenerationPath[:1], ast.NewObject(
		ast.Item(ast.StringTerm(GenerationPath[1]), ast.InternedTerm(0)),
		ast.Item(ast.StringTerm(KindGenerationsPath[1]), ast.ObjectTerm()))); err != nil {
		return fmt.Errorf("initialise inventory generation: %w", err)
	}
	return nil
}

// Value reads an AST value from the store, nil when absent.
func (i *Inventory) Value(ctx context.Context, txn storage.Transaction, path storage.Path) ast.Value {
	v, err := i.store.Read(ctx, txn, path)
	if err != nil {
		return nil
	}
	if av, ok := v.(ast.Value); ok {
		return av
	}
	av, err := ast.InterfaceToValue(v)
	if err != nil {
		return nil
	}
	return av
}

// KindGenerations reads the kinds' generations in txn (nil when the store
// holds none yet).
func (i *Inventory) KindGenerations(ctx context.Context, txn storage.Transaction) ast.Object {
	obj, _ := i.Value(ctx, txn, KindGenerationsPath).(ast.Object)
	return obj
}

// Generation is the whole inventory's generation as last committed.
func (i *Inventory) Generation() uint64 { return i.generation }

// Written is what a commit's inventory changes did.
type Written struct {
	// Counts are the changes of each kind's object count, by Key.
	Counts map[string]int
	// Changed are the kinds whose stored objects changed, by Key.
	Changed map[string]bool
	// Nodes names the Nodes whose stored value changed (added, replaced
	// or removed), for the node index (IndexCache.Advance).
	Nodes []string
	// Refused are the changes not written.
	Refused []*policy.ApplyError
}

// Write writes the inventory changes of a commit under view (what Cut
// returned); raw receives the whole Nodes to keep once the commit is done.
func (i *Inventory) Write(ctx context.Context, txn storage.Transaction, changes []policy.Change, view View, raw map[string][]byte) Written {
	if !view.all {
		i.prepareNodeCodec(changes)
	}
	w := Written{Counts: map[string]int{}, Changed: map[string]bool{}}
	// The Nodes' writes are counted apart and count once they are stored.
	nodes := Written{Counts: map[string]int{}, Changed: map[string]bool{}}
	var nodeRefs []policy.ObjectRef
	nw := i.nodeWrites(ctx, txn)
	for _, ch := range changes {
		ref, _ := ch.Ref()
		delta, changed, err := i.write(ctx, txn, ch, view, raw, nw)
		if err != nil {
			w.Refused = append(w.Refused, &policy.ApplyError{Ref: ref, Err: err})
			continue
		}
		into := &w
		if IsNode(ref) {
			into = &nodes
			nodeRefs = append(nodeRefs, ref)
		}
		into.count(ref, delta, changed)
	}
	if err := nw.flush(ctx, i.store, txn); err != nil {
		for _, ref := range nodeRefs {
			w.Refused = append(w.Refused, &policy.ApplyError{Ref: ref, Err: err})
			delete(raw, ref.Name) // the kept copy stays the stored one's
		}
		return w
	}
	for k, d := range nodes.Counts {
		w.Counts[k] += d
	}
	for k := range nodes.Changed {
		w.Changed[k] = true
	}
	w.Nodes = nodes.Nodes
	return w
}

// count records one written object.
func (w *Written) count(ref policy.ObjectRef, delta int, changed bool) {
	key := Key(ref.GroupVersionKind)
	w.Counts[key] += delta
	if changed {
		w.Changed[key] = true
		if IsNode(ref) {
			w.Nodes = append(w.Nodes, ref.Name)
		}
	}
}

// write applies one inventory change inside txn (a Node's to nw, which
// the caller flushes) and reports how the object count changed (+1 added,
// -1 removed, 0 replaced or absent) and whether what the store holds
// changed. A write of the value the store holds already (a Node whose
// heartbeat is all that changed, once cut to what policies read; an
// informer's resync) writes nothing: what keys on the inventory's state
// stays valid.
func (i *Inventory) write(ctx context.Context, txn storage.Transaction, ch policy.Change, view View, raw map[string][]byte, nw *nodeWrites) (delta int, changed bool, err error) {
	ref, _ := ch.Ref()
	path := Path(ref.GroupVersionKind, ref.Namespace, ref.Name)
	isNode := IsNode(ref)
	var old ast.Value
	var exists bool
	if isNode {
		old, exists = nw.value(ref.Name)
	} else if old, exists, err = i.held(ctx, txn, path); err != nil {
		return 0, false, err
	}
	if ch.Object == nil {
		if !exists {
			return 0, false, nil
		}
		if isNode {
			nw.set(ref.Name, nil)
			raw[ref.Name] = nil
		} else if err := i.store.Write(ctx, txn, storage.RemoveOp, path, nil); err != nil {
			return 0, false, fmt.Errorf("remove from inventory: %w", err)
		}
		return -1, true, nil
	}
	content := WithoutManagedFields(ch.Object.Object)
	if IsNamespace(ref) {
		if err := CheckNamespace(content); err != nil {
			return 0, false, err
		}
	}
	var value ast.Value
	if isNode {
		value, err = i.keepNode(ref.Name, content, view, raw)
	} else {
		value, err = ast.InterfaceToValue(content)
	}
	if err != nil {
		return 0, false, fmt.Errorf("convert object: %w", err)
	}
	if exists && old.Compare(value) == 0 {
		return 0, false, nil
	}
	if isNode {
		nw.set(ref.Name, value)
	} else if err := put(ctx, i.store, txn, path, value, exists); err != nil {
		return 0, false, err
	}
	if exists {
		return 0, true, nil
	}
	return 1, true, nil
}

// held is the value the store holds at path in txn; false when none.
func (i *Inventory) held(ctx context.Context, txn storage.Transaction, path storage.Path) (ast.Value, bool, error) {
	v, err := i.store.Read(ctx, txn, path)
	if storage.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read inventory: %w", err)
	}
	held, ok := v.(ast.Value)
	if !ok {
		// Not an AST value: never equal to one, so it is replaced.
		return ast.Null{}, true, nil
	}
	return held, true, nil
}

// put writes value at path in txn, replacing what exists there.
func put(ctx context.Context, store storage.Store, txn storage.Transaction, path storage.Path, value ast.Value, exists bool) error {
	if exists {
		if err := store.Write(ctx, txn, storage.ReplaceOp, path, value); err != nil {
			return fmt.Errorf("write inventory: %w", err)
		}
		return nil
	}
	if err := storage.MakeDir(ctx, store, txn, path[:len(path)-1]); err != nil {
		return fmt.Errorf("make inventory path: %w", err)
	}
	if err := store.Write(ctx, txn, storage.AddOp, path, value); err != nil {
		return fmt.Errorf("write inventory: %w", err)
	}
	return nil
}

// Bump writes, in txn, the generations that change with a commit: each
// changed kind's and, when anything changed, the whole inventory's (recut:
// the Nodes were cut anew, which changes the Node kind). It returns the
// whole inventory's new generation, which Committed makes current.
func (i *Inventory) Bump(ctx context.Context, txn storage.Transaction, changedKinds map[string]bool, recut bool) (uint64, error) {
	if recut {
		changedKinds[NodeKind] = true
	}
	if len(changedKinds) == 0 {
		return i.generation, nil
	}
	gens := i.KindGenerations(ctx, txn)
	next := ast.NewObject()
	if gens != nil {
		next = gens.Copy()
	}
	for k := range changedKinds {
		n := 1
		if g := next.Get(ast.StringTerm(k)); g != nil {
			if held, ok := g.Value.(ast.Number).Int(); ok {
				n = held + 1
			}
		}
		next.Insert(ast.StringTerm(k), ast.InternedTerm(n))
	}
	if err := i.store.Write(ctx, txn, storage.ReplaceOp, KindGenerationsPath, next); err != nil {
		return 0, fmt.Errorf("store inventory kinds' generations: %w", err)
	}
	gen := i.generation + 1
	if err := i.store.Write(ctx, txn, storage.ReplaceOp, GenerationPath, GenerationValue(gen)); err != nil {
		return 0, fmt.Errorf("store inventory generation: %w", err)
	}
	return gen, nil
}

// GenerationValue is generation g as the store holds it at GenerationPath;
// nil for 0, which the store never holds.
func GenerationValue(g uint64) ast.Value {
	if g == 0 {
		return nil
	}
	return ast.InternedTerm(int(g)).Value
}

// Committed records, once a commit is done, the generation it wrote, the
// view it wrote Nodes under and the whole Nodes it changed.
func (i *Inventory) Committed(generation uint64, view View, raw map[string][]byte) {
	i.generation = generation
	i.view = view
	for name, b := range raw {
		if b == nil {
			delete(i.nodesRaw, name)
		} else {
			i.nodesRaw[name] = b
		}
	}
}
