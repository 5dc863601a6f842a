// Package server is the HTTP face of opa-scheduler-extender: the service the
// stock kube-scheduler calls through the `extenders:` list of its
// KubeSchedulerConfiguration.
//
// # What it owns
//
//   - The scheduler's wire contract (k8s.io/kube-scheduler/extender/v1 types,
//     never hand-written ones): POST /filter, /prioritize, /preempt and /bind,
//     decoding and validating their arguments, answering in the mode the
//     scheduler asked in (NodeNames in, NodeNames out; Nodes in, Nodes out),
//     and never naming a node that was not in the request.
//   - Turning engine verdicts into scheduler answers: a deny violation puts
//     the node in FailedAndUnresolvableNodes with the messages
//     "[<constraint>] <msg>" joined by "; "; a node the engine does not know
//     goes to FailedNodes; warn violations lower the prioritize score
//     (Placement.Score); preempt vetoes nodes the pod may not go to; bind
//     re-checks the chosen node against the current policy before creating
//     the pods/binding subresource through a Binder.
//   - Bad input handling (HTTP 400 with the verb's result type and its Error
//     field set), engine failures (HTTP 500, same shape), per-request deadlines
//     (Options.RequestTimeout, passed into Policy.Evaluate), body size limits,
//     panic recovery.
//   - Health (/livez, /healthz, /readyz with pluggable ReadinessChecks),
//     Prometheus metrics (/metrics, prefix opa_scheduler_extender_), debug
//     endpoints (/debug/policies, /debug/explain, optional /debug/pprof/) and
//     serving over HTTP or HTTPS with optional client certificates, with a
//     graceful shutdown.
//
// # What it does not own
//
//   - Rego, Gatekeeper semantics, the inventory, memoisation: all of that is
//     package opa, reached only through the small Policy interface defined
//     here (satisfied by *opa.Engine), so handlers can be tested with fakes.
//   - Where policies and inventory objects come from (a folder, a cluster):
//     sources feed the engine directly; this package never writes to it.
//   - Building Kubernetes clients, flags, and process wiring: cmd/ does that
//     and hands in a Binder (NewKubeBinder) or none.
//
// # Wire notes
//
// kube-scheduler treats any non-200 answer and any non-empty Error alike,
// but it does not read the body of a non-200 answer: it only logs the status
// code. Every 4xx and 5xx is therefore also logged here (Warn for client
// faults, Error for engine failures) with the full message. Results that the
// scheduler should see verbatim (a denied or failed bind) are HTTP 200 with
// Error set.
//
// Input rules, the same on every verb: the body must be exactly one JSON
// value of the verb's argument type (empty bodies, malformed JSON, wrong
// field types and trailing data are rejected; unknown fields are ignored so
// that newer schedulers keep working); the Pod must be present and carry both
// metadata.name and metadata.namespace (an empty namespace is NOT defaulted
// to "default": the scheduler always sends it, so its absence means a broken
// client); node names must be non-empty; a request with neither Nodes nor
// NodeNames is a valid, empty question and gets an empty answer; a request
// with both non-empty is rejected (the scheduler sends exactly one,
// depending on nodeCacheCapable); duplicate node names are evaluated once and
// answered once, at their first position, keeping the input order.
//
// Filter and prioritize read their ExtenderArgs without a typed Pod
// (wire.go): the envelope is scanned directly when it is plain JSON
// (encoding/json stays the reference, and reads whatever the scan is not
// sure of, with its error messages), and the pod goes from its JSON straight
// into the engine's values (opa.DecodePod). The pod's metadata the engine
// reads itself is type-checked; its other fields reach templates as the
// scheduler sent them, as the object of an admission review does (a field
// of the wrong type deep in the spec is no longer a 400). Full Nodes
// (nodeCacheCapable: false) are read the same way: each item of the
// NodeList stays JSON, checked as JSON and named by its metadata.name as it
// is scanned, handed to the engine as such (opa.Candidate.JSON, read only as
// far as the policy set reads Nodes), and the ones that pass are echoed in
// the answer as the scheduler sent them. Node names are interned and
// numbered as they are scanned (nodenames.go), and the lists that hold them,
// the request's body (which the echoed Nodes point into), and the engine's
// answer (Placement.Release) are given back once the answer is written.
// Preempt, bind and /debug/explain decode typed arguments.
package server
