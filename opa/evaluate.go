package opa

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/topdown"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/gatekeeper"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/inventory"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/lookup"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/policyset"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/verdict"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/policy"
)

var podGVK = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}

// podInput is what a request knows of its pod: the review templates see
// (before spec.nodeName is set per node) and what matching reads.
type podInput struct {
	review          ast.Object
	name, namespace string
	labels          map[string]string
	ns              *gatekeeper.NamespaceInfo
}

func (e *Engine) podInput(ctx context.Context, txn storage.Transaction, pod *Pod) podInput {
	in := podInput{name: pod.name, namespace: pod.namespace, labels: pod.labels}
	nsValue := e.inv.Value(ctx, txn, append(inventory.NamespacesPath[:len(inventory.NamespacesPath):len(inventory.NamespacesPath)], in.namespace))
	nsTerm := ast.ObjectTerm()
	if nsValue != nil && in.namespace != "" {
		nsTerm = ast.NewTerm(nsValue)
		in.ns = e.namespaces.of(in.namespace, nsValue)
	}
	in.review = gatekeeper.PodReview(pod.value, in.name, in.namespace, e.userInfo, nsTerm)
	return in
}

// namespaceCache holds the matching view (namespaceInfo) of the
// namespace objects in the store, by the value the store holds: a value
// is immutable while the store holds it, and a replaced one is a new
// value, so an entry never goes stale; the table starts over past
// maxCachedNamespaces, so replaced values are not kept for long. Every
// request for a pod reads its namespace, and its labels map was made
// anew each time.
type namespaceCache struct {
	mu      sync.Mutex
	byValue map[ast.Value]*gatekeeper.NamespaceInfo
}

const maxCachedNamespaces = 4096

