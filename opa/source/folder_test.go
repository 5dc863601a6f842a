package source

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// engineFake keeps the objects it was given ("Kind/name" -> label v),
// the size of every Apply, and refuses the objects named bad-*.
type engineFake struct {
	mu      sync.Mutex
	objects map[string]string
	batches []int
}

func newEngineFake() *engineFake { return &engineFake{objects: map[string]string{}} }

func (e *engineFake) Apply(_ context.Context, changes []opa.Change) []*opa.ApplyError {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.batches = append(e.batches, len(changes))
	var errs []*opa.ApplyError
	for _, c := range changes {
		if c.Object == nil {
			delete(e.objects, c.Delete.GroupVersionKind.Kind+"/"+c.Delete.Name)
			continue
		}
		if strings.HasPrefix(c.Object.GetName(), "bad-") {
			errs = append(errs, &opa.ApplyError{Ref: opa.ObjectRef{GroupVersionKind: c.Object.GroupVersionKind(), Name: c.Object.GetName()}, Err: errors.New("refused by the fake")})
			continue
		}
		e.objects[c.Object.GetKind()+"/"+c.Object.GetName()] = c.Object.GetLabels()["v"]
	}
	return errs
}

// summary: how many objects of each label value, "v1:600,v2:3".
func (e *engineFake) summary() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	counts := map[string]int{}
	for _, v := range e.objects {
		counts[v]++
	}
	var parts []string
	for v, n := range counts {
		parts = append(parts, fmt.Sprintf("%s:%d", v, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func syncOnce(t *testing.T, d *Dir) {
	t.Helper()
	if err := d.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestDirReadsListsInChunks: a kubectl List of many Nodes reaches the
// engine item by item, in chunks, and so does a typed list.
func TestDirReadsListsInChunks(t *testing.T) { bothReads(t, testDirReadsListsInChunks) }

func testDirReadsListsInChunks(t *testing.T) {
	const n = 2*inventoryChunk + 10
	for _, tc := range []struct{ name, content string }{
		{"List", nodeList(n, "1")},
		{"NodeList", strings.Replace(strings.ReplaceAll(nodeList(n, "1"), "- apiVersion: v1\n  kind: Node\n  metadata:", "- metadata:"), "kind: List", "kind: NodeList", 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, filepath.Join(dir, "nodes.yaml"), tc.content)
			e := newEngineFake()
			d := NewDir(dir, e, DirOptions{})
			syncOnce(t, d)
			if got := fmt.Sprint(e.batches); got != "[250 250 10]" {
				t.Errorf("batches %s, want [250 250 10]", got)
			}
			if got := e.summary(); got != fmt.Sprintf("1:%d", n) {
				t.Errorf("engine holds %s", got)
			}
			if ok, note := d.Ready(); !ok || note != "" {
				t.Errorf("Ready() = %v, %q", ok, note)
			}
			// Rewritten with one Node changed and one gone: only they are
			// applied.
			content := strings.Replace(tc.content, "name: n7\n    labels: {v: \"1\"}", "name: n7\n    labels: {v: \"2\"}", 1)
			content = strings.Replace(content, "name: n9\n", "name: n9x\n", 1)
			write(t, filepath.Join(dir, "nodes.yaml"), content)
			e.batches = nil
			syncOnce(t, d)
			if got := fmt.Sprint(e.batches); got != "[2 1]" {
				t.Errorf("an update applied batches %s, want [2 1] (n7 and n9x, then n9 deleted)", got)
			}
			if got := e.summary(); got != fmt.Sprintf("1:%d,2:1", n-1) {
				t.Errorf("engine holds %s", got)
			}
		})
	}
}

// TestDirBrokenFileChangesNothing: a file that breaks after hundreds of
// good objects, in a list or in documents, leaves the engine as it was:
// nothing added, updated or removed, until it parses again.
func TestDirBrokenFileChangesNothing(t *testing.T) { bothReads(t, testDirBrokenFileChangesNothing) }

func testDirBrokenFileChangesNothing(t *testing.T) {
	const n = 600
	docs := func(v string, count int) string {
		var b strings.Builder
		for i := range count {
			b.WriteString("---\n" + nodeYAML(fmt.Sprintf("n%d", i), v))
		}
		return b.String()
	}
	brokenDoc := "---\napiVersion: v1\nkind: Node\nmetadata: {name: [\n"
	for _, tc := range []struct{ name, good, broken string }{
		{"List", nodeList(n, "1"), strings.Replace(nodeList(n-10, "2"), "kind: List", "- apiVersion: v1\n  kind: Node\n  metadata: {name: [\nkind: List", 1)},
		{"documents", docs("1", n), docs("2", n-10) + brokenDoc},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "nodes.yaml")
			e := newEngineFake()
			d := NewDir(dir, e, DirOptions{})

			write(t, path, tc.broken) // broken from the start: nothing applied
			syncOnce(t, d)
			if len(e.batches) != 0 || d.FileErrors() != 1 {
				t.Fatalf("a broken new file applied %v (file errors %d)", e.batches, d.FileErrors())
			}
			write(t, path, tc.good)
			syncOnce(t, d)
			if got := e.summary(); got != fmt.Sprintf("1:%d", n) {
				t.Fatalf("engine holds %s", got)
			}
			batches := len(e.batches)
			write(t, path, tc.broken+"\n") // an update that breaks late
			syncOnce(t, d)
			if got := e.summary(); got != fmt.Sprintf("1:%d", n) || len(e.batches) != batches {
				t.Errorf("a broken update changed the engine: %s, %d more batches", got, len(e.batches)-batches)
			}
			if ok, note := d.Ready(); !ok || !strings.Contains(note, "1 policy files do not parse") {
				t.Errorf("Ready() = %v, %q", ok, note)
			}
			// Verification does not read the broken file again and again.
			forceVerify(d)
			for range 5 {
				syncOnce(t, d)
			}
			if len(e.batches) != batches {
				t.Errorf("verifying a broken file applied %d batches", len(e.batches)-batches)
			}
		})
	}
}

