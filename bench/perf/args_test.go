package perf

import (
	"bytes"
	"encoding/json"
	"testing"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// TestRotatingArgs: successive bodies name successive windows of the
// inventory, wrapping around, each a valid ExtenderArgs; Build is the
// first window; an inventory no larger than a window is the fixed list.
func TestRotatingArgs(t *testing.T) {
	pod := NewStream(1, 0, 0).Replica(0, 0)
	names := func(body []byte) []string {
		t.Helper()
		var args extenderv1.ExtenderArgs
		if err := json.Unmarshal(body, &args); err != nil {
			t.Fatal(err)
		}
		if args.NodeNames == nil {
			t.Fatal("no NodeNames")
		}
		return *args.NodeNames
	}
	const n, inventory = 4, 10
	a := NewRotatingArgs(n, inventory)
	var buf bytes.Buffer
	for call, start := range []int{0, 4, 8, 0, 4} {
		body := a.BuildInto(&buf, pod)
		if err := a.Check(body, pod); err != nil {
			t.Fatalf("call %d: %v", call, err)
		}
		got := names(body)
		for i, name := range got {
			if want := NodeName((start + i) % inventory); name != want {
				t.Fatalf("call %d: names %v, want the window from %d", call, got, start)
			}
		}
	}
	if got := names(a.Build(pod)); got[0] != NodeName(0) {
		t.Fatalf("Build names %v, want the first window", got)
	}
	fixed := NewRotatingArgs(n, n)
	for range 2 {
		if got := names(fixed.BuildInto(&buf, pod)); got[0] != NodeName(0) || len(got) != n {
			t.Fatalf("an inventory of one window: names %v", got)
		}
	}
}
