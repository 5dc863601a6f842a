// Command celpeer is Gatekeeper's CEL engine as a reference for the
// opa-scheduler-extender's differential test (bench/diff, TestCELDifferential):
// it reads a corpus of ConstraintTemplates, constraints and pod placement
// reviews as JSON and prints what Gatekeeper's constraint framework client
// answers for each review, also as JSON.
//
// The client is built as Gatekeeper's main.go builds it with
// --enable-k8s-native-validation (the default): the K8sValidationTarget, the
// k8scel driver (github.com/open-policy-agent/gatekeeper/v3/pkg/drivers/k8scel)
// registered first, then the Rego driver with data.inventory as an extern,
// and one enforcement point, "opa-scheduler-extender". A template with both
// engines therefore runs on CEL. Each review is the one Gatekeeper's admission
// webhook builds for a Pod CREATE (target.AugmentedReview with IsAdmission,
// plus util.NamespaceReviewOpt for namespaceObject).
//
// It is its own Go module because the CEL driver needs the k8s.io v0.36 line
// and does not build with the k8s.io v0.37.2 of the bench module; the bench
// module runs it as a program and never imports it. Its Gatekeeper,
// framework, k8s.io and cel-go versions are Gatekeeper v3.23.1's; OPA is
// raised to the engine's v1.22.4, as in the bench module, so that the Rego
// driver's error texts are those of the Rego comparison. Run it with
//
//	cd bench/celpeer && go run . < corpus.json > results.json
//	go run . -in corpus.json -enable-k8s-native-validation=false
//	go run . -in corpus.json -default-k8s-native-validation-failure-policy=Ignore
//
// Both flags have Gatekeeper's names and defaults; the failure policy one is
// registered by the k8scel driver's schema package itself. The corpus format
// is the corpus type in main.go; the output is the output type.
package main
