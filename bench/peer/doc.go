// Package peer is the correctness oracle and speed peer of the
// opa-scheduler-extender: a thin wrapper over Gatekeeper's constraint
// framework client (github.com/open-policy-agent/frameworks/constraint at the
// pseudo-version gatekeeper v3.23.1 requires) with the Rego driver only
// (rego.Externs("inventory"), no CEL driver) and Gatekeeper's
// K8sValidationTarget.
//
// ReviewPodOnNode reviews a pod placement the way Gatekeeper's admission
// webhook reviews a Pod CREATE with spec.nodeName set (target.AugmentedReview
// plus util.NamespaceReviewOpt for input.review.namespaceObject);
// ReviewObject reviews an object the way `gator verify` does
// (target.AugmentedUnstructured). AddData feeds data.inventory as Gatekeeper's
// sync does. ReadObjects parses YAML files the way gator's reader does.
//
// The package lives in its own module (bench/go.mod) so that the framework,
// Gatekeeper and their dependencies stay out of the product's module.
// Gatekeeper's pkg/gator and its CEL driver are deliberately not imported:
// they need the k8s.io v0.36 line and do not build with k8s.io v0.37.2.
package peer
