package opa

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/drivers"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/lookup"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/memo"
)

var (
	termObject   = ast.StringTerm("object")
	termSpec     = ast.StringTerm("spec")
	termNodeName = ast.StringTerm("nodeName")
)

// result is one element of a violation set.
type result struct {
	msg     string
	details json.RawMessage
	err     bool
	// msgText and detailsText are msg and details cut at their
	// placeholders (see message.go), nil when they hold none.
	msgText, detailsText *text
	// msgPlain: msg is plain text (isPlain; for msgText, see its lits).
	msgPlain bool
	// transient: the request's deadline stopped the evaluation; such a
	// verdict is never remembered.
	transient bool
}

type memoEntry = memo.Entry[[]result]

func resultBytes(res []result) int {
	n := 24
	for _, x := range res {
		n += 64 + len(x.msg) + len(x.details)
	}
	return n
}

func anyHoles(res []result) bool {
	for i := range res {
		if res[i].msgText != nil || res[i].detailsText != nil {
			return true
		}
	}
	return false
}

// podView is the pod as one constraint is evaluated on it: its review
// with placeholders where printed values could stand, their part of the
// memo key, and the real values to put back. The review is rebuilt with
// the placeholders only when Rego runs (reviewOf): a memo hit, a
// replica's every constraint, needs the key and the values alone.
type podView struct {
	review *ast.Term
	key    []*ast.Term
	bind   bindings
	// msgs are the printed paths the view was made for; placed: some
	// value has a placeholder, so review is not the pod's own.
	msgs   []msgSlot
	placed bool
}

// reviewEdit puts placeholders into the review: text at path, or, for a
// path through a list's elements (texts set), texts[i] at rest below
// element i of the list at path ("" where the element keeps its value).
type reviewEdit struct {
	path  []*ast.Term
	text  string
	rest  []*ast.Term
	texts []string
}

// podView builds (or finds, for constraints printing the same paths) the
// pod's view for bc. Without the memo, values are never replaced: that is
// the reference the memo is tested against.
func (r *request) podView(bc *boundConstraint, memoOK bool) *podView {
	if !memoOK || len(bc.podMsgs) == 0 {
		if r.plain == nil {
			r.plain = &podView{review: r.podReview}
		}
		return r.plain
	}
	b := r.buffers()
	if v, ok := b.viewsBySig[bc.podViewSig]; ok {
		return v
	}
	v := b.newView()
	v.msgs = bc.podMsgs
	v.bind = b.bindScratch[:0]
	r.walkMsgs(v, nil)
	b.bindScratch = v.bind[:0]
	v.bind = r.keepBindings(v.bind)
	if !v.placed {
		v.review = r.podReview
	}
	if b.viewsBySig == nil {
		b.viewsBySig = map[string]*podView{}
	}
	b.viewsBySig[bc.podViewSig] = v
	return v
}

// keepBindings is a copy of b that outlives the request (an answer keeps
// its views' bindings): the request's views share one allocation, where
// each grew its own slice, a fifth of a replica's garbage.
func (r *request) keepBindings(b bindings) bindings {
	if len(b) == 0 {
		return nil
	}
	if cap(r.bindArena)-len(r.bindArena) < len(b) {
		r.bindArena = make(bindings, 0, max(len(b), int(r.e.bindHint.Load())))
	}
	n := len(r.bindArena)
	r.bindArena = append(r.bindArena, b...)
	if used := int32(min(len(r.bindArena), maxBindHint)); used > r.e.bindHint.Load() {
		r.e.bindHint.Store(used)
	}
	return r.bindArena[n : n+len(b) : n+len(b)]
}

// maxBindHint bounds Engine.bindHint: a pod that binds hundreds of
// values (a long container list) makes the chunk of every request after
// it no larger than this.
const maxBindHint = 128

