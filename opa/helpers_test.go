package opa_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// newEngine starts an engine and loads the given files or folders (as the
// folder source would).
func newEngine(t testing.TB, opts opa.Options, paths ...string) *opa.Engine {
	t.Helper()
	ctx := context.Background()
	e, err := opa.New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(ctx) })
	for _, p := range paths {
		apply(t, e, load(t, p)...)
	}
	return e
}

func load(t testing.TB, path string) []*unstructured.Unstructured {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !info.IsDir() {
		objs, err := readFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return objs
	}
	var out []*unstructured.Unstructured
	err = filepath.Walk(path, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.IsDir() && fi.Name() == "testdata" {
			return filepath.SkipDir
		}
		if fi.IsDir() || filepath.Ext(p) != ".yaml" || fi.Name() == "suite.yaml" {
			return nil
		}
		objs, err := readFile(p)
		if err != nil {
			return err
		}
		out = append(out, objs...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// readObjects reads the objects of a YAML or JSON stream, a List's items
// as objects of their own. It is the tests' reader: the engine's own
// (opa/source) sits above the engine.
func readObjects(r io.Reader) ([]*unstructured.Unstructured, error) {
	dec := k8syaml.NewYAMLOrJSONDecoder(r, 4096)
	var out []*unstructured.Unstructured
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		if obj == nil {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		if !u.IsList() {
			out = append(out, u)
			continue
		}
		err := u.EachListItem(func(item runtime.Object) error {
			out = append(out, item.(*unstructured.Unstructured))
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
}

// readFile is readObjects of a file.
func readFile(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	objs, err := readObjects(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return objs, nil
}

func apply(t testing.TB, e *opa.Engine, objs ...*unstructured.Unstructured) {
	t.Helper()
	changes := make([]opa.Change, len(objs))
	for i, o := range objs {
		changes[i] = opa.Change{Object: o}
	}
	if errs := e.Apply(context.Background(), changes); len(errs) > 0 {
		t.Fatalf("apply: %v", errs)
	}
}

func node(name string, labels map[string]string) *unstructured.Unstructured {
	l := map[string]any{"kubernetes.io/hostname": name}
	for k, v := range labels {
		l[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Node",
		"metadata": map[string]any{"name": name, "labels": l},
	}}
}

func namespace(name string, labels map[string]string) *unstructured.Unstructured {
	l := map[string]any{}
	for k, v := range labels {
		l[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": name, "labels": l},
	}}
}

func pod(ns, name string, mutate ...func(map[string]any)) map[string]any {
	p := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": ns, "uid": "uid-" + name},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "app", "image": "nginx:1.27"}}},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func spec(p map[string]any) map[string]any { return p["spec"].(map[string]any) }

func names(prefix string, n int) []opa.Candidate {
	out := make([]opa.Candidate, n)
	for i := range out {
		out[i] = opa.Candidate{Name: fmt.Sprintf("%s-%d", prefix, i)}
	}
	return out
}

// churn runs work on workers goroutines and change on one more, each in a
// loop (i counts the rounds, change pausing between them) until d has
// passed, and fails t with the first error of each.
func churn(t *testing.T, d, pause time.Duration, workers int, work func(w, i int) error, change func(i int) error) {
	t.Helper()
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	errc := make(chan error, workers+1)
	loop := func(f func(i int) error, pause time.Duration) {
		defer wg.Done()
		for i := 0; time.Now().Before(deadline); i++ {
			if err := f(i); err != nil {
				errc <- err
				return
			}
			time.Sleep(pause)
		}
	}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go loop(func(i int) error { return work(w, i) }, 0)
	}
	wg.Add(1)
	go loop(change, pause)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

// violationLines are the violations e finds for p on cands, one line each
// ("node constraint message details"), in the answer's order.
func violationLines(t testing.TB, e *opa.Engine, p map[string]any, cands []opa.Candidate) []string {
	t.Helper()
	pl, err := e.Evaluate(context.Background(), opa.PlacementRequest{Pod: p, Candidates: cands})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, v := range pl.Nodes {
		for _, x := range pl.Violations(i) {
			out = append(out, fmt.Sprintf("%s %s %s %s", v.Name, x.Constraint.Name, x.Message, x.Details))
		}
	}
	return out
}

// sameAsWithoutMemo fails t unless memo and exact (an engine without
// memo) find the same violations for p, and gives memo's.
func sameAsWithoutMemo(t testing.TB, memo, exact *opa.Engine, p map[string]any, cands []opa.Candidate) []string {
	t.Helper()
	got, want := violationLines(t, memo, p, cands), violationLines(t, exact, p, cands)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("pod %v:\n memo    %q\n no memo %q", p["metadata"], got, want)
	}
	return got
}
