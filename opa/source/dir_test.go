package source

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// recorder is a fake engine: it keeps the objects it was given.
type recorder struct {
	mu      sync.Mutex
	objects map[string]string // "Kind/name" -> label "v"
	batches int
}

func (r *recorder) Apply(_ context.Context, changes []opa.Change) []*opa.ApplyError {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches++
	for _, c := range changes {
		if c.Object != nil {
			r.objects[c.Object.GetKind()+"/"+c.Object.GetName()] = c.Object.GetLabels()["v"]
		} else {
			delete(r.objects, c.Delete.GroupVersionKind.Kind+"/"+c.Delete.Name)
		}
	}
	return nil
}

func (r *recorder) keys() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ks []string
	for k, v := range r.objects {
		ks = append(ks, k+"="+v)
	}
	sort.Strings(ks)
	return strings.Join(ks, ",")
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	// Make sure the scan sees a new modification time.
	future := time.Now().Add(time.Duration(len(content)) * time.Millisecond)
	_ = os.Chtimes(path, future, future)
}

func nodeYAML(name, v string) string {
	return "apiVersion: v1\nkind: Node\nmetadata:\n  name: " + name + "\n  labels: {v: \"" + v + "\"}\n"
}

func TestDirSync(t *testing.T) { bothReads(t, testDirSync) }

func testDirSync(t *testing.T) {
	dir := t.TempDir()
	rec := &recorder{objects: map[string]string{}}
	d := NewDir(dir, rec, DirOptions{})
	ctx := context.Background()

	write(t, filepath.Join(dir, "nodes.yaml"), nodeYAML("a", "1")+"---\n"+nodeYAML("b", "1"))
	write(t, filepath.Join(dir, "sub", "more.yml"), nodeYAML("c", "1"))
	write(t, filepath.Join(dir, "testdata", "ignored.yaml"), nodeYAML("fixture", "1"))
	write(t, filepath.Join(dir, "suite.yaml"), "kind: Suite\napiVersion: test.gatekeeper.sh/v1alpha1\nmetadata: {name: s}\ntests: []\n")
	write(t, filepath.Join(dir, ".swap.yaml"), "garbage: [")
	if ok, _ := d.Ready(); ok {
		t.Fatal("ready before the first scan")
	}
	if err := d.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rec.keys(); got != "Node/a=1,Node/b=1,Node/c=1" {
		t.Fatalf("after first scan: %s", got)
	}
	if ok, _ := d.Ready(); !ok {
		t.Fatal("not ready after the first scan")
	}

	// A rescan with no change applies nothing.
	batches := rec.batches
	if err := d.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if rec.batches != batches {
		t.Errorf("an unchanged folder was applied again")
	}

	// A half-written file is reported and its objects stay.
	write(t, filepath.Join(dir, "nodes.yaml"), nodeYAML("a", "2")+"---\napiVersion: v1\nkind: Node\nmetadata: {name: [")
	if err := d.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rec.keys(); got != "Node/a=1,Node/b=1,Node/c=1" {
		t.Fatalf("after a broken write: %s", got)
	}
	if d.FileErrors() != 1 || !strings.Contains(statusError(d), "nodes.yaml") {
		t.Errorf("broken file not reported: %+v", d.Status())
	}

	// Finished: a updated, b removed.
	write(t, filepath.Join(dir, "nodes.yaml"), nodeYAML("a", "2")+"\n\n")
	if err := d.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rec.keys(); got != "Node/a=2,Node/c=1" {
		t.Fatalf("after the fix: %s", got)
	}
	if d.FileErrors() != 0 {
		t.Errorf("error not cleared: %+v", d.Status())
	}

	// An object moving between files is not deleted.
	write(t, filepath.Join(dir, "sub", "more.yml"), "")
	write(t, filepath.Join(dir, "moved.yaml"), nodeYAML("c", "3"))
	if err := d.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rec.keys(); got != "Node/a=2,Node/c=3" {
		t.Fatalf("after a move: %s", got)
	}

	// Removing a file removes its objects.
	if err := os.Remove(filepath.Join(dir, "nodes.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rec.keys(); got != "Node/c=3" {
		t.Fatalf("after a removal: %s", got)
	}
}

func statusError(d *Dir) string {
	var b strings.Builder
	for _, f := range d.Status().Files {
		if f.Error != "" {
			b.WriteString(f.Path + ": " + f.Error)
		}
	}
	return b.String()
}

func TestReadObjects(t *testing.T) {
	objs, err := ReadObjects(strings.NewReader("# comment only\n---\n" + nodeYAML("a", "1") + "---\n\n---\n" + nodeYAML("b", "1")))
	if err != nil || len(objs) != 2 {
		t.Fatalf("objects %d, error %v", len(objs), err)
	}
	// The last: a Node and a Pod written as one document (no '---'); the
	// Node must not be dropped without a word.
	for _, bad := range []string{"kind: Node\nmetadata: {name: a}\n", "apiVersion: v1\nkind: [\n",
		nodeYAML("a", "1") + "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\n"} {
		if _, err := ReadObjects(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "document 1") {
			t.Errorf("%q: error = %v", bad, err)
		}
	}
}

// sizes is a fake engine that records what each Apply held.
type sizes struct {
	mu      sync.Mutex
	batches []string // per Apply: "inventory N" or "policies N"
}

func (s *sizes) Apply(_ context.Context, changes []opa.Change) []*opa.ApplyError {
	s.mu.Lock()
	defer s.mu.Unlock()
	policies := 0
	for _, c := range changes {
		if c.Object != nil && (c.Object.GroupVersionKind().Group == opa.TemplateGroup || c.Object.GroupVersionKind().Group == opa.ConstraintGroup) {
			policies++
		}
	}
	if policies > 0 {
		s.batches = append(s.batches, fmt.Sprintf("policies %d of %d", policies, len(changes)))
	} else {
		s.batches = append(s.batches, fmt.Sprintf("inventory %d", len(changes)))
	}
	return nil
}

// TestDirSyncBoundsBatches: a folder of many Nodes reaches the engine in
// chunks (the scan never holds them all), while the templates and
// constraints spread over several files arrive in one batch, after them.
func TestDirSyncBoundsBatches(t *testing.T) {
	dir := t.TempDir()
	var nodes strings.Builder
	for i := range 2*inventoryChunk + 10 {
		fmt.Fprintf(&nodes, "---\n%s", nodeYAML(fmt.Sprintf("n%d", i), "1"))
	}
	write(t, filepath.Join(dir, "a-nodes.yaml"), nodes.String())
	write(t, filepath.Join(dir, "b-template.yaml"), "apiVersion: templates.gatekeeper.sh/v1\nkind: ConstraintTemplate\nmetadata: {name: k8sx}\n")
	write(t, filepath.Join(dir, "c-constraint.yaml"), "apiVersion: constraints.gatekeeper.sh/v1beta1\nkind: K8sX\nmetadata: {name: x}\n")
	write(t, filepath.Join(dir, "d-namespace.yaml"), "apiVersion: v1\nkind: Namespace\nmetadata: {name: ns}\n")
	rec := &sizes{}
	if err := NewDir(dir, rec, DirOptions{}).Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"inventory 250", "inventory 250", "inventory 11", "policies 2 of 2"}
	if strings.Join(rec.batches, ", ") != strings.Join(want, ", ") {
		t.Errorf("batches %v, want %v", rec.batches, want)
	}
}