// walkMsgs decides, for each of v's printed paths, whether a placeholder
// stands where the value is printed. Without edits it makes v's key (the
// placeholder marker where one stands, the value where none can) and
// bindings (the real values to put back); with edits it appends to
// *edits the changes that put the placeholders into the review, and
// nothing else: podView walks once for the key, reviewOf once more when
// Rego runs, and both walks decide alike.
func (r *request) walkMsgs(v *podView, edits *[]reviewEdit) {
	for _, m := range v.msgs {
		if analysis.EachAt(m.path) >= 0 {
			r.walkEach(v, m, edits)
			continue
		}
		if s, ok := substitutableAt(r.podReview.Value, m.path[1:], m.quote); ok && m.path[0].Equal(lookup.ReviewKey) && r.absentFrom(&m, s) {
			v.placed = true
			if edits != nil {
				*edits = append(*edits, reviewEdit{path: m.path[1:], text: m.text})
			} else {
				v.key = append(v.key, placeholderKey)
				v.bind = append(v.bind, newBinding(m.index, s))
			}
			continue
		}
		if edits == nil {
			v.key = append(v.key, m.plan.Then(r.podReview, nil))
		}
	}
}

// podViewSig is the name of the pod view of the printed paths msgs.
func podViewSig(msgs []msgSlot) string {
	var sig strings.Builder
	for _, m := range msgs {
		sig.WriteString(strconv.Itoa(m.index))
		if m.quote {
			sig.WriteByte('q')
		}
		for _, p := range m.absent {
			// Placeholders depend on these objects' keys too.
			sig.WriteString("!" + analysis.PathString(p))
		}
		sig.WriteByte(',')
	}
	return sig.String()
}

// reviewOf is v's review, its placeholders put in on first need. Called
// by the request's goroutine only (prefetch builds the reviews it hands
// out before it starts its workers).
func (r *request) reviewOf(v *podView) *ast.Term {
	if v.review != nil {
		return v.review
	}
	var edits []reviewEdit
	r.walkMsgs(v, &edits)
	review := r.podReview.Value
	for _, ed := range edits {
		if ed.texts == nil {
			review, _ = setPath(review, ed.path, ast.StringTerm(ed.text))
			continue
		}
		// The list as review holds it now (an earlier edit may have put
		// placeholders into it already): each element is replaced below
		// it, and the list once, so the path above it is rebuilt once.
		cur, _ := lookup.At(review, ed.path).Value.(*ast.Array)
		elems := make([]*ast.Term, cur.Len())
		for i := range elems {
			elems[i] = cur.Elem(i)
			if ed.texts[i] != "" {
				nv, _ := setPath(elems[i].Value, ed.rest, ast.StringTerm(ed.texts[i]))
				elems[i] = ast.NewTerm(nv)
			}
		}
		review, _ = setPath(review, ed.path, ast.ArrayTerm(elems...))
	}
	v.review = ast.NewTerm(review)
	return v.review
}

// maxEachPlaceholders bounds the elements of one list that get their own
// placeholder: past it, the list's printed values stay in the key (and
// the engine's registry of placeholders stays small).
const maxEachPlaceholders = 64

// walkEach is walkMsgs for a value printed from each element of a list
// (m.path holds analysis.Each): a placeholder for each element, with its
// own registered path (containers[0].name, containers[1].name, ...). The
// list's part of the key holds placeholderKey where a placeholder stands,
// the element's value where it cannot; a list that is not an array, or
// too long, is keyed as lookup reads it.
func (r *request) walkEach(v *podView, m msgSlot, edits *[]reviewEdit) {
	j := analysis.EachAt(m.path)
	list, rest := m.path[:j], m.path[j+1:]
	arr, ok := lookup.Input(r.podReview, list).Value.(*ast.Array)
	if !ok || arr.Len() > maxEachPlaceholders || analysis.EachAt(rest) >= 0 || !list[0].Equal(lookup.ReviewKey) {
		if edits == nil {
			v.key = append(v.key, m.plan.Then(r.podReview, nil))
		}
		return
	}
	var small [16]*ast.Term
	entries := small[:0]
	if arr.Len() > len(small) {
		entries = make([]*ast.Term, 0, arr.Len())
	}
	entries = entries[:arr.Len()]
	var texts []string
	if edits != nil {
		texts = make([]string, arr.Len())
	}
	placed := false
	for i := range entries {
		s, ok := substitutableAt(arr.Elem(i).Value, rest, m.quote)
		if !ok || !r.absentFrom(&m, s) {
			entries[i] = lookup.At(arr.Elem(i).Value, rest)
			continue
		}
		placed = true
		entries[i] = placeholderKey
		idx, text := r.e.ph.ofElement(m.index, i, func() []*ast.Term {
			concrete := make([]*ast.Term, 0, len(m.path))
			return append(append(append(concrete, list...), ast.InternedTerm(i)), rest...)
		})
		if edits != nil {
			texts[i] = text
		} else {
			v.bind = append(v.bind, newBinding(idx, s))
		}
	}
	v.placed = v.placed || placed
	if edits == nil {
		v.key = append(v.key, lookup.KeyArrays.Array(entries))
	} else if placed {
		*edits = append(*edits, reviewEdit{path: list[1:], rest: rest, texts: texts})
	}
}

