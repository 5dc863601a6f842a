// Package opa is the policy engine of opa-scheduler-extender.
//
// It owns Gatekeeper semantics: it parses ConstraintTemplates and Constraints,
// compiles their Rego the way Gatekeeper's constraint framework does (each
// template isolated, Gatekeeper's ref and import rules, a violation rule
// required), keeps them in an embedded OPA SDK instance together with the
// inventory (data.inventory, laid out exactly as Gatekeeper's sync lays it
// out), evaluates spec.match in Go, and answers placement questions: for a
// Pod and a list of candidate nodes, which constraints does each node
// violate, and under which enforcement action.
//
// It does not know HTTP, the scheduler's wire types or where objects come
// from: sources (a folder, a cluster) push objects in through Apply, and
// front ends ask through Evaluate (the extender: all candidates at once),
// Prepare, PreparePod and PodQuery (the plugin build: the pod once per scheduling
// cycle, nodes a block at a time, a signature of what decides the
// verdicts) and Review. Data flows one way.
//
// Speed comes from decisions made when a template is compiled and a
// constraint bound: inputs are converted to ast.Value once per request
// (a pod straight from its JSON with DecodePod, package internal/jsonvalue);
// templates that cannot read the candidate node are evaluated once per pod
// class and their verdict kept once per answer (Placement.Common), not once
// per node; every deterministic template is memoised on a key made of
// exactly the parts of the input and of the node that decide its verdict
// (package internal/analysis); values that are only printed into messages
// are left out of that key and put back into the results (message.go); a
// boolean helper's answer (`is_exempt(c)`) stands in the key for what the
// helper reads, the helper evaluated alone and memoised on its reads
// (helper.go); the memo and the node classes are bounded, leak-free
// caches (package internal/memo). A pod new to the memo has its pod-only misses evaluated
// on several goroutines (prefetch.go); a request's per-candidate buffers
// are reused (scratch.go); the answer to a pod is reused for the next
// verb of the same scheduling cycle while nothing it depends on changed
// (reuse.go); and an answer's per-candidate memory goes to later answers
// once every reader has released it (Placement.Release, answermem.go).
package opa
