package source

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// discard is an engine that takes every change and keeps nothing: the
// benchmarks below time the folder source alone.
type discard struct{ changes int }

func (d *discard) Apply(_ context.Context, changes []opa.Change) []*opa.ApplyError {
	d.changes += len(changes)
	return nil
}

// kubeletNodesFile is a file of n kubelet-sized Nodes (testdata: node 0
// of bench/perf's KubeletNode, about 10 KB of YAML each, as kubectl
// writes it) at heartbeat k, one document each, as bench/perf's
// NodeFolder writes a file of the churn scenario's folder.
func kubeletNodesFile(tb testing.TB, n, k int) []byte {
	tb.Helper()
	node, err := os.ReadFile(filepath.Join("testdata", "kubelet-node.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	heartbeat := fmt.Sprintf("2025-11-24T16:%02d:%02dZ", k/60%60, k%60)
	var b strings.Builder
	for i := range n {
		doc := strings.ReplaceAll(string(node), "general-a-00000", fmt.Sprintf("general-a-%05d", i))
		doc = strings.ReplaceAll(doc, "2025-11-24T16:00:10Z", heartbeat)
		doc = strings.Replace(doc, `resourceVersion: "900000001"`, fmt.Sprintf(`resourceVersion: "%d"`, 900000000+i*100000+k), 1)
		b.WriteString("---\n" + doc)
	}
	return []byte(b.String())
}

// BenchmarkDirRewrite: a file of n kubelet-sized Nodes rewritten with
// every Node's heartbeat changed (through a hidden file renamed over it,
// as the churn scenario's folder is written), and the scan that applies
// it: what each of the 2 files a second of bench/README.md's churn
// scenario costs the folder source. With files > 1, the folder holds as
// many files of n small Nodes besides, as the scenario's 500 files of 10
// (small: the cost that grows with the folder is per file and object).
func BenchmarkDirRewrite(b *testing.B) {
	for _, tc := range []struct{ n, files int }{{10, 1}, {10, 500}, {250, 1}} {
		n := tc.n
		b.Run(fmt.Sprintf("nodes=%d/files=%d", n, tc.files), func(b *testing.B) {
			dir := b.TempDir()
			for f := 1; f < tc.files; f++ {
				var others strings.Builder
				for i := range n {
					others.WriteString("---\n" + nodeYAML(fmt.Sprintf("small-%05d", f*n+i), "1"))
				}
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("nodes-%05d.yaml", f*n)), []byte(others.String()), 0o644); err != nil {
					b.Fatal(err)
				}
			}
			path := filepath.Join(dir, "nodes-00000.yaml")
			versions := [][]byte{kubeletNodesFile(b, n, 1), kubeletNodesFile(b, n, 2)}
			rewrite := func(k int) {
				tmp := filepath.Join(dir, ".nodes-00000.yaml.tmp")
				if err := os.WriteFile(tmp, versions[k%2], 0o644); err != nil {
					b.Fatal(err)
				}
				if err := os.Rename(tmp, path); err != nil {
					b.Fatal(err)
				}
			}
			e := &discard{}
			d := NewDir(dir, e, DirOptions{})
			ctx := context.Background()
			rewrite(0)
			if err := d.Sync(ctx); err != nil {
				b.Fatal(err)
			}
			if e.changes != n*tc.files {
				b.Fatalf("%d changes applied, want %d", e.changes, n*tc.files)
			}
			e.changes = 0
			b.SetBytes(int64(len(versions[0])))
			b.ReportAllocs()
			b.ResetTimer()
			for k := 1; k <= b.N; k++ {
				b.StopTimer()
				rewrite(k)
				b.StartTimer()
				if err := d.Sync(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if e.changes != n*b.N {
				b.Fatalf("%d changes applied, want %d", e.changes, n*b.N)
			}
		})
	}
}
