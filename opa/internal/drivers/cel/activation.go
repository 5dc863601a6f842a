package cel

import (
	"context"
	"fmt"
	"math"
	"reflect"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/lazy"
)

// This file evaluates compiled expressions as Gatekeeper v3.23 does, with
// the activation of the Kubernetes 1.36 admission libraries it builds on:
// object, oldObject, params, request and namespaceObject reach CEL as
// unstructured content. The 1.37 libraries this module builds on hand
// request, params and namespaceObject to CEL as typed values, whose maps
// fail on a null key (`null in namespaceObject.metadata.labels` is an
// error there and false in Gatekeeper). Compilation, cost accounting, the
// composited variables and every error text are the libraries' own.

// variablesTypeName is the type of CEL's `variables` (the libraries'
// composition.go).
const variablesTypeName = "kubernetes.variables"

// templateVariables are a template's compiled variables (Gatekeeper's and
// its own), evaluated lazily, at most once per evaluation of an
// expression list, as the libraries' composition context does.
type templateVariables struct {
	results map[string]plugincel.CompilationResult
	mapType ref.Type
}

func newTemplateVariables() *templateVariables {
	return &templateVariables{
		results: map[string]plugincel.CompilationResult{},
		mapType: apiservercel.NewObjectType(variablesTypeName, map[string]*apiservercel.DeclField{}),
	}
}

// compile compiles and keeps variable v; it says whether v compiled.
func (tv *templateVariables) compile(compiler *plugincel.CompositedCompiler, v plugincel.NamedExpressionAccessor) bool {
	res := compiler.CompileAndStoreVariable(v, plugincel.OptionalVariableDeclarations{HasParams: true}, environment.StoredExpressions)
	tv.results[v.GetName()] = res
	return res.Error == nil
}

// conditions are compiled expressions evaluated in order on one
// activation (the libraries' condition). It is a
// plugincel.ConditionEvaluator, for the match conditions' matcher.
type conditions struct {
	results   []plugincel.CompilationResult
	variables *templateVariables
}

var _ plugincel.ConditionEvaluator = (*conditions)(nil)

func compileConditions(compiler *plugincel.CompositedCompiler, tv *templateVariables, exprs []plugincel.ExpressionAccessor) *conditions {
	c := &conditions{results: make([]plugincel.CompilationResult, len(exprs)), variables: tv}
	for i, e := range exprs {
		if e != nil {
			c.results[i] = compiler.CompileCELExpression(e, plugincel.OptionalVariableDeclarations{}, environment.StoredExpressions)
		}
	}
	return c
}

// CompilationErrors are the expressions' compile errors.
func (c *conditions) CompilationErrors() []error {
	var errs []error
	for _, r := range c.results {
		if r.Error != nil {
			errs = append(errs, r.Error)
		}
	}
	return errs
}

// activationInput is what an activation binds, as unstructured content.
type activationInput struct {
	object, params, request, namespace any
}

// ForInput is the libraries' ConditionEvaluator.ForInput with 1.36's
// activation.
func (c *conditions) ForInput(ctx context.Context, attr *admission.VersionedAttributes, request *admissionv1.AdmissionRequest, vars plugincel.OptionalVariableBindings, namespace *corev1.Namespace, budget int64) ([]plugincel.EvaluationResult, int64, error) {
	in, err := unstructuredInput(attr, request, vars.VersionedParams, namespace)
	if err != nil {
		return nil, -1, err
	}
	return c.evaluate(ctx, in, budget)
}

// unstructuredInput converts an evaluation's values as 1.36's
// newActivation does.
func unstructuredInput(attr *admission.VersionedAttributes, request *admissionv1.AdmissionRequest, params runtime.Object, namespace *corev1.Namespace) (activationInput, error) {
	var in activationInput
	var err error
	if attr != nil {
		if in.object, err = toUnstructured(attr.VersionedObject.Object()); err != nil {
			return in, fmt.Errorf("failed to prepare object variable for evaluation: %w", err)
		}
	}
	if in.params, err = toUnstructured(params); err != nil {
		return in, fmt.Errorf("failed to prepare params variable for evaluation: %w", err)
	}
	if in.request, err = toUnstructured(request); err != nil {
		return in, fmt.Errorf("failed to prepare request variable for evaluation: %w", err)
	}
	if in.namespace, err = toUnstructured(namespace); err != nil {
		return in, fmt.Errorf("failed to prepare namespace variable for evaluation: %w", err)
	}
	return in, nil
}

// toUnstructured is obj's unstructured content; nil for a nil object (a
// typed nil too). The request is never nil in the libraries: they convert
// a nil one to a nil map, which this does too.
func toUnstructured(obj any) (any, error) {
	if obj == nil || reflect.ValueOf(obj).IsNil() {
		return nil, nil
	}
	switch o := obj.(type) {
	case *constraintParams:
		return o.obj, nil
	case runtime.Unstructured:
		return o.UnstructuredContent(), nil
	}
	return runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
}

