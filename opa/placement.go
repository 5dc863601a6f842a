package opa

import (
	"strings"
	"sync/atomic"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/verdict"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/policy"
)

// Placement is the answer to a PlacementRequest.
//
// It keeps verdicts the way they were computed, not copied per node: the
// violations of constraints that cannot see the node once (Common), and
// for each constraint that can, one column with, per node, the memo's
// result for the node's class and the node's printed values. Messages are
// written when they are read (EachViolation): most warn messages, and the
// messages of nodes nobody asks about, never are.
type Placement struct {
	// Nodes holds one verdict per candidate, in the request's order.
	Nodes []NodeVerdict
	// Common holds the violations of constraints that cannot see the
	// node: they hold on every known node, and are kept once, not per node.
	Common []Violation
	// MatchedWarnConstraints is W in the scoring rule: how many warn
	// constraints match the pod (whatever the node).
	MatchedWarnConstraints int
	// Generation is the policy generation the answer was computed with.
	Generation uint64
	// Evaluations counts the evaluations of templates' code this answer took.
	Evaluations int

	columns []column
	// signature is the PodQuery's whose answer this is (Rebind).
	signature string
	// denyMemo keeps each node's DenyMessage once written, for answers
	// that serve many Filter calls (PodQuery's: shared by the pods of a
	// class while Rebind hands them out as they are); nil elsewhere.
	denyMemo   []atomic.Pointer[string]
	commonDeny bool
	commonWarn int // distinct warn constraints in Common
	// traces are the nodes' explain traces, nil unless explain was asked.
	traces [][]ConstraintTrace
	// at maps node i of an answer cut from another (restrict) to the
	// other's node, whose cells hold node i's verdicts: the columns are
	// shared, not copied. nil: node i's cells are cells[i].
	at []int32
	// mem counts the readers of the pooled memory the answer holds
	// (answermem.go); nil for an answer whose memory is not pooled.
	mem *answerMemory
}

// cellOf is the index into the columns' cells of node i's verdicts.
func (p *Placement) cellOf(i int) int {
	if p.at != nil {
		return int(p.at[i])
	}
	return i
}

// Trace gives the constraints' verdicts on node i, one entry per matched
// constraint, for an answer to a request with Explain; nil otherwise.
func (p *Placement) Trace(i int) []ConstraintTrace {
	if p.traces == nil {
		return nil
	}
	return p.traces[i]
}

// AddTrace appends to node i's trace (Trace). Policy implementations
// other than the Engine (adapters, test fakes) explain with it too.
func (p *Placement) AddTrace(i int, t ...ConstraintTrace) {
	if p.traces == nil {
		p.traces = make([][]ConstraintTrace, len(p.Nodes))
	}
	p.traces[i] = append(p.traces[i], t...)
}

// column is one node-reading constraint's verdicts, one cell per node.
type column struct {
	constraint policy.ConstraintKey
	action     policy.Action
	order      int
	ph         *verdict.Placeholders
	// pod are the pod's printed values, for every cell.
	pod verdict.Bindings
	// results are the distinct result sets of the column (a few: one per
	// node class met), cells point into them.
	results [][]verdict.Result
	cells   []cell
	// deny holds, for a deny column's results of one message to fill,
	// that message joined for the column (verdict.DenyPieces; nil for the
	// others): made by settle, read by writeDenies for every denied node.
	deny [][]verdict.DenyPiece
	// nameOnly are the placeholders of the node's printed values when
	// all are its name, the candidate's own (policyset's NameOnly): a
	// cell's printed values are that name in some of them, or nothing
	// (nothingPrinted) where it cannot stand for a placeholder (project).
	nameOnly []int
}

// cell is a node's verdict from one constraint: which of the column's
// results (0: none), and the node's printed values. The column methods
// take a cell's index, which is the node's own except in an answer cut
// from another (Placement.cellOf).
type cell struct {
	result  uint32
	printed *nodePrinted
}

// res gives node i's results as evaluated (placeholders possibly).
func (c *column) res(i int) []verdict.Result {
	if k := c.cells[i].result; k > 0 {
		return c.results[k-1]
	}
	return nil
}

