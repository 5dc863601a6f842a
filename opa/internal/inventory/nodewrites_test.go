package inventory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/policy"
)

// TestNodeWrites: a commit's Node writes, stored in place (few) or as one
// new Nodes object (nodeRebuildAt or more), leave the store holding what
// a write per Node would, count alike, and never change a Nodes object a
// request may still hold.
func TestNodeWrites(t *testing.T) {
	nodeChange := func(name, label string) policy.Change {
		return policy.Change{Object: &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Node",
			"metadata": map[string]any{"name": name, "labels": map[string]any{"v": label}},
		}}}
	}
	nodeDelete := func(name string) policy.Change {
		return policy.Change{Delete: &policy.ObjectRef{GroupVersionKind: schema.GroupVersionKind{Version: "v1", Kind: "Node"}, Name: name}}
	}
	names := func(from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, fmt.Sprintf("n%02d", i))
		}
		return out
	}
	relabel := func(label string, ns ...string) []policy.Change {
		var out []policy.Change
		for _, n := range ns {
			out = append(out, nodeChange(n, label))
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		commits [][]policy.Change
		// want: the last commit's count change and changed Nodes.
		wantDelta   int
		wantChanged []string
		// wantNone: the store holds no Nodes object at all.
		wantNone bool
	}{
		{name: "first Nodes, few", commits: [][]policy.Change{relabel("a", names(0, 2)...)},
			wantDelta: 2, wantChanged: names(0, 2)},
		{name: "first Nodes, many", commits: [][]policy.Change{relabel("a", names(0, 20)...)},
			wantDelta: 20, wantChanged: names(0, 20)},
		{name: "one relabelled", commits: [][]policy.Change{relabel("a", names(0, 20)...), relabel("b", "n03")},
			wantChanged: []string{"n03"}},
		{name: "many relabelled, some unchanged", commits: [][]policy.Change{relabel("a", names(0, 20)...),
			append(relabel("b", names(0, 6)...), relabel("a", names(6, 12)...)...)},
			wantChanged: names(0, 6)},
		{name: "nothing changed", commits: [][]policy.Change{relabel("a", names(0, 20)...), relabel("a", names(0, 20)...)}},
		{name: "removed, added, relabelled at once", commits: [][]policy.Change{relabel("a", names(0, 20)...),
			append(append(relabel("b", "n01", "n02"), nodeDelete("n05"), nodeDelete("n06")), relabel("a", "n30", "n31")...)},
			wantChanged: []string{"n01", "n02", "n05", "n06", "n30", "n31"}},
		{name: "one removed", commits: [][]policy.Change{relabel("a", names(0, 20)...), {nodeDelete("n07")}},
			wantDelta: -1, wantChanged: []string{"n07"}},
		{name: "absent removed", commits: [][]policy.Change{relabel("a", names(0, 20)...), {nodeDelete("n77")}}},
		{name: "added then removed in one commit", commits: [][]policy.Change{relabel("a", names(0, 20)...),
			append(relabel("a", "n40", "n41", "n42", "n43"), nodeDelete("n40"))},
			wantDelta: 3, wantChanged: []string{"n40", "n41", "n42", "n43", "n40"}},
		{name: "none yet: added and removed in one commit", commits: [][]policy.Change{
			append(relabel("a", "n40", "n41", "n42", "n43"), nodeDelete("n40"), nodeDelete("n41"), nodeDelete("n42"), nodeDelete("n43"))},
			wantChanged: []string{"n40", "n41", "n42", "n43", "n40", "n41", "n42", "n43"}, wantNone: true},
		{name: "written twice in one commit", commits: [][]policy.Change{relabel("a", names(0, 20)...),
			append(relabel("b", names(0, 5)...), relabel("c", "n00")...)},
			wantChanged: []string{"n00", "n01", "n02", "n03", "n04", "n00"}},
		{name: "all removed", commits: [][]policy.Change{relabel("a", names(0, 20)...),
			func() (out []policy.Change) {
				for _, n := range names(0, 20) {
					out = append(out, nodeDelete(n))
				}
				return out
			}()},
			wantDelta: -20, wantChanged: names(0, 20)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			store := inmem.NewWithOpts(inmem.OptRoundTripOnWrite(false), inmem.OptReturnASTValuesOnRead(true))
			inv := New(store)
			if err := inv.Init(ctx); err != nil {
				t.Fatal(err)
			}
			model := map[string]string{}
			var w Written
			for _, commit := range tc.commits {
				before, _ := nodesIn(t, store)
				var beforeText string
				if before != nil {
					beforeText = before.String()
				}
				txn := storage.NewTransactionOrDie(ctx, store, storage.WriteParams)
				w = inv.Write(ctx, txn, commit, Whole, map[string][]byte{})
				if len(w.Refused) > 0 {
					t.Fatalf("refused: %v", w.Refused[0])
				}
				if err := store.Commit(ctx, txn); err != nil {
					t.Fatal(err)
				}
				if before != nil && before.String() != beforeText && distinct(w.Nodes) >= nodeRebuildAt {
					t.Errorf("the Nodes object held before the commit changed:\n%s\nnow\n%s", beforeText, before)
				}
				for _, ch := range commit {
					if ch.Object == nil {
						delete(model, ch.Delete.Name)
						continue
					}
					model[ch.Object.GetName()] = ch.Object.GetLabels()["v"]
				}
			}
			got, held := nodesIn(t, store)
			if tc.wantNone && held {
				t.Errorf("the store holds a Nodes object %v, want none", got)
			}
			gotModel := map[string]string{}
			if got != nil {
				got.Foreach(func(k, v *ast.Term) {
					label := v.Get(ast.StringTerm("metadata")).Get(ast.StringTerm("labels")).Get(ast.StringTerm("v"))
					gotModel[string(k.Value.(ast.String))] = string(label.Value.(ast.String))
				})
				if keys := got.Keys(); !slices.IsSortedFunc(keys, func(a, b *ast.Term) int { return a.Value.Compare(b.Value) }) {
					t.Errorf("keys not sorted: %v", keys)
				}
			}
			if !maps.Equal(gotModel, model) {
				t.Errorf("store holds %v, want %v", gotModel, model)
			}
			if d := w.Counts[NodeKind]; d != tc.wantDelta {
				t.Errorf("count changed by %d, want %d", d, tc.wantDelta)
			}
			if !slices.Equal(w.Nodes, tc.wantChanged) {
				t.Errorf("changed Nodes %v, want %v", w.Nodes, tc.wantChanged)
			}
			if w.Changed[NodeKind] != (len(tc.wantChanged) > 0) {
				t.Errorf("Node kind changed: %v, want %v", w.Changed[NodeKind], len(tc.wantChanged) > 0)
			}
		})
	}
}

