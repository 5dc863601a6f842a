package opa_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// requestPath are the packages a request runs in: the engine and its
// internal packages. Each package-level variable there must be a value
// built once and never written (or a buffer the runtime owns), named
// below with why: a cache, a pool, an interner or a table that grows
// belongs to an Engine (or to a front end's opa.PodDecoder), so that two
// engines in one process share nothing and each bounds its own memory.
var requestPath = []string{"opa", "opa/internal"}

// immutable are the package-level variables allowed on the request path,
// by package, with why each group is not state.
var immutable = map[string]struct {
	names []string
	why   string
}{
	"opa": {[]string{"podGVK", "termAPIVersion", "termAnnotations", "termGenerateName", "termKind", "termLabels",
		"termMetadata", "termName", "termNamespace", "termSpec", "termUID", "objectKey", "oldObjectKey", "zeroGeneration",
		"nothingPrinted", "answerArrays", "helperMemoOptions", "refusedOPAConfig", "podDigestSeed"},
		"terms, arrays and options built once and never written; a seed drawn once"},
	"opa/internal/analysis": {[]string{"Each", "Keys", "Len", "Shape", "NodeNamePath", "argMarker", "helperArgRoot",
		"helperArgVar", "nodesPath", "parametersTerm", "sharedRoot", "stringBuiltins", "uniqueNodePaths", "uniquePodPaths"},
		"markers, paths and builtin tables built once"},
	"opa/internal/drivers/cel": {[]string{"CompatibilityVersion", "errNotString", "gatekeeperVariables", "keyKind", "keyName",
		"keyNamespace", "keyNamespaceObject", "keyNodeName", "keyObject", "keyOperation", "keyResource", "keySpec",
		"keyUserInfo", "requestFields"}, "the CEL environment's version, Gatekeeper's variables, keys"},
	"opa/internal/drivers/rego": {[]string{"helperArgument", "noMetrics", "termNodes", "termParameters", "termReview",
		"termReviewInput"}, "terms and an evaluation option built once"},
	"opa/internal/gatekeeper": {[]string{"ErrInvalidConstraint", "ErrInvalidTemplate", "formats", "kindPattern", "matchers",
		"podKindTerm", "podResourceTerm", "reviewKeys", "termNodeName", "termObject", "termSpec", "valueChecks"},
		"errors, Gatekeeper's matchers and schema checks, terms"},
	"opa/internal/inventory": {[]string{"GenerationPath", "KindGenerationsPath", "NamespacesPath", "NodesPath", "Whole",
		"defaultSharedLimits", "nodeTypeMeta", "unknown", "nodeRebuildAt"},
		"paths, views and limits; nodeRebuildAt is set by its benchmark only"},
	"opa/internal/jsonvalue": {[]string{"commonKeys", "keepAll", "scratchPool", "endsPool"},
		"a key table built once; two sync.Pools of parse buffers, which hold no value across calls and which every collection empties"},
	"opa/internal/lookup":    {[]string{"ReviewKey", "Undefined", "notReadKey", "shapes", "wholeMarker"}, "terms built once"},
	"opa/internal/policyset": {[]string{"metadataName"}, "a term"},
	"opa/internal/verdict":   {[]string{"PlaceholderKey"}, "a term"},
}

// TestNoProcessWideState: the request path has no package-level variable
// but the values named in immutable.
func TestNoProcessWideState(t *testing.T) {
	found := map[string][]string{}
	fset := token.NewFileSet()
	for _, root := range requestPath {
		dir := filepath.Join("..", root)
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || (root == "opa" && path != dir)) {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel("..", filepath.Dir(path))
			pkg := filepath.ToSlash(rel)
			for _, decl := range f.Decls {
				if g, ok := decl.(*ast.GenDecl); ok && g.Tok == token.VAR {
					for _, spec := range g.Specs {
						for _, n := range spec.(*ast.ValueSpec).Names {
							if n.Name != "_" {
								found[pkg] = append(found[pkg], n.Name)
							}
						}
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(found["opa"]) == 0 || len(found["opa/internal/lookup"]) == 0 {
		t.Fatalf("found no variables in opa or opa/internal/lookup: %v", found)
	}
	for pkg, names := range found {
		sort.Strings(names)
		for _, n := range names {
			if !slices.Contains(immutable[pkg].names, n) {
				t.Errorf("%s.%s is a package-level variable on the request path: a cache, pool or table belongs to an Engine; a value built once goes in immutable (state_test.go) with why", pkg, n)
			}
		}
	}
	for pkg, allowed := range immutable {
		for _, n := range allowed.names {
			if !slices.Contains(found[pkg], n) {
				t.Errorf("immutable names %s.%s, which is gone: drop it", pkg, n)
			}
		}
	}
}
