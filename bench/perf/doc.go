// Package perf is the shared setup of the load generator (bench/cmd/loadgen):
// policy sets (LoadSet: "mix", Gatekeeper library templates that apply to
// Pods, with their sample constraints, plus the placement templates of
// deploy/examples; "all", every library template plus the examples;
// "realistic", every library template made warn here plus the five
// placement templates of bench/testdata/realistic, whose messages name the
// node and the pod as users' templates do), a cluster of Nodes in ten pools
// (small nodes, Node, or kubelet-sized ones, KubeletNode) and its
// Namespaces, a stream of pods drawn from a few ReplicaSets plus one-off
// pods, and helpers that load all of it into the engine (opa.New +
// Apply). Package perf/peerset loads the same into Gatekeeper's constraint
// framework (bench/peer); this package does not import the framework, so
// that a program built on it alone (bench/cmd/footprint) links what the
// service links.
//
// Everything is deterministic: the same flags give the same objects and the
// same pod sequence.
package perf
