package source

import (
	"context"
	"log/slog"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watchSettle is how long a burst of file-system events (an editor's
// write, a ConfigMap's ..data swap, a git-sync checkout) gathers before
// the scan it triggers.
const watchSettle = 20 * time.Millisecond

// folderWatch is the policy folder's file-system watch: it follows the
// folders the last scan read and says when something in them changed. It
// only makes scans sooner; the scan decides what changed, and the scan
// interval goes on, so a missed event (a folder outside the watch, such as
// the parent of a git-sync link; a platform without watches) costs at most
// one interval.
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

// follow watches folders and stops watching the ones no longer in it.
func (f *folderWatch) follow(folders []string) {
	if f.w == nil {
		return
	}
	want := make(map[string]bool, len(folders))
	for _, dir := range folders {
		want[dir] = true
		if f.watched[dir] {
			continue
		}
		if err := f.w.Add(dir); err != nil {
			f.log.Debug("cannot watch a policy folder; the scan interval covers it", "folder", dir, "err", err)
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

// settle lets a burst of events pass for d, draining them (and the
// watch's errors, which only cost a scan's delay).
func (f *folderWatch) settle(ctx context.Context, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			return
		case <-f.w.Events:
		case err := <-f.w.Errors:
			f.log.Debug("policy folder watch", "err", err)
		}
	}
}

func (f *folderWatch) close() {
	if f.w != nil {
		_ = f.w.Close()
	}
}
