package opa

import (
	"context"
	"fmt"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/policy"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestNodeIndexLetsOldNodesGo: the index is built by a request large
// enough, serves its generation only, and an outdated one is dropped by
// the next small request rather than keeping replaced Nodes alive.
func TestNodeIndexLetsOldNodesGo(t *testing.T) {
	ctx := context.Background()
	e, err := New(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	var objs []*unstructured.Unstructured
	var cands []Candidate
	for i := range minIndexedCandidates {
		name := fmt.Sprintf("n%02d", i)
		objs = append(objs, mustObj(t, "apiVersion: v1\nkind: Node\nmetadata: {name: "+name+"}\n"))
		cands = append(cands, Candidate{Name: name})
	}
	if errs := e.Apply(ctx, changesOf(objs)); len(errs) > 0 {
		t.Fatal(errs)
	}
	pod := map[string]any{"metadata": map[string]any{"name": "p", "namespace": "default"}}
	if _, err := e.Evaluate(ctx, PlacementRequest{Pod: pod, Candidates: cands}); err != nil {
		t.Fatal(err)
	}
	built := e.nodeIndex.cur.Load()
	if built == nil || len(built.byName) != len(cands) {
		t.Fatalf("no index of %d Nodes after a request of %d candidates: %+v", len(cands), len(cands), built)
	}
	if _, err := e.Evaluate(ctx, PlacementRequest{Pod: pod, Candidates: cands[:2]}); err != nil {
		t.Fatal(err)
	}
	if e.nodeIndex.cur.Load() != built {
		t.Fatal("a small request of the same generation dropped the index")
	}
	// A write that changes what the store holds (a label no policy reads
	// changes nothing there: Nodes are kept cut to what policies read).
	gone := &policy.ObjectRef{GroupVersionKind: objs[0].GroupVersionKind(), Name: "n00"}
	if errs := e.Apply(ctx, []policy.Change{{Delete: gone}}); len(errs) > 0 {
		t.Fatal(errs)
	}
	if _, err := e.Evaluate(ctx, PlacementRequest{Pod: pod, Candidates: cands[:2]}); err != nil {
		t.Fatal(err)
	}
	if idx := e.nodeIndex.cur.Load(); idx != nil {
		t.Fatalf("the outdated index (generation %v) is still held", idx.generation)
	}
}
