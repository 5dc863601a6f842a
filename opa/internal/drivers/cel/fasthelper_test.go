package cel

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/drivers"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/gatekeeper"
)

// libraryDir is Gatekeeper's policy library, beside the repository.
const libraryDir = "../../../../../shared/gatekeeper-library/library"

// TestFastTestMatchesComposition checks every membership helper of the
// library's CEL templates: the fast test's answer (variables kept per
// Constraint, fasthelper.go) equals the composited test's on every value,
// for the templates' sample Constraints and for parameters written to
// reach each branch of the exemption tests (prefixes, explicit names, a
// bare "*", none, an empty list, values of the wrong type); where the
// fast test declines, the composition answers. It fails if the fast test
// answers none of them, so that it proves the fast path is taken.
func TestFastTestMatchesComposition(t *testing.T) {
	tmpls, _ := filepath.Glob(filepath.Join(libraryDir, "*", "*", "template.yaml"))
	if len(tmpls) == 0 {
		t.Skipf("Gatekeeper library not found at %s", libraryDir)
	}
	synthetic := []map[string]any{
		nil,
		{},
		{"exemptImages": []any{}},
		{"exemptImages": []any{"registry.example/*", "docker.io/library/nginx:1.27", "*"}},
		{"exemptImages": []any{"registry.example/app:1", "gcr.io/*"}},
		{"exemptImages": "registry.example/*"},
		{"exemptImages": []any{int64(3)}},
	}
	args := []string{"", "*", "registry.example/app:1", "registry.example/other:2", "gcr.io/x/y:1",
		"docker.io/library/nginx:1.27", "docker.io/library/nginx:1.28", "unicodé/image:1", "registry.example"}
	d := New()
	ctx := context.Background()
	var fastAnswers, declined, helpers int
	for _, tf := range tmpls {
		tmpl := parseLibraryTemplate(t, tf)
		if tmpl == nil {
			continue
		}
		p, err := d.CompileTemplate(tmpl)
		if err != nil {
			t.Fatalf("%s: %v", tf, err)
		}
		params := append(sampleParameters(t, filepath.Dir(tf)), synthetic...)
		for _, name := range sortedKeys(p.helpers) {
			h := p.helpers[name]
			helpers++
			if h.fast == nil {
				t.Logf("%s %s: no fast test", tmpl.Name, name)
				continue
			}
			for _, ps := range params {
				c := &unstructured.Unstructured{Object: map[string]any{"kind": tmpl.Kind, "spec": map[string]any{}}}
				if ps != nil {
					c.Object["spec"].(map[string]any)["parameters"] = ps
				}
				for _, arg := range args {
					in := drivers.HelperInput{Constraint: c, Argument: ast.String(arg)}
					want, wantErr := h.composited(ctx, in, ast.String(arg))
					got, ok := h.fast.holds(ctx, c, arg)
					switch {
					case !ok:
						if wantErr == nil {
							declined++ // the composition answers
						}
						continue
					case wantErr != nil:
						t.Errorf("%s %s params %v on %q: fast %v, composited error %v", tmpl.Name, name, ps, arg, got, wantErr)
					case got != want:
						t.Errorf("%s %s params %v on %q: fast %v, composited %v", tmpl.Name, name, ps, arg, got, want)
					}
					fastAnswers++
				}
			}
		}
	}
	if helpers == 0 || fastAnswers == 0 {
		t.Fatalf("%d helpers, %d fast answers: the fast test was never taken", helpers, fastAnswers)
	}
	t.Logf("%d helpers, %d fast answers compared, %d values declined that the composition answered", helpers, fastAnswers, declined)
}

// parseLibraryTemplate is the template at path with its CEL code, or nil
// if it has none.
func parseLibraryTemplate(t testing.TB, path string) *gatekeeper.Template {
	t.Helper()
	tmpl, err := gatekeeper.ParseTemplate(&unstructured.Unstructured{Object: readYAML(t, path)}, gatekeeper.ParseOptions{})
	if err != nil || tmpl.Engine != Engine {
		return nil
	}
	return tmpl
}

