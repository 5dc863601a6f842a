package opa

import (
	"context"
	"errors"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/gatekeeper"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/inventory"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/verdict"
)

// admissionReview is the AdmissionRequest's JSON fields a template sees
// for req, plus namespaceObject.
func admissionReview(req ReviewRequest, gvk schema.GroupVersionKind, obj map[string]any) map[string]any {
	name, _, _ := gatekeeper.ObjectMeta(obj)
	if req.Name != "" {
		name = req.Name
	}
	review := map[string]any{
		"uid":       "",
		"kind":      map[string]any{"group": gvk.Group, "version": gvk.Version, "kind": gvk.Kind},
		"resource":  map[string]any{"group": req.Resource.Group, "version": req.Resource.Version, "resource": req.Resource.Resource},
		"operation": req.Operation,
		"userInfo":  map[string]any{},
		"object":    req.Object,
		"oldObject": req.OldObject,
		"options":   nil,
	}
	if name != "" {
		review["name"] = name
	}
	if req.Namespace != "" {
		review["namespace"] = req.Namespace
	}
	if req.UserInfo != nil {
		review["userInfo"] = req.UserInfo
	}
	for k, v := range req.Extra {
		review[k] = v
	}
	review["namespaceObject"] = req.NamespaceObject
	return review
}

// reviewTargets are what constraints match against: the object and the
// old object (either may be missing), in namespace unless they name one.
func reviewTargets(req ReviewRequest, gvk schema.GroupVersionKind, namespace string) []*gatekeeper.Matchable {
	var nsInfo *gatekeeper.NamespaceInfo
	if len(req.NamespaceObject) > 0 {
		nsName, _, nsLabels := gatekeeper.ObjectMeta(req.NamespaceObject)
		nsInfo = &gatekeeper.NamespaceInfo{Name: nsName, Labels: nsLabels}
	}
	var targets []*gatekeeper.Matchable
	for _, o := range []map[string]any{req.Object, req.OldObject} {
		if o == nil {
			continue
		}
		n, ns, labels := gatekeeper.ObjectMeta(o)
		if ns == "" {
			ns = namespace
		}
		targets = append(targets, &gatekeeper.Matchable{GVK: gvk, Name: n, Namespace: ns, Labels: labels, NS: nsInfo, Source: "Original"})
	}
	return targets
}

// Review evaluates one admission-style review against every constraint
// whose spec.match selects it, whatever its enforcement action: this is
// what gator verify and Gatekeeper's audit do. Violations carry the
// constraint's action at this enforcement point ("" when it is scoped to
// other points only).
func (e *Engine) Review(ctx context.Context, req ReviewRequest) ([]Violation, error) {
	obj := req.Object
	if obj == nil {
		obj = req.OldObject
	}
	if obj == nil {
		return nil, errors.New("review has neither object nor oldObject")
	}
	// The transaction first: while it is open no commit completes, so
	// the policy set loaded next is the one in force for its inventory,
	// or the one just before (see commit and package internal/inventory).
	txn, err := e.store.NewTransaction(ctx)
	if err != nil {
		return nil, fmt.Errorf("open store transaction: %w", err)
	}
	defer e.store.Abort(ctx, txn)
	snap := e.snap.Load()

	gvk := req.Kind
	if gvk.Kind == "" {
		apiVersion, _ := obj["apiVersion"].(string)
		kind, _ := obj["kind"].(string)
		gvk = schema.FromAPIVersionAndKind(apiVersion, kind)
	}
	reviewValue, err := ast.InterfaceToValue(admissionReview(req, gvk, obj))
	if err != nil {
		return nil, fmt.Errorf("convert review: %w", err)
	}
	_, namespace, _ := gatekeeper.ObjectMeta(obj)
	targets := reviewTargets(req, gvk, namespace)

	r := (&request{e: e, ctx: ctx, txn: txn, snap: snap, podReview: ast.NewTerm(reviewValue),
		invGen: ast.NewTerm(e.inv.Value(ctx, txn, inventory.GenerationPath)), kindGens: e.inv.KindGenerations(ctx, txn)}).withParts()
	defer r.addStats()
	var out []Violation
	for order, bc := range snap.Constraints {
		matched, matchErr := matchAny(bc.Constraint.Match, targets)
		var res []verdict.Result
		switch {
		case matchErr != nil:
			res = []verdict.Result{{Msg: fmt.Sprintf("match error: %v", matchErr), Err: true}}
		case !matched:
			continue
		default:
			// The review's own nodeName picks the node: the memo's pod key
			// says nothing about it, so only node-blind templates use it.
			memoOK := r.keys.memoOK(bc) && bc.Analysis.PerPod()
			pod := r.reviews.podView(bc, memoOK)
			res, _, err = r.evalPod(bc, order, memoOK, pod)
			res = r.e.reg.Placeholders.Substitute(res, pod.bind)
			if err != nil {
				return nil, err
			}
		}
		for _, x := range res {
			out = append(out, Violation{Constraint: bc.Constraint.Key, Action: bc.Constraint.Action, Message: x.Msg, Details: x.Details, Error: x.Err})
		}
	}
	return out, nil
}

// matchAny is Gatekeeper's rule for requests with an object and an old
// object: the constraint applies if either matches.
func matchAny(m *gatekeeper.Matcher, targets []*gatekeeper.Matchable) (bool, error) {
	var firstErr error
	for _, t := range targets {
		ok, err := m.Matches(t)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if ok {
			return true, nil
		}
	}
	return false, firstErr
}
