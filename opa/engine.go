package opa

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/logging"
	"github.com/open-policy-agent/opa/v1/plugins"
	"github.com/open-policy-agent/opa/v1/sdk"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/drivers"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/drivers/cel"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/drivers/rego"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/gatekeeper"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/inventory"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/memo"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/policyset"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/verdict"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/policy"
)

// DefaultMemoBytes is Options.MemoBytes's default: why it is 16 MiB is
// the memo's to say (memo.DefaultMaxBytes).
const DefaultMemoBytes = memo.DefaultMaxBytes

// Options configure an Engine. The zero value is usable.
type Options struct {
	// EnforcementPoint is this service's name in scopedEnforcementActions
	// (default DefaultEnforcementPoint).
	EnforcementPoint string
	// UserInfo is review.userInfo in placement reviews (default: the
	// kube-scheduler's identity).
	UserInfo map[string]any
	// Logger receives compile errors and policy changes (default: discard).
	Logger *slog.Logger
	// MemoEntries bounds the results the memo holds, for all constraints
	// together (default 1<<18); MemoBytes bounds their estimated size
	// (default DefaultMemoBytes: about the heap a full memo takes).
	MemoEntries int
	MemoBytes   int64
	// OPAConfig is an OPA configuration (YAML or JSON) for the embedded
	// SDK: services, labels, keys, and the status and decision_logs
	// plugins, which then report to an OPA control plane as any OPA does
	// (LogDecision sends the decisions). bundles and discovery are refused:
	// the engine owns the store's policies and data.
	OPAConfig []byte
	// DisableMemo evaluates every review (for tests and measurements).
	DisableMemo bool
	// Parallelism is how many goroutines one request evaluates the pod's
	// memo misses on (default GOMAXPROCS minus one, at least one: one
	// after the other on two CPUs or fewer). The scheduler waits for each
	// answer, so on a larger machine a pod new to the memo is judged
	// sooner on idle cores; on two, handing work to the other core cost
	// more than it saved (Engine.parallelism).
	Parallelism int
	// DisableK8sNativeValidation runs templates on Rego only, as
	// Gatekeeper's --enable-k8s-native-validation=false: a template that
	// carries both engines' code runs its Rego, and one with CEL code only
	// is refused. By default, as in Gatekeeper, K8sNativeValidation (CEL)
	// code is chosen over Rego.
	DisableK8sNativeValidation bool
	// DefaultK8sNativeValidationFailurePolicy is the failure policy of CEL
	// code that names none, as Gatekeeper's
	// --default-k8s-native-validation-failure-policy: "Fail" (the default:
	// an evaluation error denies) or "Ignore".
	DefaultK8sNativeValidationFailurePolicy string
	// AllowNetworkBuiltins keeps http.send and net.lookup_ip_addr available
	// to templates. Off by default, as in Gatekeeper: a template cannot
	// reach out of the process.
	AllowNetworkBuiltins bool
}

