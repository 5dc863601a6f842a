// Package source feeds the engine from where policies and inventory live:
// a folder of YAML files (this file) or a cluster (package kube). A source
// only reads objects and sends changes to the engine; it knows nothing of
// Rego or HTTP.
package source

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
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
// policy can keep its gator suite and fixtures beside it. It polls the
// folder and applies what changed; a file that does not parse (for example
// one that is half written) is reported and the objects it last held stay
// in force until it parses again.
type Dir struct {
	root     string
	applier  Applier
	interval time.Duration
	log      *slog.Logger

	mu     sync.Mutex
	files  map[string]*fileState
	synced bool
	last   time.Time
	// folders are the folders the last scan read (watch.go watches them).
	folders []string
	// scanErr is why the last scan could not list the folder, since
	// scanFailed; nil when it could.
	scanErr    error
	scanFailed time.Time
	// scans counts the scans (fileState.seen).
	scans uint64
	// verified is when a scan last compared every file's content.
	verified       time.Time
	verifyInterval time.Duration
	// readBuf holds the file a scan reads, reused from file to file and
	// scan to scan (under mu): a verifying scan of 5000 Node files read
	// 50 MB into fresh buffers every 10 s, garbage that paced the
	// collector under the requests.
	readBuf bytes.Buffer
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
	// seen is the number of the last scan that listed the file.
	seen uint64
}

// digest is what a change needs of an object the folder held: its kind,
// to delete it, and a hash of its content, to see whether it changed.
type digest struct {
	gvk schema.GroupVersionKind
	sum [sha256.Size]byte
	ok  bool // false: the content could not be hashed
}

func digestOf(u *unstructured.Unstructured) digest {
	b, err := u.MarshalJSON() // maps marshal with sorted keys: same content, same bytes
	return digest{gvk: u.GroupVersionKind(), sum: sha256.Sum256(b), ok: err == nil}
}

// unchanged: both hashed, to the same content. An object whose content
// could not be hashed is always applied again.
func (d digest) unchanged(next digest) bool { return d.ok && next.ok && d == next }

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
	// changed.
	Interval time.Duration
	// VerifyInterval is how often a scan reads every file and compares
	// content, for changes that keep the modification time and size (a
	// copy that preserves times, a same-size rewrite within the file
	// system's time granularity). Default 10s; the cost is reading the
	// folder once per interval.
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
	return &Dir{root: root, applier: applier, interval: opts.Interval, verifyInterval: opts.VerifyInterval, log: opts.Logger, files: map[string]*fileState{}}
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
func (d *Dir) Sync(ctx context.Context) error {
	paths, folders, err := walkFolder(d.root)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.folders = folders
	if err != nil {
		if d.scanErr == nil {
			d.scanFailed = time.Now()
		}
		d.scanErr = fmt.Errorf("scan %s: %w", d.root, err)
		return d.scanErr
	}
	d.scanErr = nil
	d.scans++
	sc := &scan{dir: d, ctx: ctx, changed: map[string]map[objectKey]digest{},
		verify: time.Since(d.verified) >= d.verifyInterval}
	if sc.verify {
		d.verified = time.Now()
	}
	for _, p := range paths {
		sc.file(p)
	}
	sc.finish()
	d.synced = true
	d.last = time.Now()
	return nil
}

// inventoryChunk is how many inventory objects one Apply of a scan takes.
const inventoryChunk = 250

// scan is one pass over the folder.
type scan struct {
	dir *Dir
	ctx context.Context
	// changed holds what every changed file holds now (nothing for a
	// file that is gone).
	changed map[string]map[objectKey]digest
	// verify: read every file and compare content, whatever its
	// modification time says (once every DirOptions.VerifyInterval).
	verify    bool
	policies  []opa.Change // applied at the end
	inventory []opa.Change // applied every inventoryChunk
}

// file reads one file if it may have changed since the last scan: its
// modification time, size or identity (a link moved to another file)
// changed, or the scan verifies content. It is parsed again only when its
// content did change.
func (sc *scan) file(p string) {
	d := sc.dir
	st := d.files[p]
	if st != nil {
		st.seen = d.scans
	}
	info, err := os.Stat(p)
	if err != nil {
		return // removed while scanning: the next scan sees it
	}
	if st != nil && !sc.verify && st.modTime.Equal(info.ModTime()) && st.size == info.Size() && os.SameFile(st.info, info) {
		return
	}
	data, err := d.read(p)
	if err != nil {
		return // removed or unreadable for now: the next scan sees it
	}
	sum := sha256.Sum256(data)
	if st == nil {
		st = &fileState{objects: map[objectKey]digest{}, seen: d.scans}
		d.files[p] = st
	} else if st.sum == sum {
		st.info, st.modTime, st.size = info, info.ModTime(), info.Size()
		return // touched, not changed
	}
	st.info, st.modTime, st.size, st.sum = info, info.ModTime(), info.Size(), sum
	objs, err := ReadObjects(bytes.NewReader(data))
	if err != nil {
		err = fmt.Errorf("%s: %w", p, err)
		st.err = err
		d.log.Warn("policy file does not parse; its last good objects stay in force", "file", p, "err", err)
		return
	}
	st.err = nil
	next := map[objectKey]digest{}
	for _, o := range objs {
		if o.GetKind() == "Suite" {
			continue
		}
		k, dg := keyOf(o), digestOf(o)
		next[k] = dg
		if old, ok := st.objects[k]; ok && old.unchanged(dg) {
			continue
		}
		sc.add(opa.Change{Object: o})
	}
	sc.changed[p] = next
}

