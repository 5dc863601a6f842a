package analysis

import (
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// exemptLibModule is the library's exempt_container lib as it ships,
// under template kind's namespace (as the engine moves it there).
func exemptLibModule(kind string) string {
	return "package templates." + kind + ".lib.exempt_container\n" + exemptLib
}

// privilegedModule is a template of kind that tests each container with
// the lib's is_exempt; extra rules change how the compiler numbers its
// locals.
func privilegedModule(kind, extra string) string {
	return "package templates." + kind + ".template\nimport data.templates." + kind + ".lib.exempt_container.is_exempt\n" +
		"violation contains {\"msg\": msg} if {\nc := " + containers + "[_]\nnot is_exempt(c)\nc.securityContext.privileged\nmsg := sprintf(\"%v\", [c.name])\n}\n" + extra
}

// compileModules compiles Rego v1 modules together, as the engine compiles
// the policy set.
func compileModules(t *testing.T, modules ...string) *ast.Compiler {
	t.Helper()
	parsed := map[string]*ast.Module{}
	for i, src := range modules {
		id := "m" + string(rune('a'+i)) + ".rego"
		m, err := ast.ParseModuleWithOpts(id, src, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			t.Fatalf("parse %s: %v", id, err)
		}
		parsed[id] = m
	}
	c := ast.NewCompiler()
	c.Compile(parsed)
	if c.Failed() {
		t.Fatalf("compile: %v", c.Errors)
	}
	return c
}

// helperDepsOf analyses template kind of c with params and returns the
// dependencies of its first Helper.
func helperDepsOf(t *testing.T, c *ast.Compiler, kind, params string) HelperDeps {
	t.Helper()
	root := ast.MustParseRef("data.templates." + kind)
	var rules []*ast.Rule
	for _, m := range c.Modules {
		if m.Package.Path.HasPrefix(root) {
			rules = append(rules, m.Rules...)
		}
	}
	res := Analyze(c, rules, root, ast.MustParseTerm(params).Value)
	for _, p := range res.InputPaths {
		if h, ok := HelperOf(p[len(p)-1]); ok {
			return HelperDependencies(c, root, h)
		}
	}
	t.Fatalf("template %s has no Helper: %v", kind, res.Describe())
	return HelperDeps{}
}

func paramStrings(paths [][]*ast.Term) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = PathString(p)
		if out[i] == "" {
			out[i] = "(all)"
		}
	}
	return out
}

// TestHelperDependencies: what a Helper's answer depends on besides its
// value: the parameters its function reads, and its code, equal between
// templates that ship the same function and different where any rule it
// runs differs.
func TestHelperDependencies(t *testing.T) {
	other := func(kind, fn string) string {
		return "package templates." + kind + ".template\nviolation contains {\"msg\": \"x\"} if {\nc := " + containers + "[_]\nnot ok(c)\n}\n" + fn
	}
	cases := []struct {
		name    string
		modules []string
		params  string
		// wantParams are the parameter paths K's helper reads.
		wantParams []string
		// sameCode: K's and L's helpers run the same code.
		sameCode bool
	}{
		{
			name:    "the library's is_exempt in two templates: exemptImages, one code",
			modules: []string{exemptLibModule("K"), privilegedModule("K", ""), exemptLibModule("L"), privilegedModule("L", "a := 1\nb if { x := a; x > 0 }\nc if { some y in [1]; y == 1 }")},
			params:  `{"exemptImages": ["safe/*"], "allowedCapabilities": ["x"]}`, wantParams: []string{".exemptImages"}, sameCode: true,
		},
		{
			name:       "a parameter read by reference, through an alias",
			modules:    []string{other("K", "ok(c) if { p := input.parameters\nstartswith(c.image, p.prefix) }"), other("L", "ok(c) if { p := input.parameters\nstartswith(c.image, p.prefix) }")},
			params:     `{"prefix": "safe/", "other": 1}`,
			wantParams: []string{".prefix"}, sameCode: true,
		},
		{
			name:       "two parameters, one below a list",
			modules:    []string{other("K", "ok(c) if { startswith(c.image, input.parameters.repos[_].prefix)\nnot input.parameters.strict }"), other("L", "ok(c) if { startswith(c.image, input.parameters.repos[_].prefix)\nnot input.parameters.strict }")},
			params:     `{"repos": [{"prefix": "a/"}], "strict": false}`,
			wantParams: []string{".repos", ".strict"}, sameCode: true,
		},
		{
			name:       "the parameters used whole",
			modules:    []string{other("K", "ok(c) if { count(input.parameters) > 1\nc.image == \"x\" }"), other("L", "ok(c) if { count(input.parameters) > 1\nc.image == \"x\" }")},
			params:     `{"a": 1}`,
			wantParams: []string{"(all)"}, sameCode: true,
		},
		{
			name:       "a rule the function calls differs: other code",
			modules:    []string{other("K", "ok(c) if pre(c.image)\npre(i) if startswith(i, \"a/\")"), other("L", "ok(c) if pre(c.image)\npre(i) if endswith(i, \"a/\")")},
			params:     `{}`,
			wantParams: []string{}, sameCode: false,
		},
		{
			name:       "a constant the function reads differs: other code",
			modules:    []string{other("K", "ok(c) if startswith(c.image, repo)\nrepo := \"a/\""), other("L", "ok(c) if startswith(c.image, repo)\nrepo := \"b/\"")},
			params:     `{}`,
			wantParams: []string{}, sameCode: false,
		},
		{
			name:       "one more definition: other code",
			modules:    []string{other("K", "ok(c) if startswith(c.image, \"a/\")"), other("L", "ok(c) if startswith(c.image, \"a/\")\nok(c) if c.image == \"b\"")},
			params:     `{}`,
			wantParams: []string{}, sameCode: false,
		},
		{
			name:       "the same function under another name: other code",
			modules:    []string{other("K", "ok(c) if startswith(c.image, \"a/\")"), "package templates.L.template\nviolation contains {\"msg\": \"x\"} if {\nc := " + containers + "[_]\nnot fine(c)\n}\nfine(c) if startswith(c.image, \"a/\")"},
			params:     `{}`,
			wantParams: []string{}, sameCode: false,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := compileModules(t, tc.modules...)
			k := helperDepsOf(t, c, "K", tc.params)
			l := helperDepsOf(t, c, "L", tc.params)
			if got := paramStrings(k.Params); !slices.Equal(got, tc.wantParams) {
				t.Errorf("params = %q, want %q", got, tc.wantParams)
			}
			if same := k.Code == l.Code; same != tc.sameCode {
				t.Errorf("same code = %v, want %v\nK:\n%s\nL:\n%s", same, tc.sameCode, k.Code, l.Code)
			}
			if strings.Contains(k.Code, "templates.K") || strings.Contains(k.Code, `"K"`) {
				t.Errorf("K's code names its template:\n%s", k.Code)
			}
		})
	}
}