// Engine holds the policy set and the inventory, and answers reviews. It is
// safe for concurrent use: Evaluate and Review run in parallel with Apply,
// and each sees one consistent policy set and inventory.
type Engine struct {
	opts Options
	log  *slog.Logger
	// userInfo is Options.UserInfo as a value, converted once.
	userInfo *ast.Term
	sdk      *sdk.OPA
	mgr      *plugins.Manager
	store    storage.Store
	// drivers compile the templates' code, by engine (newDrivers).
	drivers map[string]drivers.Driver

	// snap is what requests read: swapped whole, never mutated.
	snap atomic.Pointer[policyset.Snapshot]
	// nodeIndex finds inventory Nodes by name, or by the number names
	// gives the name (internal/inventory).
	nodeIndex inventory.IndexCache
	// memo holds verdicts for every constraint, each under its owner id.
	memo *memo.Memo[[]verdict.Result]
	// helpers holds the answers of helpers keyed apart (helper.go).
	helpers *memo.Memo[bool]
	// names numbers node names for the node classes and the node index.
	names *memo.Names
	// recent are the last answers, for the next verb of the same
	// scheduling cycle (reuse.go).
	recent recent
	// workloadKeys are the last key values of each workload's pods, for
	// its next pod (workloadkeys.go).
	workloadKeys workloadKeys
	// namespaces are the namespaces' labels as matching reads them.
	namespaces namespaceCache
	// printed shares the printed values of nodes (evaluate.go), workers
	// evaluate a request's memo misses in parallel (prefetch.go).
	printed printedOnce
	workers *workerPool
	// pools hold the memory answers and requests reuse (answermem.go).
	pools *pools
	// reg numbers what every policy set shares (policyset.go).
	reg *policyset.Registry

	// w stages and commits Apply's batches (applier).
	w applier
	// mu serialises writers; the fields below belong to it.
	mu          sync.Mutex
	templates   map[string]*templateState // by template name
	constraints map[policy.ConstraintKey]*constraintState
	invCounts   map[string]int
	generation  uint64
	// inv writes data.inventory and keeps the whole Nodes while the store
	// holds them cut.
	inv *inventory.Inventory
	// pending is the snapshot a commit is about to install, picked up by
	// the SDK manager's compiler trigger.
	pending *policyset.Snapshot

	stats struct {
		evaluations, memoHits, memoMisses, evalErrors atomic.Uint64
		helperEvaluations                             atomic.Uint64
		compileErrors, constraintErrors               atomic.Uint64
		lastApply                                     atomic.Int64
	}
	// commonHint is the most pod-level violations an answer held (at
	// most maxCommonHint): an answer's Placement.Common is made that large
	// at once instead of grown by appending, a dozen warnings per pod with
	// the whole library.
	commonHint atomic.Int32
	// columnsHint is the same for Placement.columns, and bindHint for
	// the bindings of a request's pod views (request.keepBindings).
	columnsHint atomic.Int32
	bindHint    atomic.Int32
}

type templateState struct {
	current *gatekeeper.Template // in force; nil if never compiled
	err     error                // last rejected version
}

type constraintState struct {
	current *gatekeeper.Constraint
	err     error // last rejected version
	bindErr error // the version in force does not fit its template's schema
}

