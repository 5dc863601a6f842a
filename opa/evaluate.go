package opa

import (
	"context"
	"fmt"
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
	keys := r.keys.reuseKeys(pod)
	if err := r.cands.candidates(req.Candidates); err != nil {
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
	r.reviews.handBindings(p)
	if reusable && req.Reuse == ReuseKeep {
		e.recent.keep(r, pod, p)
	}
	r.keys.keepKeys(pod, keys)
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
	return (&request{
		e: e, ctx: ctx, txn: v.txn, snap: v.snap, in: in,
		invGen:    ast.NewTerm(v.invGen),
		kindGens:  v.kindGens,
		explain:   explain,
		podReview: ast.NewTerm(in.review),
	}).withParts()
}

// withParts gives r its parts.
func (r *request) withParts() *request {
	r.cands, r.keys, r.helpers = candidateSlots{r}, memoKeys{r}, helperCalls{r}
	r.fetch, r.reviews, r.msgs = prefetcher{r}, reviews{r}, messages{r}
	return r
}

// The request's parts: each reads the request's state through it.
type (
	// candidateSlots fill the candidates' slots and sort them into node
	// classes, each with the values its constraints print of it.
	candidateSlots struct{ *request }
	// memoKeys make the memo keys of the pod and its nodes, and keep a
	// workload's key values for its next pod.
	memoKeys struct{ *request }
	// helperCalls answer the helpers a memo key stands in for.
	helperCalls struct{ *request }
	// prefetcher evaluates the pod-only memo misses ahead, in parallel.
	prefetcher struct{ *request }
	// reviews make the pod's reviews with placeholders and keep their
	// bindings for the answer.
	reviews struct{ *request }
	// messages decide which printed values a placeholder may stand for.
	messages struct{ *request }
)

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
	r.fetch.prefetch(podOnly)
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
			if !g.Holds(r.e.reg.Lookup.Input(r.podReview, g.Path).Value) {
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

// request is the state of one Evaluate call, and its judgement of the
// pod's constraints on the candidates (judgePod, judgeNodes). Its parts
// are the work it delegates, each a type with the methods that belong to
// it: the candidates' slots and node classes (cands, candidates.go), memo
// keys (keys: memokeys.go, inventorykey.go, workloadkeys.go), helper
// answers (helpers, helper.go), the pod-only evaluations run ahead in
// parallel (fetch, prefetch.go), the reviews with placeholders and the
// bindings they keep (reviews, results.go), and the printed values behind
// placeholders (msgs, message.go).
type request struct {
	cands   candidateSlots
	keys    memoKeys
	helpers helperCalls
	fetch   prefetcher
	reviews reviews
	msgs    messages

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

func (r *request) evalConstraint(bc *policyset.BoundConstraint, order int, p *Placement) error {
	a := bc.Analysis
	memoOK := r.keys.memoOK(bc)
	r.unrepeatable = r.unrepeatable || a.Nondeterministic
	var pod *podView
	if f := r.fetch.fetchedAt(order); f != nil {
		pod = f.view // made by prefetch for the same constraint and memoOK
	} else {
		pod = r.reviews.podView(bc, memoOK)
	}
	if a.PerPod() {
		start := r.now()
		res, hit, err := r.evalPod(bc, order, memoOK, pod)
		if err != nil {
			return err
		}
		res = r.e.reg.Placeholders.Substitute(res, pod.bind)
		d := r.since(start)
		if f := r.fetch.fetchedAt(order); f != nil && f.evaluated && r.explain {
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
		entry = r.keys.entry(bc, r.keys.keyTerms(bc, r.podReview, pod))
	}
	readsNode := len(a.NodePaths) > 0 || len(a.NodeExists) > 0 || len(bc.NodeMsgs) > 0 || bc.NameMsg != nil
	var classes []int
	if memoOK && readsNode {
		classes = r.cands.nodeClasses(bc, p)
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
			e = r.keys.entry(bc, r.keys.keyTerms(bc, r.reviews.nodeReview(r.podReview, i, r.slots[i].name), pod))
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
			col.set(i, res, r.cands.printed(bc, i, subst))
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

// evalNode evaluates a constraint on one node. With subst, the node's
// printed values (its name, the paths bc.nodeMsgs) are placeholders: the
// node is given to the query in place of the inventory's, under the
// placeholder name.
func (r *request) evalNode(bc *policyset.BoundConstraint, i int, pod *podView, subst bool) ([]verdict.Result, error) {
	s := &r.slots[i]
	if !subst {
		return r.eval(bc, r.reviews.nodeReview(r.reviews.reviewOf(pod), i, s.name), true)
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
	return r.evalWith(bc, r.reviews.nodeReview(r.reviews.reviewOf(pod), -1, key), nodes)
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
		Evaluated: string(bc.Class), Why: bc.Analysis.Why, Keyed: r.msgs.keptPrinted(bc)}
	for _, x := range res {
		t.Violations = append(t.Violations, x.Msg)
		if x.Listed {
			t.Validations = append(t.Validations, int(x.Validation))
		}
	}
	return t
}

// evalPod evaluates a template that cannot see the node, once per pod
// class.
func (r *request) evalPod(bc *policyset.BoundConstraint, order int, memoOK bool, pod *podView) ([]verdict.Result, bool, error) {
	var e *memoEntry
	f := r.fetch.fetchedAt(order) // only for memoised constraints
	switch {
	case f != nil && f.hit:
		r.hits++
		return r.msgs.checkPlaceholders(bc, f.res, pod, true)
	case f != nil:
		e = f.entry // a miss, found by prefetch
		r.misses++
	case memoOK:
		e = r.keys.entry(bc, r.keys.keyTerms(bc, r.podReview, pod))
		if res, ok := e.Get(0); ok {
			r.hits++
			return r.msgs.checkPlaceholders(bc, res, pod, true)
		}
		r.misses++
	}
	var res []verdict.Result
	var err error
	if f != nil && f.evaluated {
		res, err = f.res, f.err
	} else {
		res, err = r.eval(bc, r.reviews.reviewOf(pod), false)
	}
	if err != nil {
		return nil, false, err
	}
	if e != nil && verdict.Memorable(res) {
		r.e.memo.Put(e, 0, res, verdict.ResultBytes(res))
	}
	return r.msgs.checkPlaceholders(bc, res, pod, false)
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
func (r *messages) checkPlaceholders(bc *policyset.BoundConstraint, res []verdict.Result, pod *podView, hit bool) ([]verdict.Result, bool, error) {
	if !bc.Analysis.PrintedThroughSeveral || !pod.placed || !verdict.HasError(res) || !verdict.Memorable(res) {
		return res, hit, nil
	}
	res, err := r.eval(bc, r.podReview, false)
	return res, false, err
}
