package footprint

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/cluster"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/policyset"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/server"
)

// markerNodeIndex is the node whose maintenance-reason annotation carries
// the marker written after the updates: the first node under maintenance,
// so that the realistic set's node-maintenance warning prints it.
const markerNodeIndex = 11

// updatesInFlight is how many UpdateStatus calls run at once.
const updatesInFlight = 32

// Allowed growth of the live heap over the node updates.
const (
	heapGrowthRatio = 0.10
	heapGrowthSlack = 2 << 20
)

// updatesReport is the NodeUpdatesKeepNoStaleCopiesAPIServer part of the figures.
type updatesReport struct {
	SyncSeconds float64 `json:"syncSeconds"`
	AfterSync   memory  `json:"afterSync"`
	Rounds      int     `json:"rounds"`
	Updates     int     `json:"updates"`
	// UpdateSeconds is the time the UpdateStatus calls took; ApplyLag is
	// from the marker's write until the service showed it.
	UpdateSeconds   float64 `json:"updateSeconds"`
	ApplyLagSeconds float64 `json:"applyLagSeconds"`
	AfterUpdates    memory  `json:"afterUpdates"`
	// HeapGrowth is AfterUpdates.HeapAlloc / AfterSync.HeapAlloc - 1.
	HeapGrowth float64 `json:"heapGrowth"`
	HeapLimit  int64   `json:"heapLimit"`
}

func runNodeUpdates(t *testing.T, e *env) *updatesReport {
	s, took := startService(t, e)
	rep := &updatesReport{SyncSeconds: took.Seconds(), Rounds: *staleRounds}
	rep.AfterSync = s.measure(t)
	t.Logf("after sync (%d nodes): %v", *numNodes, rep.AfterSync)

	start := time.Now()
	for round := 1; round <= *staleRounds; round++ {
		roundStart := time.Now()
		if err := updateAllNodes(e, round); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		rep.Updates += len(e.nodes)
		t.Logf("round %d: %d node statuses updated in %v", round, len(e.nodes), time.Since(roundStart).Round(time.Millisecond))
	}
	rep.UpdateSeconds = time.Since(start).Seconds()
	marker := fmt.Sprintf("footprint marker %d", time.Now().UnixNano())
	written := time.Now()
	if err := setMarker(e, marker); err != nil {
		t.Fatal(err)
	}
	s.waitForMarker(t, e, marker, 10*time.Minute)
	rep.ApplyLagSeconds = time.Since(written).Seconds()
	t.Logf("%d updates in %.1fs (%.0f/s); the service showed the marker written after them %.2fs later",
		rep.Updates, rep.UpdateSeconds, float64(rep.Updates)/rep.UpdateSeconds, rep.ApplyLagSeconds)

	rep.AfterUpdates = s.measure(t)
	t.Logf("after updates: %v", rep.AfterUpdates)
	base := rep.AfterSync.HeapAlloc
	rep.HeapLimit = base + int64(heapGrowthRatio*float64(base)) + heapGrowthSlack
	rep.HeapGrowth = float64(rep.AfterUpdates.HeapAlloc)/float64(base) - 1
	t.Logf("live heap: %s after sync, %s after %d updates of each of %d nodes (%+.1f%%; limit %s)",
		mib(base), mib(rep.AfterUpdates.HeapAlloc), rep.Rounds, *numNodes, 100*rep.HeapGrowth, mib(rep.HeapLimit))
	if rep.AfterUpdates.HeapAlloc > rep.HeapLimit {
		t.Errorf("live heap grew from %s to %s over %d node updates: more than %.0f%% + %s, stale node versions are kept",
			mib(base), mib(rep.AfterUpdates.HeapAlloc), rep.Updates, 100*heapGrowthRatio, mib(heapGrowthSlack))
	}
	return rep
}

// updateAllNodes writes a new status for every node, as a kubelet's
// heartbeat would (updatesInFlight at a time, in protobuf as kubelets
// send them), and keeps the versions written.
func updateAllNodes(e *env, round int) error {
	ctx := context.Background()
	nodes := e.updater.CoreV1().Nodes()
	idx := make(chan int)
	errs := make(chan error, len(e.nodes))
	var wg sync.WaitGroup
	for range updatesInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range idx {
				n := e.nodes[i].DeepCopy()
				newStatus(n, round)
				got, err := nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
				if err != nil {
					errs <- fmt.Errorf("node %s: %w", n.Name, err)
					continue
				}
				e.nodes[i] = got
			}
		}()
	}
	for i := range e.nodes {
		idx <- i
	}
	close(idx)
	wg.Wait()
	close(errs)
	return <-errs
}

// newStatus is round's status of a node: every condition's heartbeat 10 s
// per round later, and one image's size (the image round%len) changed, so
// that the image list differs in every round but keeps its size.
func newStatus(n *corev1.Node, round int) {
	for j := range n.Status.Conditions {
		c := &n.Status.Conditions[j]
		c.LastHeartbeatTime = metav1.NewTime(c.LastHeartbeatTime.Add(10 * time.Second))
	}
	if imgs := n.Status.Images; len(imgs) > 0 {
		imgs[round%len(imgs)].SizeBytes += int64(4096 * round)
	}
}

// setMarker writes marker into the maintenance-reason annotation of the
// marker node (an Update of its metadata after every status update).
func setMarker(e *env, marker string) error {
	n := e.nodes[markerNodeIndex].DeepCopy()
	if n.Labels[cluster.MaintenanceLabel] != "true" {
		return fmt.Errorf("node %s is not under maintenance (labels %v)", n.Name, n.Labels)
	}
	n.Annotations[cluster.MaintenanceReasonAnnotation] = marker
	got, err := e.c.Client().CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("marker on node %s: %w", n.Name, err)
	}
	e.nodes[markerNodeIndex] = got
	return nil
}

// waitForMarker polls /debug/explain for a plain pod on the marker node
// until its node-maintenance warning prints the marker. The cluster source
// applies node events in the order of the node watch, so every status
// update written before the marker is then in the engine.
func (s *service) waitForMarker(t *testing.T, e *env, marker string, timeout time.Duration) {
	t.Helper()
	req := server.ExplainRequest{Pod: policyset.RealisticPod(namespaces[0], 0), NodeNames: []string{e.names[markerNodeIndex]}}
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		if done, how := s.proc.Exited(); done {
			t.Fatalf("service exited (%v); last log lines:\n%s", how, s.proc.LogTail(40))
		}
		code, body, err := s.post("/debug/explain", &req)
		switch {
		case err != nil:
			last = err.Error()
		case code != http.StatusOK:
			last = fmt.Sprintf("%d %.300s", code, body)
		case strings.Contains(string(body), marker):
			return
		default:
			last = fmt.Sprintf("%.500s", body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the service did not show the marker %q on node %s within %v; last /debug/explain: %s", marker, e.names[markerNodeIndex], timeout, last)
}
