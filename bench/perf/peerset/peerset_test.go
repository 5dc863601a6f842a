package peerset_test

import (
	"context"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/perf"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/perf/peerset"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// TestPeerAgrees checks that Gatekeeper's framework, loaded as the load
// generator loads it, finds the same deny violations as the engine on
// every (pod, node) pair of two nodes per pool.
func TestPeerAgrees(t *testing.T) {
	d := perf.DefaultDirs("../..")
	if err := d.Check(); err != nil {
		if _, statErr := os.Stat(d.Library); statErr != nil {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	ps, err := perf.LoadMix(d)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n := 2 * len(perf.Pools)
	e, err := perf.NewEngine(ctx, opa.Options{}, ps, append(perf.Namespaces(), perf.Nodes(n)...), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	deny := perf.DenyConstraints(e)
	if len(deny) != 19 {
		t.Fatalf("%d deny constraints, want 19", len(deny))
	}
	p, loaded, err := peerset.Load(ps, deny, append(perf.Namespaces(), perf.Nodes(n)...))
	if err != nil {
		t.Fatal(err)
	}
	if loaded != len(deny) {
		t.Fatalf("framework holds %d constraints, want %d", loaded, len(deny))
	}
	s := perf.NewStream(2, 0, 0)
	pods := []perf.Pod{s.OneOff(5), s.OneOff(6)}
	for rs := range perf.ReplicaSets {
		pods = append(pods, s.Replica(rs, 100+rs))
	}
	for _, pod := range pods {
		obj, err := perf.ServerView(pod.JSON)
		if err != nil {
			t.Fatal(err)
		}
		pl, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: obj, Candidates: perf.Candidates(n)})
		if err != nil {
			t.Fatal(err)
		}
		for i, name := range perf.NodeNames(n) {
			res, err := p.ReviewPodOnNode(ctx, obj, name, perf.NamespaceObject(pod.Namespace), perf.SchedulerUserInfo())
			if err != nil {
				t.Fatal(err)
			}
			var got, want []string
			for _, r := range res {
				want = append(want, r.ConstraintName+": "+r.Msg)
			}
			for _, v := range pl.Nodes[i].Violations {
				if v.Action == opa.Deny {
					got = append(got, v.Constraint.Name+": "+v.Message)
				}
			}
			sort.Strings(got)
			sort.Strings(want)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("%s on %s:\nengine:    %q\nframework: %q", pod.Name, name, got, want)
			}
		}
	}
}
