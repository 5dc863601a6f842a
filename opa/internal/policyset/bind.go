package policyset

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/gatekeeper"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/inventory"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/lookup"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/memo"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/verdict"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/policy"
)

// BoundConstraint is a constraint bound to its template's compiled code:
// what a request needs to key, evaluate and explain its verdicts.
type BoundConstraint struct {
	Constraint *gatekeeper.Constraint
	Template   *CompiledTemplate
	// owner names this constraint's results in the memo; kept while the
	// constraint and its template are unchanged.
	Owner   uint64
	Classes *memo.Classes
	// parameters are the constraint's, defaulted by the template's schema.
	Parameters ast.Value
	// Object is the whole Constraint with those parameters, for code that
	// reads it (CEL's params); nil for Rego.
	Object *unstructured.Unstructured
	// analysis is the template's with this constraint's parameters known.
	Analysis *analysis.Result
	Class    analysis.Class
	// keyInputPaths are the input paths of the memo key (parameters are
	// constant per constraint and left out).
	keyInputPaths [][]*ast.Term
	// keyPathIDs number keyInputPaths in the engine's registry of key
	// paths, so that a request looks each path up once for all the
	// constraints that read it (the engine's request.keyCache).
	KeyPathIDs []int
	// keyPlans read keyInputPaths (package internal/lookup), parsed once.
	KeyPlans []*lookup.InputPlan
	// keyHelpers are, by key path, the helpers of the paths that end in
	// one (nil for the others; helper.go). Such paths are looked up per
	// constraint (their keyPathIDs are -1): their answers are its own.
	KeyHelpers []*KeyHelper
	// podMsgs and nodeMsgs are the printed paths of the pod's review and
	// of the node; nameMsg the candidate's name when it is printed.
	PodMsgs, NodeMsgs []verdict.MsgSlot
	// PodMsgGates are, by pod message, the helpers whose answers on a
	// value and on its placeholder must agree for it to get one
	// (analysis.MessagePath.Helpers); nil for most.
	PodMsgGates [][]*KeyHelper
	// PodViewSig names the pod view podMsgs make (request.podView):
	// constraints that print the same pod paths share one per request.
	PodViewSig string
	NameMsg    *verdict.MsgSlot
	// NameOnly are the placeholders of the node's printed values when
	// every one of them is the node's name (the review's spec.nodeName,
	// the Node's metadata.name), nil otherwise: for the inventory's Nodes,
	// held by metadata.name, the candidate's name is the Node's, so an
	// answer can write those values from the name it has at hand.
	NameOnly []int
	// invKinds are the inventory kinds whose generations key its
	// verdicts, invAny that the whole inventory's generation does
	// (analysis.Result.InventoryOther; package internal/inventory).
	InvKinds []*ast.Term
	InvAny   bool
}

// MaxNodeClasses bounds each constraint's table of node classes.
const MaxNodeClasses = 1 << 17

// podViewSig is the name of the pod view of the printed paths msgs.
func podViewSig(msgs []verdict.MsgSlot, gates [][]*KeyHelper) string {
	var sig strings.Builder
	for i, m := range msgs {
		for _, g := range gates[i] {
			// and on these helpers' answers.
			sig.WriteString("?" + strconv.FormatUint(g.Owner, 10))
		}
		sig.WriteString(strconv.Itoa(m.Index))
		if m.Quote {
			sig.WriteByte('q')
		}
		if m.Trim {
			sig.WriteByte('t')
		}
		for _, p := range m.Absent {
			// Placeholders depend on these objects' keys too.
			sig.WriteString("!" + analysis.PathString(p))
		}
		if m.Distinct {
			// and on the values being pairwise distinct.
			sig.WriteByte('d')
		}
		sig.WriteByte(',')
	}
	return sig.String()
}

