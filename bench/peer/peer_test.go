package peer

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/open-policy-agent/frameworks/constraint/pkg/client/reviews"
	yaml "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// libraryDir is the gatekeeper-library corpus in the shared/ folder that sits
// beside the repository clone (../../shared from bench/, so ../../../shared
// from this package's directory).
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

// suite mirrors gator's verify.Suite / Test / Case / Assertion.
type suite struct {
	Tests []struct {
		Name       string `yaml:"name"`
		Template   string `yaml:"template"`
		Constraint string `yaml:"constraint"`
		Expansion  string `yaml:"expansion"`
		Invalid    bool   `yaml:"invalid"`
		Skip       bool   `yaml:"skip"`
		Cases      []struct {
			Name       string   `yaml:"name"`
			Object     string   `yaml:"object"`
			Inventory  []string `yaml:"inventory"`
			Skip       bool     `yaml:"skip"`
			Assertions []struct {
				Violations any     `yaml:"violations"`
				Message    *string `yaml:"message"`
			} `yaml:"assertions"`
		} `yaml:"cases"`
	} `yaml:"tests"`
}

func mustRead(tb testing.TB, path string) []*unstructured.Unstructured {
	tb.Helper()
	objs, err := ReadObjects(path)
	if err != nil {
		tb.Fatal(err)
	}
	if len(objs) == 0 {
		tb.Fatalf("%s: no objects", path)
	}
	return objs
}

func mustReadOne(tb testing.TB, path string) *unstructured.Unstructured {
	tb.Helper()
	objs := mustRead(tb, path)
	if len(objs) != 1 {
		tb.Fatalf("%s: want 1 object, got %d", path, len(objs))
	}
	return objs[0]
}

// checkAssertion applies gator's Assertion.Run semantics: count the results
// whose msg matches the message regexp (all results without one), then
// compare with violations (yes = at least one, no = none, N = exactly N;
// unset = yes).
func checkAssertion(results []Result, violations any, message *string) error {
	var re *regexp.Regexp
	if message != nil {
		var err error
		if re, err = regexp.Compile(*message); err != nil {
			return err
		}
	}
	n := 0
	var msgs []string
	for _, r := range results {
		msgs = append(msgs, r.Msg)
		if re == nil || re.MatchString(r.Msg) {
			n++
		}
	}
	switch v := violations.(type) {
	case nil:
		violations = "yes"
	case int:
		if n != v {
			return fmt.Errorf("got %d matching violations, want %d (message %v); messages %q", n, v, deref(message), msgs)
		}
		return nil
	}
	switch violations {
	case "yes":
		if n == 0 {
			return fmt.Errorf("got no matching violations, want some (message %v); messages %q", deref(message), msgs)
		}
	case "no":
		if n != 0 {
			return fmt.Errorf("got %d matching violations, want none (message %v); messages %q", n, deref(message), msgs)
		}
	default:
		return fmt.Errorf("bad violations value %#v", violations)
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return "<any>"
	}
	return fmt.Sprintf("%q", *s)
}

