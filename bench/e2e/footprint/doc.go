// Package footprint measures the memory of opa-scheduler-extender in
// cluster mode, as a separate process against a real control plane
// (package cluster), with the realistic policy set (package policyset: the
// whole Gatekeeper library, warn, plus bench/testdata/realistic) and N
// kubelet-sized Nodes (cluster.KubeletNode, about 10 KB of JSON each).
//
// TestClusterFootprint builds the service (`go build
// ./cmd/opa-scheduler-extender` of the main module, into the test's
// temporary directory), creates the templates, constraints, namespaces and
// nodes, and for each subtest starts a fresh service process:
//
//	opa-scheduler-extender serve --kubeconfig <admin kubeconfig> --listen 127.0.0.1:<port> --enable-pprof --requeue-nudge=false
//
// It waits for /readyz and for /debug/policies to show every template and
// constraint in force and all N nodes in the inventory. A memory sample is
// VmRSS and VmHWM of the process (/proc/<pid>/status) and, after two
// forced collections (GET /debug/pprof/heap?gc=1), the live heap
// (go_memstats_heap_alloc_bytes and friends from /metrics).
//
//   - SyncAndTraffic: a sample after the initial sync; then sustained
//     nodeCacheCapable traffic (-footprint-duration, or
//     -footprint-requests filter+prioritize pairs, from -footprint-workers
//     clients): /filter with every node name, /prioritize with the nodes
//     that passed, each for a new pod of the realistic set
//     (policyset.RealisticPod: four ReplicaSets and host-network agents,
//     per-pod names); a sample after. Asserted: every answer is 200 and
//     well-formed, and accounts for every node it was given.
//   - NodeUpdatesKeepNoStaleCopiesAPIServer: a sample after the initial
//     sync; then every node's status is updated -stale-updates times
//     (UpdateStatus: new lastHeartbeatTime on every condition, one image's
//     size changed), then one node's maintenance-reason annotation is set
//     to a fresh marker. The service applies changes in order, so once
//     /debug/explain prints the marker in that node's maintenance warning
//     every update before it is in the engine. Asserted: the live heap is
//     then within 10% (+2 MiB) of the live heap after the initial sync,
//     i.e. no stale copy of a node version is kept.
//
// Figures are logged and, with -footprint-out FILE, written as JSON. The
// defaults (500 nodes, 20 s of traffic, 5 update rounds) are sized for CI
// (bench/e2e/ci.sh runs ./...). By hand:
//
//	cd bench/e2e && E2E_SKIP_BUILD=1 go test ./footprint/ -v -count=1 -timeout 60m -args -footprint-nodes 1000 -footprint-out /tmp/footprint-1000.json
//	cd bench/e2e && E2E_SKIP_BUILD=1 go test ./footprint/ -v -count=1 -timeout 60m -args -footprint-nodes 5000 -stale-updates 30 -footprint-out /tmp/footprint-5000.json
//	cd bench/e2e && E2E_SKIP_BUILD=1 go test ./footprint/ -v -count=1 -timeout 90m -args -footprint-nodes 10000 -footprint-out /tmp/footprint-10000.json
//
// Add -run 'TestClusterFootprint/NodeUpdates' (or /SyncAndTraffic) to run
// one part. -library points at the Gatekeeper library's library/ folder
// (default ../shared/gatekeeper-library/library next to the repository).
package footprint