// set records node i's results, sharing the slice with nodes that have
// the same.
func (c *column) set(i int, res []verdict.Result, printed *nodePrinted) {
	k := 0
	for j := len(c.results) - 1; j >= 0 && j >= len(c.results)-16; j-- {
		if len(c.results[j]) == len(res) && &c.results[j][0] == &res[0] {
			k = j + 1
			break
		}
	}
	if k == 0 {
		c.results = append(c.results, res)
		k = len(c.results)
	}
	c.cells[i] = cell{result: uint32(k), printed: printed}
}

// bindingsOf are the values to put into node i's results.
func (c *column) bindingsOf(i int) verdict.Bindings {
	if c.cells == nil {
		return c.pod // no violation yet: nothing of the node was kept
	}
	if pr := c.cells[i].printed; pr != nil && len(pr.bindings) > 0 {
		return append(append(verdict.Bindings(nil), c.pod...), pr.bindings...)
	}
	return c.pod
}

func (c *column) violations(i int, f func(*Violation)) {
	res := c.res(i)
	if len(res) == 1 {
		// One result: filled straight from the pod's and the node's values.
		x := &res[0]
		v := Violation{Constraint: c.constraint, Action: c.action, Message: x.Msg, Details: x.Details, Error: x.Err, order: c.order}
		var node verdict.Bindings
		if pr := c.cells[i].printed; pr != nil {
			node = pr.bindings
		}
		if x.MsgText != nil {
			v.Message = c.ph.Fill(x.MsgText, c.pod, node, false)
		}
		if x.DetailsText != nil {
			v.Details = []byte(c.ph.Fill(x.DetailsText, c.pod, node, true))
		}
		f(&v)
		return
	}
	if verdict.AnyHoles(res) {
		res = c.ph.Substitute(res, c.bindingsOf(i))
	}
	for _, x := range res {
		v := Violation{Constraint: c.constraint, Action: c.action, Message: x.Msg, Details: x.Details, Error: x.Err, order: c.order}
		f(&v)
	}
}

// settle computes what Common contributes to every node, and the deny
// columns' joined messages.
func (p *Placement) settle() {
	for c := range p.columns {
		col := &p.columns[c]
		col.deny = nil
		if col.action != policy.Deny || col.ph == nil {
			continue
		}
		for k, res := range col.results {
			if len(res) != 1 || res[0].MsgText == nil {
				continue
			}
			if col.deny == nil {
				col.deny = make([][]verdict.DenyPiece, len(col.results))
			}
			col.deny[k] = verdict.DenyPieces(col.constraint.Name, res[0].MsgText, col.pod)
		}
	}
	p.commonDeny, p.commonWarn = false, 0
	var last policy.ConstraintKey
	for i := range p.Common {
		x := &p.Common[i]
		switch x.Action {
		case policy.Deny:
			p.commonDeny = true
		case policy.Warn:
			if i == 0 || x.Constraint != last || p.Common[i-1].Action != policy.Warn {
				p.commonWarn++
			}
		}
		last = x.Constraint
	}
}

// EachViolation calls f with every violation on node i, Common's and the
// node-reading constraints', in the policy set's order, messages written.
// Unknown nodes have none.
func (p *Placement) EachViolation(i int, f func(*Violation)) {
	p.EachViolationOf(i, "", f)
}

// EachViolationOf is EachViolation for the violations of one action ("":
// all); messages of the others are never written.
func (p *Placement) EachViolationOf(i int, action policy.Action, f func(*Violation)) {
	if p.Nodes[i].Unknown {
		return
	}
	j := p.cellOf(i)
	common, cols := p.Common, p.columns
	for len(common) > 0 || len(cols) > 0 {
		if len(cols) == 0 || (len(common) > 0 && common[0].order <= cols[0].order) {
			if action == "" || common[0].Action == action {
				f(&common[0])
			}
			common = common[1:]
			continue
		}
		if c := &cols[0]; (action == "" || c.action == action) && c.cells[j].result > 0 {
			c.violations(j, f)
		}
		cols = cols[1:]
	}
}

// Violations lists the violations on node i (see EachViolation).
func (p *Placement) Violations(i int) []Violation {
	var out []Violation
	p.EachViolation(i, func(x *Violation) { out = append(out, *x) })
	return out
}

// Denied reports whether any deny constraint is violated on node i.
func (p *Placement) Denied(i int) bool {
	if p.Nodes[i].Unknown {
		return false
	}
	if p.commonDeny {
		return true
	}
	j := p.cellOf(i)
	for c := range p.columns {
		if col := &p.columns[c]; col.action == policy.Deny && col.cells[j].result > 0 {
			return true
		}
	}
	return false
}

