package diff

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/peer"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// libraryDir is the gatekeeper-library corpus in the shared/ folder beside
// the repository clone (../../shared from bench/).
func libraryDir(tb testing.TB) string {
	tb.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "..", "shared", "gatekeeper-library", "library"))
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		tb.Skipf("gatekeeper-library corpus not found at %s (the shared/ folder is expected beside the repository clone): %v", dir, err)
	}
	return dir
}

// examplesDir holds the project's placement templates.
func examplesDir(tb testing.TB) string {
	tb.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "deploy", "examples"))
	if err != nil {
		tb.Fatal(err)
	}
	return dir
}

// policy is one template with the constraints the test loads for it.
type policy struct {
	dir         string // for messages
	template    *unstructured.Unstructured
	constraints []*unstructured.Unstructured
}

// corpus is everything the test feeds both sides.
type corpus struct {
	policies []policy
	// seeds are Pods from the samples and the examples' test data.
	seeds []*unstructured.Unstructured
	// renamed maps "kind/new name" to the sample constraint it came from,
	// for constraints renamed to keep names unique.
	renamed map[string]string
}

func readAll(tb testing.TB, path string) []*unstructured.Unstructured {
	tb.Helper()
	objs, err := peer.ReadObjects(path)
	if err != nil {
		tb.Fatal(err)
	}
	return objs
}

func readOne(tb testing.TB, path string) *unstructured.Unstructured {
	tb.Helper()
	objs := readAll(tb, path)
	if len(objs) != 1 {
		tb.Fatalf("%s: want one object, got %d", path, len(objs))
	}
	return objs[0]
}

// targetsPods tells whether a constraint's spec.match.kinds selects Pods
// (a kinds entry with group "" or "*" and kind Pod or "*"), or all kinds
// (no kinds at all).
func targetsPods(c *unstructured.Unstructured) bool {
	kinds, found, _ := unstructured.NestedSlice(c.Object, "spec", "match", "kinds")
	if !found || len(kinds) == 0 {
		return true
	}
	for _, k := range kinds {
		m, _ := k.(map[string]any)
		groups, _, _ := unstructured.NestedStringSlice(m, "apiGroups")
		names, _, _ := unstructured.NestedStringSlice(m, "kinds")
		if !(containsAny(groups, "", "*") || len(groups) == 0) {
			continue
		}
		if containsAny(names, "Pod", "*") || len(names) == 0 {
			return true
		}
	}
	return false
}

func containsAny(list []string, want ...string) bool {
	for _, s := range list {
		for _, w := range want {
			if s == w {
				return true
			}
		}
	}
	return false
}

// loadCorpus reads every library template with a sample constraint that
// targets Pods (with all its samples' constraints), the four placement
// templates of deploy/examples, and the Pods among their sample objects.
func loadCorpus(tb testing.TB) *corpus {
	tb.Helper()
	lib := libraryDir(tb)
	ex := examplesDir(tb)
	c := &corpus{renamed: map[string]string{}}
	seen := map[string]bool{} // kind/name

	addConstraint := func(p *policy, u *unstructured.Unstructured, sample string) {
		key := u.GetKind() + "/" + u.GetName()
		if seen[key] {
			// Several samples of a template reuse one constraint name;
			// both sides would keep only the last one.
			orig := u.GetName()
			u.SetName(orig + "-" + strings.ReplaceAll(strings.ToLower(sample), "_", "-"))
			key = u.GetKind() + "/" + u.GetName()
			c.renamed[key] = orig
		}
		if seen[key] {
			tb.Fatalf("%s: duplicate constraint %s", p.dir, key)
		}
		seen[key] = true
		p.constraints = append(p.constraints, u)
	}

	templates, err := filepath.Glob(filepath.Join(lib, "*", "*", "template.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	for _, tf := range templates {
		dir := filepath.Dir(tf)
		samples, _ := filepath.Glob(filepath.Join(dir, "samples", "*", "constraint.yaml"))
		pods := false
		var cons []*unstructured.Unstructured
		var names []string
		for _, sf := range samples {
			u := readOne(tb, sf)
			if targetsPods(u) {
				pods = true
			}
			cons = append(cons, u)
			names = append(names, filepath.Base(filepath.Dir(sf)))
		}
		if !pods {
			continue
		}
		rel, _ := filepath.Rel(lib, dir)
		p := policy{dir: rel, template: readOne(tb, tf)}
		for i, u := range cons {
			addConstraint(&p, u, names[i])
		}
		c.policies = append(c.policies, p)
		objs, _ := filepath.Glob(filepath.Join(dir, "samples", "*", "*.yaml"))
		for _, of := range objs {
			if filepath.Base(of) == "constraint.yaml" {
				continue
			}
			for _, o := range readAll(tb, of) {
				if o.GetKind() == "Pod" && o.GetAPIVersion() == "v1" {
					c.seeds = append(c.seeds, o)
				}
			}
		}
	}

	exDirs, _ := filepath.Glob(filepath.Join(ex, "*", "template.yaml"))
	if len(exDirs) != 4 {
		tb.Fatalf("want the 4 placement templates in %s, found %d", ex, len(exDirs))
	}
	for _, tf := range exDirs {
		dir := filepath.Dir(tf)
		p := policy{dir: "deploy/examples/" + filepath.Base(dir), template: readOne(tb, tf)}
		for _, u := range readAll(tb, filepath.Join(dir, "constraint.yaml")) {
			addConstraint(&p, u, filepath.Base(dir))
		}
		c.policies = append(c.policies, p)
		objs, _ := filepath.Glob(filepath.Join(dir, "testdata", "*.yaml"))
		for _, of := range objs {
			for _, o := range readAll(tb, of) {
				if o.GetKind() == "Pod" && o.GetAPIVersion() == "v1" {
					c.seeds = append(c.seeds, o)
				}
			}
		}
	}
	if len(c.policies) < 30 || len(c.seeds) < 50 {
		tb.Fatalf("corpus too small: %d templates, %d seed pods", len(c.policies), len(c.seeds))
	}
	return c
}

func (c *corpus) constraintCount() int {
	n := 0
	for _, p := range c.policies {
		n += len(p.constraints)
	}
	return n
}

func (c *corpus) describe() string {
	var names []string
	for _, p := range c.policies {
		names = append(names, fmt.Sprintf("%s(%d)", p.dir, len(p.constraints)))
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}