// readYAML is the object in the YAML file at path.
func readYAML(t testing.TB, path string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(raw, &obj); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return obj
}

// sampleParameters are the spec.parameters of a template's sample
// Constraints.
func sampleParameters(t *testing.T, dir string) []map[string]any {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "samples", "*", "constraint.yaml"))
	var out []map[string]any
	for _, f := range files {
		if ps, ok, _ := unstructured.NestedMap(readYAML(t, f), "spec", "parameters"); ok {
			out = append(out, ps)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// BenchmarkMembershipHelper is one helper answer of the library's
// privileged-containers template on a new image, with a Constraint that
// exempts images by prefix and by name: through the fast test, and
// through the composition alone.
func BenchmarkMembershipHelper(b *testing.B) {
	h := libraryHelper(b, "privileged-containers")
	c := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"parameters": map[string]any{
		"exemptImages": []any{"safe.example/*", "docker.io/library/nginx:1.27"}}}}}
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		fast *fastTest
	}{{"fast", h.fast}, {"composited", nil}} {
		b.Run(bc.name, func(b *testing.B) {
			h := &memberHelper{program: h.program, test: h.test, request: h.request, fast: bc.fast}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := h.Holds(ctx, drivers.HelperInput{Constraint: c, Argument: ast.String("registry.example/app:1")}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestFastTestConcurrent asks one helper about many values for several
// Constraints from many goroutines at once (run with -race): the
// variables kept per Constraint are computed under the test's lock and
// read-only after, and the answers are those of the composition.
func TestFastTestConcurrent(t *testing.T) {
	h := libraryHelper(t, "capabilities")
	constraints := make([]*unstructured.Unstructured, 4)
	for i := range constraints {
		constraints[i] = &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"parameters": map[string]any{
			"exemptImages": []any{fmt.Sprintf("team-%d.example/*", i), fmt.Sprintf("tool:%d", i)}}}}}
	}
	ctx := context.Background()
	want := map[[2]int]bool{}
	for c := range constraints {
		for v := range 8 {
			in := drivers.HelperInput{Constraint: constraints[c], Argument: ast.String(concurrentValue(v))}
			holds, err := h.composited(ctx, in, ast.String(concurrentValue(v)))
			if err != nil {
				t.Fatal(err)
			}
			want[[2]int{c, v}] = holds
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 400 {
				c, v := (g+i)%len(constraints), i%8
				holds, ok := h.fast.holds(ctx, constraints[c], concurrentValue(v))
				if !ok || holds != want[[2]int{c, v}] {
					errs <- fmt.Errorf("constraint %d, %q: fast %v (answered %v), composited %v", c, concurrentValue(v), holds, ok, want[[2]int{c, v}])
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// concurrentValue is the v-th image TestFastTestConcurrent asks about:
// exempt by prefix or by name for some Constraints, not for others.
func concurrentValue(v int) string {
	if v%2 == 0 {
		return fmt.Sprintf("team-%d.example/app:1", v/2)
	}
	return fmt.Sprintf("tool:%d", v/2)
}

// libraryHelper is the first membership helper (with a fast test) of the
// library's pod-security-policy template in folder name.
func libraryHelper(t testing.TB, name string) *memberHelper {
	t.Helper()
	path := filepath.Join(libraryDir, "pod-security-policy", name, "template.yaml")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("Gatekeeper library not found: %v", err)
	}
	tmpl := parseLibraryTemplate(t, path)
	if tmpl == nil {
		t.Fatalf("%s has no CEL code", path)
	}
	p, err := New().CompileTemplate(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	keys := sortedKeys(p.helpers)
	if len(keys) == 0 || p.helpers[keys[0]].fast == nil {
		t.Fatalf("%s has no helper with a fast test", path)
	}
	return p.helpers[keys[0]]
}
