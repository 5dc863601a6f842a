// Package opa is the policy engine of opa-scheduler-extender: the facade
// front ends call (Engine, Options, Apply, Evaluate, Prepare, PreparePod,
// PodQuery, Review, Status) and the per-call fast path behind it.
//
// The engine is built in layers, imports pointing one way (layers_test.go
// keeps them so):
//
//   - opa/policy: the vocabulary (Action, ConstraintKey, Change, the
//     enforcement point and annotation names); imports nothing of the
//     project.
//   - opa/freelist: the working memory requests hand on to the requests
//     after them, kept through collections for any processor; imports
//     nothing of the project.
//   - internal/gatekeeper: Gatekeeper's semantics: ConstraintTemplates,
//     Constraints, parameter schemas, spec.match, the admission review a
//     template sees.
//   - internal/inventory: data.inventory's layout and generations, the
//     Nodes cut to what policies read and kept whole beside them.
//   - internal/analysis, internal/lookup: what a template's code reads,
//     reading those paths, and which of them a change to a review can
//     move.
//   - internal/verdict: a violation set as Gatekeeper reads it, deny
//     messages, and the placeholders of printed values.
//   - internal/drivers: the evaluator seam (Program: Analyze, Eval,
//     Helper); internal/drivers/rego is its Rego driver and
//     internal/drivers/cel its CEL (K8sNativeValidation) driver, the
//     engine Gatekeeper runs a template on when it carries CEL code.
//   - internal/policyset: the immutable policy set a request reads: the
//     compiled templates and the bound constraints with their memo keys'
//     paths.
//   - this package: staging and committing changes (Apply) with the
//     embedded OPA SDK's store, and the fast path. The fast path's request
//     is still one type whose methods span its files (evaluate.go,
//     results.go, helper.go, prefetch.go, ...); splitting it into named
//     parts (the pod's input, the node slots, the key cache, the columns)
//     is the next structural step.
//
// It does not know HTTP, the scheduler's wire types or where objects come
// from: sources (a folder, a cluster) push objects in through Apply, and
// front ends ask through Evaluate (the extender: all candidates at once),
// Prepare, PreparePod and PodQuery (the plugin build: the pod once per
// scheduling cycle, nodes a block at a time, a signature of what decides
// the verdicts) and Review. Data flows one way.
//
// Speed comes from decisions made when a template is compiled and a
// constraint bound: inputs are converted to ast.Value once per request
// (a pod straight from its JSON with a PodDecoder, package internal/jsonvalue);
// templates that cannot read the candidate node are evaluated once per pod
// class and their verdict kept once per answer (Placement.Common), not once
// per node; every deterministic template is memoised on a key made of
// exactly the parts of the input and of the node that decide its verdict
// (package internal/analysis); values that are only printed into messages
// are left out of that key and put back into the results (package
// internal/verdict); a boolean helper's answer (`is_exempt(c)`) stands in
// the key for what the helper reads, the helper evaluated alone and
// memoised on its reads (helper.go); the memo and the node classes are
// bounded, leak-free caches (package internal/memo). A pod new to the memo
// has its pod-only misses evaluated on several goroutines (prefetch.go); a
// request's per-candidate buffers are reused (scratch.go); the answer to a
// pod is reused for the next verb of the same scheduling cycle while
// nothing it depends on changed (reuse.go); a workload's next pod takes
// the key values of the one before wherever no difference between their
// reviews can move them (workloadkeys.go); and an answer's per-candidate
// memory goes to later answers once every reader has released it
// (Placement.Release, answermem.go).
package opa
