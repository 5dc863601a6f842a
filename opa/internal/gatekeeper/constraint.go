package gatekeeper

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/policy"
)

// ErrInvalidConstraint marks a Constraint the engine refuses.
var ErrInvalidConstraint = errors.New("invalid Constraint")

// constraint is a parsed Constraint, ready to match and evaluate.
type Constraint struct {
	Key        policy.ConstraintKey
	Generation int64
	// action at this enforcement point; "" when the constraint is scoped
	// to other enforcement points only.
	Action policy.Action
	// rawParameters is spec.parameters as given, for schema checks.
	RawParameters map[string]any
	Match         *Matcher
	// content is the object's spec and annotations, to tell a real change
	// from a resync of the same object.
	Content string
	// Object is the Constraint as given, shared: never modified.
	Object map[string]any
}

// WithParameters is the Constraint as CEL code sees it (params): the
// object with its spec.parameters replaced by params (the schema's
// defaults applied), in the types an unstructured object decoded from JSON
// holds (int64 and float64 numbers). A Constraint without spec.parameters
// keeps none, as the API server's defaulting adds none.
func (c *Constraint) WithParameters(params map[string]any) (*unstructured.Unstructured, error) {
	obj := make(map[string]any, len(c.Object))
	for k, v := range c.Object {
		obj[k] = v
	}
	if spec, ok := c.Object["spec"].(map[string]any); ok {
		if _, has := spec["parameters"]; has {
			withParams := make(map[string]any, len(spec))
			for k, v := range spec {
				withParams[k] = v
			}
			withParams["parameters"] = params
			obj["spec"] = withParams
		}
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConstraint, err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(b); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConstraint, err)
	}
	return u, nil
}

// parseConstraint reads a Constraint (any version of
// constraints.gatekeeper.sh) and resolves its action at enforcementPoint.
func ParseConstraint(u *unstructured.Unstructured, enforcementPoint string) (*Constraint, error) {
	key := policy.ConstraintKey{Kind: u.GetKind(), Name: u.GetName()}
	if key.Kind == "" || key.Name == "" {
		return nil, fmt.Errorf("%w: kind and metadata.name are required", ErrInvalidConstraint)
	}
	// NoCopy: a deep copy panics on values that are not JSON types.
	rawSpec, _, _ := unstructured.NestedFieldNoCopy(u.Object, "spec")
	spec, ok := rawSpec.(map[string]any)
	if rawSpec != nil && !ok {
		return nil, fmt.Errorf("%w: spec must be an object", ErrInvalidConstraint)
	}
	params := map[string]any{}
	if p, ok := spec["parameters"]; ok && p != nil {
		m, ok := p.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%w: spec.parameters must be an object", ErrInvalidConstraint)
		}
		params = m
	}
	if _, err := ast.InterfaceToValue(params); err != nil {
		return nil, fmt.Errorf("%w: spec.parameters: %v", ErrInvalidConstraint, err)
	}
	action, err := resolveAction(u, spec, enforcementPoint)
	if err != nil {
		return nil, err
	}
	m, err := newMatcher(spec["match"])
	if err != nil {
		return nil, fmt.Errorf("%w: spec.match: %v", ErrInvalidConstraint, err)
	}
	content, _ := json.Marshal([]any{spec, u.GetAnnotations()[policy.ActionAnnotation]})
	return &Constraint{
		Key:           key,
		Generation:    u.GetGeneration(),
		Action:        action,
		RawParameters: params,
		Match:         m,
		Content:       string(content),
		Object:        u.Object,
	}, nil
}

// resolveAction gives the constraint's action at this enforcement point:
// the ActionAnnotation when present, else spec.enforcementAction (deny by
// default), where `scoped` looks up scopedEnforcementActions for this
// point or `*`. A constraint scoped only to other points gets "".
func resolveAction(u *unstructured.Unstructured, spec map[string]any, enforcementPoint string) (policy.Action, error) {
	if a, ok := u.GetAnnotations()[policy.ActionAnnotation]; ok {
		action := policy.Action(a)
		switch action {
		case policy.Deny, policy.Warn, policy.DryRun:
			return action, nil
		}
		return "", fmt.Errorf("%w: annotation %s=%q: want deny, warn or dryrun", ErrInvalidConstraint, policy.ActionAnnotation, a)
	}
	ea, _ := spec["enforcementAction"].(string)
	switch ea {
	case "", string(policy.Deny):
		return policy.Deny, nil
	case string(policy.Warn):
		return policy.Warn, nil
	case string(policy.DryRun):
		return policy.DryRun, nil
	case "scoped":
		return scopedAction(spec, enforcementPoint)
	}
	return "", fmt.Errorf("%w: spec.enforcementAction %q: want deny, warn, dryrun or scoped", ErrInvalidConstraint, ea)
}

// scopedAction picks, among the scoped actions naming this enforcement
// point (or `*`), the strictest: deny over warn over dryrun.
func scopedAction(spec map[string]any, enforcementPoint string) (policy.Action, error) {
	entries, _ := spec["scopedEnforcementActions"].([]any)
	best := policy.Action("")
	rank := map[policy.Action]int{"": 0, policy.DryRun: 1, policy.Warn: 2, policy.Deny: 3}
	for i, e := range entries {
		entry, ok := e.(map[string]any)
		if !ok {
			return "", fmt.Errorf("%w: scopedEnforcementActions[%d] is not an object", ErrInvalidConstraint, i)
		}
		action := policy.Action(fmt.Sprint(entry["action"]))
		if _, known := rank[action]; !known || action == "" {
			return "", fmt.Errorf("%w: scopedEnforcementActions[%d].action %q: want deny, warn or dryrun", ErrInvalidConstraint, i, entry["action"])
		}
		points, _ := entry["enforcementPoints"].([]any)
		for _, p := range points {
			pm, _ := p.(map[string]any)
			name, _ := pm["name"].(string)
			if (name == enforcementPoint || name == "*") && rank[action] > rank[best] {
				best = action
			}
		}
	}
	return best, nil
}
