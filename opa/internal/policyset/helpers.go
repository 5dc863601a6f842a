package policyset

import (
	"fmt"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/drivers"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/lookup"
)

// KeyHelper is one Helper of a bound constraint's key.
type KeyHelper struct {
	// owner names its answers in the engine's helper memo: every helper
	// with the same identity (helperIdentity) has the same owner, so the
	// library's is_exempt, shipped in each PSP template, is evaluated once
	// per image and exemptImages, not once per template.
	Owner    uint64
	identity string
	// reads are the function's reads below the value: its memo key.
	Reads [][]*ast.Term
	Query drivers.Helper
	// parameters are the constraint's: input.parameters of every call;
	// Constraint the whole Constraint (drivers.Input.Constraint).
	Parameters *ast.Term
	Constraint *unstructured.Unstructured
	// rawPaths are the reads' review paths (the argument's path, then the
	// read), rawIDs their numbers in the Registry's key paths and eachDepth the Each
	// in the argument's path: a request finds the answers the helper memo
	// holds from its key cache, which the constraints reading those paths
	// share (knownAnswers). nil for an argument's path with a condition.
	rawPaths  [][]*ast.Term
	RawPlans  []*lookup.InputPlan
	RawIDs    []int
	EachDepth int
	// argPlan reads the argument's path (the key path without its
	// Helper), the helper called on each value it finds.
	ArgPlan *lookup.InputPlan
	// argLast: the last raw path is the argument's own, which may be
	// absent (its path does not end in Each: it is not an element).
	ArgLast bool
}

// helperIdentity names what a helper's answer depends on besides its
// value: the code it runs, its constant arguments, what it reads of the
// value, and the values of the parameters it reads.
func helperIdentity(deps analysis.HelperDeps, h analysis.HelperCall, params ast.Value, constraint *unstructured.Unstructured) string {
	var b strings.Builder
	b.WriteString(deps.Code)
	b.WriteString("\x00")
	if deps.Presence {
		_, present, _ := unstructured.NestedFieldNoCopy(constraintObject(constraint), "spec", "parameters")
		fmt.Fprintf(&b, "parameters present: %t\x00", present)
	}
	for _, a := range h.Args {
		b.WriteString(a.String())
		b.WriteString("\x00")
	}
	for _, p := range h.Reads {
		b.WriteString(analysis.PathString(p))
		b.WriteString("\x00")
	}
	for _, p := range deps.Params {
		b.WriteString(analysis.PathString(p))
		b.WriteString("=")
		if v, err := params.Find(ast.Ref(p)); err == nil {
			b.WriteString(v.String())
		} else {
			b.WriteString("(absent)")
		}
		b.WriteString("\x00")
	}
	return b.String()
}

// constraintObject is u's content (nil for none).
func constraintObject(u *unstructured.Unstructured) map[string]any {
	if u == nil {
		return nil
	}
	return u.Object
}

// helperOf is the keyHelper of a key path ending in a Helper, or nil.
func (reg *Registry) helperOf(ct *CompiledTemplate, bc *BoundConstraint, path []*ast.Term) (*KeyHelper, error) {
	if len(path) == 0 {
		return nil, nil
	}
	h, ok := analysis.HelperOf(path[len(path)-1])
	if !ok {
		return nil, nil
	}
	q, deps, err := ct.Program.Helper(h)
	if err != nil {
		return nil, fmt.Errorf("prepare helper %s: %w", h.Func, err)
	}
	identity := helperIdentity(deps, h, bc.Parameters, bc.Object)
	kh := &KeyHelper{Owner: reg.helperOwner(identity), identity: identity, Reads: h.Reads, Query: q, Parameters: ast.NewTerm(bc.Parameters), Constraint: bc.Object}
	arg := path[:len(path)-1]
	kh.ArgPlan = reg.Lookup.CompileInput(arg)
	if _, _, conditional := analysis.Condition(arg); !conditional {
		for _, rel := range h.Reads {
			raw := append(slices.Clone(arg), rel...)
			kh.rawPaths = append(kh.rawPaths, raw)
			kh.RawPlans = append(kh.RawPlans, reg.Lookup.CompileInput(raw))
			kh.RawIDs = append(kh.RawIDs, reg.keyPaths.ID(analysis.PathString(raw)))
		}
		for _, t := range arg {
			if analysis.IsEach(t) {
				kh.EachDepth++
			}
		}
		if kh.ArgLast = !analysis.IsEach(arg[len(arg)-1]); kh.ArgLast {
			kh.rawPaths = append(kh.rawPaths, arg)
			kh.RawPlans = append(kh.RawPlans, kh.ArgPlan)
			kh.RawIDs = append(kh.RawIDs, reg.keyPaths.ID(analysis.PathString(arg)))
		}
	}
	return kh, nil
}
