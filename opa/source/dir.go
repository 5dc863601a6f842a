// Package source feeds the engine from where policies and inventory live:
// a folder of YAML files (this file) or a cluster (package kube). A source
// only reads objects and sends changes to the engine; it knows nothing of
// Rego or HTTP.
package source

import (
	"context"
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
}

type fileState struct {
	modTime time.Time
	size    int64
	objects map[objectKey]*unstructured.Unstructured
	err     error
}

type objectKey struct {
	apiVersion, kind, namespace, name string
}

func keyOf(u *unstructured.Unstructured) objectKey {
	return objectKey{u.GetAPIVersion(), u.GetKind(), u.GetNamespace(), u.GetName()}
}

// DirOptions configure a Dir.
type DirOptions struct {
	// Interval between scans (default 250ms: changes apply within a second).
	Interval time.Duration
	Logger   *slog.Logger
}

// NewDir makes a folder source; Run starts it.
func NewDir(root string, applier Applier, opts DirOptions) *Dir {
	if opts.Interval <= 0 {
		opts.Interval = 250 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Dir{root: root, applier: applier, interval: opts.Interval, log: opts.Logger, files: map[string]*fileState{}}
}

// Sync scans the folder once and applies the changes. It returns an error
// only when the folder itself cannot be read; per-file problems are in
// Status.
func (d *Dir) Sync(ctx context.Context) error {
	paths, err := yamlFiles(d.root)
	if err != nil {
		return fmt.Errorf("scan %s: %w", d.root, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()

	present := map[string]bool{}
	var changes []opa.Change
	changedFiles := map[string]map[objectKey]*unstructured.Unstructured{}
	for _, p := range paths {
		present[p] = true
		info, err := os.Stat(p)
		if err != nil {
			continue // removed while scanning: next scan sees it
		}
		st := d.files[p]
		if st != nil && st.modTime.Equal(info.ModTime()) && st.size == info.Size() {
			continue
		}
		if st == nil {
			st = &fileState{objects: map[objectKey]*unstructured.Unstructured{}}
			d.files[p] = st
		}
		st.modTime, st.size = info.ModTime(), info.Size()
		objs, err := ReadFile(p)
		if err != nil {
			st.err = err
			d.log.Warn("policy file does not parse; its last good objects stay in force", "file", p, "err", err)
			continue
		}
		st.err = nil
		next := map[objectKey]*unstructured.Unstructured{}
		for _, o := range objs {
			if o.GetKind() == "Suite" {
				continue
			}
			next[keyOf(o)] = o
		}
		changedFiles[p] = next
	}
	for p, st := range d.files {
		if !present[p] {
			changedFiles[p] = map[objectKey]*unstructured.Unstructured{}
			_ = st
		}
	}
	// Diff every changed file against what it held before. An object that
	// moves from one file to another is an update, not a delete and add.
	held := map[objectKey]bool{}
	for p, st := range d.files {
		if _, changing := changedFiles[p]; changing {
			continue
		}
		for k := range st.objects {
			held[k] = true
		}
	}
	for _, next := range changedFiles {
		for k := range next {
			held[k] = true
		}
	}
	for p, next := range changedFiles {
		prev := d.files[p].objects
		for k, o := range next {
			if old, ok := prev[k]; ok && equalContent(old, o) {
				continue
			}
			changes = append(changes, opa.Change{Object: o})
		}
		for k, o := range prev {
			if _, still := next[k]; !still && !held[k] {
				changes = append(changes, opa.Change{Delete: &opa.ObjectRef{GroupVersionKind: o.GroupVersionKind(), Namespace: k.namespace, Name: k.name}})
			}
		}
	}
	for p, next := range changedFiles {
		if !present[p] {
			delete(d.files, p)
			continue
		}
		d.files[p].objects = next
	}
	if len(changes) > 0 {
		sortChanges(changes)
		for _, err := range d.applier.Apply(ctx, changes) {
			d.log.Warn("policy object refused", "err", err)
		}
	}
	d.synced = true
	d.last = time.Now()
	return nil
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

func equalContent(a, b *unstructured.Unstructured) bool {
	ab, err1 := a.MarshalJSON()
	bb, err2 := b.MarshalJSON()
	return err1 == nil && err2 == nil && string(ab) == string(bb)
}

// Run scans until ctx ends.
func (d *Dir) Run(ctx context.Context) {
	t := time.NewTicker(d.interval)
	defer t.Stop()
	for {
		if err := d.Sync(ctx); err != nil {
			d.log.Error("policy folder scan failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Ready reports whether the folder has been read once.
func (d *Dir) Ready() (bool, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.synced {
		return false, "policy folder " + d.root + " not read yet"
	}
	return true, ""
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

func yamlFiles(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := e.Name()
		if e.IsDir() {
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasPrefix(name, ".") {
			return nil // editor swap files and the like
		}
		if strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") || strings.HasSuffix(name, ".json") {
			out = append(out, path)
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}
