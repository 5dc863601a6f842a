package cel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	celtypes "github.com/google/cel-go/common/types"
	"github.com/open-policy-agent/opa/v1/ast"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/drivers"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/gatekeeper"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/inventory"
)

// Program is one template's CEL code, compiled. It is immutable and safe
// for concurrent use.
type Program struct {
	t           *gatekeeper.Template
	driver      *Driver
	policy      admissionregistrationv1.FailurePolicyType
	matcher     matchconditions.Matcher
	validations *conditions
	messages    *conditions
	variables   *templateVariables
	// hasMessages: some validation has a messageExpression.
	hasMessages bool
	analysis    *analysis.Result
	// members are the template's variables that are memberships
	// (membership.go); helpers their tests, compiled alone (helper.go).
	members map[string]*membership
	helpers map[string]*memberHelper
}

// Template is the template the program was compiled from.
func (p *Program) Template() *gatekeeper.Template { return p.t }

// Engine is "K8sNativeValidation".
func (p *Program) Engine() string { return Engine }

// Analyze says what the code reads of the review. The Constraint's
// parameters are constants whatever their values, so the answer is the
// template's.
func (p *Program) Analyze(ast.Value) *analysis.Result { return p.analysis }

// Guards: none are known for CEL code.
func (p *Program) Guards() [][]analysis.Guard { return nil }

// InventoryReads: CEL code cannot see data.inventory.
func (p *Program) InventoryReads() inventory.Reads { return inventory.Reads{} }

// ReadsConstraint: CEL's params is the whole Constraint.
func (p *Program) ReadsConstraint() bool { return true }

// ListViolations: one violation per failed validation, in order,
// duplicates kept, as Gatekeeper's k8scel driver reports them.
func (p *Program) ListViolations() bool { return true }

// Eval judges one review: the violations of the failed validations, with
// Gatekeeper's messages. An evaluation error denies with its text under
// failure policy Fail and admits under Ignore; the request's context
// ending is an error, never a verdict.
func (p *Program) Eval(ctx context.Context, in drivers.Input) ([]any, error) {
	attr, input, err := p.driver.cache.input(in.Review)
	if err != nil {
		return nil, fmt.Errorf("CEL input of template %s: %w", p.t.Name, err)
	}
	// params is the whole Constraint (runtime.Object: never a typed nil).
	var params runtime.Object
	if in.Constraint != nil {
		params = &constraintParams{obj: in.Constraint.Object}
		input.params = in.Constraint.Object
	}
	denials := p.decide(ctx, attr, params, input)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	items := make([]any, len(denials))
	for i, d := range denials {
		items[i] = map[string]any{"msg": d.message, "validation": d.validation}
	}
	return items, nil
}

// constraintParams is the Constraint as CEL's params sees it: the API
// server hands params to CEL through its unstructured content, which an
// *unstructured.Unstructured gives by a JSON round trip on every
// evaluation; this gives the same content (the Constraint was decoded from
// JSON once, policyset.BoundConstraint.Object) as it is
// (value.UnstructuredConverter).
type constraintParams struct{ obj map[string]any }

func (p *constraintParams) ToUnstructured() any              { return p.obj }
func (p *constraintParams) MarshalJSON() ([]byte, error)     { return json.Marshal(p.obj) }
func (p *constraintParams) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (p *constraintParams) DeepCopyObject() runtime.Object {
	return &constraintParams{obj: runtime.DeepCopyJSON(p.obj)}
}

// denial is one Deny decision: its message, and the validation that
// failed or errored (1 for the first; 0 when the match conditions or the
// variables errored).
type denial struct {
	message    string
	validation int
}

// decide is the decision of k8s.io/apiserver's ValidatingAdmissionPolicy
// validator (validating.validator.Validate), as Gatekeeper calls it: its
// Deny decisions. It is kept here, not imported, because that package
// carries the whole admission policy plugin.
func (p *Program) decide(ctx context.Context, attr *admission.VersionedAttributes, params runtime.Object, input activationInput) []denial {
	onError := func(err error) []denial {
		if p.policy == admissionregistrationv1.Ignore {
			return nil
		}
		return []denial{{message: err.Error()}}
	}
	if m := p.matcher.Match(ctx, attr, params, nil); m.Error != nil {
		return onError(m.Error)
	} else if !m.Matches {
		return nil
	}
	results, remaining, err := p.validations.evaluate(ctx, input, celconfig.PerCallLimit)
	if err != nil {
		return onError(err)
	}
	// Message expressions are evaluated for every review, as the
	// validator does: when they run out of the cost budget (or fail
	// internally), every validation that did not error becomes an error,
	// even on a review that passes them all.
	var messages []plugincel.EvaluationResult
	if p.hasMessages {
		messages, _, err = p.messages.evaluate(ctx, input, remaining)
	}
	var out []denial
	for i, r := range results {
		v, _ := r.ExpressionAccessor.(*validation)
		switch {
		case v == nil:
			continue
		case r.Error != nil:
			out = append(out, ofValidation(onError(r.Error), i)...)
		case errors.Is(err, apiservercel.ErrInternal) || errors.Is(err, apiservercel.ErrOutOfBudget):
			out = append(out, ofValidation(onError(fmt.Errorf("failed messageExpression: %s", err)), i)...)
		case r.EvalResult != celtypes.True:
			var msg *plugincel.EvaluationResult
			if i < len(messages) {
				msg = &messages[i]
			}
			out = append(out, denial{message: denyMessage(v, msg), validation: i + 1})
		}
	}
	return out
}

// ofValidation marks denials as validation i's.
func ofValidation(ds []denial, i int) []denial {
	for k := range ds {
		ds[k].validation = i + 1
	}
	return ds
}

// denyMessage is a failed validation's message: its messageExpression's
// value when that is a non-empty single-line string of at most 5 KiB, else
// its message, else the expression that failed.
func denyMessage(v *validation, msg *plugincel.EvaluationResult) string {
	var message string
	if msg != nil && msg.Error == nil && msg.EvalResult != nil {
		if s, ok := msg.EvalResult.Value().(string); ok {
			message = strings.TrimSpace(s)
			if len(message) > celconfig.MaxEvaluatedMessageExpressionSizeBytes || strings.ContainsAny(message, "\n") {
				message = ""
			}
		}
	}
	if message == "" && len(v.message) > 0 {
		message = strings.TrimSpace(v.message)
	}
	if message == "" {
		message = fmt.Sprintf("failed expression: %v", strings.TrimSpace(v.expression))
	}
	return message
}