// ViolatedWarnConstraints counts the distinct warn constraints violated
// on node i.
func (p *Placement) ViolatedWarnConstraints(i int) int {
	if p.Nodes[i].Unknown {
		return 0
	}
	n := p.commonWarn
	j := p.cellOf(i)
	for c := range p.columns {
		if col := &p.columns[c]; col.action == policy.Warn && col.cells[j].result > 0 {
			n++
		}
	}
	return n
}

// Decisions calls f once per (constraint, action) violated on some known
// node, with the number of known nodes it is violated on (a constraint
// violated several times on one node counts once).
func (p *Placement) Decisions(f func(c policy.ConstraintKey, a policy.Action, nodes int)) {
	known := 0
	for i := range p.Nodes {
		if !p.Nodes[i].Unknown {
			known++
		}
	}
	if known == 0 {
		return
	}
	for i := range p.Common {
		x := &p.Common[i]
		if i > 0 && p.Common[i-1].Constraint == x.Constraint && p.Common[i-1].Action == x.Action {
			continue
		}
		f(x.Constraint, x.Action, known)
	}
	for c := range p.columns {
		col := &p.columns[c]
		n := 0
		for i := range p.Nodes {
			if col.cells[p.cellOf(i)].result > 0 {
				n++
			}
		}
		if n > 0 {
			f(col.constraint, col.action, n)
		}
	}
}

// Score is the prioritize score of node i, 0..10: with W warn constraints
// matching the pod and V of them violated on the node,
// round(10 * (W - V) / W), and 10 when W = 0.
func (p *Placement) Score(i int) int64 {
	w := p.MatchedWarnConstraints
	if w == 0 {
		return 10
	}
	violated := min(p.ViolatedWarnConstraints(i), w)
	// Integer rounding of 10*(w-v)/w, halves up.
	return int64((20*(w-violated) + w) / (2 * w))
}

// NewPlacement builds a Placement from each node's violations, for
// Policy implementations other than the Engine (adapters, test fakes).
// Violations of one constraint and action are kept together, constraints
// in the order they first appear.
func NewPlacement(nodes []NodeVerdict, violations [][]Violation, matchedWarn int, generation uint64) *Placement {
	p := &Placement{Nodes: nodes, MatchedWarnConstraints: matchedWarn, Generation: generation}
	type colKey struct {
		c policy.ConstraintKey
		a policy.Action
	}
	index := map[colKey]int{}
	for i, vs := range violations {
		for _, v := range vs {
			k := colKey{v.Constraint, v.Action}
			c, ok := index[k]
			if !ok {
				c = len(p.columns)
				index[k] = c
				p.columns = append(p.columns, column{constraint: v.Constraint, action: v.Action, order: c, cells: make([]cell, len(nodes))})
			}
			col := &p.columns[c]
			if col.cells[i].result == 0 {
				col.results = append(col.results, nil)
				col.cells[i].result = uint32(len(col.results))
			}
			ri := col.cells[i].result - 1
			col.results[ri] = append(col.results[ri], verdict.Result{Msg: v.Message, Details: v.Details, Err: v.Error})
		}
	}
	for c := range p.columns {
		for _, res := range p.columns[c].results {
			verdict.SortResults(res)
		}
	}
	return p
}

// DenyMessage joins the deny violations on node i, each as
// "[<constraint name>] <msg>", with "; ": the reason both front ends
// (the extender's filter, the plugin's Filter) give for a denied node.
func (p *Placement) DenyMessage(i int) string {
	if p.denyMemo != nil {
		if m := p.denyMemo[i].Load(); m != nil {
			return *m
		}
	}
	// Measured first, so that the message is one allocation of its size.
	var n lengthWriter
	p.WriteDenyMessage(&n, i)
	var b strings.Builder
	b.Grow(int(n))
	p.WriteDenyMessage(&b, i)
	m := b.String()
	if p.denyMemo != nil {
		p.denyMemo[i].Store(&m)
	}
	return m
}

// lengthWriter counts what it is given.
type lengthWriter int

func (n *lengthWriter) WriteString(s string) (int, error) {
	*n += lengthWriter(len(s))
	return len(s), nil
}

