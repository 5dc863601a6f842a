package opa

import (
	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/drivers"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/gatekeeper"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/lookup"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/memo"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/policyset"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/verdict"
)

type memoEntry = memo.Entry[[]verdict.Result]

// podView is the pod as one constraint is evaluated on it: its review
// with placeholders where printed values could stand, their part of the
// memo key, and the real values to put back. The review is rebuilt with
// the placeholders only when Rego runs (reviewOf): a memo hit, a
// replica's every constraint, needs the key and the values alone.
type podView struct {
	review *ast.Term
	key    []*ast.Term
	bind   verdict.Bindings
	// msgs are the printed paths the view was made for, gates their
	// helpers (policyset.BoundConstraint.PodMsgGates); placed: some value
	// has a placeholder, so review is not the pod's own.
	msgs   []verdict.MsgSlot
	gates  [][]*policyset.KeyHelper
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
func (r *reviews) podView(bc *policyset.BoundConstraint, memoOK bool) *podView {
	if !memoOK || len(bc.PodMsgs) == 0 {
		if r.plain == nil {
			r.plain = &podView{review: r.podReview}
		}
		return r.plain
	}
	b := r.buffers()
	if v, ok := b.viewsBySig[bc.PodViewSig]; ok {
		return v
	}
	v := b.newView()
	v.msgs, v.gates = bc.PodMsgs, bc.PodMsgGates
	v.bind = b.bindScratch[:0]
	r.reviews.walkMsgs(v, nil)
	b.bindScratch = v.bind[:0]
	v.bind = r.reviews.keepBindings(v.bind)
	if !v.placed {
		v.review = r.podReview
	}
	if b.viewsBySig == nil {
		b.viewsBySig = map[string]*podView{}
	}
	b.viewsBySig[bc.PodViewSig] = v
	return v
}

// keepBindings is a copy of b that outlives the request (an answer keeps
// its views' bindings): the request's views share one chunk, where each
// grew its own slice, a fifth of a replica's garbage. The chunks come from
// a pool, and go back to it with the answer's memory (handBindings).
func (r *reviews) keepBindings(b verdict.Bindings) verdict.Bindings {
	if len(b) == 0 {
		return nil
	}
	if cap(r.bindArena)-len(r.bindArena) < len(b) {
		c := r.e.pools.binds.Get()
		if n := max(len(b), int(r.e.bindHint.Load())); cap(*c) < n {
			*c = make(verdict.Bindings, 0, n)
		}
		r.arenas = append(r.arenas, c)
		r.bindArena = (*c)[:0]
	}
	n := len(r.bindArena)
	r.bindArena = append(r.bindArena, b...)
	if used := int32(min(len(r.bindArena), maxBindHint)); used > r.e.bindHint.Load() {
		r.e.bindHint.Store(used)
	}
	return r.bindArena[n : n+len(b) : n+len(b)]
}

// handBindings gives the request's binding chunks to p, whose columns read
// them: they go back to the pool when p's memory does. An answer whose
// memory is not counted (and a pod query's views, which outlive their
// request) leaves them to the collector.
func (r *reviews) handBindings(p *Placement) {
	if p.mem != nil && len(r.arenas) > 0 {
		p.mem.mu.Lock()
		p.mem.binds = append(p.mem.binds, r.arenas...)
		p.mem.mu.Unlock()
	}
	r.arenas, r.bindArena = nil, nil
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
func (r *reviews) walkMsgs(v *podView, edits *[]reviewEdit) {
	for i, m := range v.msgs {
		if analysis.EachAt(m.Path) >= 0 {
			r.reviews.walkEach(v, m, v.gates[i], edits)
			continue
		}
		if s, ok := verdict.SubstitutableAt(r.podReview.Value, m.Path[1:], m.Quote, m.Trim); ok && m.Path[0].Equal(lookup.ReviewKey) &&
			r.msgs.absentFrom(&m, s) && r.msgs.gatesAgree(v.gates[i], s, m.Text) && r.msgs.distinct(&m) {
			v.placed = true
			if edits != nil {
				*edits = append(*edits, reviewEdit{path: m.Path[1:], text: m.Text})
			} else {
				v.key = append(v.key, verdict.PlaceholderKey)
				v.bind = append(v.bind, verdict.NewBinding(m.Index, s))
			}
			continue
		}
		if edits == nil {
			v.key = append(v.key, m.Plan.ThenWith(r.podReview, nil, &r.buffers().lists))
		}
	}
}

// reviewOf is v's review, its placeholders put in on first need. Called
// by the request's goroutine only (prefetch builds the reviews it hands
// out before it starts its workers).
func (r *reviews) reviewOf(v *podView) *ast.Term {
	if v.review != nil {
		return v.review
	}
	var edits []reviewEdit
	r.reviews.walkMsgs(v, &edits)
	review := r.podReview.Value
	for _, ed := range edits {
		if ed.texts == nil {
			review, _ = verdict.SetPath(review, ed.path, ast.StringTerm(ed.text))
			continue
		}
		// The list as review holds it now (an earlier edit may have put
		// placeholders into it already): each element is replaced below
		// it, and the list once, so the path above it is rebuilt once.
		cur, _ := r.e.reg.Lookup.At(review, ed.path).Value.(*ast.Array)
		elems := make([]*ast.Term, cur.Len())
		for i := range elems {
			elems[i] = cur.Elem(i)
			if ed.texts[i] != "" {
				nv, _ := verdict.SetPath(elems[i].Value, ed.rest, ast.StringTerm(ed.texts[i]))
				elems[i] = ast.NewTerm(nv)
			}
		}
		review, _ = verdict.SetPath(review, ed.path, ast.ArrayTerm(elems...))
	}
	v.review = ast.NewTerm(review)
	return v.review
}

// walkEach is walkMsgs for a value printed from each element of a list
// (m.path holds analysis.Each): a placeholder for each element, with its
// own registered path (containers[0].name, containers[1].name, ...). The
// list's part of the key holds verdict.PlaceholderKey where a placeholder stands,
// the element's value where it cannot; a list that is not an array, or
// too long, is keyed as lookup reads it.
func (r *reviews) walkEach(v *podView, m verdict.MsgSlot, gates []*policyset.KeyHelper, edits *[]reviewEdit) {
	j := analysis.EachAt(m.Path)
	list, rest := m.Path[:j], m.Path[j+1:]
	arr, ok := r.e.reg.Lookup.Input(r.podReview, list).Value.(*ast.Array)
	if !ok || arr.Len() > verdict.MaxEachPlaceholders || analysis.EachAt(rest) >= 0 || !list[0].Equal(lookup.ReviewKey) || !r.msgs.distinct(&m) {
		if edits == nil {
			v.key = append(v.key, m.Plan.ThenWith(r.podReview, nil, &r.buffers().lists))
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
		s, ok := verdict.SubstitutableAt(arr.Elem(i).Value, rest, m.Quote, m.Trim)
		if !ok || !r.msgs.absentFrom(&m, s) {
			entries[i] = r.e.reg.Lookup.At(arr.Elem(i).Value, rest)
			continue
		}
		idx, text := r.e.reg.Placeholders.OfElement(m.Index, i, func() []*ast.Term {
			concrete := make([]*ast.Term, 0, len(m.Path))
			return append(append(append(concrete, list...), ast.InternedTerm(i)), rest...)
		})
		if !r.msgs.gatesAgree(gates, s, text) {
			entries[i] = r.e.reg.Lookup.At(arr.Elem(i).Value, rest)
			continue
		}
		placed = true
		entries[i] = verdict.PlaceholderKey
		if edits != nil {
			texts[i] = text
		} else {
			v.bind = append(v.bind, verdict.NewBinding(idx, s))
		}
	}
	v.placed = v.placed || placed
	if edits == nil {
		v.key = append(v.key, r.e.reg.Lookup.Array(entries))
	} else if placed {
		*edits = append(*edits, reviewEdit{path: list[1:], rest: rest, texts: texts})
	}
}

// nodeReview is review with object.spec.nodeName set to node. The pod's
// own review on slot i is built once per request (slot >= 0).
func (r *reviews) nodeReview(review *ast.Term, slot int, node string) *ast.Term {
	if slot >= 0 && review == r.podReview {
		s := &r.slots[slot]
		if s.review == nil {
			s.review = ast.NewTerm(gatekeeper.WithNodeName(review.Value.(ast.Object), node))
		}
		return s.review
	}
	return ast.NewTerm(gatekeeper.WithNodeName(review.Value.(ast.Object), node))
}

// eval runs the template's query on one review: with the request's nodes
// in place of the inventory's when the request carries nodes and the
// template may read them (perNode, or other inventory reads).
func (r *request) eval(bc *policyset.BoundConstraint, review *ast.Term, perNode bool) ([]verdict.Result, error) {
	if r.override && (bc.Analysis.InventoryOther || perNode) {
		return r.evalWith(bc, review, r.nodes)
	}
	return r.evalWith(bc, review, nil)
}

// evalWith runs the query with nodes (when not nil) as
// data.inventory.cluster.v1.Node. Evaluation errors become violations
// (fail closed), and so does the request's deadline: a template that runs
// too long denies the nodes it could not judge, with the reason, and the
// rest of the answer still goes back.
func (r *request) evalWith(bc *policyset.BoundConstraint, review, nodes *ast.Term) ([]verdict.Result, error) {
	r.evals++
	return r.evalQuery(bc, review, nodes)
}

// evalQuery is evalWith without the request's counter: it writes nothing
// of the request, so that prefetch may run it on several goroutines.
func (r *request) evalQuery(bc *policyset.BoundConstraint, review, nodes *ast.Term) ([]verdict.Result, error) {
	if err := r.ctx.Err(); err != nil {
		r.e.stats.evalErrors.Add(1)
		return []verdict.Result{{Msg: "evaluation stopped before this constraint was judged: " + err.Error(), Err: true, Transient: true}}, nil
	}
	prog := bc.Template.Program
	items, err := prog.Eval(r.ctx, drivers.Input{Txn: r.txn, Review: review, Parameters: bc.Parameters, Constraint: bc.Object, Nodes: nodes, Cancel: r.evalCancel()})
	if err != nil {
		r.e.stats.evalErrors.Add(1)
		if ctxErr := r.ctx.Err(); ctxErr != nil {
			return []verdict.Result{{Msg: "evaluation stopped (the request's deadline): " + ctxErr.Error(), Err: true, Transient: true}}, nil
		}
		return []verdict.Result{{Msg: err.Error(), Err: true}}, nil
	}
	res := verdict.Results(items, r.e.reg.Placeholders, prog.ListViolations())
	if verdict.HasError(res) {
		r.e.stats.evalErrors.Add(1)
	}
	return res, nil
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
	labels, _ := stringMap(md, termLabels, false)
	return labels
}
