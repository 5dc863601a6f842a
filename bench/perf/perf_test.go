package perf

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// allowedPools is where each ReplicaSet's pods may go under the mix's
// deny constraints (see the ReplicaSets comment), and under the realistic
// set's.
var allowedPools = map[string][]string{
	"frontend":   {"general-a", "general-b", "general-c", "general-d", "system"},
	"api":        {"general-a", "general-b", "general-c", "general-d", "system"},
	"web":        {"alpha", "alpha-spot"},
	"worker":     {"beta"},
	"etl":        {"general-a", "general-b", "general-c", "general-d", "spot-a", "spot-b", "system"},
	"cart":       {"general-a", "general-b", "general-c", "general-d", "system"},
	"node-agent": {"system"},
	"trainer":    {"general-a", "general-b", "general-c", "general-d", "spot-a", "spot-b", "system"},
}

func testDirs(t testing.TB) Dirs {
	t.Helper()
	d := DefaultDirs("..")
	if err := d.Check(); err != nil {
		if _, statErr := os.Stat(d.Library); statErr != nil {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	return d
}

func loadEngine(t *testing.T, ps []Policy, nodes int) *opa.Engine {
	t.Helper()
	ctx := context.Background()
	e, err := NewEngine(ctx, opa.Options{}, ps, append(Namespaces(), Nodes(nodes)...), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(ctx) })
	return e
}

// TestWorkload pins the workload's shape: 20 constraints in the mix; each
// ReplicaSet's replicas pass exactly on their pools and violate no
// library constraint; one-off pods pass somewhere except every fifth,
// which a library constraint denies everywhere.
func TestWorkload(t *testing.T) {
	d := testDirs(t)
	ps, err := LoadMix(d)
	if err != nil {
		t.Fatal(err)
	}
	if n := CountConstraints(ps); n != 20 {
		t.Fatalf("mix has %d constraints, want 20", n)
	}
	e := loadEngine(t, ps, len(Pools))
	ctx := context.Background()
	s := NewStream(1, 0, 0)
	for rs := range ReplicaSets {
		pod := s.Replica(rs, rs)
		obj, err := ServerView(pod.JSON)
		if err != nil {
			t.Fatal(err)
		}
		p, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: obj, Candidates: Candidates(len(Pools))})
		if err != nil {
			t.Fatal(err)
		}
		var passed []string
		for i, v := range p.Nodes {
			if !p.Denied(i) {
				passed = append(passed, Pools[i].Name)
			}
			for _, x := range p.Violations(i) {
				if !strings.HasPrefix(x.Constraint.Kind, "K8sTenant") && !strings.HasPrefix(x.Constraint.Kind, "K8sSpot") &&
					!strings.HasPrefix(x.Constraint.Kind, "K8sPrivilegedNodePool") && !strings.HasPrefix(x.Constraint.Kind, "K8sNodeLabel") {
					t.Errorf("%s on %s: library violation %s: %s", pod.Name, v.Name, x.Constraint, x.Message)
				}
			}
		}
		want := allowedPools[ReplicaSets[rs].App]
		if strings.Join(passed, ",") != strings.Join(want, ",") {
			t.Errorf("%s passes on %v, want %v", ReplicaSets[rs].App, passed, want)
		}
	}
	for i := 1; i <= 10; i++ {
		pod := s.OneOff(i)
		obj, err := ServerView(pod.JSON)
		if err != nil {
			t.Fatal(err)
		}
		p, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: obj, Candidates: Candidates(len(Pools))})
		if err != nil {
			t.Fatal(err)
		}
		passed := 0
		for i := range p.Nodes {
			if !p.Denied(i) {
				passed++
			}
		}
		if (passed == 0) != (i%5 == 0) {
			b, _ := json.Marshal(p.Nodes)
			t.Errorf("one-off %d passes on %d pools: %s", i, passed, b)
		}
	}
}

// TestAllPolicies loads every library template with a sample constraint,
// plus the examples: the set of the RSS measurement.
func TestAllPolicies(t *testing.T) {
	d := testDirs(t)
	ps, err := LoadAll(d)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 53 {
		t.Fatalf("%d templates, want 53", len(ps))
	}
	loadEngine(t, ps, 10)
}
