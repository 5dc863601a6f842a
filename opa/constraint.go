package opa

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ErrInvalidConstraint marks a Constraint the engine refuses.
var ErrInvalidConstraint = errors.New("invalid Constraint")

// constraint is a parsed Constraint, ready to match and evaluate.
type constraint struct {
	key        ConstraintKey
	generation int64
	// action at this enforcement point; "" when the constraint is scoped
	// to other enforcement points only.
	action Action
	// rawParameters is spec.parameters as given, for schema checks.
	rawParameters map[string]any
	match         *matcher
	// content is the object's spec and annotations, to tell a real change
	// from a resync of the same object.
	content string
}

// parseConstraint reads a Constraint (any version of
// constraints.gatekeeper.sh) and resolves its action at enforcementPoint.
func parseConstraint(u *unstructured.Unstructured, enforcementPoint string) (*constraint, error) {
	key := ConstraintKey{Kind: u.GetKind(), Name: u.GetName()}
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
	content, _ := json.Marshal([]any{spec, u.GetAnnotations()[ActionAnnotation]})
	return &constraint{
		key:           key,
		generation:    u.GetGeneration(),
		action:        action,
		rawParameters: params,
		match:         m,
		content:       string(content),
	}, nil
}

// resolveAction gives the constraint's action at this enforcement point:
// the ActionAnnotation when present, else spec.enforcementAction (deny by
// default), where `scoped` looks up scopedEnforcementActions for this
// point or `*`. A constraint scoped only to other points gets "".
func resolveAction(u *unstructured.Unstructured, spec map[string]any, enforcementPoint string) (Action, error) {
	if a, ok := u.GetAnnotations()[ActionAnnotation]; ok {
		action := Action(a)
		switch action {
		case Deny, Warn, DryRun:
			return action, nil
		}
		return "", fmt.Errorf("%w: annotation %s=%q: want deny, warn or dryrun", ErrInvalidConstraint, ActionAnnotation, a)
	}
	ea, _ := spec["enforcementAction"].(string)
	switch ea {
	case "", string(Deny):
		return Deny, nil
	case string(Warn):
		return Warn, nil
	case string(DryRun):
		return DryRun, nil
	case "scoped":
		return scopedAction(spec, enforcementPoint)
	}
	return "", fmt.Errorf("%w: spec.enforcementAction %q: want deny, warn, dryrun or scoped", ErrInvalidConstraint, ea)
}

// scopedAction picks, among the scoped actions naming this enforcement
// point (or `*`), the strictest: deny over warn over dryrun.
func scopedAction(spec map[string]any, enforcementPoint string) (Action, error) {
	entries, _ := spec["scopedEnforcementActions"].([]any)
	best := Action("")
	rank := map[Action]int{"": 0, DryRun: 1, Warn: 2, Deny: 3}
	for i, e := range entries {
		entry, ok := e.(map[string]any)
		if !ok {
			return "", fmt.Errorf("%w: scopedEnforcementActions[%d] is not an object", ErrInvalidConstraint, i)
		}
		action := Action(fmt.Sprint(entry["action"]))
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