// TestDirFollowsLinks: the layouts policy folders come in. git-sync points
// a link at the checkout; a ConfigMap volume links each key through a
// hidden "..data" link that is swapped on update; folders may link to
// others, in loops too.
func TestDirFollowsLinks(t *testing.T) {
	link := func(t *testing.T, target, name string) {
		t.Helper()
		if err := os.Symlink(target, name); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		layout func(t *testing.T, base string) (root string)
		want   string
		update func(t *testing.T, base string) // then want2
		want2  string
	}{
		{
			name: "root is a link (git-sync)",
			layout: func(t *testing.T, base string) string {
				write(t, filepath.Join(base, "rev1", "nodes.yaml"), nodeYAML("a", "1"))
				link(t, "rev1", filepath.Join(base, "current"))
				return filepath.Join(base, "current")
			},
			want: "Node/a=1",
			update: func(t *testing.T, base string) {
				write(t, filepath.Join(base, "rev2", "nodes.yaml"), nodeYAML("a", "2")+"---\n"+nodeYAML("b", "2"))
				link(t, "rev2", filepath.Join(base, "next"))
				if err := os.Rename(filepath.Join(base, "next"), filepath.Join(base, "current")); err != nil {
					t.Fatal(err)
				}
			},
			want2: "Node/a=2,Node/b=2",
		},
		{
			name: "ConfigMap volume",
			layout: func(t *testing.T, base string) string {
				root := filepath.Join(base, "volume")
				write(t, filepath.Join(root, "..2026_12_01_1", "nodes.yaml"), nodeYAML("a", "1"))
				link(t, "..2026_12_01_1", filepath.Join(root, "..data"))
				link(t, filepath.Join("..data", "nodes.yaml"), filepath.Join(root, "nodes.yaml"))
				return root
			},
			want: "Node/a=1",
			update: func(t *testing.T, base string) {
				root := filepath.Join(base, "volume")
				// Same size, so only the file's identity tells the change.
				write(t, filepath.Join(root, "..2026_12_01_2", "nodes.yaml"), nodeYAML("a", "2"))
				link(t, "..2026_12_01_2", filepath.Join(root, "..data_tmp"))
				if err := os.Rename(filepath.Join(root, "..data_tmp"), filepath.Join(root, "..data")); err != nil {
					t.Fatal(err)
				}
			},
			want2: "Node/a=2",
		},
		{
			name: "linked folders and a loop",
			layout: func(t *testing.T, base string) string {
				root := filepath.Join(base, "root")
				write(t, filepath.Join(base, "shared", "nodes.yaml"), nodeYAML("s", "1"))
				write(t, filepath.Join(root, "own.yaml"), nodeYAML("o", "1"))
				link(t, filepath.Join(base, "shared"), filepath.Join(root, "shared"))
				link(t, root, filepath.Join(base, "shared", "back")) // root/shared/back -> root
				link(t, "missing", filepath.Join(root, "dangling.yaml"))
				return root
			},
			want: "Node/o=1,Node/s=1",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			rec := &recorder{objects: map[string]string{}}
			d := NewDir(tc.layout(t, base), rec, DirOptions{})
			if err := d.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := rec.keys(); got != tc.want {
				t.Fatalf("loaded %q, want %q", got, tc.want)
			}
			if tc.update == nil {
				return
			}
			tc.update(t, base)
			if err := d.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := rec.keys(); got != tc.want2 {
				t.Errorf("after the update %q, want %q", got, tc.want2)
			}
		})
	}
}