// read reads the file at p into d.readBuf: the bytes are valid until the
// next read (ReadObjects copies what it keeps).
func (d *Dir) read(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d.readBuf.Reset()
	if _, err := d.readBuf.ReadFrom(f); err != nil {
		return nil, err
	}
	if d.readBuf.Cap() > maxKeptReadBuffer {
		// One huge file is not kept for every scan after it.
		data := bytes.Clone(d.readBuf.Bytes())
		d.readBuf = bytes.Buffer{}
		return data, nil
	}
	return d.readBuf.Bytes(), nil
}

// maxKeptReadBuffer bounds the read buffer a folder source keeps between
// files.
const maxKeptReadBuffer = 4 << 20

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
	if len(sc.changed) == 0 {
		// Nothing to delete: the usual scan, every 250 ms. Building the
		// set of held objects here cost a map of every object in the
		// folder per scan (1.3 MB of garbage with 5000 Nodes).
		sc.apply(sc.inventory)
		sc.apply(sc.policies)
		return
	}
	held := map[objectKey]bool{}
	for p, st := range d.files {
		objects := st.objects
		if next, changing := sc.changed[p]; changing {
			objects = next
		}
		for k := range objects {
			held[k] = true
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

func (sc *scan) apply(changes []opa.Change) {
	if len(changes) == 0 {
		return
	}
	sortChanges(changes)
	for _, err := range sc.dir.applier.Apply(sc.ctx, changes) {
		sc.dir.log.Warn("policy object refused", "err", err)
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

// Run scans until ctx ends: every interval, and as soon as the file-system
// watch reports a change in a folder the last scan read (when the platform
// offers one; the interval alone otherwise).
func (d *Dir) Run(ctx context.Context) {
	t := time.NewTicker(d.interval)
	defer t.Stop()
	w := newFolderWatch(d.log)
	defer w.close()
	for {
		if err := d.Sync(ctx); err != nil {
			d.log.Error("policy folder scan failed", "err", err)
		}
		d.mu.Lock()
		folders := d.folders
		d.mu.Unlock()
		w.follow(folders)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.changed():
			w.settle(ctx, watchSettle)
		case err := <-w.errors():
			d.log.Debug("policy folder watch", "err", err)
		}
	}
}

// Ready reports whether the folder has been read once. Once it has, it
// stays ready (the objects read stay in force) and says what is wrong: a
// folder that can no longer be listed, files that do not parse, a folder
// that holds nothing.
func (d *Dir) Ready() (bool, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.synced {
		if d.scanErr != nil {
			return false, "policy folder: " + d.scanErr.Error()
		}
		return false, "policy folder " + d.root + " not read yet"
	}
	var notes []string
	if d.scanErr != nil {
		notes = append(notes, fmt.Sprintf("policy folder unreadable since %s, serving what it held then: %v", d.scanFailed.Format(time.RFC3339), d.scanErr))
	}
	objects := 0
	var broken []string
	for p, st := range d.files {
		objects += len(st.objects)
		if st.err != nil {
			broken = append(broken, p)
		}
	}
	if len(broken) > 0 {
		sort.Strings(broken)
		first := d.files[broken[0]].err
		notes = append(notes, fmt.Sprintf("%d policy files do not parse, their last good objects stay in force (first: %v)", len(broken), first))
	}
	if objects == 0 && d.scanErr == nil {
		notes = append(notes, "policy folder "+d.root+" holds no objects: nothing is enforced from it")
	}
	return true, strings.Join(notes, "; ")
}

// FileStatus is one file of the folder.
type FileStatus struct {
	Path    string `json:"path"`
	Objects int    `json:"objects"`
	Error   string `json:"error,omitempty"`
}

// DirStatus describes the folder source for /debug/policies.
type DirStatus struct {
	Root     string       `json:"root"`
	LastScan time.Time    `json:"lastScan"`
	Files    []FileStatus `json:"files"`
}

// Status lists the files read and their errors.
func (d *Dir) Status() DirStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := DirStatus{Root: d.root, LastScan: d.last}
	for p, st := range d.files {
		fs := FileStatus{Path: p, Objects: len(st.objects)}
		if st.err != nil {
			fs.Error = st.err.Error()
		}
		s.Files = append(s.Files, fs)
	}
	sort.Slice(s.Files, func(i, j int) bool { return s.Files[i].Path < s.Files[j].Path })
	return s
}

// FileErrors counts files that do not parse.
func (d *Dir) FileErrors() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, st := range d.files {
		if st.err != nil {
			n++
		}
	}
	return n
}

// yamlFiles lists the YAML and JSON files below root, following symbolic
// links to folders and files (git-sync points a link at each checkout; a
// ConfigMap volume links every key through "..data"), the root included.
// Hidden entries and testdata folders are skipped; a folder reached twice
// through links is read once.
func yamlFiles(root string) ([]string, error) {
	files, _, err := walkFolder(root)
	return files, err
}

// walkFolder is yamlFiles with the folders it read, for the file-system
// watch (watch.go).
func walkFolder(root string) (files, folders []string, err error) {
	var out []string
	seen := map[string]bool{}
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
		folders = append(folders, dir)
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
			isDir := e.IsDir()
			if e.Type()&fs.ModeSymlink != 0 {
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
			case strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") || strings.HasSuffix(name, ".json"):
				out = append(out, path)
			}
		}
		return nil
	}
	err = walk(root, true)
	sort.Strings(out)
	return out, folders, err
}
