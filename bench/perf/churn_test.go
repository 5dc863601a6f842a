package perf

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestPrerenderWritesWhatUpdateRenders: a folder whose files were
// rendered ahead (Churn.Plan, NodeFolder.Prerender) ends with the bytes
// of a folder that rendered each write as it came, and renders nothing
// itself while the plan lasts.
func TestPrerenderWritesWhatUpdateRenders(t *testing.T) {
	const nodes, perFile, writes = 40, 5, 12
	for _, kind := range []ChurnKind{ChurnHeartbeat, ChurnLabels} {
		t.Run(string(kind), func(t *testing.T) {
			churn := &Churn{Rate: 10, Nodes: nodes, Batch: perFile}
			planned, numbers := churn.Plan(time.Duration(writes) * time.Second / 2)
			if len(planned) != writes {
				t.Fatalf("Plan gave %d writes, want %d", len(planned), writes)
			}
			ahead, err := WriteNodeFolder(t.TempDir(), KubeletNodes, nodes, perFile)
			if err != nil {
				t.Fatal(err)
			}
			live, err := WriteNodeFolder(t.TempDir(), KubeletNodes, nodes, perFile)
			if err != nil {
				t.Fatal(err)
			}
			ahead.SetKind(kind)
			live.SetKind(kind)
			if err := ahead.Prerender(planned, numbers); err != nil {
				t.Fatal(err)
			}
			counts := map[int]int{}
			for k := range writes {
				ns, us := churn.write(k, counts)
				for _, f := range []*NodeFolder{ahead, live} {
					if err := f.Update(context.Background(), ns, us); err != nil {
						t.Fatal(err)
					}
				}
			}
			if ahead.Rendered() != 0 || live.Rendered() != writes*perFile {
				t.Errorf("rendered during the run: %d with a plan, %d without; want 0 and %d", ahead.Rendered(), live.Rendered(), writes*perFile)
			}
			files, err := filepath.Glob(filepath.Join(live.dir, "*.yaml"))
			if err != nil || len(files) != nodes/perFile {
				t.Fatalf("%d files (%v), want %d", len(files), err, nodes/perFile)
			}
			for _, path := range files {
				want, _ := os.ReadFile(path)
				got, err := os.ReadFile(filepath.Join(ahead.dir, filepath.Base(path)))
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("%s differs when prerendered (%v)", filepath.Base(path), err)
				}
			}
		})
	}
}
