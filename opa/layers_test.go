package opa_test

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// module is the main module's path, opaModule OPA's.
const (
	module    = "github.com/opa-scheduler-extender/opa-scheduler-extender/"
	opaModule = "github.com/open-policy-agent/opa/"
)

// ranks are the packages of the repository, every module's, from the
// bottom up: a package may import only packages of the
// ranks below its own, in its code and in its tests (a package's external
// tests import the package itself). The vocabulary (opa/policy) and the
// leaf utilities import nothing of the project; then Gatekeeper's
// semantics and the memo's keys; the inventory and the verdicts; the
// evaluator seam (drivers); the drivers, which never import each other;
// the policy set; the engine (opa), which imports nothing that feeds or
// serves it; its sources; the fixtures and verify; the HTTP service; and
// cmd, which wires them together. A package missing from this list fails
// the test: a new package takes a place deliberately.
var ranks = [][]string{
	{"opa/policy", "opa/freelist", "opa/internal/analysis", "opa/internal/compact", "opa/internal/jsonvalue",
		"opa/internal/memo", "cmd/opa-scheduler-extender/heapfloor"},
	{"opa/internal/lookup", "opa/internal/gatekeeper"},
	{"opa/internal/inventory", "opa/internal/verdict"},
	{"opa/internal/drivers"},
	{"opa/internal/drivers/rego", "opa/internal/drivers/cel"},
	{"opa/internal/policyset"},
	{"opa"},
	{"opa/enginemetrics", "opa/source"},
	{"opa/opatest", "opa/verify"},
	{"server"},
	{"cmd/opa-kube-scheduler/gatekeeper", "cmd/opa-scheduler-extender"},
	{"cmd/opa-kube-scheduler"},
	// The benchmarks' and the end-to-end tests' modules, above everything
	// they measure; nothing imports them.
	{"bench/gen", "bench/peer", "bench/perf", "bench/celpeer", "bench/cmd/tracetail",
		"bench/e2e/cmd/etcd", "bench/e2e/cmd/kube-apiserver", "bench/e2e/cmd/kube-scheduler"},
	{"bench/perf/peerset", "bench/e2e/cluster"},
	{"bench/diff", "bench/cmd/footprint", "bench/cmd/gkfootprint", "bench/cmd/loadgen",
		"bench/e2e/harness", "bench/e2e/policyset", "bench/e2e/chart"},
	{"bench/e2e/extender", "bench/e2e/plugin", "bench/e2e/footprint", "bench/e2e/throughput"},
}

// rankOf is each package's rank.
func rankOf() map[string]int {
	out := map[string]int{}
	for r, pkgs := range ranks {
		for _, p := range pkgs {
			out[p] = r
		}
	}
	return out
}

// pluginModule is the plugin build's module: a nested module that must be
// found, or the walk is not at the repository's root.
const pluginModule = "cmd/opa-kube-scheduler"

func TestImportsPointOneWay(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	imports, v0 := moduleImports(t, root)
	for _, at := range v0 {
		// OPA's v0 packages wrap v1 with Rego v0 defaults (parsing,
		// capabilities): one of them in the engine changes what it accepts.
		t.Errorf("%s imports OPA's v0 API; use github.com/open-policy-agent/opa/v1/...", at)
	}
	rank := rankOf()
	if len(imports) < len(rank)/2 || imports[pluginModule] == nil {
		t.Fatalf("found %d packages under %s (plugin module: %v); is this the module root?", len(imports), root, imports[pluginModule] != nil)
	}
	for pkg, got := range imports {
		r, known := rank[pkg]
		if !known {
			t.Errorf("package %s has no rank: give it a place (layers_test.go)", pkg)
			continue
		}
		for imp, at := range got {
			if imp == pkg { // its external tests
				continue
			}
			if ir, ok := rank[imp]; !ok || ir >= r {
				t.Errorf("%s (rank %d) imports %s (rank %d) in %s: a package imports only ranks below its own", pkg, r, imp, ir, at)
			}
		}
	}
	for pkg := range rank {
		if _, found := imports[pkg]; !found {
			t.Errorf("the ranks name %s, which has no Go files", pkg)
		}
	}
}

// moduleImports reads the Go files of every package of every module under
// root (testdata skipped) and gives each package's imports of the main module, from its
// files and its tests, both relative to the module path, with a file that
// imports each; and the files that import OPA's v0 API.
func moduleImports(t *testing.T, root string) (map[string]map[string]string, []string) {
	t.Helper()
	out := map[string]map[string]string{}
	var v0 []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(rel))
		if _, ok := out[pkg]; !ok {
			out[pkg] = map[string]string{}
		}
		for _, spec := range f.Imports {
			p, _ := strconv.Unquote(spec.Path.Value)
			if strings.HasPrefix(p, opaModule) && !strings.HasPrefix(p, opaModule+"v1/") {
				v0 = append(v0, fmt.Sprintf("%s (%s)", path, p))
			}
			if dep, ok := strings.CutPrefix(p, module); ok {
				if _, seen := out[pkg][dep]; !seen {
					out[pkg][dep] = rel
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out, v0
}
