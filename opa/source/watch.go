package source

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watchSettle is how long a burst of file-system events (an editor's
// write, a ConfigMap's ..data swap, a git-sync checkout) gathers before
// the scan it triggers.
const watchSettle = 20 * time.Millisecond

// Run scans until ctx ends.
//
// Without a file-system watch that covers the folder (no watch on this
// platform, a folder it could not add), every scan is whole: it lists the
// folder and checks every file's time, size and identity, every interval
// and as soon as the watch reports a change.
//
// With one, a change the watch reports rescans only the files it names
// (syncNamed; a whole scan when it names anything else), the interval's
// scans only hash the next slice of the content check (verify.go), and a
// whole scan runs every FullScanInterval for what a watch cannot see.
// Whole scans every 250 ms of a folder of 500 files took a few
// milliseconds of CPU each, a share of a small machine that the calls
// served beside them showed in their p99.
func (d *Dir) Run(ctx context.Context) {
	t := time.NewTicker(d.interval)
	defer t.Stop()
	w := newFolderWatch(d.log)
	defer w.close()
	whole, covered := true, false
	var lastWhole time.Time
	for {
		if whole {
			if err := d.Sync(ctx); err != nil {
				d.log.Error("policy folder scan failed", "err", err)
			}
			lastWhole = time.Now()
			covered = w.follow(d.watchList())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			whole = !covered || time.Since(lastWhole) >= d.fullScanInterval
			if !whole {
				whole = !d.verifySlice(ctx)
			}
		case ev := <-w.changed():
			names, lost := w.gather(ctx, ev, watchSettle)
			whole = !covered || lost || !d.syncNamed(ctx, names)
		case err := <-w.errors():
			d.log.Debug("policy folder watch; scanning the whole folder", "err", err)
			whole = true // events may have been lost (an overflow)
		}
	}
}

// watchList is what the watch follows: the folders the last whole scan
// read and those beyond them (listing).
func (d *Dir) watchList() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	l := d.listing
	out := slices.Concat(l.folders, l.targets)
	if l.rootLink != "" {
		out = append(out, filepath.Dir(l.rootLink))
	}
	return out
}

// syncNamed rescans the files a burst of watch events named, and reports
// false when the burst may mean more than a change to files the last whole
// scan listed (see nameEffect) or a named file was gone or unreadable: a
// whole scan follows then.
func (d *Dir) syncNamed(ctx context.Context, names []string) bool {
	return d.partial(ctx, func(sc *scan) {
		var listed []string
		for _, p := range names {
			switch d.nameEffect(p) {
			case nameIgnored:
			case nameListed:
				listed = append(listed, p)
			default:
				sc.missed = true
				return
			}
		}
		for _, p := range listed {
			sc.file(p)
		}
	})
}

// verifySlice hashes the next slice of the content check between whole
// scans; false when there is no whole scan to build on.
func (d *Dir) verifySlice(ctx context.Context) bool {
	return d.partial(ctx, func(sc *scan) { sc.verifyStep(d.listing.files) })
}

// partial runs a scan that reads only the files read reads, within the last
// whole scan's listing: the files it does not read keep that scan's mark,
// so finish deletes nothing. It reports false when the last whole scan
// failed or read reported a miss.
func (d *Dir) partial(ctx context.Context, read func(sc *scan)) bool {
	d.mu.Lock()
	if !d.synced || d.scanErr != nil {
		d.mu.Unlock()
		return false
	}
	sc := d.newScan(ctx)
	read(sc)
	sc.finish()
	if sc.dirty {
		d.summarize()
	}
	d.last = time.Now()
	d.mu.Unlock()
	if sc.loaded >= bulkLoadBytes {
		releaseMemory()
	}
	return !sc.missed
}

// nameEffect is what a watch event's name means for the folder.
type nameEffect int

const (
	// nameWhole: the name may change what the folder lists (a new policy
	// file, a folder, a link, a name beyond the folders read): a whole
	// scan decides.
	nameWhole nameEffect = iota
	// nameListed: a file the last whole scan listed; reading it again is
	// enough.
	nameListed
	// nameIgnored: a name the folder's listing does not read (a hidden or
	// non-YAML file, such as an editor's swap file or a temporary file
	// renamed into place), or one that came and went.
	nameIgnored
)

// nameEffect classifies an event's name (under mu).
func (d *Dir) nameEffect(p string) nameEffect {
	p = filepath.Clean(p)
	l := &d.listing
	dir := filepath.Dir(p)
	switch {
	case slices.Contains(l.targets, dir):
		return nameWhole // a file link's target may have changed, under another name
	case d.files[p] != nil:
		return nameListed
	case slices.Contains(l.folders, p):
		return nameWhole
	case !slices.Contains(l.folders, dir):
		if l.rootLink != "" && dir == filepath.Dir(l.rootLink) && p != l.rootLink {
			return nameIgnored // the root link's neighbours
		}
		return nameWhole
	}
	info, err := os.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nameIgnored // neither listed before nor there now
	case err != nil, info.Mode()&(fs.ModeSymlink|fs.ModeDir) != 0, policyFileName(filepath.Base(p)):
		return nameWhole
	}
	return nameIgnored
}

// folderWatch is the policy folder's file-system watch: it follows the
// folders the last whole scan read and says what changed in them.
type folderWatch struct {
	w       *fsnotify.Watcher // nil: no watch
	log     *slog.Logger
	watched map[string]bool
}

func newFolderWatch(log *slog.Logger) *folderWatch {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		log.Warn("no file-system watch on the policy folder; scanning at the interval only", "err", err)
	}
	return &folderWatch{w: w, log: log, watched: map[string]bool{}}
}

// follow watches folders and stops watching the ones no longer in it. It
// reports whether the watch covers them all.
func (f *folderWatch) follow(folders []string) (covered bool) {
	if f.w == nil {
		return false
	}
	covered = true
	want := make(map[string]bool, len(folders))
	for _, dir := range folders {
		want[dir] = true
		if f.watched[dir] {
			continue
		}
		if err := f.w.Add(dir); err != nil {
			f.log.Debug("cannot watch a policy folder; the scan interval covers it", "folder", dir, "err", err)
			covered = false
			continue
		}
		f.watched[dir] = true
	}
	for dir := range f.watched {
		if !want[dir] {
			_ = f.w.Remove(dir)
			delete(f.watched, dir)
		}
	}
	return covered
}

// changed delivers an event; never, without a watch.
func (f *folderWatch) changed() <-chan fsnotify.Event {
	if f.w == nil {
		return nil
	}
	return f.w.Events
}

// errors delivers the watch's errors (read, so that the watch never blocks
// on them); never, without a watch.
func (f *folderWatch) errors() <-chan error {
	if f.w == nil {
		return nil
	}
	return f.w.Errors
}

// gather lets a burst of events that started with first pass for d and
// returns the names they carried; lost when the watch reported an error
// meanwhile (events may be missing).
func (f *folderWatch) gather(ctx context.Context, first fsnotify.Event, d time.Duration) (names []string, lost bool) {
	names = append(names, first.Name)
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return names, true
		case <-timer.C:
			slices.Sort(names)
			return slices.Compact(names), lost
		case ev := <-f.w.Events:
			names = append(names, ev.Name)
		case err := <-f.w.Errors:
			f.log.Debug("policy folder watch", "err", err)
			lost = true
		}
	}
}

func (f *folderWatch) close() {
	if f.w != nil {
		_ = f.w.Close()
	}
}
