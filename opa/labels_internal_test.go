package opa

import (
	"fmt"
	"maps"
	"reflect"
	"testing"
)

// TestPodLabelsOfReplicas: replicas' labels, given as the same shared term
// once seen twice, come from one map; every pod's labels are its own,
// whichever pods came before it.
func TestPodLabelsOfReplicas(t *testing.T) {
	sets := []map[string]string{
		{"app": "web", "pod-template-hash": "5f6b7c8d9e", "tier": "frontend"},
		{"app": "api", "pod-template-hash": "66c8f9d7b4", "tier": "backend"},
		{"app": "web", "pod-template-hash": "5f6b7c8d9e", "tier": "canary"},
	}
	pods := NewPodDecoder()
	seen := map[int]uintptr{}
	for i := range 30 {
		k := i % len(sets)
		labels := `{"app":%q,"pod-template-hash":%q,"tier":%q}`
		l := sets[k]
		b := fmt.Appendf(nil, `{"metadata":{"name":"p-%d","namespace":"ns","uid":"u-%d","labels":`+labels+`},"spec":{"containers":[{"name":"c","image":"nginx:1.27"}]}}`,
			i, i, l["app"], l["pod-template-hash"], l["tier"])
		p, err := pods.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(p.labels, l) {
			t.Fatalf("pod %d: labels %v, want %v", i, p.labels, l)
		}
		ptr := reflect.ValueOf(p.labels).Pointer()
		if i >= 3*len(sets) { // each set seen twice: shared, its map kept
			if prev, ok := seen[k]; ok && prev != ptr {
				t.Errorf("pod %d: a new map for labels seen before", i)
			}
		}
		seen[k] = ptr
	}
}
