package opa_test

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// TestPrefetchedMissesAsSequential: a pod new to the memo has its pod-only
// misses evaluated on several goroutines (prefetch.go); the answer,
// explain's memo flags and the evaluation count are those of an engine
// that evaluates them one after the other, and the violations those of an
// engine without memo.
func TestPrefetchedMissesAsSequential(t *testing.T) {
	if _, err := os.Stat(libraryDir); err != nil {
		t.Skipf("gatekeeper-library not found at %s: %v", libraryDir, err)
	}
	objs := libraryObjects(t)
	parallel, ref, cands := libraryEngines(t, opa.Options{})
	seq := newEngine(t, opa.Options{Parallelism: 1})
	apply(t, seq, objs...)
	apply(t, seq, node("n1", map[string]string{"pool": "a"}), node("n2", nil))
	prefetched := 0
	for k, p := range librarySamplePods(t) {
		for round := 0; round < 2; round++ { // misses, then hits
			c := renamed(p, k)
			eachContainer(c, func(m map[string]any) { m["image"] = fmt.Sprintf("%v-build-%d", m["image"], k) })
			got := judgeAsReference(t, parallel, ref, c, cands, true)
			want, err := seq.Evaluate(t.Context(), opa.PlacementRequest{Pod: c, Candidates: cands, Explain: true})
			if err != nil {
				t.Fatal(err)
			}
			if got.Evaluations != want.Evaluations {
				t.Errorf("pod %d round %d: %d evaluations, sequentially %d", k, round, got.Evaluations, want.Evaluations)
			}
			if round == 0 && got.Evaluations >= 2 {
				prefetched++
			}
			for i := range cands {
				if g, w := memoFlags(got.Trace(i)), memoFlags(want.Trace(i)); !reflect.DeepEqual(g, w) {
					t.Errorf("pod %d round %d node %d: explain\n parallel   %v\n sequential %v", k, round, i, g, w)
				}
			}
		}
	}
	if prefetched < 20 {
		t.Errorf("only %d pods had two misses or more: the parallel path was not exercised", prefetched)
	}
}

// memoFlags are explain's traces without their durations.
func memoFlags(ts []opa.ConstraintTrace) []string {
	out := make([]string, len(ts))
	for i, tr := range ts {
		out[i] = fmt.Sprintf("%s/%s memoised=%v %q %v", tr.Constraint.Kind, tr.Constraint.Name, tr.Memoised, tr.NotEvaluated, tr.Violations)
	}
	return out
}

// TestPrefetchWhilePoliciesChange runs pods new to the memo (parallel
// misses) on several goroutines while a constraint's parameters change
// underneath: -race checks the parallel path, and every answer is the
// reference engine's for the constraints that do not change.
func TestPrefetchWhilePoliciesChange(t *testing.T) {
	if _, err := os.Stat(libraryDir); err != nil {
		t.Skipf("gatekeeper-library not found at %s: %v", libraryDir, err)
	}
	e, ref, cands := libraryEngines(t, opa.Options{})
	samples := librarySamplePods(t)
	var limits *unstructured.Unstructured
	for _, o := range libraryObjects(t) {
		if o.GetKind() == "K8sContainerLimits" {
			limits = o
		}
	}
	if limits == nil {
		t.Fatal("no K8sContainerLimits constraint in the library")
	}
	ctx := context.Background()
	work := func(w, i int) error {
		c := renamed(samples[(i*3+w)%len(samples)], i)
		eachContainer(c, func(m map[string]any) { m["image"] = fmt.Sprintf("%v-w%d-%d", m["image"], w, i) })
		res, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: c, Candidates: cands})
		if err != nil {
			return err
		}
		want, err := ref.Evaluate(ctx, opa.PlacementRequest{Pod: c, Candidates: cands})
		if err != nil {
			return err
		}
		for n := range res.Nodes {
			if g, w := unchanging(res.Violations(n)), unchanging(want.Violations(n)); !reflect.DeepEqual(g, w) {
				return fmt.Errorf("pod %v node %d during churn:\n got  %v\n want %v", c["metadata"], n, g, w)
			}
		}
		return nil
	}
	change := func(i int) error {
		c := limits.DeepCopy()
		unstructured.SetNestedField(c.Object, fmt.Sprintf("%dm", 100+i), "spec", "parameters", "cpu")
		if errs := e.Apply(ctx, []opa.Change{{Object: c}}); len(errs) > 0 {
			return fmt.Errorf("apply: %v", errs)
		}
		return nil
	}
	churn(t, time.Second, 10*time.Millisecond, 3, work, change)
}

// unchanging drops the violations of the constraint the churn changes.
func unchanging(vs []opa.Violation) []opa.Violation {
	var out []opa.Violation
	for _, v := range vs {
		if v.Constraint.Kind != "K8sContainerLimits" {
			out = append(out, v)
		}
	}
	return out
}