// runLibrarySuite runs one library suite.yaml the way gator verify does (a
// fresh client per case, inventory added per case, ReviewObject), and, for
// Pod objects, also through ReviewPodOnNode (the admission path) with the
// same assertions.
func runLibrarySuite(t *testing.T, dir string) {
	var s suite
	b, err := os.ReadFile(filepath.Join(dir, "suite.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range s.Tests {
		if tc.Skip {
			continue
		}
		t.Run(tc.Name, func(t *testing.T) {
			if tc.Expansion != "" {
				t.Skip("expansion templates are not supported by this runner")
			}
			tmpl := mustReadOne(t, filepath.Join(dir, tc.Template))
			cons := mustReadOne(t, filepath.Join(dir, tc.Constraint))
			if tc.Invalid {
				// gator: the template or the constraint must be rejected.
				p, err := New()
				if err != nil {
					t.Fatal(err)
				}
				if err := p.AddTemplate(tmpl); err == nil {
					if err := p.AddConstraint(cons); err == nil {
						t.Fatal("invalid test: template and constraint were both accepted")
					}
				}
				return
			}
			for _, c := range tc.Cases {
				if c.Skip {
					continue
				}
				t.Run(c.Name, func(t *testing.T) {
					obj := mustReadOne(t, filepath.Join(dir, c.Object))
					p, err := New()
					if err != nil {
						t.Fatal(err)
					}
					if err := p.AddTemplate(tmpl); err != nil {
						t.Fatalf("AddTemplate: %v", err)
					}
					if err := p.AddConstraint(cons); err != nil {
						t.Fatalf("AddConstraint: %v", err)
					}
					for _, inv := range c.Inventory {
						for _, o := range mustRead(t, filepath.Join(dir, inv)) {
							if err := p.AddData(o); err != nil {
								t.Fatalf("AddData: %v", err)
							}
						}
					}
					results, err := p.ReviewObject(ctx, obj.Object, nil)
					if err != nil {
						t.Fatalf("ReviewObject: %v", err)
					}
					for i, a := range c.Assertions {
						if err := checkAssertion(results, a.Violations, a.Message); err != nil {
							t.Errorf("ReviewObject assertion %d: %v", i, err)
						}
					}
					if obj.GetKind() != "Pod" || obj.GroupVersionKind().Group != "" {
						return
					}
					results, err = p.ReviewPodOnNode(ctx, obj.Object, "node-1", nil, map[string]any{"username": "system:kube-scheduler"})
					if err != nil {
						t.Fatalf("ReviewPodOnNode: %v", err)
					}
					for i, a := range c.Assertions {
						if err := checkAssertion(results, a.Violations, a.Message); err != nil {
							t.Errorf("ReviewPodOnNode assertion %d: %v", i, err)
						}
					}
				})
			}
		})
	}
}

func TestLibrarySuites(t *testing.T) {
	lib := libraryDir(t)
	for _, d := range []string{
		"general/allowedrepos",
		"pod-security-policy/privileged-containers",
		"general/requiredlabels",
	} {
		t.Run(d, func(t *testing.T) { runLibrarySuite(t, filepath.Join(lib, d)) })
	}
}

// --- framework semantics the engine must mirror -----------------------------

func mustParse(tb testing.TB, y string) *unstructured.Unstructured {
	tb.Helper()
	objs, err := ParseObjects([]byte(y))
	if err != nil {
		tb.Fatal(err)
	}
	if len(objs) != 1 {
		tb.Fatalf("want 1 object, got %d", len(objs))
	}
	return objs[0]
}

// templateYAML builds a v1 template of kind K whose targets[0] body is code
// (already indented for the target list entry).
func templateYAML(kind, target string) string {
	return `apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata:
  name: ` + strings.ToLower(kind) + `
spec:
  crd:
    spec:
      names:
        kind: ` + kind + `
  targets:
  - target: admission.k8s.gatekeeper.sh
` + target
}

func constraintYAML(kind, name, extraSpec string) string {
	return `apiVersion: constraints.gatekeeper.sh/v1beta1
kind: ` + kind + `
metadata:
  name: ` + name + `
spec:
` + extraSpec + `
  match:
    kinds:
    - apiGroups: [""]
      kinds: ["Pod"]
`
}

func indent(s, pfx string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = pfx + lines[i]
	}
	return strings.Join(lines, "\n") + "\n"
}

func regoTarget(rego string) string {
	return "    rego: |\n" + indent(rego, "      ")
}

func codeTarget(version, rego string) string {
	v := ""
	if version != "" {
		v = "        version: " + version + "\n"
	}
	return "    code:\n    - engine: Rego\n      source:\n" + v + "        rego: |\n" + indent(rego, "          ")
}

var testPod = map[string]any{
	"apiVersion": "v1",
	"kind":       "Pod",
	"metadata":   map[string]any{"name": "p", "namespace": "ns1", "labels": map[string]any{"app": "x"}},
	"spec":       map[string]any{"containers": []any{map[string]any{"name": "c", "image": "nginx"}}},
}

