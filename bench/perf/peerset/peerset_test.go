package peerset_test

import (
	"context"
	"encoding/json"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/perf"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/perf/peerset"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// TestPeerAgrees checks that Gatekeeper's framework, loaded as the load
// generator loads it, finds the same deny violations (constraint, message
// and details) as the engine on every (pod, node) pair of the mix's
// nodes (two per pool) and of the realistic set's kubelet-sized nodes
// (three per pool, one per zone). Loading them also checks that the
// framework accepts the realistic set's placement templates.
func TestPeerAgrees(t *testing.T) {
	d := perf.DefaultDirs("../..")
	if err := d.Check(); err != nil {
		if _, statErr := os.Stat(d.Library); statErr != nil {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	for _, tc := range []struct {
		set   string
		nodes int
		deny  int
	}{
		{perf.SetMix, 2 * len(perf.Pools), 19},
		{perf.SetRealistic, 3 * len(perf.Pools), 3},
	} {
		t.Run(tc.set, func(t *testing.T) {
			ps, err := perf.LoadSet(d, tc.set)
			if err != nil {
				t.Fatal(err)
			}
			size := perf.DefaultNodeSize(tc.set)
			inventory := append(perf.Namespaces(), size.Nodes(tc.nodes)...)
			ctx := context.Background()
			e, err := perf.NewEngine(ctx, opa.Options{}, ps, inventory, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close(ctx)
			deny := perf.DenyConstraints(e)
			if len(deny) != tc.deny {
				t.Fatalf("%d deny constraints, want %d", len(deny), tc.deny)
			}
			p, loaded, err := peerset.Load(ps, deny, inventory)
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
			violations := 0
			for _, pod := range pods {
				obj, err := perf.ServerView(pod.JSON)
				if err != nil {
					t.Fatal(err)
				}
				pl, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: obj, Candidates: perf.Candidates(tc.nodes)})
				if err != nil {
					t.Fatal(err)
				}
				for i, name := range perf.NodeNames(tc.nodes) {
					res, err := p.ReviewPodOnNode(ctx, obj, name, perf.NamespaceObject(pod.Namespace), perf.SchedulerUserInfo())
					if err != nil {
						t.Fatal(err)
					}
					var got, want []string
					for _, r := range res {
						det, _ := json.Marshal(r.Details)
						want = append(want, r.ConstraintName+": "+r.Msg+" "+string(det))
					}
					for _, v := range pl.Violations(i) {
						if v.Action == opa.Deny {
							det := string(v.Details)
							if det == "" {
								det = "{}"
							}
							got = append(got, v.Constraint.Name+": "+v.Message+" "+det)
						}
					}
					sort.Strings(got)
					sort.Strings(want)
					violations += len(got)
					if strings.Join(got, "\n") != strings.Join(want, "\n") {
						t.Errorf("%s on %s:\nengine:    %q\nframework: %q", pod.Name, name, got, want)
					}
				}
			}
			if violations == 0 {
				t.Error("no deny violation on any (pod, node) pair")
			}
		})
	}
}
