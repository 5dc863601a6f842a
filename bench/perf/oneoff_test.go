package perf

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// BenchmarkOneOffPod times the realistic mix's one-off pods (a new Job:
// new image, labels and container names) over 50 kubelet-sized nodes, one
// core (Parallelism 1), and logs what they still evaluate: each
// constraint's explain duration per pod and why, and how many helpers
// (analysis.Helper) it evaluates for its memo keys. Run with
//
//	cd bench && go test -run '^$' -bench OneOffPod -benchtime 100x ./perf/
func BenchmarkOneOffPod(b *testing.B) {
	ctx := context.Background()
	e, cands := realisticEngine(b)
	s := NewStream(1, 0, 0)
	for i := range 40 { // warm: the classes every one-off pod shares
		if _, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: podMap(b, s.OneOff(i)), Candidates: cands}); err != nil {
			b.Fatal(err)
		}
	}
	cost := map[string]time.Duration{}
	why := map[string]string{}
	helpers := e.Stats().HelperEvaluations
	b.ResetTimer()
	for i := range b.N {
		p, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: podMap(b, s.OneOff(1000+i)), Candidates: cands, Explain: true})
		if err != nil {
			b.Fatal(err)
		}
		seen := map[string]bool{}
		for n := range p.Nodes {
			for _, tr := range p.Trace(n) {
				k := tr.Constraint.Kind
				if tr.Memoised || tr.NotEvaluated != "" || (seen[k] && tr.PerPod) {
					continue
				}
				seen[k] = true
				cost[k] += tr.Duration
				why[k] = tr.Evaluated + "; " + strings.Join(tr.Why, "; ")
			}
		}
	}
	b.StopTimer()
	helpers = e.Stats().HelperEvaluations - helpers
	kinds := make([]string, 0, len(cost))
	var total time.Duration
	for k, d := range cost {
		kinds = append(kinds, k)
		total += d
	}
	sort.Slice(kinds, func(x, y int) bool { return cost[kinds[x]] > cost[kinds[y]] })
	per := func(d time.Duration) string {
		return fmt.Sprintf("%.3f ms", float64(d.Microseconds())/1000/float64(b.N))
	}
	for _, k := range kinds {
		b.Logf("%-42s %s per pod (%s)", k, per(cost[k]), why[k])
	}
	b.Logf("%d constraints evaluated, %s per one-off pod in all; %.1f helper evaluations per pod (not timed above)", len(kinds), per(total), float64(helpers)/float64(b.N))
}

// realisticEngine is an engine on the realistic mix with 50 kubelet-sized
// nodes, evaluating on one core, and those nodes as candidates.
func realisticEngine(tb testing.TB) (*opa.Engine, []opa.Candidate) {
	tb.Helper()
	ps, err := LoadRealistic(testDirs(tb))
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	e, err := NewEngine(ctx, opa.Options{Parallelism: 1}, ps, append(Namespaces(), KubeletNodes.Nodes(50)...), 0)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close(ctx) })
	return e, Candidates(50)
}

func podMap(tb testing.TB, p Pod) map[string]any {
	tb.Helper()
	var m map[string]any
	if err := json.Unmarshal(p.JSON, &m); err != nil {
		tb.Fatal(err)
	}
	return m
}

// BenchmarkReplicaPod times the realistic mix's steady state on one core:
// new replicas of known ReplicaSets over 50 kubelet-sized nodes, every
// verdict in the memo, so what is timed is the request's own work (keys,
// lookups, the answer). Run with
//
//	cd bench && go test -run '^$' -bench ReplicaPod -benchmem ./perf/
func BenchmarkReplicaPod(b *testing.B) {
	ctx := context.Background()
	e, cands := realisticEngine(b)
	s := NewStream(1, 0, 0)
	pods := make([]map[string]any, 64)
	for i := range pods {
		pods[i] = podMap(b, s.Replica(i%len(ReplicaSets), i))
		if _, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: pods[i], Candidates: cands}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		p, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: pods[i%len(pods)], Candidates: cands})
		if err != nil {
			b.Fatal(err)
		}
		p.Release()
	}
}

// BenchmarkPodStream times Evaluate as the extender calls it (the pod
// decoded from its JSON, 500 candidates, every core) on the realistic
// mix, warm: "replica" new replicas of known ReplicaSets only, "one-off"
// one-off pods only (a new Job each: new image, labels and names). The
// time per pod and its allocations are what a filter call costs the
// engine before the answer is written. Run with
//
//	cd bench && go test -run '^$' -bench PodStream -benchmem ./perf/
func BenchmarkPodStream(b *testing.B) {
	for _, tc := range streamKinds {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			e := streamEngine(b, tc.parallelism)
			cands := Candidates(500)
			s := NewStream(7, 3, tc.share)
			pods := opa.NewPodDecoder()
			run := func() {
				pod, err := pods.Decode(s.Next().JSON)
				if err != nil {
					b.Fatal(err)
				}
				p, err := e.Evaluate(ctx, opa.PlacementRequest{Decoded: pod, Candidates: cands})
				if err != nil {
					b.Fatal(err)
				}
				p.Release()
			}
			timeWarm(b, run)
		})
	}
}

// warmCalls are the calls timeWarm makes before it times any.
const warmCalls = 300

// timeWarm runs run unmeasured until the memo holds the stream's
// ReplicaSets and the namespaces' classes, then b.N times measured.
func timeWarm(b *testing.B, run func()) {
	for range warmCalls {
		run()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		run()
	}
}

// streamKinds are the pod streams of the 500-candidate benchmarks:
// replicas of known ReplicaSets only, and one-off pods only, with the
// engine's default parallelism (GOMAXPROCS minus one: one after the other
// on two vCPUs); one-off pods again with their misses evaluated one after
// the other on the request's goroutine (Options.Parallelism 1), and on
// every core (GOMAXPROCS: what the default gives on more than two).
var streamKinds = []struct {
	name        string
	share       float64
	parallelism int
}{{"replica", 0, 0}, {"one-off", 1, 0}, {"one-off-serial", 1, 1}, {"one-off-all-cores", 1, runtime.GOMAXPROCS(0)}}

// streamEngine is an engine on the realistic mix with 500 kubelet-sized
// Nodes and the Namespaces, evaluating on parallelism goroutines (0: its
// default), closed when b ends.
func streamEngine(b *testing.B, parallelism int) *opa.Engine {
	ctx := context.Background()
	ps, err := LoadRealistic(testDirs(b))
	if err != nil {
		b.Fatal(err)
	}
	e, err := NewEngine(ctx, opa.Options{Parallelism: parallelism}, ps, append(Namespaces(), KubeletNodes.Nodes(500)...), 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close(ctx) })
	return e
}