// evaluate evaluates every expression on one activation, within budget,
// as the libraries' condition.ForInput does.
func (c *conditions) evaluate(ctx context.Context, in activationInput, budget int64) ([]plugincel.EvaluationResult, int64, error) {
	out := make([]plugincel.EvaluationResult, len(c.results))
	if len(c.results) == 0 {
		return out, budget, nil
	}
	comp := &compositionContext{Context: ctx, variables: c.variables}
	a := &activation{in: in}
	a.variables = comp.Variables(a)
	var err error
	for i, r := range c.results {
		out[i], budget, err = a.evaluate(comp, r, budget)
		if err != nil {
			return nil, -1, err
		}
	}
	return out, budget, nil
}

// activation resolves CEL's names (the libraries' evaluationActivation);
// no authorizer is bound, as in Gatekeeper.
type activation struct {
	in        activationInput
	variables any
}

func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case plugincel.ObjectVarName:
		return a.in.object, true
	case plugincel.OldObjectVarName:
		return nil, true
	case plugincel.ParamsVarName:
		return a.in.params, true
	case plugincel.RequestVarName:
		return a.in.request, true
	case plugincel.NamespaceVarName:
		return a.in.namespace, true
	case plugincel.VariableVarName:
		return a.variables, true
	}
	return nil, false
}

func (a *activation) Parent() interpreter.Activation { return nil }

// evaluate is the libraries' evaluationActivation.Evaluate: the result of
// one expression, and the budget left; an error stops the list.
func (a *activation) evaluate(comp *compositionContext, r plugincel.CompilationResult, budget int64) (plugincel.EvaluationResult, int64, error) {
	var eval plugincel.EvaluationResult
	if r.ExpressionAccessor == nil { // a placeholder
		return eval, budget, nil
	}
	eval.ExpressionAccessor = r.ExpressionAccessor
	if r.Error != nil {
		eval.Error = &apiservercel.Error{Type: apiservercel.ErrorTypeInvalid, Detail: fmt.Sprintf("compilation error: %v", r.Error), Cause: r.Error}
		return eval, budget, nil
	}
	if r.Program == nil {
		eval.Error = &apiservercel.Error{Type: apiservercel.ErrorTypeInternal, Detail: "unexpected internal error compiling expression"}
		return eval, budget, nil
	}
	result, details, err := r.Program.ContextEval(comp, a)
	// The variables' cost is spent when they are first read.
	variablesCost := comp.GetAndResetCost()
	if variablesCost > budget {
		return eval, -1, errOutOfBudget()
	}
	budget -= variablesCost
	if details == nil {
		return eval, -1, &apiservercel.Error{Type: apiservercel.ErrorTypeInternal,
			Detail: fmt.Sprintf("runtime cost could not be calculated for expression: %v, no further expression will be run", r.ExpressionAccessor.GetExpression())}
	}
	cost := details.ActualCost()
	if cost == nil {
		return eval, -1, &apiservercel.Error{Type: apiservercel.ErrorTypeInvalid,
			Detail: fmt.Sprintf("runtime cost could not be calculated for expression: %v, no further expression will be run", r.ExpressionAccessor.GetExpression()),
			Cause:  apiservercel.ErrOutOfBudget}
	}
	if *cost > math.MaxInt64 || int64(*cost) > budget {
		return eval, -1, errOutOfBudget()
	}
	budget -= int64(*cost)
	if err != nil {
		eval.Error = &apiservercel.Error{Type: apiservercel.ErrorTypeInvalid,
			Detail: fmt.Sprintf("expression '%v' resulted in error: %v", r.ExpressionAccessor.GetExpression(), err)}
	} else {
		eval.EvalResult = result
	}
	return eval, budget, nil
}

func errOutOfBudget() error {
	return &apiservercel.Error{Type: apiservercel.ErrorTypeInvalid,
		Detail: "validation failed due to running out of cost budget, no further validation rules will be run",
		Cause:  apiservercel.ErrOutOfBudget}
}

// compositionContext evaluates the template's variables lazily and counts
// what they cost (the libraries' compositionContext).
type compositionContext struct {
	context.Context
	variables *templateVariables
	cost      int64
}

// Variables is CEL's `variables`: each variable is evaluated on a's
// bindings when first read.
func (c *compositionContext) Variables(a any) ref.Val {
	m := lazy.NewMapValue(c.variables.mapType)
	for name, result := range c.variables.results {
		m.Append(name, func(*lazy.MapValue) ref.Val { return c.evaluateVariable(name, result, a) })
	}
	return m
}

func (c *compositionContext) evaluateVariable(name string, r plugincel.CompilationResult, a any) ref.Val {
	if r.Error != nil {
		return types.NewErr("composited variable %q fails to compile: %v", name, r.Error)
	}
	v, details, err := r.Program.ContextEval(c, a)
	if details == nil {
		return types.NewErr("unable to get evaluation details of variable %q", name)
	}
	cost := details.ActualCost()
	if cost == nil {
		return types.NewErr("unable to calculate cost of variable %q", name)
	}
	if *cost > math.MaxInt64 {
		c.cost += math.MaxInt64
	} else {
		c.cost += int64(*cost)
	}
	if err != nil {
		return types.NewErr("composited variable %q fails to evaluate: %v", name, err)
	}
	return v
}

func (c *compositionContext) GetAndResetCost() int64 {
	cost := c.cost
	c.cost = 0
	return cost
}

var _ plugincel.CompositionContext = (*compositionContext)(nil)
