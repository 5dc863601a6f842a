// Package source feeds the engine from where policies and inventory live:
// a folder of YAML files (this file) or a cluster (package kube). A source
// only reads objects and sends changes to the engine; it knows nothing of
// Rego or HTTP.
package source

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// Applier is what a source feeds: the engine.
type Applier interface {
	Apply(ctx context.Context, changes []opa.Change) []*opa.ApplyError
}

// Dir loads every YAML file below a folder: ConstraintTemplates,
// Constraints and inventory objects (Nodes, Namespaces, anything else).
// Folders named testdata and documents of kind Suite are skipped, so a
// policy can keep its gator suite and fixtures beside it. It watches and
// polls the folder (watch.go) and applies what changed; a file that does
// not parse (for example one that is half written) is reported and the
// objects it last held stay in force until it parses again.
//
// Files are parsed document by document and list item by list item
// (load.go): a file of up to 4 MiB is read whole, once; a bigger one, such
// as a `kubectl get nodes -o yaml` of thousands of Nodes, as streams,
// never held whole.
type Dir struct {
	root     string
	applier  Applier
	interval time.Duration
	// fullScanInterval paces the whole scans where a watch covers the
	// folder (watch.go).
	fullScanInterval time.Duration
	log              *slog.Logger

	mu     sync.Mutex
	files  map[string]*fileState
	synced bool
	last   time.Time
	// listing is what the last scan listed: its files, and the folders
	// the watch follows (watch.go).
	listing listing
	// scanErr is why the last scan could not list the folder, since
	// scanFailed; nil when it could.
	scanErr    error
	scanFailed time.Time
	// scans counts the scans (fileState.seen).
	scans uint64
	// verify compares the files' content a slice per scan (verify.go).
	verify         verifier
	verifyInterval time.Duration
	// br, hashBuf, hasher and whole (a small file read whole, load.go)
	// are reused from file to file and scan to scan (under mu): fresh
	// buffers per file were garbage that paced the collector under the
	// requests.
	br      *bufio.Reader
	hashBuf []byte
	hasher  hash.Hash
	whole   bytes.Buffer
	// refused are the objects the engine refused, by object, with why;
	// batchErr is why the last Apply failed as a whole ("" when it did
	// not).
	refused  map[refusalKey]string
	batchErr string
	// summary is what Ready and the metrics read, updated by the scans:
	// they never wait for a scan (one that reads a big file takes
	// seconds).
	summary atomic.Pointer[dirSummary]
}

// refusalKey names a refused object; the version is left out (the
// engine names a refused template without it).
type refusalKey struct {
	group, kind, namespace, name string
}

func refusalKeyOf(ref opa.ObjectRef) refusalKey {
	return refusalKey{ref.GroupVersionKind.Group, ref.GroupVersionKind.Kind, ref.Namespace, ref.Name}
}

type fileState struct {
	info    os.FileInfo
	modTime time.Time
	size    int64
	sum     [sha256.Size]byte // of the file's bytes
	// objects are what the file held when it last parsed, as digests: the
	// engine keeps the objects themselves, and a folder of 5000 Nodes
	// would otherwise be held twice (as unstructured maps, several times
	// their JSON size).
	objects map[objectKey]digest
	err     error
	// refused are the file's list items that are not objects (no kind,
	// no name) and its documents without a name, and why, as it last
	// parsed.
	refused []string
	// seen is the number of the last scan that listed the file.
	seen uint64
}

// digest is what a change needs of an object the folder held: its kind,
// to delete it, and a hash of its bytes in the file (of its content, for
// the items of a list written inline), to see whether it changed. The
// bytes are hashed as they stream by; an object rewritten in another
// layout is applied again, which changes nothing.
type digest struct {
	gvk schema.GroupVersionKind
	sum [sha256.Size]byte
}

func (d digest) unchanged(next digest) bool { return d == next }

type objectKey struct {
	apiVersion, kind, namespace, name string
}

func keyOf(u *unstructured.Unstructured) objectKey {
	return objectKey{u.GetAPIVersion(), u.GetKind(), u.GetNamespace(), u.GetName()}
}