// TestDirNamesRefusedObjects: list items that are not objects, and objects
// the engine refuses, are named by Ready and counted, until they are
// fixed or gone.
func TestDirNamesRefusedObjects(t *testing.T) { bothReads(t, testDirNamesRefusedObjects) }

func testDirNamesRefusedObjects(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "nodes.yaml")
	list := "apiVersion: v1\nitems:\n" +
		"- apiVersion: v1\n  kind: Node\n  metadata: {name: good}\n" +
		"- metadata: {name: no-kind}\n" +
		"- apiVersion: v1\n  kind: Node\n  metadata: {labels: {a: b}}\n" +
		"- apiVersion: v1\n  kind: Node\n  metadata: {name: bad-node}\n" +
		"kind: List\n"
	write(t, path, list)
	e := newEngineFake()
	d := NewDir(dir, e, DirOptions{})
	syncOnce(t, d)
	if got := e.summary(); got != ":1" {
		t.Errorf("engine holds %s, want only Node/good", got)
	}
	ok, note := d.Ready()
	for _, want := range []string{
		"3 policy folder objects refused",
		path + ": document 1, item 2: apiVersion and kind are required",
		path + ": document 1, item 3 (Node): metadata.name is required",
		"Node bad-node: refused by the fake",
	} {
		if !ok || !strings.Contains(note, want) {
			t.Errorf("Ready() = %v, %q: no %q", ok, note, want)
		}
	}
	if n := d.RefusedObjects(); n != 3 {
		t.Errorf("RefusedObjects() = %d, want 3", n)
	}
	st := d.Status()
	if len(st.Refused) != 1 || len(st.Files) != 1 || len(st.Files[0].Refused) != 2 {
		t.Errorf("Status() = %+v", st)
	}

	// A document without a name is refused too; the list's are fixed.
	write(t, path, "apiVersion: v1\nkind: Node\nmetadata: {labels: {a: b}}\n---\n"+nodeYAML("good", "1"))
	syncOnce(t, d)
	if ok, note := d.Ready(); !ok || !strings.Contains(note, "1 policy folder objects refused, not in force: "+path+": document 1 (Node): metadata.name is required") {
		t.Errorf("Ready() = %v, %q", ok, note)
	}
	write(t, path, nodeYAML("good", "1"))
	syncOnce(t, d)
	if ok, note := d.Ready(); !ok || note != "" || d.RefusedObjects() != 0 {
		t.Errorf("Ready() = %v, %q; %d refused", ok, note, d.RefusedObjects())
	}
}

