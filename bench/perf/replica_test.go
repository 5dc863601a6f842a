package perf

import (
	"context"
	"sort"
	"strings"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// TestReplicasShareVerdicts: a replica differs from its ReplicaSet's other
// pods in its name, uid and token volume name (kube-api-access-<random>,
// in the volume and in every container's mounts), which is what
// ServiceAccount admission gives each pod. Once the ReplicaSets' classes
// are warm, a new replica evaluates no constraint: host-filesystem, which
// joins host-path volumes and mounts by name, reads the mounts' names only
// for a pod that has a host-path volume, on CEL (the dual templates' engine
// by default, as in Gatekeeper) as on Rego.
func TestReplicasShareVerdicts(t *testing.T) {
	ctx := context.Background()
	e, cands := realisticEngine(t)
	s := NewStream(1, 0, 0)
	for i := range 4 * len(ReplicaSets) { // warm every ReplicaSet's classes
		if _, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: podMap(t, s.Replica(i%len(ReplicaSets), i)), Candidates: cands}); err != nil {
			t.Fatal(err)
		}
	}
	evaluated := map[string]int{}
	for i := range 3 * len(ReplicaSets) {
		p, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: podMap(t, s.Replica(i%len(ReplicaSets), 1000+i)), Candidates: cands, Explain: true})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for n := range p.Nodes {
			for _, tr := range p.Trace(n) {
				if tr.Memoised || tr.NotEvaluated != "" || seen[tr.Constraint.Kind] {
					continue
				}
				seen[tr.Constraint.Kind] = true
				evaluated[tr.Constraint.Kind]++
			}
		}
	}
	var kinds []string
	for k, n := range evaluated {
		kinds = append(kinds, k)
		t.Errorf("%s was evaluated for %d of %d new replicas: its verdict should be shared by the ReplicaSet's pods", k, n, 3*len(ReplicaSets))
	}
	sort.Strings(kinds)
	t.Logf("evaluated for new replicas: %s", strings.Join(kinds, ", "))
}
