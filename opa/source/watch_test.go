package source

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNameEffect: what a watch event's name asks of the scans, on a folder
// with a subfolder, a file link to a folder beyond it, and a root that is
// a link (as git-sync makes it).
func TestNameEffect(t *testing.T) {
	top := t.TempDir()
	real := filepath.Join(top, "checkout")
	beyond := filepath.Join(top, "shared")
	write(t, filepath.Join(real, "a.yaml"), nodeYAML("a", "1"))
	write(t, filepath.Join(real, "sub", "b.yaml"), nodeYAML("b", "1"))
	write(t, filepath.Join(real, "notes.txt"), "not a policy file")
	write(t, filepath.Join(beyond, "c.yaml"), nodeYAML("c", "1"))
	write(t, filepath.Join(real, "new.yaml"), nodeYAML("n", "1"))
	link := func(target, name string) {
		if err := os.Symlink(target, name); err != nil {
			t.Fatal(err)
		}
	}
	link(filepath.Join(beyond, "c.yaml"), filepath.Join(real, "c.yaml"))
	root := filepath.Join(top, "current")
	link(real, root)

	d := NewDir(root, &recorder{objects: map[string]string{}}, DirOptions{})
	if err := d.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A file created after the scan: the listing does not hold it.
	write(t, filepath.Join(root, "later.yaml"), nodeYAML("l", "1"))
	write(t, filepath.Join(root, ".later.yaml.swp"), "swap")
	write(t, filepath.Join(root, "later.yaml.tmp"), "temporary")
	link("a.yaml", filepath.Join(root, "alias.yaml"))
	if err := os.Mkdir(filepath.Join(root, "newfolder"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want nameEffect
	}{
		{filepath.Join(root, "a.yaml"), nameListed},
		{filepath.Join(root, "sub", "b.yaml"), nameListed},
		{filepath.Join(root, "sub") + "/./b.yaml", nameListed},
		{filepath.Join(root, "c.yaml"), nameListed},
		{filepath.Join(root, "later.yaml"), nameWhole},   // a new policy file
		{filepath.Join(root, "alias.yaml"), nameWhole},   // a new link
		{filepath.Join(root, "newfolder"), nameWhole},    // a new folder
		{filepath.Join(root, "sub"), nameWhole},          // a folder read (removed, renamed)
		{filepath.Join(beyond, "c.yaml"), nameWhole},     // a link's target
		{filepath.Join(beyond, "other.yaml"), nameWhole}, // beside a link's target
		{root, nameWhole}, // the root link, retargeted
		{filepath.Join(top, "elsewhere"), nameIgnored},        // the root link's neighbours
		{filepath.Join(root, "notes.txt"), nameIgnored},       // not a policy file
		{filepath.Join(root, ".later.yaml.swp"), nameIgnored}, // hidden
		{filepath.Join(root, "later.yaml.tmp"), nameIgnored},  // a temporary file, before its rename
		{filepath.Join(root, "gone.yaml"), nameIgnored},       // came and went
		{filepath.Join(t.TempDir(), "x.yaml"), nameWhole},     // beyond everything followed
	} {
		d.mu.Lock()
		got := d.nameEffect(tc.name)
		d.mu.Unlock()
		if got != tc.want {
			t.Errorf("nameEffect(%s) = %d, want %d", strings.TrimPrefix(tc.name, top), got, tc.want)
		}
	}
}

// TestDirWatchRescansOnlyWhatChanged: with a watch, an in-place rewrite
// and a rename into place are read without a whole scan, however often
// the interval ticks; a removal, a new file and a git-sync style swap of
// the root link are read through one. Without the watch's events none of
// them would be seen: the whole scans' interval is beyond the test.
func TestDirWatchRescansOnlyWhatChanged(t *testing.T) {
	top := t.TempDir()
	write(t, filepath.Join(top, "v1", "a.yaml"), nodeYAML("a", "1"))
	write(t, filepath.Join(top, "v1", "b.yaml"), nodeYAML("b", "1"))
	root := filepath.Join(top, "current")
	if err := os.Symlink("v1", root); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{objects: map[string]string{}}
	d := NewDir(root, rec, DirOptions{Interval: 5 * time.Millisecond, FullScanInterval: time.Hour, VerifyInterval: time.Hour})
	wholeScans := func() uint64 {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.scans
	}
	runDir(t, d)
	waitFor(t, "the first scan", func() bool { return rec.keys() == "Node/a=1,Node/b=1" })
	first := wholeScans()

	write(t, filepath.Join(root, "a.yaml"), nodeYAML("a", "2"))
	waitFor(t, "an in-place rewrite", func() bool { return rec.keys() == "Node/a=2,Node/b=1" })
	tmp := filepath.Join(root, "b.yaml.tmp")
	write(t, tmp, nodeYAML("b", "2"))
	if err := os.Rename(tmp, filepath.Join(root, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a rename into place", func() bool { return rec.keys() == "Node/a=2,Node/b=2" })
	time.Sleep(50 * time.Millisecond) // ten ticks
	if n := wholeScans(); n != first {
		t.Errorf("%d whole scans for changes to listed files, want none", n-first)
	}

	if err := os.Remove(filepath.Join(root, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a removal", func() bool { return rec.keys() == "Node/a=2" })
	write(t, filepath.Join(root, "c.yaml"), nodeYAML("c", "1"))
	waitFor(t, "a new file", func() bool { return rec.keys() == "Node/a=2,Node/c=1" })

	write(t, filepath.Join(top, "v2", "a.yaml"), nodeYAML("a", "3"))
	if err := os.Symlink("v2", filepath.Join(top, "current.tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(top, "current.tmp"), root); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the root link's swap", func() bool { return rec.keys() == "Node/a=3" })
}

// TestDirWatchVerifiesBetweenWholeScans: with a watch, the interval's
// scans go on comparing content, so a rewrite that keeps the file's size
// and modification time is still read, without a whole scan.
func TestDirWatchVerifiesBetweenWholeScans(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "a.yaml")
	write(t, p, nodeYAML("a", "1"))
	write(t, filepath.Join(root, "b.yaml"), nodeYAML("b", "1"))
	rec := &recorder{objects: map[string]string{}}
	d := NewDir(root, rec, DirOptions{Interval: 5 * time.Millisecond, FullScanInterval: time.Hour, VerifyInterval: 20 * time.Millisecond})
	runDir(t, d)
	waitFor(t, "the first scan", func() bool { return rec.keys() == "Node/a=1,Node/b=1" })
	d.mu.Lock()
	first := d.scans
	d.mu.Unlock()

	info, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(nodeYAML("a", "2")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, info.ModTime(), info.ModTime()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the same-size rewrite", func() bool { return rec.keys() == "Node/a=2,Node/b=1" })
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.scans != first {
		t.Errorf("%d whole scans, want none", d.scans-first)
	}
}

// runDir runs d until the test ends.
func runDir(t *testing.T, d *Dir) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}