// TestDirSpreadsVerification: verifying content hashes a bounded slice
// of the folder per scan, and still finds a rewrite that keeps size and
// modification time.
func TestDirSpreadsVerification(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "nodes.yaml")
	content := nodeList(8000, "1") // about 600 KB
	write(t, path, content)
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	e := newEngineFake()
	d := NewDir(dir, e, DirOptions{Interval: time.Second, VerifyInterval: time.Hour})
	syncOnce(t, d)
	batches := len(e.batches)

	// Same size, same time, one label changed.
	changed := strings.Replace(content, "name: n4321\n    labels: {v: \"1\"}", "name: n4321\n    labels: {v: \"2\"}", 1)
	if err := os.WriteFile(path, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, info.ModTime(), info.ModTime()); err != nil {
		t.Fatal(err)
	}
	forceVerify(d)
	scans := 0
	for e.summary() != "1:7999,2:1" {
		if scans++; scans > 20 {
			t.Fatalf("not found after %d scans: %s", scans-1, e.summary())
		}
		before := d.verify.offset
		syncOnce(t, d)
		if d.verify.offset > 0 && d.verify.offset-before > minVerifyBytes {
			t.Fatalf("a scan hashed %d bytes, past the budget of %d", d.verify.offset-before, minVerifyBytes)
		}
	}
	if want := len(content)/minVerifyBytes + 1; scans != want {
		t.Errorf("found after %d scans, want %d (the file in slices of %d bytes)", scans, want, minVerifyBytes)
	}
	// The next round starts VerifyInterval after this one did.
	offset := d.verify.offset
	syncOnce(t, d)
	if len(d.verify.queue) != 0 || d.verify.offset != offset {
		t.Errorf("a round started before VerifyInterval")
	}
	if len(e.batches) != batches+1 {
		t.Errorf("%d batches for the change, want 1", len(e.batches)-batches)
	}
}

// TestDirFileChangedBetweenPasses: a file rewritten between the pass that
// validates it and the pass that applies it: only what the first pass
// validated is applied, and the file is read again at the next scan.
func TestDirFileChangedBetweenPasses(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "nodes.yaml")
	write(t, path, nodeYAML("a", "1")+"---\n"+nodeYAML("b", "1")+"---\n"+nodeYAML("c", "1"))
	e := newEngineFake()
	d := NewDir(dir, e, DirOptions{})
	syncOnce(t, d)
	write(t, path, nodeYAML("a", "2")+"---\n"+nodeYAML("b", "2")+"---\n"+nodeYAML("c", "2"))
	d.mu.Lock()
	sv, err := d.survey(path)
	if err != nil {
		t.Fatal(err)
	}
	// Rewritten again before the second pass: a and c as surveyed, b not.
	write(t, path, nodeYAML("a", "2")+"---\n"+nodeYAML("b", "3")+"---\n"+nodeYAML("c", "2"))
	d.scans++
	sc := &scan{dir: d, ctx: context.Background(), changed: map[string]map[objectKey]digest{}}
	st := d.files[path]
	st.seen = d.scans
	sc.applyFile(path, st, sv)
	sc.finish()
	d.mu.Unlock()
	if got := e.summary(); got != "1:1,2:2" {
		t.Errorf("engine holds %s, want a and c at 2, b at 1", got)
	}
	if st.sum != ([32]byte{}) {
		t.Errorf("the file's sum is kept: it would not be read again")
	}
	syncOnce(t, d)
	if got := e.summary(); got != "2:2,3:1" {
		t.Errorf("engine holds %s after the next scan", got)
	}
}

// forceVerify makes the next scan start a verifying round.
func forceVerify(d *Dir) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.verify.started = time.Unix(1, 0)
}

// TestDirListForms: the forms a list comes in are updated in place, and an
// object whose items are not objects is one object.
func TestDirListForms(t *testing.T) { bothReads(t, testDirListForms) }