// WriteDenyMessage writes DenyMessage(i) to w, in pieces: the walk of
// EachViolationOf, with filled messages written straight from their
// literal parts and printed values (a denied node's message is written on
// every filter call).
func (p *Placement) WriteDenyMessage(w verdict.MessageWriter, i int) {
	if p.Nodes[i].Unknown {
		return
	}
	d := newDenyWriter(w)
	j := p.cellOf(i)
	common, cols := p.Common, p.columns
	for len(common) > 0 || len(cols) > 0 {
		if len(cols) == 0 || (len(common) > 0 && common[0].order <= cols[0].order) {
			if common[0].Action == policy.Deny {
				d.violation(&common[0])
			}
			common = common[1:]
			continue
		}
		if c := &cols[0]; c.action == policy.Deny && c.cells[j].result > 0 {
			c.writeDenies(&d, j, p.Nodes[i].Name)
		}
		cols = cols[1:]
	}
}

// denyWriter writes the parts of one deny message, "; " between them.
type denyWriter struct {
	w       verdict.MessageWriter
	pw      verdict.PlainWriter // w, when it is one
	started bool
	names   [2]verdict.Binding // the node's name, for nameOnly columns
}

func newDenyWriter(w verdict.MessageWriter) denyWriter {
	pw, _ := w.(verdict.PlainWriter)
	return denyWriter{w: w, pw: pw}
}

// prefix starts one violation's part: "; " after an earlier one, then
// "[<constraint name>] ".
func (d *denyWriter) prefix(constraint string) {
	if d.started {
		verdict.WriteText(d.w, d.pw, "; ", true)
	}
	d.started = true
	verdict.WriteText(d.w, d.pw, "[", true)
	_, _ = d.w.WriteString(constraint)
	verdict.WriteText(d.w, d.pw, "] ", true)
}

// violation writes "[<constraint name>] <msg>".
func (d *denyWriter) violation(x *Violation) {
	d.prefix(x.Constraint.Name)
	_, _ = d.w.WriteString(x.Message)
}

// writeDenies writes node i's violations of the column as DenyMessage
// does; one result with a message to fill is written without building
// the violation (its details are not needed).
func (c *column) writeDenies(d *denyWriter, i int, name string) {
	res := c.res(i)
	if !verdict.AnyHoles(res) {
		// Messages as evaluated: nothing to fill, nothing to merge.
		for k := range res {
			d.prefix(c.constraint.Name)
			verdict.WriteText(d.w, d.pw, res[k].Msg, res[k].MsgPlain)
		}
		return
	}
	if len(res) == 1 && res[0].MsgText != nil {
		var node verdict.Bindings
		switch pr := c.cells[i].printed; {
		case len(c.nameOnly) > 0 && len(c.nameOnly) <= len(d.names) && pr != nil && pr != nothingPrinted:
			// The name at hand, not the one the node's printed values
			// hold (the same): reading those was a cache miss per denied
			// node, the window of candidates moving through the cluster.
			// A slot the name could not stand for has no hole to fill.
			for k, slot := range c.nameOnly {
				d.names[k] = verdict.NewBinding(slot, name)
			}
			node = d.names[:len(c.nameOnly)]
		case pr != nil:
			node = pr.bindings
		}
		if k := int(c.cells[i].result); k <= len(c.deny) && c.deny[k-1] != nil {
			if d.started {
				verdict.WriteText(d.w, d.pw, "; ", true)
			}
			d.started = true
			c.ph.WriteDenyPieces(d.w, d.pw, c.deny[k-1], node)
			return
		}
		d.prefix(c.constraint.Name)
		c.ph.FillTo(d.w, res[0].MsgText, c.pod, node, false)
		return
	}
	c.violations(i, d.violation)
}

// PodDenied reports whether a deny constraint that cannot see the node is
// violated, so that every known node is denied whatever it is, and the
// reason as DenyMessage writes it (node-reading violations left out).
func (p *Placement) PodDenied() (bool, string) {
	if !p.commonDeny {
		return false, ""
	}
	var b strings.Builder
	d := denyWriter{w: &b}
	for i := range p.Common {
		x := &p.Common[i]
		if x.Action == policy.Deny {
			d.violation(x)
		}
	}
	return true, b.String()
}

// AnyDenied reports whether some known node is denied: when none is, a
// front end can skip its per-node checks.
func (p *Placement) AnyDenied() bool {
	for i := range p.Nodes {
		if p.Denied(i) {
			return true
		}
	}
	return false
}
