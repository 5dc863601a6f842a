package gatekeeper

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
)

// Engine names of a ConstraintTemplate's code, as spec.targets[].code[].engine
// spells them.
const (
	EngineRego = "Rego"
	EngineCEL  = "K8sNativeValidation"
)

// Failure policies of CEL code: an evaluation error denies (Fail) or admits
// (Ignore), as a ValidatingAdmissionPolicy's failurePolicy.
const (
	FailurePolicyFail   = "Fail"
	FailurePolicyIgnore = "Ignore"
)

// Names Gatekeeper keeps for itself in CEL code: its own variables
// (variables.params, variables.anyObject) and the prefix of the match
// conditions and variables it generates.
const (
	celReservedPrefix = "gatekeeper_internal_"
	celParamsName     = "params"
	celObjectName     = "anyObject"
)

// ParseOptions are the engine choices Gatekeeper makes with its flags.
type ParseOptions struct {
	// DisableK8sNativeValidation is --enable-k8s-native-validation=false:
	// templates run on Rego, and CEL-only templates are refused. By
	// default (as in Gatekeeper) code of engine K8sNativeValidation is
	// chosen over Rego.
	DisableK8sNativeValidation bool
	// DefaultFailurePolicy is --default-k8s-native-validation-failure-policy:
	// the failure policy of CEL code that names none ("" is Fail).
	DefaultFailurePolicy string
}

// CheckFailurePolicy refuses a failure policy other than Fail and Ignore
// ("" stands for Fail).
func CheckFailurePolicy(p string) error {
	switch p {
	case "", FailurePolicyFail, FailurePolicyIgnore:
		return nil
	}
	return fmt.Errorf("unrecognized failure policy %q: Fail or Ignore", p)
}

// CELSource is a template's K8sNativeValidation code, in the form
// Gatekeeper's k8scel driver reads it (field names included: the match
// conditions' key is the singular `matchCondition`).
type CELSource struct {
	Validations     []CELValidation `json:"validations,omitempty"`
	FailurePolicy   *string         `json:"failurePolicy,omitempty"`
	MatchConditions []CELNamed      `json:"matchCondition,omitempty"`
	Variables       []CELNamed      `json:"variables,omitempty"`
	// GenerateVAP asks Gatekeeper to generate a ValidatingAdmissionPolicy;
	// it changes nothing here.
	GenerateVAP *bool `json:"generateVAP,omitempty"`
}

// CELValidation is one CEL condition a review must satisfy.
type CELValidation struct {
	Expression        string `json:"expression,omitempty"`
	Message           string `json:"message,omitempty"`
	MessageExpression string `json:"messageExpression,omitempty"`
}

// CELNamed is a named CEL expression: a match condition or a variable.
type CELNamed struct {
	Name       string `json:"name,omitempty"`
	Expression string `json:"expression,omitempty"`
}

// Policy is the failure policy in force: the source's, else def, else
// Fail.
func (s *CELSource) Policy(def string) string {
	if s.FailurePolicy != nil {
		return *s.FailurePolicy
	}
	if def != "" {
		return def
	}
	return FailurePolicyFail
}

// parseCELSource reads code[i].source of engine K8sNativeValidation with
// Gatekeeper's checks: reserved names and the failure policy. Expressions
// that do not compile are not refused here (Gatekeeper denies every review
// with the compile error instead).
func parseCELSource(raw any, field string) (*CELSource, error) {
	obj, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: %s is not an object", ErrInvalidTemplate, field)
	}
	src := &CELSource{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, src); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidTemplate, field, err)
	}
	for _, mc := range src.MatchConditions {
		if strings.HasPrefix(mc.Name, celReservedPrefix) {
			return nil, fmt.Errorf("%w: %s: %s is not a valid match condition; cannot have %q as a prefix", ErrInvalidTemplate, field, mc.Name, celReservedPrefix)
		}
	}
	for _, v := range src.Variables {
		switch {
		case strings.HasPrefix(v.Name, celReservedPrefix):
			return nil, fmt.Errorf("%w: %s: %s is not a valid variable; cannot have %q as a prefix", ErrInvalidTemplate, field, v.Name, celReservedPrefix)
		case v.Name == celParamsName, v.Name == celObjectName:
			return nil, fmt.Errorf("%w: %s: %s is an invalid variable name, %q is a reserved keyword", ErrInvalidTemplate, field, v.Name, v.Name)
		}
	}
	if src.FailurePolicy != nil {
		if err := CheckFailurePolicy(*src.FailurePolicy); err != nil || *src.FailurePolicy == "" {
			return nil, fmt.Errorf("%w: %s: unrecognized failure policy: %s", ErrInvalidTemplate, field, *src.FailurePolicy)
		}
	}
	return src, nil
}