// nodeReview is review with object.spec.nodeName set to node. The pod's
// own review on slot i is built once per request (slot >= 0).
func (r *request) nodeReview(review *ast.Term, slot int, node string) *ast.Term {
	if slot >= 0 && review == r.podReview {
		s := &r.slots[slot]
		if s.review == nil {
			s.review = ast.NewTerm(withNodeName(review.Value.(ast.Object), node))
		}
		return s.review
	}
	return ast.NewTerm(withNodeName(review.Value.(ast.Object), node))
}

// eval runs the template's query on one review: with the request's nodes
// in place of the inventory's when the request carries nodes and the
// template may read them (perNode, or other inventory reads).
func (r *request) eval(bc *boundConstraint, review *ast.Term, perNode bool) ([]result, error) {
	if r.override && (bc.analysis.InventoryOther || perNode) {
		return r.evalWith(bc, review, r.nodes)
	}
	return r.evalWith(bc, review, nil)
}

// evalWith runs the query with nodes (when not nil) as
// data.inventory.cluster.v1.Node. Evaluation errors become violations
// (fail closed), and so does the request's deadline: a template that runs
// too long denies the nodes it could not judge, with the reason, and the
// rest of the answer still goes back.
func (r *request) evalWith(bc *boundConstraint, review, nodes *ast.Term) ([]result, error) {
	r.evals++
	return r.evalQuery(bc, review, nodes)
}

// evalQuery is evalWith without the request's counter: it writes nothing
// of the request, so that prefetch may run it on several goroutines.
func (r *request) evalQuery(bc *boundConstraint, review, nodes *ast.Term) ([]result, error) {
	if err := r.ctx.Err(); err != nil {
		r.e.stats.evalErrors.Add(1)
		return []result{{msg: "evaluation stopped before this constraint was judged: " + err.Error(), err: true, transient: true}}, nil
	}
	items, err := bc.tmpl.prog.Eval(r.ctx, drivers.Input{Txn: r.txn, Review: review, Parameters: bc.parameters, Nodes: nodes, Cancel: r.evalCancel()})
	if err != nil {
		r.e.stats.evalErrors.Add(1)
		if ctxErr := r.ctx.Err(); ctxErr != nil {
			return []result{{msg: "evaluation stopped (the request's deadline): " + ctxErr.Error(), err: true, transient: true}}, nil
		}
		return []result{{msg: err.Error(), err: true}}, nil
	}
	res := toResults(items, r.e.ph)
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

// memorable reports whether res may be remembered: evaluation errors of a
// deterministic template are verdicts like any other (Gatekeeper fails
// closed on them every time), a deadline is not.
func memorable(res []result) bool {
	for _, x := range res {
		if x.transient {
			return false
		}
	}
	return true
}

// toResults reads a violation set the way Gatekeeper's hook does: elements
// without msg are dropped, a non-string msg is an error, details default to
// {}, duplicates collapse. holes marks results that hold placeholder text.
func toResults(items []any, ph *placeholders) []result {
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
		out = append(out, result{msg: msg, details: b, msgText: ph.cut(msg), detailsText: ph.cut(string(b)), msgPlain: isPlain(msg)})
	}
	sortResults(out)
	return out
}