// nodesIn reads the store's Nodes object in a transaction of its own.
func nodesIn(t *testing.T, store storage.Store) (ast.Object, bool) {
	t.Helper()
	ctx := context.Background()
	txn := storage.NewTransactionOrDie(ctx, store)
	defer store.Abort(ctx, txn)
	v, err := store.Read(ctx, txn, NodesPath)
	if storage.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return v.(ast.Object), true
}

// distinct counts the names in ns once each.
func distinct(ns []string) int {
	seen := map[string]bool{}
	for _, n := range ns {
		seen[n] = true
	}
	return len(seen)
}

// BenchmarkNodeWrites times a commit of n relabelled Nodes into an
// inventory of 5000: in all (ns/op), and the part spent in the store's
// Commit (commit-µs/op), which holds the lock requests wait for to open
// their transactions.
//
//	go test -run '^$' -bench NodeWrites ./opa/internal/inventory/
func BenchmarkNodeWrites(b *testing.B) {
	rebuildAt := nodeRebuildAt
	defer func() { nodeRebuildAt = rebuildAt }()
	for _, tc := range []struct {
		n         int
		rebuildAt int
		how       string
	}{
		{1, rebuildAt, "in place"}, {rebuildAt - 1, rebuildAt, "in place"}, {rebuildAt, rebuildAt, "rebuilt"},
		{10, rebuildAt, "rebuilt"}, {10, 1 << 30, "in place"},
	} {
		n := tc.n
		b.Run(fmt.Sprintf("nodes=%d/%s", n, tc.how), func(b *testing.B) {
			nodeRebuildAt = tc.rebuildAt
			ctx := context.Background()
			store := inmem.NewWithOpts(inmem.OptRoundTripOnWrite(false), inmem.OptReturnASTValuesOnRead(true))
			inv := New(store)
			if err := inv.Init(ctx); err != nil {
				b.Fatal(err)
			}
			node := func(i int, label string) policy.Change {
				return policy.Change{Object: &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": "v1", "kind": "Node",
					"metadata": map[string]any{"name": fmt.Sprintf("node-%05d", i), "labels": map[string]any{
						"v": label, "topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", i%3), "kubernetes.io/hostname": fmt.Sprintf("node-%05d", i)}},
					"spec": map[string]any{"taints": []any{map[string]any{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}}},
				}}}
			}
			commit := func(changes []policy.Change) time.Duration {
				txn := storage.NewTransactionOrDie(ctx, store, storage.WriteParams)
				if w := inv.Write(ctx, txn, changes, Whole, map[string][]byte{}); len(w.Refused) > 0 {
					b.Fatal(w.Refused[0])
				}
				start := time.Now()
				if err := store.Commit(ctx, txn); err != nil {
					b.Fatal(err)
				}
				return time.Since(start)
			}
			var all []policy.Change
			for i := range 5000 {
				all = append(all, node(i, "a"))
			}
			commit(all)
			var locked time.Duration
			round := 0
			for b.Loop() {
				round++
				changes := make([]policy.Change, n)
				for j := range n {
					changes[j] = node((round*n+j)*7%5000, fmt.Sprint(round))
				}
				locked += commit(changes)
			}
			b.ReportMetric(float64(locked.Microseconds())/float64(b.N), "commit-µs/op")
		})
	}
}