// DirOptions configure a Dir.
type DirOptions struct {
	// Interval between scans (default 250ms: changes apply within a second).
	// A scan reads the files whose modification time, size or identity
	// changed. Where a file-system watch covers the folder (watch.go),
	// changes apply as the watch reports them and the interval only paces
	// the content check below.
	Interval time.Duration
	// FullScanInterval is, where a file-system watch covers the folder,
	// how often a scan lists the whole folder and checks every file's time,
	// size and identity anyway, for what a watch cannot see (a link
	// retargeted beyond the folders watched, an event lost). Default 10s.
	// Without such a watch every scan is whole.
	FullScanInterval time.Duration
	// VerifyInterval is how often the scans start comparing every file's
	// content with what was read, for changes that keep the modification
	// time and size (a copy that preserves times, a same-size rewrite
	// within the file system's time granularity). Default 10s. The
	// comparison is spread over the scans, a slice of the folder each
	// (about the folder's size times Interval / VerifyInterval, at most
	// 1 MiB per scan), so that no scan does a burst of work: such a change
	// is found within VerifyInterval, or, for folders past 40 MiB at the
	// default interval, the time to hash the folder at 4 MiB/s.
	VerifyInterval time.Duration
	Logger         *slog.Logger
}

// NewDir makes a folder source; Run starts it.
func NewDir(root string, applier Applier, opts DirOptions) *Dir {
	if opts.Interval <= 0 {
		opts.Interval = 250 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.VerifyInterval <= 0 {
		opts.VerifyInterval = 10 * time.Second
	}
	if opts.FullScanInterval <= 0 {
		opts.FullScanInterval = 10 * time.Second
	}
	d := &Dir{root: root, applier: applier, interval: opts.Interval, fullScanInterval: opts.FullScanInterval,
		verifyInterval: opts.VerifyInterval, log: opts.Logger,
		files: map[string]*fileState{}, br: bufio.NewReaderSize(nil, readBufferSize), hashBuf: make([]byte, readBufferSize),
		hasher: sha256.New(), refused: map[refusalKey]string{}}
	d.verify.h, d.verify.buf = sha256.New(), make([]byte, readBufferSize)
	d.summary.Store(&dirSummary{root: root})
	return d
}

// Sync scans the folder once and applies the changes. It returns an error
// only when the folder itself cannot be read; per-file problems are in
// Status.
//
// Inventory objects are applied as the files holding them are read, in
// chunks of inventoryChunk, so that a folder of thousands of Nodes is never
// held in memory all at once; templates and constraints, and deletions,
// are applied together once the whole folder is read, so that a policy
// set changes in one step.
//
// A scan that read more than bulkLoadBytes gives the memory it freed back
// to the operating system, so that the process's RSS follows its live heap
// after a bulk load rather than the load's peak.
func (d *Dir) Sync(ctx context.Context) error {
	loaded, err := d.sync(ctx)
	if loaded >= bulkLoadBytes {
		releaseMemory()
	}
	return err
}

// bulkLoadBytes is how much a scan reads (parsing) before it returns the
// freed memory to the operating system. Below it the collector's own
// pace returns it soon enough.
var bulkLoadBytes int64 = 16 << 20

// releaseMemory is debug.FreeOSMemory: a collection, then every free page
// returned. It costs one forced collection after a bulk load, which is
// rare, and leaves the heap floor (cmd/opa-scheduler-extender/heapfloor)
// as it was: the floor sets the next collection's goal, it keeps no pages.
var releaseMemory = debug.FreeOSMemory

func (d *Dir) sync(ctx context.Context) (loaded int64, err error) {
	l, err := walkFolder(d.root)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.listing = l
	if err != nil {
		if d.scanErr == nil {
			d.scanFailed = time.Now()
		}
		d.scanErr = fmt.Errorf("scan %s: %w", d.root, err)
		d.summarize()
		return 0, d.scanErr
	}
	sc := d.newScan(ctx)
	sc.dirty = d.scanErr != nil || !d.synced
	d.scanErr = nil
	d.scans++
	for _, p := range l.files {
		sc.file(p)
	}
	sc.verifyStep(l.files)
	sc.finish()
	d.synced = true
	d.last = time.Now()
	if sc.dirty {
		d.summarize()
	}
	return sc.loaded, nil
}

// inventoryChunk is how many inventory objects one Apply of a scan takes.
const inventoryChunk = 250

// scan is one pass over the folder.
type scan struct {
	dir *Dir
	ctx context.Context
	// changed holds what every changed file holds now (nothing for a
	// file that is gone).
	changed   map[string]map[objectKey]digest
	policies  []opa.Change // applied at the end
	inventory []opa.Change // applied every inventoryChunk
	// loaded counts the bytes the scan parsed; dirty: it changed what
	// Ready reports; missed: a file it meant to read was gone or
	// unreadable (a scan of named files then leaves it to a whole one).
	loaded int64
	dirty  bool
	missed bool
}

func (d *Dir) newScan(ctx context.Context) *scan {
	return &scan{dir: d, ctx: ctx, changed: map[string]map[objectKey]digest{}}
}

// file reads one file if it may have changed since the last scan: its
// modification time, size or identity (a link moved to another file)
// changed. It is parsed again only when its content did change (load).
func (sc *scan) file(p string) {
	d := sc.dir
	st := d.files[p]
	if st != nil {
		st.seen = d.scans
	}
	info, err := os.Stat(p)
	if err != nil {
		sc.missed = true
		return // removed while scanning: the next scan sees it
	}
	if st != nil && st.modTime.Equal(info.ModTime()) && st.size == info.Size() && os.SameFile(st.info, info) {
		return
	}
	sc.load(p, st, info)
}

// hashFile hashes the file at p, streamed through a reused buffer.
func (d *Dir) hashFile(p string) (sum [sha256.Size]byte, err error) {
	f, err := os.Open(p)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	d.hasher.Reset()
	if _, err := io.CopyBuffer(d.hasher, onlyReader{f}, d.hashBuf); err != nil {
		return sum, fmt.Errorf("hash %s: %w", p, err)
	}
	d.hasher.Sum(sum[:0])
	return sum, nil
}

// onlyReader hides an *os.File's WriterTo, so that io.CopyBuffer uses the
// buffer it is given rather than allocating one.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(b []byte) (int, error) { return o.r.Read(b) }

// listed reports whether this scan listed the file at p (a file it has
// state for).
func (sc *scan) listed(p string) bool {
	st := sc.dir.files[p]
	return st != nil && st.seen == sc.dir.scans
}

// add queues an upsert: policy objects until the end, inventory objects
// until a chunk is full.
func (sc *scan) add(ch opa.Change) {
	switch ch.Object.GroupVersionKind().Group {
	case opa.TemplateGroup, opa.ConstraintGroup:
		sc.policies = append(sc.policies, ch)
		return
	}
	sc.inventory = append(sc.inventory, ch)
	if len(sc.inventory) >= inventoryChunk {
		sc.apply(sc.inventory)
		sc.inventory = nil
	}
}

// finish applies the rest: the last inventory chunk, then the policy
// objects with the deletions. An object that moved from one file to
// another is an update, not a delete and add.
func (sc *scan) finish() {
	d := sc.dir
	for p, st := range d.files {
		if st.seen != d.scans { // gone from the folder
			sc.changed[p] = nil
		}
	}
	if len(sc.changed) > 0 {
		sc.dirty = true
	}
	if len(sc.changed) == 0 {
		// Nothing to delete: the usual scan, every 250 ms. Building the
		// set of held objects here cost a map of every object in the
		// folder per scan (1.3 MB of garbage with 5000 Nodes).
		sc.apply(sc.inventory)
		sc.apply(sc.policies)
		return
	}
	// The objects gone from their file are deleted unless another file
	// holds them. Usually there are none (a rewrite with the same
	// objects): the set of every object held in the folder, which costs a
	// map of every object (5000 Nodes: milliseconds and a megabyte of
	// garbage per rewritten file), is built only when there are.
	var held map[objectKey]bool
	if sc.anyGone() {
		held = map[objectKey]bool{}
		for p, st := range d.files {
			objects := st.objects
			if next, changing := sc.changed[p]; changing {
				objects = next
			}
			for k := range objects {
				held[k] = true
			}
		}
	}
	changes := sc.policies
	for p, next := range sc.changed {
		for k, old := range d.files[p].objects {
			if _, still := next[k]; !still && !held[k] {
				changes = append(changes, opa.Change{Delete: &opa.ObjectRef{GroupVersionKind: old.gvk, Namespace: k.namespace, Name: k.name}})
			}
		}
		if sc.listed(p) {
			d.files[p].objects = next
		} else {
			delete(d.files, p)
		}
	}
	sc.apply(sc.inventory)
	sc.apply(changes)
}

// anyGone reports whether a changed file no longer holds an object it
// held.
func (sc *scan) anyGone() bool {
	for p, next := range sc.changed {
		for k := range sc.dir.files[p].objects {
			if _, still := next[k]; !still {
				return true
			}
		}
	}
	return false
}

func (sc *scan) apply(changes []opa.Change) {
	if len(changes) == 0 {
		return
	}
	sortChanges(changes)
	errs := sc.dir.applier.Apply(sc.ctx, changes)
	sc.dir.noteApplied(changes, errs)
	sc.dirty = true
}

// noteApplied keeps what the engine refused: an object applied (or
// deleted) again is no longer refused unless the engine says so again.
func (d *Dir) noteApplied(changes []opa.Change, errs []*opa.ApplyError) {
	if len(d.refused) > 0 {
		for _, c := range changes {
			ref := opa.ObjectRef{}
			if c.Object != nil {
				ref = opa.ObjectRef{GroupVersionKind: c.Object.GroupVersionKind(), Namespace: c.Object.GetNamespace(), Name: c.Object.GetName()}
			} else if c.Delete != nil {
				ref = *c.Delete
			}
			delete(d.refused, refusalKeyOf(ref))
		}
	}
	d.batchErr = ""
	for _, err := range errs {
		d.log.Warn("policy object refused", "err", err)
		if err.Ref == (opa.ObjectRef{}) {
			d.batchErr = err.Error()
			continue
		}
		d.refused[refusalKeyOf(err.Ref)] = err.Error()
	}
}

// sortChanges applies templates before constraints before the rest, and
// deletions last, so that a batch reads like a kubectl apply of a folder.
func sortChanges(changes []opa.Change) {
	rank := func(c opa.Change) int {
		if c.Object == nil {
			return 3
		}
		switch c.Object.GroupVersionKind().Group {
		case opa.TemplateGroup:
			return 0
		case opa.ConstraintGroup:
			return 1
		}
		return 2
	}
	sort.SliceStable(changes, func(i, j int) bool { return rank(changes[i]) < rank(changes[j]) })
}

// dirSummary is what Ready and the metrics report, as of the last scan
// that changed it.
type dirSummary struct {
	root       string
	synced     bool
	scanErr    error
	scanFailed time.Time
	objects    int
	// broken are the files that do not parse, sorted; firstErr is the
	// first one's error.
	broken   []string
	firstErr error
	// refused names the objects refused: by the engine, and list items
	// that are not objects; sorted.
	refused []string
}

// summarize updates the summary (under mu).
func (d *Dir) summarize() {
	s := &dirSummary{root: d.root, synced: d.synced, scanErr: d.scanErr, scanFailed: d.scanFailed}
	var withRefused []string
	for p, st := range d.files {
		s.objects += len(st.objects)
		if st.err != nil {
			s.broken = append(s.broken, p)
		}
		if len(st.refused) > 0 {
			withRefused = append(withRefused, p)
		}
	}
	sort.Strings(s.broken)
	if len(s.broken) > 0 {
		s.firstErr = d.files[s.broken[0]].err
	}
	sort.Strings(withRefused)
	for _, p := range withRefused { // by file, in the file's order
		for _, why := range d.files[p].refused {
			s.refused = append(s.refused, p+": "+why)
		}
	}
	s.refused = append(s.refused, d.refusedByEngine()...)
	d.summary.Store(s)
}

// maxNamedRefusals bounds the refused objects Ready names (the rest are
// in /debug/policies).
const maxNamedRefusals = 10

// Ready reports whether the folder has been read once. Once it has, it
// stays ready (the objects read stay in force) and says what is wrong: a
// folder that can no longer be listed, files that do not parse, objects
// refused, a folder that holds nothing. It never waits for a scan.
func (d *Dir) Ready() (bool, string) {
	s := d.summary.Load()
	if !s.synced {
		if s.scanErr != nil {
			return false, "policy folder: " + s.scanErr.Error()
		}
		return false, "policy folder " + s.root + " not read yet"
	}
	var notes []string
	if s.scanErr != nil {
		notes = append(notes, fmt.Sprintf("policy folder unreadable since %s, serving what it held then: %v", s.scanFailed.Format(time.RFC3339), s.scanErr))
	}
	if len(s.broken) > 0 {
		notes = append(notes, fmt.Sprintf("%d policy files do not parse, their last good objects stay in force (first: %v)", len(s.broken), s.firstErr))
	}
	if n := len(s.refused); n > 0 {
		named := s.refused[:min(n, maxNamedRefusals)]
		note := fmt.Sprintf("%d policy folder objects refused, not in force: %s", n, strings.Join(named, "; "))
		if n > len(named) {
			note += fmt.Sprintf("; and %d more (/debug/policies)", n-len(named))
		}
		notes = append(notes, note)
	}
	if s.objects == 0 && s.scanErr == nil {
		notes = append(notes, "policy folder "+s.root+" holds no objects: nothing is enforced from it")
	}
	return true, strings.Join(notes, "; ")
}

// FileStatus is one file of the folder.
type FileStatus struct {
	Path    string `json:"path"`
	Objects int    `json:"objects"`
	Error   string `json:"error,omitempty"`
	// Refused are the file's list items that are not objects, and why.
	Refused []string `json:"refused,omitempty"`
}

// DirStatus describes the folder source for /debug/policies.
type DirStatus struct {
	Root     string       `json:"root"`
	LastScan time.Time    `json:"lastScan"`
	Files    []FileStatus `json:"files"`
	// Refused are the objects the engine refused, and why.
	Refused []string `json:"refused,omitempty"`
}

// Status lists the files read, their errors and the objects refused.
func (d *Dir) Status() DirStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := DirStatus{Root: d.root, LastScan: d.last}
	for p, st := range d.files {
		fs := FileStatus{Path: p, Objects: len(st.objects), Refused: st.refused}
		if st.err != nil {
			fs.Error = st.err.Error()
		}
		s.Files = append(s.Files, fs)
	}
	sort.Slice(s.Files, func(i, j int) bool { return s.Files[i].Path < s.Files[j].Path })
	s.Refused = d.refusedByEngine()
	return s
}