func sortResults(out []result) {
	sort.Slice(out, func(i, j int) bool {
		if out[i].msg != out[j].msg {
			return out[i].msg < out[j].msg
		}
		return string(out[i].details) < string(out[j].details)
	})
}

// podReview is the Pod CREATE review a template sees: the AdmissionRequest's
// JSON fields plus namespaceObject. name and namespace are left out when
// empty, as the AdmissionRequest's JSON leaves them out.
// podKindTerm and podResourceTerm are review.kind and review.resource of
// every pod review (values are immutable, so one term serves them all).
var (
	podKindTerm = ast.ObjectTerm(
		ast.Item(ast.StringTerm("group"), ast.StringTerm("")),
		ast.Item(ast.StringTerm("version"), ast.StringTerm("v1")),
		ast.Item(ast.StringTerm("kind"), ast.StringTerm("Pod")))
	podResourceTerm = ast.ObjectTerm(
		ast.Item(ast.StringTerm("group"), ast.StringTerm("")),
		ast.Item(ast.StringTerm("version"), ast.StringTerm("v1")),
		ast.Item(ast.StringTerm("resource"), ast.StringTerm("pods")))
)

// reviewKeys are the review's keys and constant values, made once: every
// request builds a review.
var reviewKeys = struct {
	uid, kind, resource, operation, userInfo, oldObject, options, namespaceObject, name, namespace *ast.Term
	empty, create                                                                                  *ast.Term
}{
	ast.StringTerm("uid"), ast.StringTerm("kind"), ast.StringTerm("resource"), ast.StringTerm("operation"),
	ast.StringTerm("userInfo"), ast.StringTerm("oldObject"), ast.StringTerm("options"), ast.StringTerm("namespaceObject"),
	ast.StringTerm("name"), ast.StringTerm("namespace"), ast.StringTerm(""), ast.StringTerm("CREATE"),
}

func podReview(pod ast.Object, name, namespace string, userInfo, namespaceObject *ast.Term) ast.Object {
	k := &reviewKeys
	items := make([][2]*ast.Term, 0, 11)
	items = append(items,
		ast.Item(k.uid, k.empty),
		ast.Item(k.kind, podKindTerm),
		ast.Item(k.resource, podResourceTerm),
		ast.Item(k.operation, k.create),
		ast.Item(k.userInfo, userInfo),
		ast.Item(termObject, ast.NewTerm(pod)),
		ast.Item(k.oldObject, ast.InternedNullTerm),
		ast.Item(k.options, ast.InternedNullTerm),
		ast.Item(k.namespaceObject, namespaceObject),
	)
	if name != "" {
		items = append(items, ast.Item(k.name, ast.StringTerm(name)))
	}
	if namespace != "" {
		items = append(items, ast.Item(k.namespace, ast.StringTerm(namespace)))
	}
	return ast.NewObject(items...)
}

// withNodeName gives review with object.spec.nodeName set to node. Values
// are shared with the review, never copied.
func withNodeName(review ast.Object, node string) ast.Object {
	var pod ast.Object
	if t := review.Get(termObject); t != nil {
		pod, _ = t.Value.(ast.Object)
	}
	if pod == nil {
		pod = ast.NewObject()
	}
	var spec ast.Object
	if t := pod.Get(termSpec); t != nil {
		spec, _ = t.Value.(ast.Object)
	}
	if spec == nil {
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

// valueLabels are an object's metadata.labels that are strings.
func valueLabels(v ast.Value) map[string]string {
	obj, _ := v.(ast.Object)
	if obj == nil {
		return nil
	}
	md, _ := objectField(obj, termMetadata, "metadata")
	if md == nil {
		return nil
	}
	labels, _ := stringMap(md, "labels", "metadata.labels", false)
	return labels
}
