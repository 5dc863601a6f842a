package perf

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

func TestScratchOneOffCost(t *testing.T) {
	d := testDirs(t)
	ps, err := LoadRealistic(d)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e, err := NewEngine(ctx, opa.Options{Parallelism: 1}, ps, append(Namespaces(), KubeletNodes.Nodes(50)...), 0)
	if err != nil {
		t.Fatal(err)
	}
	cands := Candidates(50)
	s := NewStream(1, 0, 0)
	// warm with replicas and a few one-offs
	for i := range 40 {
		p := s.OneOff(i)
		dec, _ := opa.DecodePod(p.JSON)
		e.Evaluate(ctx, opa.PlacementRequest{Decoded: dec, Candidates: cands})
	}
	cost := map[string]time.Duration{}
	evals := map[string]int{}
	n := 100
	for i := range n {
		p := s.OneOff(1000 + i)
		var m map[string]any
		json.Unmarshal(p.JSON, &m)
		pl, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: m, Candidates: cands, Explain: true})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, nv := range pl.Nodes {
			for _, tr := range nv.Explain {
				k := tr.Constraint.Kind
				if tr.Memoised || tr.NotEvaluated != "" || seen[k] && tr.PerPod {
					continue
				}
				seen[k] = true
				if evals[k] == 0 && i == 0 {
					fmt.Println(k, tr.Evaluated, tr.Why)
				}
				cost[k] += tr.Duration
				evals[k]++
			}
		}
	}
	var ks []string
	for k := range cost {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(a, b int) bool { return cost[ks[a]] > cost[ks[b]] })
	var total time.Duration
	for _, k := range ks {
		total += cost[k]
		fmt.Printf("%-45s %6.3f ms/pod  evals %d\n", k, float64(cost[k].Microseconds())/1000/float64(n), evals[k])
	}
	fmt.Printf("total %.3f ms/pod\n", float64(total.Microseconds())/1000/float64(n))
}
