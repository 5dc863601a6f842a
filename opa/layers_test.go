package opa_test

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is the main module's path, opaModule OPA's.
const (
	module    = "github.com/opa-scheduler-extender/opa-scheduler-extender/"
	opaModule = "github.com/open-policy-agent/opa/"
)

// layers lists, for every package of the main module, the packages of the
// module it may import (directly; test files excluded). The engine's layers
// point one way: the vocabulary (opa/policy) and the leaf utilities import
// nothing of the project; Gatekeeper's semantics, the inventory and the
// evaluator seam import only what is below them; a driver imports the
// seam, never another driver or the engine; the engine (opa) imports the
// layers below and nothing that feeds or serves it; sources and front ends
// sit above it, and only cmd wires them together. A package missing from
// this table fails the test: a new package takes a place deliberately.
var layers = map[string][]string{
	"opa/policy":             nil,
	"opa/freelist":           nil,
	"opa/internal/analysis":  nil,
	"opa/internal/compact":   nil,
	"opa/internal/jsonvalue": nil,
	"opa/internal/memo":      nil,
	"opa/internal/lookup": {
		"opa/internal/analysis", "opa/internal/memo"},
	"opa/internal/gatekeeper": {
		"opa/policy"},
	"opa/internal/inventory": {
		"opa/policy", "opa/internal/analysis", "opa/internal/compact", "opa/internal/jsonvalue"},
	"opa/internal/verdict": {
		"opa/internal/analysis", "opa/internal/gatekeeper", "opa/internal/lookup"},
	"opa/internal/drivers": {
		"opa/policy", "opa/internal/analysis", "opa/internal/inventory", "opa/internal/gatekeeper"},
	"opa/internal/drivers/rego": {
		"opa/policy", "opa/internal/analysis", "opa/internal/inventory", "opa/internal/gatekeeper", "opa/internal/drivers"},
	"opa/internal/drivers/cel": {
		"opa/policy", "opa/internal/analysis", "opa/internal/inventory", "opa/internal/gatekeeper", "opa/internal/drivers"},
	"opa/internal/policyset": {
		"opa/policy", "opa/internal/analysis", "opa/internal/memo", "opa/internal/lookup", "opa/internal/verdict",
		"opa/internal/gatekeeper", "opa/internal/inventory", "opa/internal/drivers"},
	"opa": {
		"opa/policy", "opa/freelist", "opa/internal/analysis", "opa/internal/compact", "opa/internal/jsonvalue", "opa/internal/memo",
		"opa/internal/lookup", "opa/internal/verdict", "opa/internal/gatekeeper", "opa/internal/inventory", "opa/internal/drivers", "opa/internal/drivers/rego", "opa/internal/drivers/cel", "opa/internal/policyset"},
	"opa/enginemetrics":                    {"opa", "opa/policy"},
	"opa/source":                           {"opa", "opa/policy"},
	"opa/verify":                           {"opa", "opa/policy", "opa/source"},
	"opa/opatest":                          {"opa", "opa/policy", "opa/source"},
	"server":                               {"opa", "opa/policy", "opa/freelist", "opa/enginemetrics"},
	"cmd/opa-scheduler-extender/heapfloor": nil,
	"cmd/opa-scheduler-extender": {
		"opa", "opa/policy", "opa/source", "opa/verify", "opa/enginemetrics", "server", "cmd/opa-scheduler-extender/heapfloor"},
}

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
	if len(imports) < len(layers)/2 {
		t.Fatalf("found %d packages under %s; is this the module root?", len(imports), root)
	}
	for pkg, got := range imports {
		allowed, known := layers[pkg]
		if !known {
			t.Errorf("package %s is not in the layers table: give it a place (layers_test.go)", pkg)
			continue
		}
		for _, imp := range got {
			if !slices.Contains(allowed, imp) {
				t.Errorf("%s imports %s, which its layer may not", pkg, imp)
			}
		}
	}
	for pkg := range layers {
		if _, found := imports[pkg]; !found {
			t.Errorf("the layers table names %s, which has no Go files", pkg)
		}
	}
}

// moduleImports reads the Go files of every package of the main module
// under root (nested modules and testdata skipped) and gives each
// package's imports of the module from its non-test files, both relative
// to the module path, and the files (tests included) that import OPA's v0
// API.
func moduleImports(t *testing.T, root string) (map[string][]string, []string) {
	t.Helper()
	out := map[string][]string{}
	var v0 []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || fileExists(filepath.Join(path, "go.mod"))) {
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
		for _, spec := range f.Imports {
			p, _ := strconv.Unquote(spec.Path.Value)
			if strings.HasPrefix(p, opaModule) && !strings.HasPrefix(p, opaModule+"v1/") {
				v0 = append(v0, fmt.Sprintf("%s (%s)", path, p))
			}
		}
		if strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := filepath.ToSlash(rel)
		if _, ok := out[pkg]; !ok {
			out[pkg] = nil
		}
		for _, spec := range f.Imports {
			p, _ := strconv.Unquote(spec.Path.Value)
			if dep, ok := strings.CutPrefix(p, module); ok && !slices.Contains(out[pkg], dep) {
				out[pkg] = append(out[pkg], dep)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out, v0
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
