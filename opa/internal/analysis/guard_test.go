package analysis

import (
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// guards compiles rego as template K and reads its guards.
func guards(t *testing.T, rego string) [][]Guard {
	t.Helper()
	_, rules := compileTemplate(t, rego)
	return Guards(rules, ast.MustParseRef("data.templates.K"))
}

func TestGuards(t *testing.T) {
	cases := []struct {
		name string
		rego string
		// want lists each violation rule's guards, "; " between rules;
		// "" is no guards (nil).
		want string
	}{
		{
			name: "kind checks first",
			rego: "violation contains {\"msg\": \"x\"} if {\ninput.review.kind.kind == \"Service\"\ninput.review.kind.group == \"\"\ncount(input.review.object.spec.selector) > 0\n}",
			want: `input.review.kind.kind == "Service", input.review.kind.group == ""`,
		},
		{
			name: "unification, constant on the left, object name",
			rego: "violation contains {\"msg\": \"x\"} if {\n\"system:aggregate-to-edit\" = input.review.object.metadata.name\ninput.review.object.rules[_].verbs[_] == \"create\"\n}",
			want: `input.review.object.metadata.name == "system:aggregate-to-edit"`,
		},
		{
			name: "every rule guarded",
			rego: "violation contains {\"msg\": \"a\"} if {\ninput.review.kind.kind == \"Ingress\"\n}\nviolation contains {\"msg\": \"b\"} if {\ninput.review.kind.kind == \"Service\"\ninput.review.object.spec.type == \"LoadBalancer\"\n}",
			want: `input.review.kind.kind == "Ingress"; input.review.kind.kind == "Service", input.review.object.spec.type == "LoadBalancer"`,
		},
		{
			// The Constraint's parameters are not in the review a guard is
			// tested on: such a test would fail every pod.
			name: "a test of a parameter is no guard",
			rego: "violation contains {\"msg\": \"x\"} if {\ninput.parameters.key == \"team\"\n}",
		},
		{
			name: "one rule unguarded: no guards",
			rego: "violation contains {\"msg\": \"a\"} if {\ninput.review.kind.kind == \"Ingress\"\n}\nviolation contains {\"msg\": \"b\"} if {\ninput.review.object.spec.hostNetwork\n}",
		},
		{
			name: "the guard after another expression does not count",
			rego: "violation contains {\"msg\": \"x\"} if {\nf(input.review.object)\ninput.review.kind.kind == \"Pod\"\n}\nf(o) := true if { o.a }",
		},
		{
			name: "negated",
			rego: "violation contains {\"msg\": \"x\"} if {\nnot input.review.kind.kind == \"Pod\"\n}",
		},
		{
			name: "compared with a value that is not a scalar",
			rego: "violation contains {\"msg\": \"x\"} if {\ninput.review.object.metadata.labels == {\"a\": \"b\"}\n}",
		},
		{
			name: "non-ground reference",
			rego: "violation contains {\"msg\": \"x\"} if {\ninput.review.object.spec.containers[_].name == \"a\"\n}",
		},
		{
			name: "inequality",
			rego: "violation contains {\"msg\": \"x\"} if {\ninput.review.kind.kind != \"Pod\"\n}",
		},
		{
			name: "the candidate's name never guards",
			rego: "violation contains {\"msg\": \"x\"} if {\ninput.review.object.spec.nodeName == \"n1\"\n}",
		},
		{
			name: "parameters compared: not the review",
			rego: "violation contains {\"msg\": \"x\"} if {\ninput.review.kind.kind == input.parameters.kind\n}",
		},
		{
			name: "with modifier",
			rego: "violation contains {\"msg\": \"x\"} if {\ninput.review.kind.kind == \"Pod\" with input.review.kind.kind as \"Pod\"\n}",
		},
		{
			name: "no violation rule at all",
			rego: "other contains 1 if { input.review.kind.kind == \"Pod\" }",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			gs := guards(t, tc.rego)
			var rules []string
			for _, rule := range gs {
				var parts []string
				for _, g := range rule {
					parts = append(parts, g.String())
				}
				rules = append(rules, strings.Join(parts, ", "))
			}
			if got := strings.Join(rules, "; "); got != tc.want {
				t.Errorf("guards %q, want %q", got, tc.want)
			}
		})
	}
}

func TestGuardHolds(t *testing.T) {
	g := Guard{Path: ast.MustParseRef("input.review.kind.kind")[1:], Value: ast.String("Service")}
	for _, tc := range []struct {
		v    ast.Value
		want bool
	}{
		{ast.String("Service"), true},
		{ast.String("Pod"), false},
		{ast.Number("1"), false},
		{nil, false},
	} {
		if got := g.Holds(tc.v); got != tc.want {
			t.Errorf("Holds(%v) = %v, want %v", tc.v, got, tc.want)
		}
	}
	n := Guard{Path: g.Path, Value: ast.Number("1")}
	if !n.Holds(ast.Number("1.0")) {
		t.Error("1.0 == 1 is true in Rego")
	}
}