// of is the namespaceInfo of the namespace named name whose object is v
// (read-only: it is shared by the requests).
func (c *namespaceCache) of(name string, v ast.Value) *gatekeeper.NamespaceInfo {
	if _, ok := v.(ast.Object); !ok {
		// Not a namespace object (keyed only by objects, which are
		// pointers): matching reads no labels of it.
		return &gatekeeper.NamespaceInfo{Name: name, Labels: valueLabels(v)}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ns := c.byValue[v]; ns != nil && ns.Name == name {
		return ns
	}
	if c.byValue == nil || len(c.byValue) >= maxCachedNamespaces {
		c.byValue = map[ast.Value]*gatekeeper.NamespaceInfo{}
	}
	ns := &gatekeeper.NamespaceInfo{Name: name, Labels: valueLabels(v)}
	c.byValue[v] = ns
	return ns
}

// ReviewInput is input.review as every template sees it when the pod is
// judged on node: the Pod CREATE review with spec.nodeName set to node and
// the namespace's object from the inventory. With input.parameters (the
// constraint's spec.parameters) and data.inventory it reproduces a
// verdict with opa eval.
func (e *Engine) ReviewInput(ctx context.Context, pod map[string]any, node string) (map[string]any, error) {
	p, err := NewPod(pod)
	if err != nil {
		return nil, err
	}
	txn, err := e.store.NewTransaction(ctx)
	if err != nil {
		return nil, fmt.Errorf("open store transaction: %w", err)
	}
	defer e.store.Abort(ctx, txn)
	in := e.podInput(ctx, txn, p)
	v, err := ast.JSON(gatekeeper.WithNodeName(in.review, node))
	if err != nil {
		return nil, fmt.Errorf("review as JSON: %w", err)
	}
	review, _ := v.(map[string]any)
	return review, nil
}

// Evaluate judges each candidate node for the pod: the violations of every
// constraint that matches the pod and applies at this enforcement point.
// It keeps nothing of req.Candidates once it returns (callers reuse the
// list); with req.Reuse it keeps its answer for, or answers from, the
// request for the same pod moments before (reuse.go).
func (e *Engine) Evaluate(ctx context.Context, req PlacementRequest) (*Placement, error) {
	pod, err := req.pod()
	if err != nil {
		return nil, err
	}
	v, err := e.openView(ctx)
	if err != nil {
		return nil, err
	}
	reusable := e.reusable(req)
	if reusable && req.Reuse == ReuseTake {
		if p := e.recent.reuse(v.snap, v.invGen, pod, req.Candidates); p != nil {
			e.store.Abort(ctx, v.txn)
			return p, nil
		}
	}
	r := e.newRequest(ctx, v, e.podInput(ctx, v.txn, pod), req.Explain)
	defer r.end()
	keys := r.reuseKeys(pod)
	if err := r.candidates(req.Candidates); err != nil {
		return nil, err
	}
	p := r.placement()
	nodeReading, err := r.judgePod(p)
	if err != nil {
		return nil, err
	}
	if err := r.judgeNodes(p, nodeReading); err != nil {
		return nil, err
	}
	p.Evaluations = int(r.evals)
	p.settle()
	r.handBindings(p)
	if reusable && req.Reuse == ReuseKeep {
		e.recent.keep(r, pod, p)
	}
	r.keepKeys(pod, keys)
	return p, nil
}

// begin opens a request for the pod on a view of the store (openView). end
// closes it.
func (e *Engine) begin(ctx context.Context, pod *Pod, explain bool) (*request, error) {
	v, err := e.openView(ctx)
	if err != nil {
		return nil, err
	}
	return e.newRequest(ctx, v, e.podInput(ctx, v.txn, pod), explain), nil
}

// storeView is what a request reads: a store transaction, the policy set
// and the inventory generation. The transaction first: while it is open no
// commit completes, so the policy set loaded next is the one in force for
// its inventory, or the one just before (see commit and package internal/inventory).
type storeView struct {
	txn    storage.Transaction
	snap   *policyset.Snapshot
	invGen ast.Value
	// kindGens are the inventory kinds' generations (package internal/inventory).
	kindGens ast.Object
}

func (e *Engine) openView(ctx context.Context) (storeView, error) {
	txn, err := e.store.NewTransaction(ctx)
	if err != nil {
		return storeView{}, fmt.Errorf("open store transaction: %w", err)
	}
	return storeView{txn: txn, snap: e.snap.Load(), invGen: e.inv.Value(ctx, txn, inventory.GenerationPath), kindGens: e.inv.KindGenerations(ctx, txn)}, nil
}

// end adds the request's counters to the engine's, returns its scratch
// and closes its transaction.
func (r *request) end() {
	r.addStats()
	r.release()
	r.e.store.Abort(r.ctx, r.txn)
}

// release returns the request's scratch to the pool; the request's node
// slots are gone with it.
func (r *request) release() {
	if r.stopCancel != nil {
		r.stopCancel()
		r.stopCancel = nil
	}
	if r.scratch != nil {
		r.scratch.release(&r.e.pools.scratch)
		r.scratch, r.slots, r.slotValues, r.slotNums, r.classAux = nil, nil, nil, nil, nil
	}
	if r.pb != nil {
		r.pb.release(&r.e.pools.podBuffers)
		r.pb = nil
	}
}

// evalCancel is what stops the request's evaluations when its
// context ends: one topdown.Cancel per request, set by context.AfterFunc,
// which starts no goroutine unless the context ends. Without it OPA
// starts a goroutine per evaluation to watch the context (a tenth of an
// evaluation's cost, and a one-off pod runs a dozen). Safe for the
// prefetch workers to call at once.
func (r *request) evalCancel() topdown.Cancel {
	r.cancelOnce.Do(func() {
		c := topdown.NewCancel()
		r.stopCancel = context.AfterFunc(r.ctx, c.Cancel)
		r.cancel = c
	})
	return r.cancel
}

func (e *Engine) newRequest(ctx context.Context, v storeView, in podInput, explain bool) *request {
	return &request{
		e: e, ctx: ctx, txn: v.txn, snap: v.snap, in: in,
		invGen:    ast.NewTerm(v.invGen),
		kindGens:  v.kindGens,
		explain:   explain,
		podReview: ast.NewTerm(in.review),
	}
}

// placement is an empty answer for the request's candidates.
func (r *request) placement() *Placement {
	p := r.e.pools.newPlacement(len(r.slots))
	p.Generation = r.snap.Generation
	for i, s := range r.slots {
		p.Nodes[i].Name = s.name
		p.Nodes[i].Unknown = s.value == nil
	}
	return p
}

// judgePod matches every constraint against the pod, records the verdicts
// of those that cannot see the node (p.Common) and the warn count, and
// returns the places in the policy set of the matched constraints that
// can see the node, for judgeNodes. The pod-only constraints' memo misses
// are evaluated first, in parallel (prefetch.go); verdicts are recorded in
// policy order.
func (r *request) judgePod(p *Placement) ([]int, error) {
	steps, podOnly, nodeReading := r.matchPod(p)
	r.prefetch(podOnly)
	for _, s := range steps {
		switch {
		case s.matchErr != nil:
			r.recordCommon(p, s.bc, s.order, []verdict.Result{{Msg: fmt.Sprintf("match error: %v", s.matchErr), Err: true}}, false)
		case s.guarded:
			r.recordGuarded(p, s.bc, s.guard)
		default:
			if err := r.evalConstraint(s.bc, s.order, p); err != nil {
				return nil, err
			}
		}
	}
	return nodeReading, nil
}

// podStep is what judgePod does for one constraint that the pod matches
// (or fails to be matched against): record a match error, record a
// guard that fails, or evaluate a pod-only constraint.
type podStep struct {
	bc       *policyset.BoundConstraint
	order    int
	matchErr error
	guarded  bool
	guard    analysis.Guard
}

// matchPod matches every constraint against the pod and counts the
// matched warn constraints: the steps for judgePod, the places of the
// pod-only constraints to evaluate, and those of the node-reading ones.
func (r *request) matchPod(p *Placement) (steps []podStep, podOnly, nodeReading []int) {
	b := r.buffers()
	steps, podOnly = b.steps[:0], b.podOnly[:0]
	defer func() { b.steps, b.podOnly = steps, podOnly }()
	in := r.in
	m := &gatekeeper.Matchable{GVK: podGVK, Name: in.name, Namespace: in.namespace, Labels: in.labels, NS: in.ns, Source: "Original"}
	for order, bc := range r.snap.Constraints {
		if bc.Constraint.Action == "" {
			continue // scoped to other enforcement points
		}
		matched, err := bc.Constraint.Match.Matches(m)
		if err == nil && !matched {
			continue
		}
		if bc.Constraint.Action == policy.Warn {
			p.MatchedWarnConstraints++
		}
		step := podStep{bc: bc, order: order, matchErr: err}
		switch {
		case err != nil:
		case bc.Analysis.PerPod():
			step.guard, step.guarded = r.guardFails(bc)
			if !step.guarded {
				podOnly = append(podOnly, order)
			}
		default:
			if step.guard, step.guarded = r.guardFails(bc); !step.guarded {
				nodeReading = append(nodeReading, order)
				continue
			}
		}
		steps = append(steps, step)
	}
	return steps, podOnly, nodeReading
}

// guardFails reports whether the pod fails a guard of every violation
// rule of bc's template (the first rule's failing guard is returned):
// its violation set is empty, on every node, without evaluation. Only on
// the memoised path: an engine without the memo is the reference the
// fast paths are tested against.
func (r *request) guardFails(bc *policyset.BoundConstraint) (analysis.Guard, bool) {
	if bc.Template.Guards == nil || r.e.opts.DisableMemo {
		return analysis.Guard{}, false
	}
	var first analysis.Guard
	for k, rule := range bc.Template.Guards {
		failed := false
		for _, g := range rule {
			if !g.Holds(lookup.Input(r.podReview, g.Path).Value) {
				if k == 0 {
					first = g
				}
				failed = true
				break
			}
		}
		if !failed {
			return analysis.Guard{}, false
		}
	}
	return first, true
}

// recordGuarded records, for explain, a constraint whose guards the pod
// fails: no violation on any node.
func (r *request) recordGuarded(p *Placement, bc *policyset.BoundConstraint, g analysis.Guard) {
	if !r.explain {
		return
	}
	t := r.trace(bc, nil, false, true, 0)
	t.NotEvaluated = "`" + g.String() + "` is false for this pod, and every violation rule begins with such a test"
	for i := range p.Nodes {
		if !p.Nodes[i].Unknown {
			p.AddTrace(i, t)
		}
	}
}

// judgeNodes evaluates the matched node-reading constraints on the
// request's candidates.
func (r *request) judgeNodes(p *Placement, nodeReading []int) error {
	for _, order := range nodeReading {
		if err := r.evalConstraint(r.snap.Constraints[order], order, p); err != nil {
			return err
		}
	}
	return nil
}

// candidates fills the request's node slots: request nodes converted, the
// others looked up in the inventory.
func (r *request) candidates(cands []Candidate) error {
	r.scratch = r.e.pools.scratch.Get()
	r.scratch.grow(len(cands))
	r.slots = r.scratch.slots
	inventoryNodes, _ := r.e.inv.Value(r.ctx, r.txn, inventory.NodesPath).(ast.Object)
	index := r.e.nodeIndex.Of(r.invGen.Value)
	r.numberSlots(cands)
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
		if s.value, s.fromRequest, err = r.requestNode(c, known(i, c.Name)); err != nil {
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
func (r *request) numberSlots(cands []Candidate) {
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
func (r *request) requestNode(c Candidate, known ast.Value) (ast.Value, bool, error) {
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

// request is the state of one Evaluate call.
type request struct {
	// cancelOnce makes cancelOpt, the evaluations' cancellation
	// (evalCancel); stopCancel unregisters it.
	cancelOnce sync.Once
	cancel     topdown.Cancel
	stopCancel func() bool
	// deferHelpers: a helper answer the helper memo lacks is recorded in
	// deferred instead of evaluated (prefetch runs them in parallel).
	deferHelpers bool
	deferred     []deferredHelper
	e            *Engine
	ctx          context.Context
	txn          storage.Transaction
	snap         *policyset.Snapshot
	invGen       *ast.Term
	kindGens     ast.Object
	podReview    *ast.Term
	in           podInput
	slots        []nodeSlot
	override     bool
	nodes        *ast.Term
	explain      bool
	// plain is the pod's review as it is; the reviews with placeholders
	// are in the request's buffers (podBuffers.viewsBySig).
	plain *podView
	// bindArena holds the views' bindings (keepBindings); arenas are the
	// pooled chunks it was cut from, handed to the answer (handBindings).
	bindArena verdict.Bindings
	arenas    []*verdict.Bindings
	// scratch holds the per-candidate buffers below (scratch.go); classAux
	// is the node classes' printed values of the constraint being judged.
	scratch    *scratch
	classAux   []any
	bindBuf    verdict.Bindings
	slotValues []ast.Value
	slotNums   []int32 // the slots' numbers in the engine's Names
	numGen     uint64
	// pb holds the request's per-constraint lists (podBuffers): the key
	// cache, the prefetched verdicts, matchPod's lists.
	pb *podBuffers
	// unrepeatable: a constraint judged calls a nondeterministic builtin,
	// so the answer is not kept for reuse (reuse.go).
	unrepeatable bool
	// counters, added to the engine's once per request
	hits, misses, evals uint64
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

func (r *request) evalConstraint(bc *policyset.BoundConstraint, order int, p *Placement) error {
	a := bc.Analysis
	memoOK := r.memoOK(bc)
	r.unrepeatable = r.unrepeatable || a.Nondeterministic
	var pod *podView
	if f := r.fetchedAt(order); f != nil {
		pod = f.view // made by prefetch for the same constraint and memoOK
	} else {
		pod = r.podView(bc, memoOK)
	}
	if a.PerPod() {
		start := r.now()
		res, hit, err := r.evalPod(bc, order, memoOK, pod)
		if err != nil {
			return err
		}
		res = r.e.reg.Placeholders.Substitute(res, pod.bind)
		d := r.since(start)
		if f := r.fetchedAt(order); f != nil && f.evaluated && r.explain {
			d += f.took
		}
		r.recordCommon(p, bc, order, res, hit, d)
		return nil
	}
	return r.evalNodes(bc, order, p, memoOK, pod)
}

// evalNodes judges a constraint that can see the node: once per node
// class when memoised. Each node's cell holds the class's results and the
// node's printed values; messages are written when read.
func (r *request) evalNodes(bc *policyset.BoundConstraint, order int, p *Placement, memoOK bool, pod *podView) error {
	a := bc.Analysis
	var entry *memoEntry
	if memoOK && !a.NodeNameObserved {
		entry = r.entry(bc, r.keyTerms(bc, r.podReview, pod))
	}
	readsNode := len(a.NodePaths) > 0 || len(a.NodeExists) > 0 || len(bc.NodeMsgs) > 0 || bc.NameMsg != nil
	var classes []int
	if memoOK && readsNode {
		classes = r.nodeClasses(bc, p)
	}
	subst := memoOK && (len(bc.NodeMsgs) > 0 || bc.NameMsg != nil)
	// Cells are made at the first violation: most constraints are
	// violated on no candidate of most pods.
	col := column{constraint: bc.Constraint.Key, action: bc.Constraint.Action, order: order, ph: r.e.reg.Placeholders, pod: pod.bind}
	if !r.override {
		// A Node sent with the request may name itself otherwise than
		// its candidate (Candidate.Name is the caller's): only the
		// inventory's Nodes are held by their own names.
		col.nameOnly = bc.NameOnly
	}
	violated := false
	// The classes met so far and their results: a request's candidates
	// fall into a few classes, found here without the memo's locks.
	var seen classCache
	for i := range r.slots {
		if p.Nodes[i].Unknown {
			continue
		}
		start := r.now()
		e := entry
		if memoOK && e == nil {
			e = r.entry(bc, r.keyTerms(bc, r.nodeReview(r.podReview, i, r.slots[i].name), pod))
		}
		class := 0
		if e != nil && readsNode {
			class = classes[i]
		}
		res, hit := []verdict.Result(nil), false
		switch {
		case e != nil && e == entry:
			if res, hit = seen.get(class); !hit {
				res, hit = e.Get(class)
			}
		case e != nil:
			res, hit = e.Get(class)
		}
		if hit {
			r.hits++
		} else {
			if e != nil {
				r.misses++
			}
			var err error
			if res, err = r.evalNode(bc, i, pod, subst); err != nil {
				return err
			}
			if e != nil && verdict.Memorable(res) {
				r.e.memo.Put(e, class, res, verdict.ResultBytes(res))
			}
		}
		if e != nil && e == entry {
			seen.put(class, res)
		}
		if len(res) > 0 {
			if !violated {
				col.cells = p.newCells(len(r.slots))
			}
			violated = true
			col.set(i, res, r.printed(bc, i, subst))
		}
		if r.explain {
			p.AddTrace(i, r.trace(bc, r.e.reg.Placeholders.Substitute(res, col.bindingsOf(i)), hit, false, r.since(start)))
		}
	}
	if violated {
		if p.columns == nil {
			p.columns = p.newColumns(max(1, int(r.e.columnsHint.Load())))
		}
		p.columns = append(p.columns, col)
		if n := int32(min(len(p.columns), maxCommonHint)); n > r.e.columnsHint.Load() {
			r.e.columnsHint.Store(n)
		}
	}
	return nil
}

// classCache holds the results of the first few classes of one
// constraint met in a request.
type classCache struct {
	n       int
	classes [16]int
	res     [16][]verdict.Result
}

func (c *classCache) get(class int) ([]verdict.Result, bool) {
	for k := 0; k < c.n; k++ {
		if c.classes[k] == class {
			return c.res[k], true
		}
	}
	return nil, false
}

func (c *classCache) put(class int, res []verdict.Result) {
	if _, ok := c.get(class); ok || c.n == len(c.classes) {
		return
	}
	c.classes[c.n], c.res[c.n] = class, res
	c.n++
}

// printed gives node i's printed values for bc (remembered with its
// class), nil when bc prints none.
func (r *request) printed(bc *policyset.BoundConstraint, i int, subst bool) *nodePrinted {
	if !subst {
		return nil
	}
	if printed, _ := r.classAux[i].(*nodePrinted); printed != nil {
		return printed
	}
	_, printed := r.project(bc, r.slots[i].name, r.slots[i].value)
	return printed
}

// evalNode evaluates a constraint on one node. With subst, the node's
// printed values (its name, the paths bc.nodeMsgs) are placeholders: the
// node is given to the query in place of the inventory's, under the
// placeholder name.
func (r *request) evalNode(bc *policyset.BoundConstraint, i int, pod *podView, subst bool) ([]verdict.Result, error) {
	s := &r.slots[i]
	if !subst {
		return r.eval(bc, r.nodeReview(r.reviewOf(pod), i, s.name), true)
	}
	node, key := s.value, s.name
	for _, m := range bc.NodeMsgs {
		// The same test as project's, so the class key and the evaluation agree.
		if _, ok := verdict.SubstitutableAt(s.value, m.Path, m.Quote, m.Trim); ok {
			node, _ = verdict.SetPath(node, m.Path, ast.StringTerm(m.Text))
		}
	}
	if m := bc.NameMsg; m != nil {
		if _, ok := verdict.Substitutable(ast.StringTerm(s.name), m.Quote, m.Trim); ok {
			key = m.Text
		}
	}
	nodes := ast.NewTerm(ast.NewObject(ast.Item(ast.StringTerm(key), ast.NewTerm(node))))
	return r.evalWith(bc, r.nodeReview(r.reviewOf(pod), -1, key), nodes)
}

func (r *request) entry(bc *policyset.BoundConstraint, key []*ast.Term) *memoEntry {
	return r.e.memo.Find(bc.Owner, key)
}

func (r *request) addStats() {
	if r.hits > 0 {
		r.e.stats.memoHits.Add(r.hits)
	}
	if r.misses > 0 {
		r.e.stats.memoMisses.Add(r.misses)
	}
	if r.evals > 0 {
		r.e.stats.evaluations.Add(r.evals)
	}
}

// nodeClasses gives the class of every known candidate for bc, in one
// pass under one read lock for the inventory nodes already classified.
func (r *request) nodeClasses(bc *policyset.BoundConstraint, p *Placement) []int {
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
			ids[i], aux[i] = bc.Classes.Of(r.numGen, r.slotNums[i], s.value, !s.fromRequest, func() (*ast.Array, any) { return r.project(bc, s.name, s.value) })
		}
	}
	return ids
}

// now and since time evaluations only when explain asked for them.
func (r *request) now() time.Time {
	if r.explain {
		return time.Now()
	}
	return time.Time{}
}

func (r *request) since(t time.Time) time.Duration {
	if r.explain {
		return time.Since(t)
	}
	return 0
}

// memoOK reports whether bc's verdicts may come from the memo. Nodes sent
// with a request stand in for the inventory's Nodes: a template that
// reads Nodes other than the candidate sees the request's, which no key
// holds; one that reads other kinds keys on their generations as ever.
func (r *request) memoOK(bc *policyset.BoundConstraint) bool {
	a := bc.Analysis
	return !r.e.opts.DisableMemo && !a.Nondeterministic && !(r.override && a.OtherNodes) && keysDistinct(r.podReview, a.DistinctKeys)
}

// keysDistinct reports whether the review's values at each group's paths
// (list[_].key, analysis.Result.DistinctKeys) are pairwise distinct:
// elements without the key take no part, as a list map leaves them out.
// Kubernetes requires distinct container names across a pod's lists, so
// for real pods this holds and costs a few comparisons.
func keysDistinct(review *ast.Term, groups [][][]*ast.Term) bool {
	var small [maxPairwiseDistinct]*ast.Term
	for _, paths := range groups {
		keys := small[:0]
		for _, p := range paths {
			j := analysis.EachAt(p)
			if j < 0 {
				continue
			}
			arr, ok := lookup.Input(review, p[:j]).Value.(*ast.Array)
			if !ok {
				continue // absent, or not a list: read whole (wholeValue)
			}
			for i := range arr.Len() {
				if t := lookup.At(arr.Elem(i).Value, p[j+1:]); t != lookup.Undefined {
					keys = append(keys, t)
				}
			}
		}
		if !distinct(keys) {
			return false
		}
	}
	return true
}

// distinct reports whether no two of keys are equal as Rego compares
// object keys (1 and 1.0 are one key: an AST set's membership, not text).
func distinct(keys []*ast.Term) bool {
	if len(keys) <= maxPairwiseDistinct {
		// A pod's containers are a few: comparing each pair (Equal, as a
		// set's membership does after its hash) makes no set.
		for i, k := range keys {
			for _, other := range keys[:i] {
				if k.Equal(other) {
					return false
				}
			}
		}
		return true
	}
	seen := ast.NewSet()
	for _, k := range keys {
		if seen.Contains(k) {
			return false
		}
		seen.Add(k)
	}
	return true
}

// maxPairwiseDistinct is the most keys distinct compares pair by pair.
const maxPairwiseDistinct = 16

// maxCommonHint bounds Engine.commonHint and columnsHint.
const maxCommonHint = 256

// recordCommon records the verdict of a constraint that cannot see the
// node once, for every known node.
func (r *request) recordCommon(p *Placement, bc *policyset.BoundConstraint, order int, res []verdict.Result, hit bool, d ...time.Duration) {
	if p.Common == nil && len(res) > 0 {
		p.Common = p.newCommon(max(len(res), int(r.e.commonHint.Load())))
	}
	for _, x := range res {
		p.Common = append(p.Common, Violation{Constraint: bc.Constraint.Key, Action: bc.Constraint.Action, Message: x.Msg, Details: x.Details, Error: x.Err, order: order})
	}
	if n := int32(min(len(p.Common), maxCommonHint)); n > r.e.commonHint.Load() {
		r.e.commonHint.Store(n)
	}
	if r.explain {
		var dur time.Duration
		if len(d) > 0 {
			dur = d[0]
		}
		t := r.trace(bc, res, hit, true, dur)
		for i := range p.Nodes {
			if !p.Nodes[i].Unknown {
				p.AddTrace(i, t)
			}
		}
	}
}

func (r *request) trace(bc *policyset.BoundConstraint, res []verdict.Result, hit, perPod bool, d time.Duration) ConstraintTrace {
	t := ConstraintTrace{Constraint: bc.Constraint.Key, Action: bc.Constraint.Action, Engine: bc.Template.Program.Engine(), Memoised: hit, PerPod: perPod, Duration: d,
		Evaluated: string(bc.Class), Why: bc.Analysis.Why, Keyed: r.keptPrinted(bc)}
	for _, x := range res {
		t.Violations = append(t.Violations, x.Msg)
		if x.Listed {
			t.Validations = append(t.Validations, int(x.Validation))
		}
	}
	return t
}

// podKey is the pod's part of a memo key: the values at the input paths
// the template reads, the printed paths (a marker where the placeholder
// stands, the value where it could not), and the inventory generation if
// the template reads more of the inventory than the candidate node.
func (r *request) podKey(bc *policyset.BoundConstraint, review *ast.Term, pod *podView) *ast.Array {
	return ast.NewArray(slices.Clone(r.keyTerms(bc, review, pod))...)
}

// keyTerms are podKey's elements, in the request's buffer: valid until
// the next call (memo.Find copies what it keeps).
func (r *request) keyTerms(bc *policyset.BoundConstraint, review *ast.Term, pod *podView) []*ast.Term {
	b := r.buffers()
	terms := b.key[:0]
	for k, plan := range bc.KeyPlans {
		if h := bc.KeyHelpers[k]; h != nil {
			terms = append(terms, r.helperKey(h, review))
			continue
		}
		terms = append(terms, r.keyValue(bc.KeyPathIDs[k], review, plan))
	}
	terms = append(terms, pod.key...)
	if bc.Analysis.InventoryOther {
		terms = r.inventoryTerms(terms, bc)
	}
	b.key = terms
	return terms
}

// keyValue is the value at path in review: looked up once per request in
// the pod's own review (the constraints of a library read the same paths,
// containers[_].image in a dozen of them), every time in a node's.
func (r *request) keyValue(id int, review *ast.Term, plan *lookup.InputPlan) *ast.Term {
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

// project is a node's part of bc's memo key: the values at the node paths
// the template reads, whether the paths it only tests are true, and for
// printed values a marker where a placeholder can stand, else the value.
// It also gives the printed values themselves.
func (r *request) project(bc *policyset.BoundConstraint, name string, node ast.Value) (*ast.Array, *nodePrinted) {
	var printed *nodePrinted
	a := bc.Analysis
	terms := make([]*ast.Term, 0, len(a.NodePaths)+len(a.NodeExists)+len(bc.NodeMsgs)+1)
	for _, path := range a.NodePaths {
		terms = append(terms, lookup.At(node, path))
	}
	for _, path := range a.NodeExists {
		terms = append(terms, ast.InternedTerm(lookup.Truthy(lookup.At(node, path))))
	}
	for _, m := range bc.NodeMsgs {
		t := lookup.At(node, m.Path)
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

// evalPod evaluates a template that cannot see the node, once per pod
// class.
func (r *request) evalPod(bc *policyset.BoundConstraint, order int, memoOK bool, pod *podView) ([]verdict.Result, bool, error) {
	var e *memoEntry
	f := r.fetchedAt(order) // only for memoised constraints
	switch {
	case f != nil && f.hit:
		r.hits++
		return r.checkPlaceholders(bc, f.res, pod, true)
	case f != nil:
		e = f.entry // a miss, found by prefetch
		r.misses++
	case memoOK:
		e = r.entry(bc, r.keyTerms(bc, r.podReview, pod))
		if res, ok := e.Get(0); ok {
			r.hits++
			return r.checkPlaceholders(bc, res, pod, true)
		}
		r.misses++
	}
	var res []verdict.Result
	var err error
	if f != nil && f.evaluated {
		res, err = f.res, f.err
	} else {
		res, err = r.eval(bc, r.reviewOf(pod), false)
	}
	if err != nil {
		return nil, false, err
	}
	if e != nil && verdict.Memorable(res) {
		r.e.memo.Put(e, 0, res, verdict.ResultBytes(res))
	}
	return r.checkPlaceholders(bc, res, pod, false)
}

// checkPlaceholders is evalPod's answer for res, evaluated with pod's
// placeholders (hit: found in the memo): res itself, unless the template
// prints values through functions with several definitions and res holds
// an error, which the placeholders may have caused (two definitions whose
// messages differ with them and agree with the real values: a conflict
// that the real values do not have). Then the pod is evaluated again with
// its real values, for itself only: that answer is not memoised (the
// memo keeps the placeholders' error, so that the pods of the class go
// straight to their own evaluation).
func (r *request) checkPlaceholders(bc *policyset.BoundConstraint, res []verdict.Result, pod *podView, hit bool) ([]verdict.Result, bool, error) {
	if !bc.Analysis.PrintedThroughSeveral || !pod.placed || !verdict.HasError(res) || !verdict.Memorable(res) {
		return res, hit, nil
	}
	res, err := r.eval(bc, r.podReview, false)
	return res, false, err
}
