package opa

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/policyset"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/verdict"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/policy"
)

// PodQuery is a pod judged once for what does not depend on the node, to
// be judged on nodes a few at a time afterwards: the plugin build's Filter
// asks about one node, or the block of nodes around it, where the
// extender's filter asks about all candidates at once. Its results are
// the same as Evaluate's for the same pod and nodes.
//
// A PodQuery is immutable and safe for concurrent use. It is bound to the
// policy set in force when it was prepared; Evaluate falls back to a full
// evaluation when the policy set has changed since.
type PodQuery struct {
	e      *Engine
	pod    *Pod
	snap   *policyset.Snapshot
	in     podInput
	common *Placement // Common and MatchedWarnConstraints; no nodes
	// nodeReading are the places in the policy set of the matched
	// constraints that can see the node.
	nodeReading []int
	mayDeny     bool
	signature   string
	signable    bool
	// binds are the pod's printed values per node-reading constraint (by
	// place in the policy set), for Rebind.
	binds map[int]verdict.Bindings
}

// Prepare matches the pod against every constraint and judges it on the
// constraints that cannot see the node.
func (e *Engine) Prepare(ctx context.Context, content map[string]any) (*PodQuery, error) {
	pod, err := NewPod(content)
	if err != nil {
		return nil, err
	}
	return e.PreparePod(ctx, pod)
}

// PreparePod is Prepare for a pod already converted.
func (e *Engine) PreparePod(ctx context.Context, pod *Pod) (*PodQuery, error) {
	r, err := e.begin(ctx, pod, false)
	if err != nil {
		return nil, err
	}
	defer r.end()
	snap := r.snap
	p := r.placement()
	nodeReading, err := r.judgePod(p)
	if err != nil {
		return nil, err
	}
	p.settle()
	q := &PodQuery{e: e, pod: pod, snap: snap, in: r.in, common: p, nodeReading: nodeReading}
	for _, order := range nodeReading {
		if snap.Constraints[order].Constraint.Action == policy.Deny {
			q.mayDeny = true
		}
	}
	q.signature, q.signable = r.signature(nodeReading, p)
	if q.signable {
		q.binds = make(map[int]verdict.Bindings, len(nodeReading))
		for _, order := range nodeReading {
			q.binds[order] = r.reviews.podView(snap.Constraints[order], true).bind
		}
	}
	return q, nil
}

// signature names what decides the pod's verdicts on every node: the
// policy and inventory generations, the matched constraints and, for each,
// the pod's part of its memo key (printed values left out), and the
// pod-only verdicts.
// Pods with equal signatures are denied on the same nodes and score the
// same everywhere. It is not signable when a matched constraint is not
// memoised or keys on the node's name together with the pod.
func (r *request) signature(nodeReading []int, p *Placement) (string, bool) {
	var b strings.Builder
	b.WriteString(strconv.FormatUint(r.snap.Generation, 10))
	b.WriteByte('/')
	b.WriteString(r.invGen.String())
	for _, order := range nodeReading {
		bc := r.snap.Constraints[order]
		if !r.keys.memoOK(bc) || bc.Analysis.NodeNameObserved {
			return "", false
		}
		key := r.keys.podKey(bc, r.podReview, r.reviews.podView(bc, true))
		b.WriteByte('|')
		b.WriteString(bc.Constraint.Key.String())
		b.WriteByte('=')
		b.WriteString(key.String())
	}
	for i := range p.Common {
		x := &p.Common[i]
		b.WriteString("|common:")
		b.WriteString(x.Constraint.String())
		b.WriteByte(':')
		b.WriteString(string(x.Action))
	}
	b.WriteString("|warn:")
	b.WriteString(strconv.Itoa(p.MatchedWarnConstraints))
	return b.String(), true
}

// Signature is what decides the pod's verdicts (see request.signature),
// and whether there is one.
func (q *PodQuery) Signature() (string, bool) { return q.signature, q.signable }

// PodDenied is Placement.PodDenied for this pod (on any node).
func (q *PodQuery) PodDenied() (bool, string) { return q.common.PodDenied() }

// MatchedWarnConstraints is Placement.MatchedWarnConstraints.
func (q *PodQuery) MatchedWarnConstraints() int { return q.common.MatchedWarnConstraints }

// MayDenyNodes reports whether a matched deny constraint can see the node:
// without one, no node is denied unless the pod is everywhere.
func (q *PodQuery) MayDenyNodes() bool { return q.mayDeny }

// Evaluate judges the pod on the candidates, as Engine.Evaluate does.
func (q *PodQuery) Evaluate(ctx context.Context, cands []Candidate) (*Placement, error) {
	e := q.e
	v, err := e.openView(ctx)
	if err != nil {
		return nil, err
	}
	if v.snap != q.snap {
		// The policy set changed since Prepare: judge everything anew.
		e.store.Abort(ctx, v.txn)
		return e.Evaluate(ctx, PlacementRequest{Decoded: q.pod, Candidates: cands})
	}
	defer e.store.Abort(ctx, v.txn)
	r := e.newRequest(ctx, v, q.in, false)
	defer r.release()
	defer r.addStats()
	if err := r.cands.candidates(cands); err != nil {
		return nil, err
	}
	p := r.placement()
	p.mem = nil // Rebind hands p's cells to other pods' answers: never recycled
	p.Common = q.common.Common
	p.MatchedWarnConstraints = q.common.MatchedWarnConstraints
	if err := r.judgeNodes(p, q.nodeReading); err != nil {
		return nil, err
	}
	p.Evaluations = int(r.evals)
	p.settle()
	if q.signable {
		p.signature = q.signature
		p.denyMemo = make([]atomic.Pointer[string], len(p.Nodes))
	}
	return p, nil
}

// Rebind is p, the answer of a PodQuery with the same signature (another
// pod of the same class, judged on the same inventory under the same
// policy set), as an answer for this query's pod: the same verdicts, this
// pod's pod-only violations and printed values. It shares p's cells, and
// is p itself when p already carries this pod's values (then Evaluations
// still counts p's evaluations); it is false when p is not such an answer.
func (q *PodQuery) Rebind(p *Placement) (*Placement, bool) {
	if !q.signable || p.signature != q.signature {
		return nil, false
	}
	if q.carriedBy(p) {
		// Nothing the policies print is this pod's own.
		return p, true
	}
	out := *p
	out.Common = q.common.Common
	out.Evaluations = 0
	out.denyMemo = nil // the messages may print this pod's values
	out.mem = nil      // p's memory is p's readers' to count
	out.columns = make([]column, len(p.columns))
	for i, c := range p.columns {
		c.pod = q.binds[c.order]
		out.columns[i] = c
	}
	out.settle()
	return &out, true
}

// carriedBy reports whether p holds this pod's own values already: the
// same pod-only violations and, in every column, the same printed values.
func (q *PodQuery) carriedBy(p *Placement) bool {
	if !sameViolations(p.Common, q.common.Common) {
		return false
	}
	for i := range p.columns {
		if c := &p.columns[i]; !slices.Equal(c.pod, q.binds[c.order]) {
			return false
		}
	}
	return true
}

func sameViolations(a, b []Violation) bool {
	return slices.EqualFunc(a, b, func(x, y Violation) bool {
		return x.Constraint == y.Constraint && x.Action == y.Action && x.Message == y.Message &&
			string(x.Details) == string(y.Details) && x.Error == y.Error && x.order == y.order
	})
}