var testNamespace = map[string]any{
	"apiVersion": "v1",
	"kind":       "Namespace",
	"metadata":   map[string]any{"name": "ns1", "labels": map[string]any{"team": "a"}},
}

func peerWith(t *testing.T, kind, target string, opts ...Option) *Peer {
	t.Helper()
	p, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AddTemplate(mustParse(t, templateYAML(kind, target))); err != nil {
		t.Fatalf("AddTemplate: %v", err)
	}
	if err := p.AddConstraint(mustParse(t, constraintYAML(kind, "c1", "  enforcementAction: deny"))); err != nil {
		t.Fatalf("AddConstraint: %v", err)
	}
	return p
}

func reviewPod(t *testing.T, p *Peer) ([]Result, error) {
	t.Helper()
	return p.ReviewPodOnNode(context.Background(), testPod, "node-1", testNamespace,
		map[string]any{"username": "system:kube-scheduler", "groups": []any{"system:authenticated"}})
}

// TestReviewInput records the exact input.review a template sees on the
// admission path and on the gator path.
func TestReviewInput(t *testing.T) {
	p := peerWith(t, "K8sEcho", regoTarget(`package echo
violation[{"msg": "echo", "details": {"review": input.review, "parameters": input.parameters}}] { true }
`))
	res, err := reviewPod(t, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 {
		t.Fatalf("want 1 result, got %+v", res)
	}
	d := res[0].Details.(map[string]any)
	b, _ := json.MarshalIndent(d, "", "  ")
	t.Logf("ReviewPodOnNode input (review, parameters):\n%s", b)
	review := d["review"].(map[string]any)
	for k, want := range map[string]string{
		"kind":      `{"group":"","kind":"Pod","version":"v1"}`,
		"resource":  `{"group":"","resource":"pods","version":"v1"}`,
		"operation": `"CREATE"`,
		"name":      `"p"`,
		"namespace": `"ns1"`,
		"oldObject": `null`,
		"uid":       `""`,
		"options":   `null`,
		"userInfo":  `{"groups":["system:authenticated"],"username":"system:kube-scheduler"}`,
	} {
		got, _ := json.Marshal(review[k])
		if string(got) != want {
			t.Errorf("input.review.%s = %s, want %s", k, got, want)
		}
	}
	if nn, _, _ := unstructured.NestedString(review, "object", "spec", "nodeName"); nn != "node-1" {
		t.Errorf("object.spec.nodeName = %q", nn)
	}
	// namespaceObject is the corev1.Namespace JSON round trip done by
	// util.NamespaceToMap: fields unknown to corev1.Namespace are dropped and
	// the empty structs spec and status appear (creationTimestamp is omitted
	// when zero since k8s.io v0.3x's omitzero).
	nsb, _ := json.Marshal(review["namespaceObject"])
	if want := `{"apiVersion":"v1","kind":"Namespace","metadata":{"labels":{"team":"a"},"name":"ns1"},"spec":{},"status":{}}`; string(nsb) != want {
		t.Errorf("namespaceObject = %s, want %s", nsb, want)
	}
	if got, _ := json.Marshal(d["parameters"]); string(got) != `{}` {
		t.Errorf("parameters = %s, want {}", got)
	}

	// No namespace: namespaceObject is {} (a nil map[string]any becomes an
	// empty object in ast.InterfaceToValue), not null.
	res, err = p.ReviewPodOnNode(context.Background(), testPod, "node-1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	review = res[0].Details.(map[string]any)["review"].(map[string]any)
	if got, _ := json.Marshal(review["namespaceObject"]); string(got) != `{}` {
		t.Errorf("namespaceObject without namespace = %s, want {}", got)
	}
	// The same, asserted inside Rego (not an artefact of the JSON round trip).
	q := peerWith(t, "K8sNsEmpty", regoTarget(`package nsempty
violation[{"msg": "empty object"}] { input.review.namespaceObject == {} }
violation[{"msg": "null"}] { input.review.namespaceObject == null }
`))
	res2, err := q.ReviewPodOnNode(context.Background(), testPod, "node-1", nil, nil)
	if err != nil || len(res2) != 1 || res2[0].Msg != "empty object" {
		t.Errorf("Rego view of a missing namespaceObject: %+v, %v", res2, err)
	}
	if got, _ := json.Marshal(review["userInfo"]); string(got) != `{}` {
		t.Errorf("userInfo without userInfo = %s, want {}", got)
	}

	// gator path.
	res, err = p.ReviewObject(context.Background(), testPod, nil)
	if err != nil {
		t.Fatal(err)
	}
	review = res[0].Details.(map[string]any)["review"].(map[string]any)
	b, _ = json.MarshalIndent(review, "", "  ")
	t.Logf("ReviewObject input.review:\n%s", b)
	for k, want := range map[string]string{
		"operation":       `""`,
		"resource":        `{"group":"","resource":"","version":""}`,
		"userInfo":        `{}`,
		"namespaceObject": `{}`,
	} {
		got, _ := json.Marshal(review[k])
		if string(got) != want {
			t.Errorf("gator input.review.%s = %s, want %s", k, got, want)
		}
	}
}

func TestResultShapes(t *testing.T) {
	t.Run("missing msg dropped, details default {}, duplicates collapse", func(t *testing.T) {
		p := peerWith(t, "K8sShapes", regoTarget(`package shapes
violation[{"details": {"a": 1}}] { true }
violation[{"msg": "no details"}] { true }
violation[{"msg": "dup"}] { true }
violation[{"msg": "dup"}] { input.review.object.kind == "Pod" }
violation[{"msg": "with details", "details": {"x": 1}}] { true }
violation[{"msg": "extra key", "other": 1}] { true }
`))
		res, err := reviewPod(t, p)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, r := range res {
			b, _ := json.Marshal(r.Details)
			got[r.Msg] += string(b)
		}
		want := map[string]string{"no details": "{}", "dup": "{}", "with details": `{"x":1}`, "extra key": "{}"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("results %v, want %v", got, want)
		}
	})
	t.Run("non-string msg fails the whole review", func(t *testing.T) {
		p := peerWith(t, "K8sNumMsg", regoTarget(`package nummsg
violation[{"msg": 42}] { true }
`))
		res, err := reviewPod(t, p)
		if err == nil {
			t.Fatalf("want error, got %+v", res)
		}
		t.Logf("non-string msg error: %v", err)
	})
	t.Run("evaluation error is a violation carrying the error text", func(t *testing.T) {
		p := peerWith(t, "K8sConflict", regoTarget(`package conflict
f(x) = 1 { true }
f(x) = 2 { true }
violation[{"msg": msg}] { msg := sprintf("%v", [f(1)]) }
`))
		res, err := reviewPod(t, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 1 || res[0].ConstraintName != "c1" || res[0].EnforcementAction != "deny" {
			t.Fatalf("want one result for c1, got %+v", res)
		}
		if b, _ := json.Marshal(res[0].Details); string(b) != "null" {
			t.Errorf("details of an eval error = %s, want null", b)
		}
		t.Logf("eval error result msg: %q", res[0].Msg)
		if !strings.Contains(res[0].Msg, "eval_conflict_error") {
			t.Errorf("msg %q does not carry the error", res[0].Msg)
		}
	})
	t.Run("builtin errors are not evaluation errors", func(t *testing.T) {
		p := peerWith(t, "K8sBuiltinErr", regoTarget(`package builtinerr
violation[{"msg": "x"}] { to_number("abc") }
`))
		res, err := reviewPod(t, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 0 {
			t.Errorf("want no result (non-strict builtin error = undefined), got %+v", res)
		}
	})
}

const v1Rego = `package v1only
violation contains {"msg": "v1"} if { input.review.object.kind == "Pod" }
`

const v0Rego = `package v0only
violation[{"msg": "v0"}] { input.review.object.kind == "Pod" }
`

func TestRegoVersions(t *testing.T) {
	ctx := context.Background()
	addTemplate := func(t *testing.T, kind, target string) error {
		p, err := New()
		if err != nil {
			t.Fatal(err)
		}
		return p.AddTemplate(mustParse(t, templateYAML(kind, target)))
	}
	if err := addTemplate(t, "K8sA", regoTarget(v1Rego)); err == nil {
		t.Error("targets[].rego with v1 syntax: want a parse error (rego is Rego v0)")
	} else {
		t.Logf("rego field with v1 syntax: %v", err)
	}
	if err := addTemplate(t, "K8sB", codeTarget("", v1Rego)); err == nil {
		t.Error("code Rego without version, v1 syntax: want a parse error (default v0)")
	}
	if err := addTemplate(t, "K8sC", codeTarget("v0", v1Rego)); err == nil {
		t.Error("code Rego version v0, v1 syntax: want a parse error")
	}
	if err := addTemplate(t, "K8sD", codeTarget("v1", v0Rego)); err == nil {
		t.Error("code Rego version v1, v0 syntax: want a parse error")
	} else {
		t.Logf("code version v1 with v0 syntax: %v", err)
	}
	p := peerWith(t, "K8sE", codeTarget("v1", v1Rego))
	res, err := reviewPod(t, p)
	if err != nil || len(res) != 1 || res[0].Msg != "v1" {
		t.Errorf("code version v1: got %+v, %v", res, err)
	}
	// A non-empty rego field replaces the code Rego entry, version included:
	// the result is parsed as v0 even though code says v1.
	both := regoTarget(v0Rego) + codeTarget("v1", v1Rego)
	p = peerWith(t, "K8sF", both)
	res, err = p.ReviewObject(ctx, testPod, nil)
	if err != nil || len(res) != 1 || res[0].Msg != "v0" {
		t.Errorf("rego + code v1: got %+v, %v; want the rego field (v0) to win", res, err)
	}
	if err := addTemplate(t, "K8sG", regoTarget(v1Rego)+codeTarget("v1", v1Rego)); err == nil {
		t.Error("rego (v1 syntax) + code v1: want a parse error (rego field wins, as v0)")
	}
	// Rego v0 with future.keywords imports accepts the v1 keywords.
	body := strings.SplitN(v1Rego, "\n", 2)[1]
	p = peerWith(t, "K8sH", regoTarget("package h\nimport future.keywords.contains\nimport future.keywords.if\n"+body))
	if res, err = reviewPod(t, p); err != nil || len(res) != 1 {
		t.Errorf("v0 + import future.keywords: got %+v, %v", res, err)
	}
	// The regorewriter rejects `import rego.v1` (only data.lib.* and future.*
	// imports pass checkImport), in v0 and in v1 templates alike.
	if err := addTemplate(t, "K8sI", regoTarget("package i\nimport rego.v1\n"+body)); err == nil {
		t.Error("v0 + import rego.v1: want an invalid import error")
	} else {
		t.Logf("v0 + import rego.v1: %v", err)
	}
	if err := addTemplate(t, "K8sJ", codeTarget("v1", "package j\nimport rego.v1\n"+body)); err == nil {
		t.Error("v1 + import rego.v1: want an invalid import error")
	} else {
		t.Logf("v1 + import rego.v1: %v", err)
	}
	if err := addTemplate(t, "K8sK", codeTarget("v1", "package k\nimport future.keywords.if\n"+body)); err != nil {
		t.Errorf("v1 + import future.keywords.if: %v", err)
	}
}

func TestCELAndRego(t *testing.T) {
	cel := `    code:
    - engine: K8sNativeValidation
      source:
        validations:
        - expression: "false"
          message: "cel says no"
`
	// Both engines: the Rego-only client evaluates the Rego entry.
	p := peerWith(t, "K8sBoth", cel+`    - engine: Rego
      source:
        rego: |
          package both
          violation[{"msg": "rego says no"}] { true }
`)
	res, err := reviewPod(t, p)
	if err != nil || len(res) != 1 || res[0].Msg != "rego says no" {
		t.Errorf("CEL+Rego: got %+v, %v", res, err)
	}
	// CEL only: no driver, AddTemplate fails.
	q, _ := New()
	if err := q.AddTemplate(mustParse(t, templateYAML("K8sCelOnly", cel))); err == nil {
		t.Error("CEL-only template: want an error from a Rego-only client")
	} else {
		t.Logf("CEL-only template: %v", err)
	}
}

func TestEnforcementActions(t *testing.T) {
	kind := "K8sAlways"
	tmpl := mustParse(t, templateYAML(kind, regoTarget("package always\nviolation[{\"msg\": \"no\"}] { true }\n")))
	p, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AddTemplate(tmpl); err != nil {
		t.Fatal(err)
	}
	for name, spec := range map[string]string{
		"default": "",
		"warn":    "  enforcementAction: warn",
		"ours":    "  enforcementAction: scoped\n  scopedEnforcementActions:\n  - action: warn\n    enforcementPoints:\n    - name: opa-scheduler-extender\n  - action: deny\n    enforcementPoints:\n    - name: \"*\"",
		"theirs":  "  enforcementAction: scoped\n  scopedEnforcementActions:\n  - action: deny\n    enforcementPoints:\n    - name: validation.gatekeeper.sh",
	} {
		if err := p.AddConstraint(mustParse(t, constraintYAML(kind, name, spec))); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	res, err := reviewPod(t, p)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range res {
		got[r.ConstraintName] = r.EnforcementAction + fmt.Sprint(r.ScopedEnforcementActions)
	}
	want := map[string]string{"default": "deny[]", "warn": "warn[]", "ours": "scoped[deny warn]"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v (a scoped constraint without our point does not match)", got, want)
	}
}

func TestInventory(t *testing.T) {
	p := peerWith(t, "K8sNodePool", regoTarget(`package nodepool
violation[{"msg": msg}] {
  node := data.inventory.cluster["v1"]["Node"][input.review.object.spec.nodeName]
  node.metadata.labels.pool != "general"
  msg := sprintf("node %v is in pool %v", [node.metadata.name, node.metadata.labels.pool])
}
`))
	node := func(name, pool string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Node",
			"metadata": map[string]any{"name": name, "labels": map[string]any{"pool": pool}},
		}}
	}
	for _, n := range []*unstructured.Unstructured{node("node-1", "general"), node("node-2", "gpu")} {
		if err := p.AddData(n); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	for nodeName, want := range map[string]int{"node-1": 0, "node-2": 1, "node-3": 0} {
		res, err := p.ReviewPodOnNode(ctx, testPod, nodeName, testNamespace, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != want {
			t.Errorf("%s: got %+v, want %d violations", nodeName, res, want)
		}
	}
	if err := p.RemoveData(node("node-2", "gpu")); err != nil {
		t.Fatal(err)
	}
	if res, err := p.ReviewPodOnNode(ctx, testPod, "node-2", testNamespace, nil); err != nil || len(res) != 0 {
		t.Errorf("after RemoveData: got %+v, %v", res, err)
	}
}

// benchTemplates are ten library templates whose sample constraint matches
// Pods in any namespace (allowedrepos is restricted to "default", where the
// benchmark pod lives).
var benchTemplates = []struct{ dir, sample string }{
	{"general/allowedrepos", "repo-must-be-openpolicyagent"},
	{"general/containerlimits", "container-must-have-limits"},
	{"general/requiredprobes", "must-have-probes"},
	{"general/disallowedtags", "container-image-must-not-have-latest-tag"},
	{"general/imagedigests", "container-image-must-have-digest"},
	{"pod-security-policy/privileged-containers", "psp-privileged-container"},
	{"pod-security-policy/host-namespaces", "psp-host-namespace"},
	{"pod-security-policy/capabilities", "psp-capabilities-baseline"},
	{"pod-security-policy/allow-privilege-escalation", "psp-allow-privilege-escalation-container"},
	{"pod-security-policy/read-only-root-filesystem", "psp-readonlyrootfilesystem"},
}

// BenchmarkPeerReviewPodOnNode: one pod (namespace "default") against the ten
// benchTemplates with their sample constraints, one Node and the Namespace in
// the inventory; one Review per op (all ten constraints match the pod).
func BenchmarkPeerReviewPodOnNode(b *testing.B) { benchReviewPodOnNode(b, len(benchTemplates)) }

// BenchmarkPeerReviewPodOnNodeOneTemplate is the same with allowedrepos only.
func BenchmarkPeerReviewPodOnNodeOneTemplate(b *testing.B) { benchReviewPodOnNode(b, 1) }

func benchReviewPodOnNode(b *testing.B, nTemplates int) {
	lib := libraryDir(b)
	p, err := New()
	if err != nil {
		b.Fatal(err)
	}
	for _, bt := range benchTemplates[:nTemplates] {
		dir := filepath.Join(lib, bt.dir)
		if err := p.AddTemplate(mustReadOne(b, filepath.Join(dir, "template.yaml"))); err != nil {
			b.Fatalf("%s: %v", bt.dir, err)
		}
		if err := p.AddConstraint(mustReadOne(b, filepath.Join(dir, "samples", bt.sample, "constraint.yaml"))); err != nil {
			b.Fatalf("%s: %v", bt.dir, err)
		}
	}
	ns := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "default"}}
	node := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Node",
		"metadata": map[string]any{"name": "node-1", "labels": map[string]any{"kubernetes.io/hostname": "node-1", "pool": "general"}},
		"spec":     map[string]any{"taints": []any{}},
	}}
	for _, o := range []*unstructured.Unstructured{node, {Object: ns}} {
		if err := p.AddData(o); err != nil {
			b.Fatal(err)
		}
	}
	pod := mustReadOne(b, filepath.Join(lib, "general/allowedrepos/samples/repo-must-be-openpolicyagent/example_allowed.yaml")).Object
	_ = unstructured.SetNestedField(pod, "default", "metadata", "namespace")
	user := map[string]any{"username": "system:kube-scheduler"}
	ctx := context.Background()
	res, err := p.ReviewPodOnNode(ctx, pod, "node-1", ns, user)
	if err != nil {
		b.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, r := range res {
		kinds[r.ConstraintKind] = true
	}
	// Count the constraints that matched (were evaluated) via the driver stats.
	review, nsObj, err := PodOnNodeReview(pod, "node-1", ns, user)
	if err != nil {
		b.Fatal(err)
	}
	resp, err := p.ReviewRaw(ctx, review, append(NamespaceOpts(nsObj), reviews.Stats(true))...)
	if err != nil {
		b.Fatal(err)
	}
	evaluated := 0
	for _, e := range resp.StatsEntries {
		for _, st := range e.Stats {
			if st.Name == "constraintCount" {
				evaluated += st.Value.(int)
			}
		}
	}
	if evaluated != nTemplates {
		b.Fatalf("%d of %d constraints matched the pod", evaluated, nTemplates)
	}
	b.Logf("%d constraints evaluated, %d violations from %d of them", evaluated, len(res), len(kinds))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := p.ReviewPodOnNode(ctx, pod, "node-1", ns, user); err != nil {
			b.Fatal(err)
		}
	}
}

// TestLibraryCorpus runs every suite.yaml of the library (skipped with
// -short). The runner skips tests with gator expansion templates; the corpus
// has none.
func TestLibraryCorpus(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	lib := libraryDir(t)
	var dirs []string
	err := filepath.WalkDir(lib, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Name() == "suite.yaml" {
			dirs = append(dirs, filepath.Dir(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		rel, _ := filepath.Rel(lib, d)
		t.Run(rel, func(t *testing.T) { runLibrarySuite(t, d) })
	}
}
