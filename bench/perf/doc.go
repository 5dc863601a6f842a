// Package perf is the shared setup of the load generator (bench/cmd/loadgen):
// a realistic policy mix (Gatekeeper library templates that apply to Pods,
// with their sample constraints, plus the placement templates of
// deploy/examples), a cluster of Nodes in ten pools and its Namespaces, a
// stream of pods drawn from a few ReplicaSets plus one-off pods, and helpers
// that load all of it into the engine (opa.New + Apply). Package
// perf/peerset loads the same into Gatekeeper's constraint framework
// (bench/peer); this package does not import the framework, so that a
// program built on it alone (bench/cmd/footprint) links what the service
// links.
//
// Everything is deterministic: the same flags give the same objects and the
// same pod sequence.
package perf