// New starts an engine with an embedded OPA SDK instance.
func New(ctx context.Context, opts Options) (*Engine, error) {
	if opts.EnforcementPoint == "" {
		opts.EnforcementPoint = policy.DefaultEnforcementPoint
	}
	if opts.UserInfo == nil {
		opts.UserInfo = map[string]any{"username": "system:kube-scheduler", "groups": []any{"system:authenticated"}}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := gatekeeper.CheckFailurePolicy(opts.DefaultK8sNativeValidationFailurePolicy); err != nil {
		return nil, fmt.Errorf("Options.DefaultK8sNativeValidationFailurePolicy: %w", err)
	}
	userInfo, err := ast.InterfaceToValue(opts.UserInfo)
	if err != nil {
		return nil, fmt.Errorf("Options.UserInfo: %w", err)
	}
	reg := policyset.NewRegistry()
	e := &Engine{
		userInfo:    ast.NewTerm(userInfo),
		memo:        memo.New[[]verdict.Result](memo.Options{MaxResults: opts.MemoEntries, MaxBytes: opts.MemoBytes}),
		helpers:     memo.New[bool](helperMemoOptions),
		reg:         reg,
		names:       memo.NewNames(policyset.MaxNodeClasses),
		opts:        opts,
		log:         opts.Logger,
		templates:   map[string]*templateState{},
		constraints: map[policy.ConstraintKey]*constraintState{},
		invCounts:   map[string]int{},
		workers:     newWorkerPool(),
		pools:       newPools(),
	}
	e.w = applier{e}
	e.store = inmem.NewWithOpts(inmem.OptRoundTripOnWrite(false), inmem.OptReturnASTValuesOnRead(true))
	e.inv = inventory.New(e.store)
	e.drivers = newDrivers(e.store, opts)
	config, err := checkOPAConfig(opts.OPAConfig)
	if err != nil {
		return nil, err
	}
	var mgr *plugins.Manager
	o, err := sdk.New(ctx, sdk.Options{
		ID:            "opa-scheduler-extender",
		Config:        bytes.NewReader(config),
		Store:         sdkStore{e.store},
		Logger:        logging.NewNoOpLogger(),
		ConsoleLogger: logging.NewNoOpLogger(),
		ManagerOpts:   []func(*plugins.Manager){func(m *plugins.Manager) { mgr = m }},
	})
	if err != nil {
		return nil, fmt.Errorf("start OPA SDK: %w", err)
	}
	if mgr == nil {
		return nil, errors.New("start OPA SDK: no plugin manager")
	}
	e.sdk, e.mgr = o, mgr
	// The manager recompiles on policy commits; we hand it our compiler on
	// the transaction context and install the matching snapshot when it
	// says the compiler changed.
	mgr.RegisterCompilerTrigger(func(storage.Transaction) { e.onCompilerChange() })
	empty := &policyset.Snapshot{Compiled: map[string]drivers.Compiled{}, Templates: map[string]*policyset.CompiledTemplate{}}
	for name, d := range e.drivers {
		if empty.Compiled[name], err = d.Compile(ctx, nil, nil, nil); err != nil {
			return nil, fmt.Errorf("%s driver: %w", name, err)
		}
	}
	e.snap.Store(empty)
	if err := e.inv.Init(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// Close stops the SDK instance.
func (e *Engine) Close(ctx context.Context) { e.sdk.Stop(ctx) }

// onCompilerChange runs inside the commit that installs a new compiler.
func (e *Engine) onCompilerChange() {
	if p := e.pending; p != nil && e.mgr.GetCompiler() == p.StoreCompiler() {
		e.snap.Store(p)
		e.pending = nil
	}
}

// applier stages Apply's changes, compiles the policy set they make and
// commits it with the inventory: the engine's write side, whose state
// (templates, constraints, the inventory's writer) belongs to the write
// lock.
type applier struct{ *Engine }

// Apply adds, updates and removes templates, constraints and inventory
// objects in one step: everything accepted becomes visible at once. A
// change that is refused (a template that does not compile, an invalid
// constraint) is reported and leaves the previous version of that object
// in force; the rest of the batch still applies.
func (e *Engine) Apply(ctx context.Context, changes []policy.Change) []*policy.ApplyError {
	e.mu.Lock()
	defer e.mu.Unlock()

	b := &batch{templates: map[string]*gatekeeper.Template{}, checked: map[*gatekeeper.Template]drivers.Program{}}
	for _, ch := range changes {
		ref, err := ch.Ref()
		if err != nil {
			b.fail(ref, err)
			continue
		}
		gvk := ref.GroupVersionKind
		switch {
		case gvk.Group == policy.TemplateGroup && gvk.Kind == "ConstraintTemplate":
			e.w.stageTemplate(b, ch, ref)
		case gvk.Group == policy.ConstraintGroup:
			e.w.stageConstraint(b, ch, ref)
		default:
			b.inventory = append(b.inventory, ch)
		}
	}
	e.w.refuseDuplicateKinds(b)

	next, err := e.w.nextSnapshot(ctx, b)
	if err != nil {
		for name, t := range b.templates {
			if t != nil {
				e.w.templateState(name).err = err
				b.fail(templateRef(name), err)
			}
		}
		b.templates = map[string]*gatekeeper.Template{}
		next, _ = e.w.nextSnapshot(ctx, b)
	}
	if ierrs := e.w.commit(ctx, b.templates, next, b.inventory); len(ierrs) > 0 {
		b.errs = append(b.errs, ierrs...)
	}
	return b.errs
}

// batch is what one Apply stages before its commit.
type batch struct {
	templates          map[string]*gatekeeper.Template // name -> new version, nil = delete
	checked            map[*gatekeeper.Template]drivers.Program
	constraintsChanged bool
	inventory          []policy.Change
	errs               []*policy.ApplyError
}

func (b *batch) fail(ref policy.ObjectRef, err error) {
	b.errs = append(b.errs, &policy.ApplyError{Ref: ref, Err: err})
}

func templateRef(name string) policy.ObjectRef {
	return policy.ObjectRef{GroupVersionKind: schema.GroupVersionKind{Group: policy.TemplateGroup, Kind: "ConstraintTemplate"}, Name: name}
}

// stageTemplate parses and compiles a template change on its own; a
// refused one leaves the version in force.
func (e *applier) stageTemplate(b *batch, ch policy.Change, ref policy.ObjectRef) {
	if ch.Object == nil {
		b.templates[ref.Name] = nil
		return
	}
	if st := e.templates[ref.Name]; st != nil && st.current != nil && st.err == nil && sameVersion(st.current.ResourceVersion, ch.Object) {
		return
	}
	t, err := gatekeeper.ParseTemplate(ch.Object, gatekeeper.ParseOptions{
		DisableK8sNativeValidation: e.opts.DisableK8sNativeValidation,
		DefaultFailurePolicy:       e.opts.DefaultK8sNativeValidationFailurePolicy,
	})
	if err == nil {
		err = e.w.check(b, t)
	}
	if err != nil {
		e.stats.compileErrors.Add(1)
		e.w.templateState(ref.Name).err = err
		e.log.Warn("template rejected; the previous version stays in force", "template", ref.Name, "err", err)
		b.fail(ref, err)
		return
	}
	b.templates[ref.Name] = t
}

// stageConstraint parses a constraint change and checks its parameters
// against its template's schema (the staged version, when the batch
// changes it); a refused one leaves the version in force.
func (e *applier) stageConstraint(b *batch, ch policy.Change, ref policy.ObjectRef) {
	key := policy.ConstraintKey{Kind: ref.GroupVersionKind.Kind, Name: ref.Name}
	if ch.Object == nil {
		if _, ok := e.constraints[key]; ok {
			delete(e.constraints, key)
			b.constraintsChanged = true
		}
		return
	}
	st := e.constraints[key]
	if st == nil {
		st = &constraintState{}
		e.constraints[key] = st
	}
	refuse := func(err error) {
		e.stats.constraintErrors.Add(1)
		st.err = err
		e.log.Warn("constraint rejected; the previous version stays in force", "constraint", key.String(), "err", err)
		b.fail(ref, err)
		b.constraintsChanged = true // its status changed
	}
	c, err := gatekeeper.ParseConstraint(ch.Object, e.opts.EnforcementPoint)
	if err != nil {
		refuse(err)
		return
	}
	if st.current != nil && st.err == nil && st.current.Content == c.Content {
		return
	}
	if t := e.w.templateForKind(key.Kind, b.templates); t != nil {
		if _, err := gatekeeper.CheckParameters(t.Schema, c.RawParameters, t.LegacySchema); err != nil {
			refuse(err)
			return
		}
	}
	st.current, st.err = c, nil
	b.constraintsChanged = true
}

// refuseDuplicateKinds drops staged templates whose kind another template
// defines: Gatekeeper owns one CRD per kind.
func (e *applier) refuseDuplicateKinds(b *batch) {
	for name, t := range b.templates {
		if t == nil {
			continue
		}
		for other, st := range e.templates {
			if other == name || st.current == nil || st.current.Kind != t.Kind {
				continue
			}
			if o, changing := b.templates[other]; changing && (o == nil || o.Kind != t.Kind) {
				continue
			}
			err := fmt.Errorf("%w: kind %s is already defined by template %s", gatekeeper.ErrInvalidTemplate, t.Kind, other)
			e.w.templateState(name).err = err
			b.fail(templateRef(name), err)
			delete(b.templates, name)
			break
		}
	}
}

// templateForKind finds the template that will define kind after this
// batch: one changed in it, else the one in force.
func (e *applier) templateForKind(kind string, changed map[string]*gatekeeper.Template) *gatekeeper.Template {
	for _, t := range changed {
		if t != nil && t.Kind == kind {
			return t
		}
	}
	for name, st := range e.templates {
		if t, deleting := changed[name]; deleting && t == nil {
			continue
		}
		if st.current != nil && st.current.Kind == kind {
			return st.current
		}
	}
	return nil
}

func sameVersion(rv string, u *unstructured.Unstructured) bool {
	return rv != "" && rv == u.GetResourceVersion()
}

func (e *applier) templateState(name string) *templateState {
	st := e.templates[name]
	if st == nil {
		st = &templateState{}
		e.templates[name] = st
	}
	return st
}

// nextSnapshot builds the policy set that results from the batch's
// changes. Templates are compiled only by the drivers whose templates
// changed (compileTemplates).
func (e *applier) nextSnapshot(ctx context.Context, b *batch) (*policyset.Snapshot, error) {
	cur := e.snap.Load()
	changed := b.templates
	if len(changed) == 0 && !b.constraintsChanged {
		return nil, nil
	}
	next := &policyset.Snapshot{Generation: cur.Generation + 1, Compiled: cur.Compiled, Templates: cur.Templates}
	if len(changed) > 0 {
		templates, err := e.w.compileTemplates(ctx, cur, changed, b.checked)
		if err != nil {
			return nil, err
		}
		next.Compiled, next.Templates = templates.Compiled, templates.Templates
	}
	inForce := make(map[policy.ConstraintKey]*gatekeeper.Constraint, len(e.constraints))
	for key, st := range e.constraints {
		if st.current != nil {
			inForce[key] = st.current
		}
	}
	for key, err := range e.reg.BindConstraints(cur, next, inForce) {
		e.constraints[key].bindErr = err
	}
	return next, nil
}

// newDrivers are the engines' drivers, by the engine name templates give
// their code: a third engine is a package and a line here.
func newDrivers(store storage.Store, opts Options) map[string]drivers.Driver {
	out := map[string]drivers.Driver{}
	for _, d := range []drivers.Driver{
		rego.New(store, opts.AllowNetworkBuiltins),
		cel.New(),
	} {
		out[d.Engine()] = d
	}
	return out
}

// check compiles a template of the batch alone, with its engine's driver,
// and keeps the Program the driver may give for the batch's compile.
func (e *applier) check(b *batch, t *gatekeeper.Template) error {
	d := e.drivers[t.Engine]
	if d == nil {
		return fmt.Errorf("%w: no driver for engine %q", gatekeeper.ErrInvalidTemplate, t.Engine)
	}
	p, err := d.Check(t)
	if p != nil {
		b.checked[t] = p
	}
	return err
}

// compileTemplates compiles the whole set of templates in force after
// changed, with each driver whose templates the batch changes (the
// others' stay compiled as in cur), and keeps cur's compiled template for
// a Program that did not change.
func (e *applier) compileTemplates(ctx context.Context, cur *policyset.Snapshot, changed map[string]*gatekeeper.Template, checked map[*gatekeeper.Template]drivers.Program) (*policyset.Snapshot, error) {
	byEngine := map[string]map[string]*gatekeeper.Template{}
	touched := map[string]bool{} // engines whose templates the batch changes
	inForce := map[string]*gatekeeper.Template{}
	for name, st := range e.templates {
		if st.current != nil {
			inForce[name] = st.current
		}
	}
	for name, t := range changed {
		if old := inForce[name]; old != nil {
			touched[old.Engine] = true
		}
		if t == nil {
			delete(inForce, name)
			continue
		}
		inForce[name] = t
		touched[t.Engine] = true
	}
	for name, t := range inForce {
		if byEngine[t.Engine] == nil {
			byEngine[t.Engine] = map[string]*gatekeeper.Template{}
		}
		byEngine[t.Engine][name] = t
	}
	out := &policyset.Snapshot{Compiled: make(map[string]drivers.Compiled, len(e.drivers)), Templates: make(map[string]*policyset.CompiledTemplate, len(inForce))}
	for engine, d := range e.drivers {
		c := cur.Compiled[engine]
		if touched[engine] {
			var err error
			if c, err = d.Compile(ctx, c, byEngine[engine], checked); err != nil {
				return nil, err
			}
		}
		out.Compiled[engine] = c
		for _, t := range byEngine[engine] {
			p := c.Programs()[t.Kind]
			if p == nil {
				return nil, fmt.Errorf("compile template %s: the %s driver gave no program", t.Name, engine)
			}
			if ct := cur.Templates[t.Kind]; ct != nil && ct.Template == t && ct.Program == p {
				out.Templates[t.Kind] = ct
				continue
			}
			out.Templates[t.Kind] = policyset.NewCompiledTemplate(t, p)
		}
	}
	return out, nil
}

// storeChanges says whether changed adds, replaces or removes code the
// store holds (a template's Texts): only then do the store's policies and
// their compiler change.
func (e *applier) storeChanges(changed map[string]*gatekeeper.Template) bool {
	for name, t := range changed {
		if t != nil && len(t.Texts) > 0 {
			return true
		}
		if st := e.templates[name]; st != nil && st.current != nil && len(st.current.Texts) > 0 {
			return true
		}
	}
	return false
}

// nodeViewAfter is the view the store keeps Nodes in after a commit that
// installs next (nil: the policy set stays). A request may still hold the
// policy set in force before the commit (loaded after its transaction
// opened, before the new set was installed): the view serves both until
// the next commit.
func (e *applier) nodeViewAfter(next *policyset.Snapshot) inventory.View {
	constraints := e.snap.Load().Constraints
	if next != nil {
		constraints = append(append([]*policyset.BoundConstraint(nil), constraints...), next.Constraints...)
	}
	return policyset.ViewOf(constraints)
}

// advanceNodeIndex gives the node index (internal/inventory's IndexCache)
// the inventory generation just committed, with the Nodes requests read
// now. Should the store fail to open a transaction, requests look Nodes up
// directly until the next commit builds the index anew.
func (e *applier) advanceNodeIndex(ctx context.Context, prev, gen uint64, changed []string, whole bool) {
	txn, err := e.store.NewTransaction(ctx)
	if err != nil {
		return
	}
	defer e.store.Abort(ctx, txn)
	nodes, _ := e.inv.Value(ctx, txn, inventory.NodesPath).(ast.Object)
	e.nodeIndex.Advance(inventory.GenerationValue(prev), inventory.GenerationValue(gen), nodes, changed, whole, e.names)
}

// commit writes policies and inventory in one store transaction and
// installs the next snapshot when its compiler is in force.
func (e *applier) commit(ctx context.Context, templates map[string]*gatekeeper.Template, next *policyset.Snapshot, inv []policy.Change) []*policy.ApplyError {
	if next == nil && len(inv) == 0 {
		return nil
	}
	params := storage.WriteParams
	params.Context = storage.NewContext()
	txn, err := e.store.NewTransaction(ctx, params)
	if err != nil {
		return []*policy.ApplyError{{Err: fmt.Errorf("open store transaction: %w", err)}}
	}
	var errs []*policy.ApplyError
	for name, t := range templates {
		prev := e.templates[name]
		if prev != nil && prev.current != nil {
			for id := range prev.current.Texts {
				if t == nil || t.Texts[id] == nil {
					_ = e.store.DeletePolicy(ctx, txn, id)
				}
			}
		}
		if t != nil {
			for id, text := range t.Texts {
				if err := e.store.UpsertPolicy(ctx, txn, id, text); err != nil {
					e.store.Abort(ctx, txn)
					return []*policy.ApplyError{{Err: fmt.Errorf("store template %s: %w", name, err)}}
				}
			}
		}
	}
	view := e.w.nodeViewAfter(next)
	raw, recut, err := e.inv.Cut(ctx, txn, view)
	if err != nil {
		e.store.Abort(ctx, txn)
		return append(errs, &ApplyError{Err: err})
	}
	written := e.inv.Write(ctx, txn, inv, view, raw)
	errs = append(errs, written.Refused...)
	// Any change of what the store holds, and a re-cut of the Nodes, is
	// a new generation: what keys on it (signatures, kept answers, the
	// node index, verdicts of templates reading the inventory) never sees
	// two contents under one number; a write that changed nothing keeps it.
	gen, err := e.inv.Bump(ctx, txn, written.Changed, recut)
	if err != nil {
		e.store.Abort(ctx, txn)
		return append(errs, &ApplyError{Err: err})
	}
	recompiled := next != nil && len(templates) > 0 && e.w.storeChanges(templates)
	if recompiled {
		plugins.SetCompilerOnContext(params.Context, next.StoreCompiler())
		e.pending = next
	}
	if err := e.store.Commit(ctx, txn); err != nil {
		e.pending = nil
		return append(errs, &policy.ApplyError{Err: fmt.Errorf("commit: %w", err)})
	}
	if next != nil {
		if !recompiled {
			e.snap.Store(next) // constraints or CEL only: the compiler is unchanged
		} else if e.pending != nil {
			// The manager did not report the compiler change; install the
			// snapshot anyway, its compiler is the one just committed.
			e.log.Warn("OPA manager did not report the new compiler; installing the policy set directly")
			e.snap.Store(next)
			e.pending = nil
		}
		e.generation = next.Generation
		for name, t := range templates {
			if t == nil {
				delete(e.templates, name)
				continue
			}
			st := e.w.templateState(name)
			st.current, st.err = t, nil
		}
		e.log.Info("policy set installed", "generation", next.Generation, "templates", len(next.Templates), "constraints", len(next.Constraints))
	}
	prevGen := e.inv.Generation()
	e.inv.Committed(gen, view, raw)
	if gen != prevGen {
		e.w.advanceNodeIndex(ctx, prevGen, gen, written.Nodes, recut)
	}
	for k, d := range written.Counts {
		e.invCounts[k] += d
		if e.invCounts[k] <= 0 {
			delete(e.invCounts, k)
		}
	}
	e.stats.lastApply.Store(time.Now().UnixNano())
	return errs
}