// TestDirSeesContentChanges: a rewrite that keeps size and modification
// time is found by the scan that verifies content; a touch that changes
// nothing applies nothing.
func TestDirSeesContentChanges(t *testing.T) { bothReads(t, testDirSeesContentChanges) }

func testDirSeesContentChanges(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "nodes.yaml")
	write(t, path, nodeYAML("a", "1"))
	info, _ := os.Stat(path)
	rec := &recorder{objects: map[string]string{}}
	d := NewDir(dir, rec, DirOptions{VerifyInterval: time.Hour})
	ctx := context.Background()
	if err := d.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	batches := rec.batches

	// Touched: a new modification time, the same bytes.
	later := info.ModTime().Add(time.Minute)
	_ = os.Chtimes(path, later, later)
	if err := d.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if rec.batches != batches {
		t.Error("a touched file was applied again")
	}

	// Rewritten in place with the same size and time (rsync -t, tar -x).
	if err := os.WriteFile(path, []byte(nodeYAML("a", "2")), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.Chtimes(path, later, later)
	if err := d.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rec.keys(); got != "Node/a=1" {
		t.Fatalf("a scan that does not verify content read the file: %s", got)
	}
	forceVerify(d) // the verify interval has passed
	if err := d.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rec.keys(); got != "Node/a=2" {
		t.Errorf("the verifying scan missed the rewrite: %s", got)
	}
}

func TestDirReadiness(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "policies")
	rec := &recorder{objects: map[string]string{}}
	d := NewDir(root, rec, DirOptions{})
	ctx := context.Background()
	ready := func(wantReady bool, wantNote string) {
		t.Helper()
		ok, note := d.Ready()
		if ok != wantReady || !strings.Contains(note, wantNote) || (wantNote == "" && note != "") {
			t.Errorf("Ready() = %v, %q; want %v, a note with %q", ok, note, wantReady, wantNote)
		}
	}
	if err := d.Sync(ctx); err == nil {
		t.Fatal("a missing folder synced without an error")
	}
	ready(false, "no such file or directory")

	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	ready(true, "holds no objects: nothing is enforced from it")

	write(t, filepath.Join(root, "nodes.yaml"), nodeYAML("a", "1"))
	write(t, filepath.Join(root, "broken.yaml"), "kind: [")
	if err := d.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	ready(true, "1 policy files do not parse, their last good objects stay in force (first: "+filepath.Join(root, "broken.yaml"))

	write(t, filepath.Join(root, "broken.yaml"), nodeYAML("b", "1"))
	if err := d.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	ready(true, "")

	// The folder goes away: what it held stays, readiness says since when.
	if err := os.Rename(root, root+".gone"); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(ctx); err == nil {
		t.Fatal("a vanished folder synced without an error")
	}
	ready(true, "policy folder unreadable since ")
	if got := rec.keys(); got != "Node/a=1,Node/b=1" {
		t.Errorf("a vanished folder changed the engine: %s", got)
	}
}

