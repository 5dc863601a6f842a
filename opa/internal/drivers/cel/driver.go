// Package cel is the driver of Gatekeeper's CEL engine (code of engine
// K8sNativeValidation): it compiles a template's validations, match
// conditions and variables with the API server's own CEL admission
// libraries, bound as Gatekeeper's k8scel driver binds them (object,
// oldObject, request, namespaceObject, params as the whole Constraint,
// variables.params as its spec.parameters, variables.anyObject), and
// decides as a ValidatingAdmissionPolicy's validator does, one violation
// per failed validation.
//
// It also says what a template reads of the review (reads.go), so that the
// engine keys its memo on those values only: a template that does not read
// spec.nodeName is judged once per pod class. What a comprehension's body
// reads counts only when its range has an element, and a filter that tests
// fields keeps only the elements that have them (members.go). A use of a
// list of the values a test kept (the library's exemptImages) is keyed on
// the test's answer, which helper.go evaluates alone (membership.go), with
// the variables it reads computed once per Constraint (fasthelper.go), and
// a value a lookup's key is built from is printed, as a message's values
// are (lookupkey.go). CEL code cannot see data.inventory. Like drivers/rego, it knows nothing of the memo or a
// request.
package cel

import (
	"context"
	"fmt"

	celgo "github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/util/version"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/drivers"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/gatekeeper"
)

// Engine is the engine name a ConstraintTemplate gives CEL code.
const Engine = gatekeeper.EngineCEL

// CompatibilityVersion is the Kubernetes version whose CEL environment
// (libraries and their versions) templates compile against: Gatekeeper
// v3.23 builds on Kubernetes 1.36 libraries, whose default compatibility
// version is 1.35.
var CompatibilityVersion = version.MajorMinor(1, 35)

// Driver compiles CEL templates. It is safe for concurrent use; it holds
// the conversions of the last reviews evaluated (values.go).
type Driver struct {
	envs  *environment.EnvSet
	cache reviewCache
	// plain compiles the memberships' fast tests (fasthelper.go).
	plain plainPrograms
}

// New is a CEL driver.
func New() *Driver {
	return &Driver{envs: environment.MustBaseEnvSet(CompatibilityVersion)}
}

// Gatekeeper's own variables, compiled ahead of the template's (its
// transform.AllVariablesCEL): anyObject is the object, or oldObject on
// DELETE; params is the Constraint's spec.parameters.
var gatekeeperVariables = []plugincel.NamedExpressionAccessor{
	&variable{name: "anyObject", expression: `has(request.operation) && request.operation == "DELETE" && object == null ? oldObject : object`},
	&variable{name: "params", expression: gatekeeperParamsExpression},
}

// gatekeeperParamsExpression is variables.params: the Constraint's
// spec.parameters.
const gatekeeperParamsExpression = "!has(params.spec) ? null : !has(params.spec.parameters) ? null: params.spec.parameters"

// Engine is "K8sNativeValidation".
func (d *Driver) Engine() string { return Engine }

// Check compiles t: CEL templates compile one by one.
func (d *Driver) Check(t *gatekeeper.Template) (drivers.Program, error) {
	return d.CompileTemplate(t)
}

// Compile gives the Programs of the templates in force: prev's for a
// template it compiled, the one Check made, or a new one.
func (d *Driver) Compile(_ context.Context, prev drivers.Compiled, templates map[string]*gatekeeper.Template, checked map[*gatekeeper.Template]drivers.Program) (drivers.Compiled, error) {
	out := make(compiled, len(templates))
	var before map[string]drivers.Program
	if prev != nil {
		before = prev.Programs()
	}
	for _, t := range templates {
		if p, ok := before[t.Kind].(*Program); ok && p.t == t {
			out[t.Kind] = p
			continue
		}
		if p := checked[t]; p != nil {
			out[t.Kind] = p
			continue
		}
		p, err := d.CompileTemplate(t)
		if err != nil {
			return nil, fmt.Errorf("compile template %s: %w", t.Name, err)
		}
		out[t.Kind] = p
	}
	return out, nil
}