// bind binds a constraint to its template's compiled code: its parameters
// checked and defaulted by the template's schema, the analysis run with
// them as constants, and its memo key's paths, helpers and printed paths
// numbered in the registry.
func (reg *Registry) bind(c *gatekeeper.Constraint, ct *CompiledTemplate, owner uint64) (*BoundConstraint, error) {
	params, err := gatekeeper.CheckParameters(ct.Template.Schema, c.RawParameters, ct.Template.LegacySchema)
	if err != nil {
		return nil, err
	}
	pv, err := ast.InterfaceToValue(params)
	if err != nil {
		return nil, fmt.Errorf("%w: spec.parameters: %v", gatekeeper.ErrInvalidConstraint, err)
	}
	bc := &BoundConstraint{Constraint: c, Template: ct, Owner: owner, Classes: memo.NewClasses(MaxNodeClasses), Parameters: pv}
	if ct.Program.ReadsConstraint() {
		if bc.Object, err = c.WithParameters(params); err != nil {
			return nil, err
		}
	}
	bc.Analysis = ct.Program.Analyze(pv)
	bc.Class = bc.Analysis.Classify()
	for _, p := range bc.Analysis.InputPaths {
		if len(p) > 0 && p[0].Equal(ast.StringTerm("parameters")) {
			continue
		}
		h, err := reg.helperOf(ct, bc, p)
		if err != nil {
			return nil, err
		}
		id := -1
		if h == nil {
			id = reg.keyPaths.ID(analysis.PathString(p))
		}
		bc.keyInputPaths = append(bc.keyInputPaths, p)
		bc.KeyPlans = append(bc.KeyPlans, reg.Lookup.CompileInput(p))
		bc.KeyPathIDs = append(bc.KeyPathIDs, id)
		bc.KeyHelpers = append(bc.KeyHelpers, h)
	}
	for _, m := range bc.Analysis.Messages {
		idx, text := reg.Placeholders.Of(m.Root, m.Path)
		slot := verdict.MsgSlot{Path: m.Path, Quote: m.Quote, Trim: m.Trim, Index: idx, Text: text, Absent: m.Absent, Distinct: m.Distinct}
		if m.Root == analysis.Node {
			bc.NodeMsgs = append(bc.NodeMsgs, slot)
		} else {
			slot.Plan = reg.Lookup.CompileInput(m.Path)
			var gates []*KeyHelper
			for _, h := range m.Helpers {
				kh, err := reg.helperOf(ct, bc, append(slices.Clone(m.Path), h))
				if err != nil {
					return nil, err
				}
				gates = append(gates, kh)
			}
			bc.PodMsgs = append(bc.PodMsgs, slot)
			bc.PodMsgGates = append(bc.PodMsgGates, gates)
		}
	}
	bc.PodViewSig = podViewSig(bc.PodMsgs, bc.PodMsgGates)
	if bc.Analysis.InventoryOther {
		bc.InvKinds, bc.InvAny = inventory.KeyKinds(ct.invReads, bc.Analysis.OtherNodes), ct.invReads.Any
		if len(bc.InvKinds) == 0 && !bc.InvAny {
			// The analysis saw an inventory read the references do not
			// show (a with on data): key on the whole inventory.
			bc.InvAny = true
		}
	}
	if bc.Analysis.NodeNameMessage {
		idx, text := reg.Placeholders.Of(analysis.Input, analysis.NodeNamePath)
		bc.NameMsg = &verdict.MsgSlot{Path: analysis.NodeNamePath, Quote: bc.Analysis.NodeNameQuote, Index: idx, Text: text}
	}
	bc.NameOnly = nameOnly(bc)
	return bc, nil
}

// metadataName is the path of a Node's name in the Node.
var metadataName = ast.Ref{ast.StringTerm("metadata"), ast.StringTerm("name")}

// nameOnly is BoundConstraint.NameOnly.
func nameOnly(bc *BoundConstraint) []int {
	var slots []int
	if bc.NameMsg != nil {
		slots = append(slots, bc.NameMsg.Index)
	}
	for _, m := range bc.NodeMsgs {
		if !ast.Ref(m.Path).Equal(metadataName) {
			return nil
		}
		slots = append(slots, m.Index)
	}
	return slots
}

// BindConstraints binds the constraints in force (by key) to next's
// templates, in key order. A constraint whose constraint and template are
// unchanged keeps its binding, and one whose template was only recompiled
// with others keeps its owner: its verdicts stand. It gives the outcome
// of each constraint it bound anew (nil: bound; an error: the template's
// schema refuses its parameters, and the constraint is left out).
func (reg *Registry) BindConstraints(cur, next *Snapshot, inForce map[policy.ConstraintKey]*gatekeeper.Constraint) map[policy.ConstraintKey]error {
	old := map[policy.ConstraintKey]*BoundConstraint{}
	for _, bc := range cur.Constraints {
		old[bc.Constraint.Key] = bc
	}
	bound := map[policy.ConstraintKey]error{}
	for key, c := range inForce {
		ct := next.Templates[key.Kind]
		if ct == nil {
			continue
		}
		if prev := old[key]; prev != nil && prev.Constraint == c && prev.Template == ct {
			next.Constraints = append(next.Constraints, prev)
			continue
		}
		owner := reg.owners.Add(1)
		if prev := old[key]; prev != nil && prev.Constraint == c && prev.Template.Template == ct.Template {
			// Same constraint, same template recompiled with others: the
			// verdicts stand, the queries are new.
			owner = prev.Owner
		}
		bc, err := reg.bind(c, ct, owner)
		bound[key] = err
		if err != nil {
			continue
		}
		next.Constraints = append(next.Constraints, bc)
	}
	sort.Slice(next.Constraints, func(i, j int) bool {
		a, b := next.Constraints[i].Constraint.Key, next.Constraints[j].Constraint.Key
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.Name < b.Name
	})
	reg.keepHelperOwners(next)
	return bound
}