// TestDirWatchScansOnChange: with a scan interval far beyond the test, a
// new file, a new folder's file, and a ConfigMap-style ..data swap are
// still applied: the file-system watch triggers the scan.
func TestDirWatchScansOnChange(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "..v1", "nodes.yaml"), nodeYAML("a", "1"))
	if err := os.Symlink("..v1", filepath.Join(root, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "nodes.yaml"), filepath.Join(root, "nodes.yaml")); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{objects: map[string]string{}}
	d := NewDir(root, rec, DirOptions{Interval: time.Hour, VerifyInterval: time.Hour})
	runDir(t, d)
	waitFor(t, "the first scan", func() bool { return rec.keys() == "Node/a=1" })

	write(t, filepath.Join(root, "more.yaml"), nodeYAML("b", "1"))
	waitFor(t, "a new file", func() bool { return rec.keys() == "Node/a=1,Node/b=1" })

	if err := os.MkdirAll(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new folder watched", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, f := range d.listing.folders {
			if f == filepath.Join(root, "sub") {
				return true
			}
		}
		return false
	})
	write(t, filepath.Join(root, "sub", "c.yaml"), nodeYAML("c", "1"))
	waitFor(t, "a file in a new folder", func() bool { return strings.Contains(rec.keys(), "Node/c=1") })

	write(t, filepath.Join(root, "..v2", "nodes.yaml"), nodeYAML("a", "2"))
	if err := os.Symlink("..v2", filepath.Join(root, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(root, "..data_tmp"), filepath.Join(root, "..data")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ..data swap", func() bool { return strings.Contains(rec.keys(), "Node/a=2") })
}

// TestDirScansWithoutGarbage: a scan of an unchanged folder, verifying its
// content or not, makes little garbage. The service's collector runs
// under its requests, and a folder of thousands of Node files is scanned
// every 250 ms and read whole every VerifyInterval: fresh buffers per
// file and a map of every object per scan paced it.
func TestDirScansWithoutGarbage(t *testing.T) {
	dir := t.TempDir()
	const files = 200
	pad := strings.Repeat("x", 4000) // a Node file of about 4 KB
	folderBytes := 0
	for i := range files {
		content := nodeYAML(fmt.Sprintf("n%d", i), "1") + "  annotations: {pad: \"" + pad + "\"}\n"
		folderBytes += len(content)
		write(t, filepath.Join(dir, fmt.Sprintf("node-%03d.yaml", i)), content)
	}
	rec := &recorder{objects: map[string]string{}}
	d := NewDir(dir, rec, DirOptions{VerifyInterval: time.Hour})
	ctx := context.Background()
	if err := d.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.objects); n != files {
		t.Fatalf("%d objects read, want %d", n, files)
	}
	batches := rec.batches
	// The least of three rounds: TotalAlloc counts every goroutine's
	// allocations, and another test's may still be running.
	allocated := func(verify bool) uint64 {
		t.Helper()
		least := uint64(math.MaxUint64)
		for range 3 {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for range 5 {
				if verify {
					forceVerify(d)
				}
				if err := d.Sync(ctx); err != nil {
					t.Fatal(err)
				}
			}
			runtime.ReadMemStats(&after)
			least = min(least, (after.TotalAlloc-before.TotalAlloc)/5)
		}
		return least
	}
	// Listing and stating the files allocates per file (paths, FileInfo):
	// about half a kilobyte each, whatever their size (a set of every
	// object or every path per scan made it 780 bytes).
	if per := allocated(false); per > uint64(files)*640 {
		t.Errorf("a scan of an unchanged folder allocated %d bytes, want at most %d", per, files*640)
	}
	if per := allocated(true); per > uint64(folderBytes)/4 {
		t.Errorf("a verifying scan of an unchanged folder of %d bytes allocated %d bytes", folderBytes, per)
	}
	if rec.batches != batches {
		t.Errorf("scans of an unchanged folder applied %d batches", rec.batches-batches)
	}
}
