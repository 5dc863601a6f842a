package cel

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	celtypes "github.com/google/cel-go/common/types"
	"github.com/open-policy-agent/opa/v1/ast"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/drivers"
)

// A membership's helper (membership.go) evaluates its test alone, on one
// value: the template's compiler compiles
//
//	[{"image": object.arg}].all(container, <the test>)
//
// with the template's variables, and the value is passed as object.arg: the
// test reads its variable only as container.image, so it sees the value
// where the template's filter sees each element's image, and the
// Constraint as params, from which the variables it reads (exemptImages'
// prefixes and names) are computed.

// maxHelperString is the longest value a helper is asked about; a longer
// one is keyed whole. A CEL evaluation has a cost budget, and the cost of
// a string test grows with the string: keeping the values a key stands
// for short keeps the template's cost within a small margin of its
// representative's.
const maxHelperString = 4 << 10

// errNotString refuses a value a membership's helper may not answer for:
// `in` equates values of different types (1 and 1.0) that the test may
// tell apart.
var errNotString = errors.New("not a string of at most 4 KiB: keyed whole")

// memberHelper tests one value with a membership's test.
type memberHelper struct {
	program *Program
	test    *conditions
	// request is CEL's request for every value the helper tests (the
	// values differ in object.arg alone), made once; requestErr why not.
	request    map[string]any
	requestErr error
	// fast answers with the test's variables kept per Constraint
	// (fasthelper.go); nil: test answers every value.
	fast *fastTest
}

// Helper prepares (once per template and membership) the helper of a key
// path that ends in a membership's Helper, and says what its answer
// depends on: the test's text and the variables it reads, and the
// parameters below variables.params they read.
func (p *Program) Helper(call analysis.HelperCall) (drivers.Helper, analysis.HelperDeps, error) {
	m := p.membershipOf(call.Func)
	if m == nil {
		return nil, analysis.HelperDeps{}, fmt.Errorf("template %s has no CEL helper %s", p.t.Name, call.Func)
	}
	deps := analysis.HelperDeps{Code: Engine + "\n" + m.helperCode(), Presence: true}
	for _, path := range m.params {
		terms := make([]*ast.Term, len(path))
		for i, f := range path {
			terms[i] = ast.StringTerm(f)
		}
		if len(terms) == 0 {
			deps.Params = [][]*ast.Term{{}}
			break
		}
		if !slices.ContainsFunc(deps.Params, func(q []*ast.Term) bool { return slices.EqualFunc(q, terms, (*ast.Term).Equal) }) {
			deps.Params = append(deps.Params, terms)
		}
	}
	return p.helpers[m.name], deps, nil
}

// compileHelpers compiles the test of each of p's memberships with the
// template's compiler (its variables), once, when the template is, and its
// fast test where the template's compiler accepts the test and the
// variables it reads (varErrs: those it refused).
func compileHelpers(p *Program, compiler *plugincel.CompositedCompiler, varErrs map[string]bool) map[string]*memberHelper {
	if len(p.members) == 0 {
		return nil
	}
	typeChecks := func(expr string) bool {
		return compiler.CompileCELExpression(&validation{expression: expr}, plugincel.OptionalVariableDeclarations{}, environment.StoredExpressions).Error == nil
	}
	request, err := helperRequest()
	helpers := make(map[string]*memberHelper, len(p.members))
	for name, m := range p.members {
		test := compileConditions(compiler, p.variables, []plugincel.ExpressionAccessor{&validation{expression: m.helperExpression()}})
		helpers[name] = &memberHelper{program: p, test: test, request: request, requestErr: err, fast: p.driver.fastTestOf(m, typeChecks, varErrs)}
	}
	return helpers
}

// membershipOf is the membership a helper's function names, or nil.
func (p *Program) membershipOf(fn ast.Ref) *membership {
	if len(fn) != 2 || !fn[0].Equal(helperFunc("")[0]) {
		return nil
	}
	name, ok := fn[1].Value.(ast.String)
	if !ok {
		return nil
	}
	return p.members[string(name)]
}

// helperExpression is the test as a one-element all(): the element holds
// object.arg at the membership's chain.
func (m *membership) helperExpression() string {
	elem := "object.arg"
	for i := len(m.chain) - 1; i >= 0; i-- {
		elem = "{" + strconv.Quote(m.chain[i]) + ": " + elem + "}"
	}
	return fmt.Sprintf("[%s].all(%s, %s)", elem, m.iterVar, m.test)
}

// Holds evaluates the test on in.Argument, the Constraint as params.
func (h *memberHelper) Holds(ctx context.Context, in drivers.HelperInput) (bool, error) {
	s, ok := in.Argument.(ast.String)
	if !ok || len(s) > maxHelperString {
		return false, errNotString
	}
	if h.fast != nil && in.Constraint != nil {
		if holds, ok := h.fast.holds(ctx, in.Constraint, string(s)); ok {
			return holds, nil
		}
	}
	return h.composited(ctx, in, s)
}

// helperRequest is CEL's request when a helper tests a value: a CREATE
// with no kind, resource or user, as the API server makes it of the
// helper's attributes.
func helperRequest() (map[string]any, error) {
	attrs := admission.NewAttributesRecord(nil, nil, schema.GroupVersionKind{}, "", "", schema.GroupVersionResource{}, "", admission.Create, nil, false, nil)
	return runtime.DefaultUnstructuredConverter.ToUnstructured(plugincel.CreateAdmissionRequest(attrs, metav1.GroupVersionResource{}, metav1.GroupVersionKind{}))
}

// composited is the test's answer on s evaluated as the API server
// evaluates a condition: the reference the fast test defers to.
func (h *memberHelper) composited(ctx context.Context, in drivers.HelperInput, s ast.String) (bool, error) {
	if h.requestErr != nil {
		return false, fmt.Errorf("helper of template %s: request: %w", h.program.t.Name, h.requestErr)
	}
	input := activationInput{object: map[string]any{"arg": string(s)}, request: h.request}
	if in.Constraint != nil {
		input.params = in.Constraint.Object
	}
	results, _, err := h.test.evaluate(ctx, input, celconfig.PerCallLimit)
	if err != nil {
		return false, fmt.Errorf("helper of template %s: %w", h.program.t.Name, err)
	}
	if len(results) != 1 {
		return false, fmt.Errorf("helper of template %s: %d results", h.program.t.Name, len(results))
	}
	if results[0].Error != nil {
		return false, results[0].Error
	}
	switch results[0].EvalResult {
	case celtypes.True:
		return true, nil
	case celtypes.False:
		return false, nil
	}
	return false, fmt.Errorf("helper of template %s: %v is not a boolean", h.program.t.Name, results[0].EvalResult)
}