// compiled are the CEL templates' Programs, by kind.
type compiled map[string]drivers.Program

func (c compiled) Programs() map[string]drivers.Program { return c }

// CompileTemplate compiles a template's CEL code. An expression that does
// not compile is not an error: every review of the template is then
// denied with the compile error (under failure policy Fail), as in
// Gatekeeper.
func (d *Driver) CompileTemplate(t *gatekeeper.Template) (*Program, error) {
	if t.Engine != Engine || t.CEL == nil {
		return nil, fmt.Errorf("template %s has no K8sNativeValidation code", t.Name)
	}
	compiler, err := plugincel.NewCompositedCompiler(d.envs)
	if err != nil {
		return nil, fmt.Errorf("CEL compiler for template %s: %w", t.Name, err)
	}
	vars := append([]plugincel.NamedExpressionAccessor(nil), gatekeeperVariables...)
	for _, v := range t.CEL.Variables {
		vars = append(vars, &variable{name: v.Name, expression: v.Expression})
	}
	// Variables may read params (the Constraint); conditions may not.
	tv := newTemplateVariables()
	varErrs := map[string]bool{}
	for _, v := range vars {
		varErrs[v.GetName()] = !tv.compile(compiler, v)
	}
	policy := admissionregistrationv1.FailurePolicyType(t.FailurePolicy)

	matches := make([]plugincel.ExpressionAccessor, len(t.CEL.MatchConditions))
	for i, mc := range t.CEL.MatchConditions {
		matches[i] = &matchconditions.MatchCondition{Name: mc.Name, Expression: mc.Expression}
	}
	validations := make([]plugincel.ExpressionAccessor, len(t.CEL.Validations))
	messages := make([]plugincel.ExpressionAccessor, len(t.CEL.Validations))
	hasMessages := false
	for i, v := range t.CEL.Validations {
		validations[i] = &validation{expression: v.Expression, message: v.Message}
		if v.MessageExpression != "" {
			messages[i] = &messageExpression{expression: v.MessageExpression}
			hasMessages = true
		}
	}
	p := &Program{
		t:           t,
		driver:      d,
		policy:      policy,
		matcher:     matchconditions.NewMatcher(compileConditions(compiler, tv, matches), &policy, "validatingadmissionpolicy", "vap-matcher", t.Name),
		validations: compileConditions(compiler, tv, validations),
		messages:    compileConditions(compiler, tv, messages),
		variables:   tv,
		hasMessages: hasMessages,
	}
	env, err := compiler.Env(environment.StoredExpressions)
	if err != nil {
		return nil, fmt.Errorf("CEL environment for template %s: %w", t.Name, err)
	}
	p.analysis, p.members = analyze(env, t.CEL)
	// The helpers are compiled now, so that the compiler, which holds an
	// environment for every combination of the API server's optional
	// variables (5 to 6 MiB over the library's 16 dual templates), is not
	// kept once the template is.
	p.helpers = compileHelpers(p, compiler, varErrs)
	return p, nil
}

var (
	_ drivers.Driver  = (*Driver)(nil)
	_ drivers.Program = (*Program)(nil)
)

// The expression accessors of the API server's CEL compiler: what each
// expression is and the types it may return.
type variable struct{ name, expression string }

func (v *variable) GetExpression() string      { return v.expression }
func (v *variable) ReturnTypes() []*celgo.Type { return []*celgo.Type{celgo.AnyType, celgo.DynType} }
func (v *variable) GetName() string            { return v.name }

type validation struct{ expression, message string }

func (v *validation) GetExpression() string      { return v.expression }
func (v *validation) ReturnTypes() []*celgo.Type { return []*celgo.Type{celgo.BoolType} }

type messageExpression struct{ expression string }

func (m *messageExpression) GetExpression() string      { return m.expression }
func (m *messageExpression) ReturnTypes() []*celgo.Type { return []*celgo.Type{celgo.StringType} }
