package opa_test

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// statusNode is a Node with a status that kubelets rewrite all the time.
func statusNode(name string, pool string, beat int) *unstructured.Unstructured {
	n := node(name, map[string]string{"pool": pool})
	conds := []any{}
	for _, t := range []string{"Ready", "MemoryPressure", "DiskPressure", "PIDPressure"} {
		conds = append(conds, map[string]any{"type": t, "status": "False",
			"lastHeartbeatTime": fmt.Sprintf("2026-12-01T08:%02d:%02dZ", beat/60%60, beat%60),
			"message":           strings.Repeat("kubelet has sufficient resources ", 4)})
	}
	n.Object["status"] = map[string]any{"conditions": conds, "allocatable": map[string]any{"cpu": "3920m", "memory": "15Gi", "pods": "110"}}
	return n
}

var staleNodes = flag.Int("stale-nodes", 1000, "nodes of TestNodeUpdatesKeepNoStaleCopies (5000: the cluster size the benchmarks use)")

func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestNodeUpdatesKeepNoStaleCopies updates every Node's status 30 times,
// with placements judged between the updates (so that node classes and
// memo entries are made for each version): the live heap must stay
// within 10% of what it was after the first version. Before, every Node
// value ever classified stayed reachable from the node-class cache.
func TestNodeUpdatesKeepNoStaleCopies(t *testing.T) {
	nodes, rounds := *staleNodes, 30
	if raceEnabled && nodes > 1000 {
		nodes = 1000
	}
	objs, err := readObjects(strings.NewReader(printingPolicies))
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, opa.Options{})
	apply(t, e, objs...)
	ctx := context.Background()
	cands := make([]opa.Candidate, nodes)
	version := func(beat int) {
		batch := make([]*unstructured.Unstructured, nodes)
		for i := range batch {
			batch[i] = statusNode(fmt.Sprintf("n-%d", i), []string{"blocked", "open"}[i%2], beat)
			cands[i] = opa.Candidate{Name: batch[i].GetName()}
		}
		apply(t, e, batch...)
		for k := range 2 {
			if _, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: pod("default", fmt.Sprintf("p-%d-%d", beat, k)), Candidates: cands}); err != nil {
				t.Fatal(err)
			}
		}
	}
	version(0)
	fresh := liveHeap()
	for beat := 1; beat <= rounds; beat++ {
		version(beat)
	}
	after := liveHeap()
	t.Logf("%d nodes: live heap %.1f MiB after the first version, %.1f MiB after %d more", nodes, float64(fresh)/(1<<20), float64(after)/(1<<20), rounds)
	if float64(after) > 1.1*float64(fresh) {
		t.Errorf("live heap grew from %d to %d bytes (> 10%%) over %d status updates of %d nodes: old Node values are kept alive", fresh, after, rounds, nodes)
	}
}