func testDirListForms(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content func(v string) string
		want    string // the engine after v=1 then v=2: "v:count"
	}{
		{"inline", func(v string) string {
			return fmt.Sprintf("apiVersion: v1\nkind: NodeList\nitems: [{metadata: {name: a, labels: {v: %q}}}, {metadata: {name: b}}]\n", v)
		}, "2:1,:1"},
		{"JSON", func(v string) string {
			return fmt.Sprintf(`{"apiVersion": "v1", "items": [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a", "labels": {"v": %q}}}], "kind": "List"}`, v)
		}, "2:1"},
		{"an object with items", func(v string) string {
			return fmt.Sprintf("apiVersion: example.com/v1\nitems:\n- a\n- %s\nkind: Shelf\nmetadata:\n  name: s\n  labels: {v: %q}\n", v, v)
		}, "2:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			e := newEngineFake()
			d := NewDir(dir, e, DirOptions{})
			write(t, filepath.Join(dir, "objects.yaml"), tc.content("1"))
			syncOnce(t, d)
			write(t, filepath.Join(dir, "objects.yaml"), tc.content("2"))
			syncOnce(t, d)
			if got := e.summary(); got != tc.want {
				t.Errorf("engine holds %s, want %s", got, tc.want)
			}
			if ok, note := d.Ready(); !ok || note != "" {
				t.Errorf("Ready() = %v, %q", ok, note)
			}
		})
	}
}

// TestDirReleasesMemoryAfterBulkLoads: a scan that read more than
// bulkLoadBytes returns the freed memory to the operating system; the
// scans that read little do not.
func TestDirReleasesMemoryAfterBulkLoads(t *testing.T) {
	released := 0
	defer func(f func(), n int64) { releaseMemory, bulkLoadBytes = f, n }(releaseMemory, bulkLoadBytes)
	releaseMemory = func() { released++ }
	dir := t.TempDir()
	content := nodeList(300, "1")
	bulkLoadBytes = int64(len(content))
	write(t, filepath.Join(dir, "nodes.yaml"), content)
	d := NewDir(dir, newEngineFake(), DirOptions{})
	syncOnce(t, d)
	syncOnce(t, d)
	write(t, filepath.Join(dir, "nodes.yaml"), nodeList(3, "1"))
	syncOnce(t, d)
	if released != 1 {
		t.Errorf("memory released %d times, want 1 (after the first scan)", released)
	}
}

// bothReads runs f with the files read as they are (every file of these
// tests is small: read whole, parsed once), then with every file streamed
// twice, as a file past wholeFileBytes is.
func bothReads(t *testing.T, f func(t *testing.T)) {
	for _, tc := range []struct {
		name  string
		bound int64
	}{{"whole", wholeFileBytes}, {"streamed", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			defer func(bound int64) { wholeFileBytes = bound }(wholeFileBytes)
			wholeFileBytes = tc.bound
			f(t)
		})
	}
}

// TestDirParsesSmallFilesOnce: a changed file up to wholeFileBytes is
// read and parsed once, a bigger one twice (streamed), and a file that
// grew past the bound after it was listed is streamed.
func TestDirParsesSmallFilesOnce(t *testing.T) {
	defer func(bound int64) { wholeFileBytes = bound }(wholeFileBytes)
	dir := t.TempDir()
	path := filepath.Join(dir, "nodes.yaml")
	e := newEngineFake()
	d := NewDir(dir, e, DirOptions{})
	ctx := context.Background()
	small, big := nodeList(10, "1"), nodeList(20, "2")
	wholeFileBytes = int64(len(small))
	for _, tc := range []struct {
		content    string
		wantLoaded int
		want       string
	}{
		{small, len(small), "1:10"},             // new
		{nodeList(10, "3"), len(small), "3:10"}, // rewritten
		{big, 2 * len(big), "2:20"},             // past the bound: two passes
		{small, len(small), "1:10"},             // back under it
	} {
		write(t, path, tc.content)
		loaded, err := d.sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if int(loaded) != tc.wantLoaded || e.summary() != tc.want {
			t.Errorf("a file of %d bytes (bound %d): %d bytes parsed, engine %s; want %d, %s",
				len(tc.content), wholeFileBytes, loaded, e.summary(), tc.wantLoaded, tc.want)
		}
	}

	// Listed small, grown past the bound when read: streamed.
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	write(t, path, nodeList(20, "4"))
	d.mu.Lock()
	d.scans++
	sc := &scan{dir: d, ctx: ctx, changed: map[string]map[objectKey]digest{}}
	st := d.files[path]
	st.seen = d.scans
	sc.load(path, st, info)
	sc.finish()
	d.mu.Unlock()
	if got := e.summary(); got != "4:20" || sc.loaded != 2*int64(len(nodeList(20, "4"))) {
		t.Errorf("a file grown past the bound: engine %s, %d bytes parsed", got, sc.loaded)
	}
}