// refusedByEngine names what the engine refused, sorted (under mu).
func (d *Dir) refusedByEngine() []string {
	var out []string
	for _, why := range d.refused {
		out = append(out, why)
	}
	sort.Strings(out)
	if d.batchErr != "" {
		out = append(out, "a whole batch: "+d.batchErr)
	}
	return out
}

// FileErrors counts files that do not parse.
func (d *Dir) FileErrors() int { return len(d.summary.Load().broken) }

// RefusedObjects counts the objects of the folder that are not in force
// because they were refused: by the engine, or list items that are not
// objects (no kind, no name).
func (d *Dir) RefusedObjects() int { return len(d.summary.Load().refused) }

// yamlFiles lists the YAML and JSON files below root, following symbolic
// links to folders and files (git-sync points a link at each checkout; a
// ConfigMap volume links every key through "..data"), the root included.
// Hidden entries and testdata folders are skipped; a folder reached twice
// through links is read once.
func yamlFiles(root string) ([]string, error) {
	l, err := walkFolder(root)
	return l.files, err
}

// listing is what a walk of the folder found: the files (yamlFiles) and,
// for the file-system watch (watch.go), the folders read and the folders
// beyond them whose changes reach the files: those holding the targets of
// file links, and the root's parent when the root is a link (git-sync
// retargets it there).
type listing struct {
	files, folders []string
	// targets hold the targets of file links; rootLink is the root when
	// it is a link ("" otherwise), to be watched in its parent.
	targets  []string
	rootLink string
}

