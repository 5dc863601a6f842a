package opa

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	podGVK      = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	namespaceGV = storage.Path{"inventory", "cluster", "v1", "Namespace"}
	nodeGV      = storage.Path{"inventory", "cluster", "v1", "Node"}

	termReview      = ast.StringTerm("review")
	termParameters  = ast.StringTerm("parameters")
	termObject      = ast.StringTerm("object")
	termSpec        = ast.StringTerm("spec")
	termNodeName    = ast.StringTerm("nodeName")
	termReviewInput = ast.StringTerm("review_input")
	termNodes       = ast.StringTerm("nodes")

	// undefinedTerm stands for "nothing at this path" in memo keys: an
	// empty set, which no JSON value can be.
	undefinedTerm = ast.SetTerm()
)

// result is one element of a violation set.
type result struct {
	msg     string
	details json.RawMessage
	err     bool
}

// Evaluate judges each candidate node for the pod: the violations of every
// constraint that matches the pod and applies at this enforcement point.
func (e *Engine) Evaluate(ctx context.Context, req PlacementRequest) (*Placement, error) {
	if req.Pod == nil {
		return nil, errors.New("pod is required")
	}
	snap := e.snap.Load()
	txn, err := e.store.NewTransaction(ctx)
	if err != nil {
		return nil, fmt.Errorf("open store transaction: %w", err)
	}
	defer e.store.Abort(ctx, txn)

	pod := withTypeMeta(req.Pod, podGVK)
	podValue, err := ast.InterfaceToValue(pod)
	if err != nil {
		return nil, fmt.Errorf("convert pod: %w", err)
	}
	podObj, ok := podValue.(ast.Object)
	if !ok {
		return nil, errors.New("pod is not an object")
	}
	name, namespace, labels := objectMeta(pod)
	nsValue := e.readValue(ctx, txn, append(namespaceGV[:len(namespaceGV):len(namespaceGV)], namespace))
	nsTerm := ast.ObjectTerm()
	var nsInfo *namespaceInfo
	if nsValue != nil && namespace != "" {
		nsTerm = ast.NewTerm(nsValue)
		nsInfo = &namespaceInfo{name: namespace, labels: valueLabels(nsValue)}
	}

	r := &request{
		e: e, ctx: ctx, txn: txn, snap: snap,
		invGen:  ast.NewTerm(e.readValue(ctx, txn, generationPath)),
		pod:     podObj,
		explain: req.Explain,
	}
	defer r.addStats()
	r.podReview = ast.NewTerm(podReview(podObj, name, namespace, ast.MustInterfaceToValue(e.opts.UserInfo), nsTerm))
	r.slots = make([]nodeSlot, len(req.Candidates))
	inventoryNodes, _ := e.readValue(ctx, txn, nodeGV).(ast.Object)
	nameKey := &ast.Term{} // one lookup key for all candidates
	for i, c := range req.Candidates {
		r.slots[i].name = c.Name
		if c.Object != nil {
			v, err := ast.InterfaceToValue(withTypeMeta(c.Object, schema.GroupVersionKind{Version: "v1", Kind: "Node"}))
			if err != nil {
				return nil, fmt.Errorf("convert node %s: %w", c.Name, err)
			}
			if _, ok := v.(ast.Object); !ok {
				return nil, fmt.Errorf("node %s is not an object", c.Name)
			}
			r.slots[i].value = v
			r.slots[i].fromRequest = true
			r.override = true
		} else if inventoryNodes != nil {
			nameKey.Value = ast.String(c.Name)
			if t := inventoryNodes.Get(nameKey); t != nil {
				if _, ok := t.Value.(ast.Object); ok {
					r.slots[i].value = t.Value
				}
			}
		}
	}
	if r.override {
		nodes := ast.NewObject()
		for _, s := range r.slots {
			if s.value != nil {
				nodes.Insert(ast.StringTerm(s.name), ast.NewTerm(s.value))
			}
		}
		r.nodes = ast.NewTerm(nodes)
	}

	p := &Placement{Nodes: make([]NodeVerdict, len(r.slots)), Generation: snap.generation}
	for i, s := range r.slots {
		p.Nodes[i].Name = s.name
		p.Nodes[i].Unknown = s.value == nil
	}
	m := &matchable{gvk: podGVK, name: name, namespace: namespace, labels: labels, ns: nsInfo, source: "Original"}
	for _, bc := range snap.constraints {
		if bc.c.action == "" {
			continue // scoped to other enforcement points
		}
		matched, err := bc.c.match.matches(m)
		if err != nil {
			if bc.c.action == Warn {
				p.MatchedWarnConstraints++
			}
			res := []result{{msg: fmt.Sprintf("match error: %v", err), err: true}}
			for i := range p.Nodes {
				if !p.Nodes[i].Unknown {
					r.record(&p.Nodes[i], bc, res, false, true, 0)
				}
			}
			continue
		}
		if !matched {
			continue
		}
		if bc.c.action == Warn {
			p.MatchedWarnConstraints++
		}
		if err := r.evalConstraint(bc, p); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// request is the state of one Evaluate call.
type request struct {
	e         *Engine
	ctx       context.Context
	txn       storage.Transaction
	snap      *snapshot
	invGen    *ast.Term
	pod       ast.Object
	podReview *ast.Term
	slots     []nodeSlot
	override  bool
	nodes     *ast.Term
	explain   bool
	// classIDs is scratch space for the node classes of one constraint.
	classIDs []int
	// memo counters, added to the engine's once per request
	hits, misses uint64
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

func (r *request) nodeReview(i int) *ast.Term {
	s := &r.slots[i]
	if s.review == nil {
		s.review = ast.NewTerm(withNodeName(r.podReview.Value.(ast.Object), r.pod, s.name))
	}
	return s.review
}

func (r *request) evalConstraint(bc *boundConstraint, p *Placement) error {
	a := bc.analysis
	memoOK := r.memoOK(bc)
	if a.perPod() {
		start := r.now()
		res, hit, err := r.evalPod(bc, memoOK)
		if err != nil {
			return err
		}
		d := r.since(start)
		for i := range p.Nodes {
			if !p.Nodes[i].Unknown {
				r.record(&p.Nodes[i], bc, res, hit, true, d)
			}
		}
		return nil
	}
	var entry *podEntry
	if memoOK && !a.readsNodeName() {
		entry = r.entry(bc, r.podReview)
	}
	readsNode := len(a.nodePaths) > 0 || len(a.nodeExists) > 0
	var classes []int
	if memoOK && readsNode {
		classes = r.nodeClasses(bc, p)
	}
	for i := range r.slots {
		if p.Nodes[i].Unknown {
			continue
		}
		start := r.now()
		e := entry
		if memoOK && e == nil {
			e = r.entry(bc, r.nodeReview(i))
		}
		class := 0
		if e != nil && readsNode {
			class = classes[i]
		}
		if e != nil {
			if res, ok := e.get(class); ok {
				r.hits++
				r.record(&p.Nodes[i], bc, res, true, false, r.since(start))
				continue
			}
			r.misses++
		}
		res, err := r.eval(bc, r.nodeReview(i), true)
		if err != nil {
			return err
		}
		if e != nil && !hasError(res) {
			e.put(class, res)
		}
		r.record(&p.Nodes[i], bc, res, false, false, r.since(start))
	}
	return nil
}

// entry finds the memo entry of a pod key.
func (r *request) entry(bc *boundConstraint, review *ast.Term) *podEntry {
	return bc.memo.entry(r.podKey(bc, review))
}

func (r *request) addStats() {
	if r.hits > 0 {
		r.e.stats.memoHits.Add(r.hits)
	}
	if r.misses > 0 {
		r.e.stats.memoMisses.Add(r.misses)
	}
}

// nodeClasses gives the class of every known candidate for bc, in one
// pass under one read lock for the inventory nodes already classified.
func (r *request) nodeClasses(bc *boundConstraint, p *Placement) []int {
	ids := slices.Grow(r.classIDs[:0], len(r.slots))[:len(r.slots)]
	r.classIDs = ids
	bc.classes.known(r.slots, ids)
	for i := range r.slots {
		if ids[i] == 0 && !p.Nodes[i].Unknown {
			ids[i] = bc.classes.of(r.slots[i].value, !r.slots[i].fromRequest, bc.project)
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

func (r *request) memoOK(bc *boundConstraint) bool {
	a := bc.analysis
	return !r.e.opts.DisableMemo && !a.nondeterministic && !(r.override && a.inventoryOther)
}

func (r *request) record(v *NodeVerdict, bc *boundConstraint, res []result, hit, perPod bool, d time.Duration) {
	for _, x := range res {
		v.Violations = append(v.Violations, Violation{Constraint: bc.c.key, Action: bc.c.action, Message: x.msg, Details: x.details, Error: x.err})
	}
	if r.explain {
		t := ConstraintTrace{Constraint: bc.c.key, Action: bc.c.action, Memoised: hit, PerPod: perPod, Duration: d}
		for _, x := range res {
			t.Violations = append(t.Violations, x.msg)
		}
		v.Explain = append(v.Explain, t)
	}
}

// podKey is the pod's part of a memo key: the values at the input paths
// the template reads, and the inventory generation if it reads more of
// the inventory than the candidate node.
func (r *request) podKey(bc *boundConstraint, review *ast.Term) *ast.Array {
	terms := make([]*ast.Term, 0, len(bc.keyInputPaths)+1)
	for _, path := range bc.keyInputPaths {
		terms = append(terms, lookupInput(review, path))
	}
	if bc.analysis.inventoryOther {
		terms = append(terms, r.invGen)
	}
	return ast.NewArray(terms...)
}

// project is a node's part of a memo key: the values at the node paths
// the template reads, and whether the paths it only tests are true.
func (bc *boundConstraint) project(node ast.Value) *ast.Array {
	a := bc.analysis
	terms := make([]*ast.Term, 0, len(a.nodePaths)+len(a.nodeExists))
	for _, path := range a.nodePaths {
		terms = append(terms, lookup(node, path))
	}
	for _, path := range a.nodeExists {
		terms = append(terms, ast.InternedTerm(truthy(lookup(node, path))))
	}
	return ast.NewArray(terms...)
}

// evalPod evaluates a template that cannot see the node, once per pod.
func (r *request) evalPod(bc *boundConstraint, memoOK bool) ([]result, bool, error) {
	var e *podEntry
	if memoOK {
		e = r.entry(bc, r.podReview)
		if res, ok := e.get(0); ok {
			r.hits++
			return res, true, nil
		}
		r.misses++
	}
	res, err := r.eval(bc, r.podReview, false)
	if err != nil {
		return nil, false, err
	}
	if e != nil && !hasError(res) {
		e.put(0, res)
	}
	return res, false, nil
}

// eval runs the template's query on one review. Evaluation errors become
// violations (fail closed), and so does the request's deadline: a
// template that runs too long denies the nodes it could not judge, with
// the reason, and the rest of the answer still goes back.
func (r *request) eval(bc *boundConstraint, review *ast.Term, perNode bool) ([]result, error) {
	if err := r.ctx.Err(); err != nil {
		r.e.stats.evalErrors.Add(1)
		return []result{{msg: "evaluation stopped before this constraint was judged: " + err.Error(), err: true}}, nil
	}
	input := ast.NewObject(ast.Item(termReview, review), ast.Item(termParameters, ast.NewTerm(bc.parameters)))
	query := bc.tmpl.query
	if r.override && (bc.analysis.inventoryOther || perNode) {
		input = ast.NewObject(ast.Item(termReviewInput, ast.NewTerm(input)), ast.Item(termNodes, r.nodes))
		query = bc.tmpl.overrideQuery
	}
	r.e.stats.evaluations.Add(1)
	rs, err := query.Eval(r.ctx, rego.EvalParsedInput(input), rego.EvalTransaction(r.txn))
	if err != nil {
		r.e.stats.evalErrors.Add(1)
		if ctxErr := r.ctx.Err(); ctxErr != nil {
			return []result{{msg: "evaluation stopped (the request's deadline): " + ctxErr.Error(), err: true}}, nil
		}
		return []result{{msg: err.Error(), err: true}}, nil
	}
	res := toResults(rs)
	if hasError(res) {
		r.e.stats.evalErrors.Add(1)
	}
	return res, nil
}

func hasError(res []result) bool {
	for _, x := range res {
		if x.err {
			return true
		}
	}
	return false
}

// toResults reads a violation set the way Gatekeeper's hook does: elements
// without msg are dropped, a non-string msg is an error, details default to
// {}, duplicates collapse.
func toResults(rs rego.ResultSet) []result {
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return nil
	}
	items, ok := rs[0].Expressions[0].Value.([]any)
	if !ok {
		return []result{{msg: fmt.Sprintf("violation is not a set: %T", rs[0].Expressions[0].Value), err: true}}
	}
	var out []result
	seen := map[string]bool{}
	for _, it := range items {
		m, ok := it.(map[string]any)
		if !ok {
			continue
		}
		raw, has := m["msg"]
		if !has {
			continue
		}
		msg, ok := raw.(string)
		if !ok {
			out = append(out, result{msg: fmt.Sprintf("invalid violation: msg is %T, want string", raw), err: true})
			continue
		}
		details, has := m["details"]
		if !has {
			details = map[string]any{}
		}
		b, err := json.Marshal(details)
		if err != nil {
			out = append(out, result{msg: fmt.Sprintf("invalid violation details: %v", err), err: true})
			continue
		}
		k := msg + "\x00" + string(b)
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, result{msg: msg, details: b})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].msg != out[j].msg {
			return out[i].msg < out[j].msg
		}
		return string(out[i].details) < string(out[j].details)
	})
	return out
}

// lookupInput finds path in the input {review, parameters}: paths other
// than review.* are constant or absent for a constraint.
func lookupInput(review *ast.Term, path []*ast.Term) *ast.Term {
	if len(path) == 0 || !path[0].Equal(termReview) {
		return undefinedTerm
	}
	return lookup(review.Value, path[1:])
}

func truthy(t *ast.Term) bool {
	return t != undefinedTerm && t.Value.Compare(ast.Boolean(false)) != 0
}

func lookup(v ast.Value, path []*ast.Term) *ast.Term {
	if v == nil {
		return undefinedTerm
	}
	if len(path) == 0 {
		return ast.NewTerm(v)
	}
	found, err := v.Find(ast.Ref(path))
	if err != nil {
		return undefinedTerm
	}
	return ast.NewTerm(found)
}

// podReview is the Pod CREATE review a template sees (DESIGN.md §4): the
// AdmissionRequest's JSON fields plus namespaceObject.
func podReview(pod ast.Object, name, namespace string, userInfo ast.Value, namespaceObject *ast.Term) ast.Object {
	return ast.NewObject(
		ast.Item(ast.StringTerm("uid"), ast.StringTerm("")),
		ast.Item(ast.StringTerm("kind"), ast.ObjectTerm(
			ast.Item(ast.StringTerm("group"), ast.StringTerm("")),
			ast.Item(ast.StringTerm("version"), ast.StringTerm("v1")),
			ast.Item(ast.StringTerm("kind"), ast.StringTerm("Pod")))),
		ast.Item(ast.StringTerm("resource"), ast.ObjectTerm(
			ast.Item(ast.StringTerm("group"), ast.StringTerm("")),
			ast.Item(ast.StringTerm("version"), ast.StringTerm("v1")),
			ast.Item(ast.StringTerm("resource"), ast.StringTerm("pods")))),
		ast.Item(ast.StringTerm("name"), ast.StringTerm(name)),
		ast.Item(ast.StringTerm("namespace"), ast.StringTerm(namespace)),
		ast.Item(ast.StringTerm("operation"), ast.StringTerm("CREATE")),
		ast.Item(ast.StringTerm("userInfo"), ast.NewTerm(userInfo)),
		ast.Item(termObject, ast.NewTerm(pod)),
		ast.Item(ast.StringTerm("oldObject"), ast.NullTerm()),
		ast.Item(ast.StringTerm("options"), ast.NullTerm()),
		ast.Item(ast.StringTerm("namespaceObject"), namespaceObject),
	)
}

// withNodeName gives review with object.spec.nodeName set to node. Values
// are shared with the pod's review, never copied.
func withNodeName(review ast.Object, pod ast.Object, node string) ast.Object {
	spec, _ := pod.Get(termSpec).Value.(ast.Object)
	if t := pod.Get(termSpec); t == nil || spec == nil {
		spec = ast.NewObject()
	}
	obj := replaceKey(pod, termSpec, ast.NewTerm(replaceKey(spec, termNodeName, ast.StringTerm(node))))
	return replaceKey(review, termObject, ast.NewTerm(obj))
}

func replaceKey(obj ast.Object, key, value *ast.Term) ast.Object {
	items := make([][2]*ast.Term, 0, obj.Len()+1)
	obj.Foreach(func(k, v *ast.Term) {
		if !k.Equal(key) {
			items = append(items, ast.Item(k, v))
		}
	})
	items = append(items, ast.Item(key, value))
	return ast.NewObject(items...)
}

// withTypeMeta fills apiVersion and kind when the wire type left them out.
func withTypeMeta(obj map[string]any, gvk schema.GroupVersionKind) map[string]any {
	if _, ok := obj["kind"]; ok {
		if _, ok := obj["apiVersion"]; ok {
			return obj
		}
	}
	out := make(map[string]any, len(obj)+2)
	for k, v := range obj {
		out[k] = v
	}
	if _, ok := out["apiVersion"]; !ok {
		out["apiVersion"] = gvk.GroupVersion().String()
	}
	if _, ok := out["kind"]; !ok {
		out["kind"] = gvk.Kind
	}
	return out
}

func objectMeta(obj map[string]any) (name, namespace string, labels map[string]string) {
	md, _ := obj["metadata"].(map[string]any)
	name, _ = md["name"].(string)
	namespace, _ = md["namespace"].(string)
	if l, ok := md["labels"].(map[string]any); ok {
		labels = make(map[string]string, len(l))
		for k, v := range l {
			if s, ok := v.(string); ok {
				labels[k] = s
			}
		}
	}
	return name, namespace, labels
}

func valueLabels(v ast.Value) map[string]string {
	t, err := v.Find(ast.Ref{ast.StringTerm("metadata"), ast.StringTerm("labels")})
	if err != nil {
		return nil
	}
	obj, ok := t.(ast.Object)
	if !ok {
		return nil
	}
	out := make(map[string]string, obj.Len())
	obj.Foreach(func(k, v *ast.Term) {
		ks, ok1 := k.Value.(ast.String)
		vs, ok2 := v.Value.(ast.String)
		if ok1 && ok2 {
			out[string(ks)] = string(vs)
		}
	})
	return out
}