func walkFolder(root string) (listing, error) {
	var l listing
	seen := map[string]bool{}
	if info, err := os.Lstat(root); err == nil && info.Mode()&fs.ModeSymlink != 0 {
		l.rootLink = filepath.Clean(root)
	}
	var walk func(dir string, top bool) error
	walk = func(dir string, top bool) error {
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return err
		}
		if seen[real] {
			return nil // a link loop, or two links to one folder
		}
		seen[real] = true
		l.folders = append(l.folders, filepath.Clean(dir))
		entries, err := os.ReadDir(dir)
		if err != nil {
			if !top && errors.Is(err, fs.ErrNotExist) {
				return nil // removed while scanning: the next scan sees it
			}
			return err
		}
		for _, e := range entries {
			name, path := e.Name(), filepath.Join(dir, e.Name())
			if strings.HasPrefix(name, ".") {
				continue // hidden: editor swap files, a ConfigMap's ..data
			}
			isDir, link := e.IsDir(), e.Type()&fs.ModeSymlink != 0
			if link {
				info, err := os.Stat(path)
				if err != nil {
					continue // a dangling link
				}
				isDir = info.IsDir()
			}
			switch {
			case isDir && name == "testdata":
			case isDir:
				if err := walk(path, false); err != nil {
					return err
				}
			case policyFileName(name):
				l.files = append(l.files, path)
				if link {
					if target, err := filepath.EvalSymlinks(path); err == nil {
						l.targets = append(l.targets, filepath.Dir(target))
					}
				}
			}
		}
		return nil
	}
	err := walk(root, true)
	sort.Strings(l.files)
	slices.Sort(l.targets)
	l.targets = slices.Compact(l.targets)
	return l, err
}

// policyFileName reports whether the walk reads a file of this name (in a
// folder it reads).
func policyFileName(name string) bool {
	return !strings.HasPrefix(name, ".") &&
		(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") || strings.HasSuffix(name, ".json"))
}
