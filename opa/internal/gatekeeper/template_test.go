package gatekeeper

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func templateObject(t *testing.T, kind, target string) *unstructured.Unstructured {
	t.Helper()
	var content map[string]any
	if err := yaml.Unmarshal([]byte(`
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata:
  name: `+strings.ToLower(kind)+`
spec:
  crd:
    spec:
      names:
        kind: `+kind+`
  targets:
`+target), &content); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: content}
}

func TestParseTemplate(t *testing.T) {
	tests := []struct {
		name   string
		kind   string
		target string
		opts   ParseOptions
		// wantEngine is the engine chosen (default Rego), wantPolicy the
		// CEL code's failure policy.
		wantEngine, wantPolicy string
		wantErr                string
	}{
		{name: "rego v0", kind: "K8sOk", target: `
  - target: admission.k8s.gatekeeper.sh
    rego: |
      package x
      violation[{"msg": "m"}] { input.review.object.spec.hostNetwork }
`},
		{name: "code v1", kind: "K8sOkV1", opts: ParseOptions{DisableK8sNativeValidation: true}, target: `
  - target: admission.k8s.gatekeeper.sh
    code:
      - engine: K8sNativeValidation
        source: {validations: [{expression: "true"}]}
      - engine: Rego
        source:
          version: "v1"
          rego: |
            package x
            violation contains {"msg": "m"} if input.review.object.spec.hostNetwork
`},
		{name: "both engines", kind: "K8sBoth", target: `
  - target: admission.k8s.gatekeeper.sh
    code:
      - engine: Rego
        source:
          rego: |
            package x
            violation[{"msg": "m"}] { input.review.object.spec.hostNetwork }
      - engine: K8sNativeValidation
        source: {validations: [{expression: "true"}]}
`, wantEngine: EngineCEL, wantPolicy: FailurePolicyFail},
		{name: "both engines, CEL disabled", kind: "K8sBothRego", opts: ParseOptions{DisableK8sNativeValidation: true}, target: `
  - target: admission.k8s.gatekeeper.sh
    code:
      - engine: K8sNativeValidation
        source: {validations: [{expression: "true"}]}
      - engine: Rego
        source:
          rego: |
            package x
            violation[{"msg": "m"}] { input.review.object.spec.hostNetwork }
`, wantEngine: EngineRego},
		{name: "rego field and CEL code", kind: "K8sLegacyBoth", target: `
  - target: admission.k8s.gatekeeper.sh
    rego: |
      package x
      violation[{"msg": "m"}] { true }
    code:
      - engine: K8sNativeValidation
        source: {validations: [{expression: "true"}], failurePolicy: Ignore}
`, wantEngine: EngineCEL, wantPolicy: FailurePolicyIgnore},
		{name: "default failure policy", kind: "K8sCelDefault", opts: ParseOptions{DefaultFailurePolicy: FailurePolicyIgnore}, target: `
  - target: admission.k8s.gatekeeper.sh
    code:
      - engine: K8sNativeValidation
        source: {validations: [{expression: "true"}]}
`, wantEngine: EngineCEL, wantPolicy: FailurePolicyIgnore},
		{name: "CEL failure policy over the default", kind: "K8sCelFail", opts: ParseOptions{DefaultFailurePolicy: FailurePolicyIgnore}, target: `
  - target: admission.k8s.gatekeeper.sh
    code:
      - engine: K8sNativeValidation
        source: {validations: [{expression: "true"}], failurePolicy: Fail}
`, wantEngine: EngineCEL, wantPolicy: FailurePolicyFail},
		{name: "CEL with an expression that does not compile", kind: "K8sCelBroken", target: `
  - target: admission.k8s.gatekeeper.sh
    code:
      - engine: K8sNativeValidation
        source: {validations: [{expression: "object.spec.("}]}
`, wantEngine: EngineCEL, wantPolicy: FailurePolicyFail},
		{name: "CEL only, CEL disabled", kind: "K8sCelOff", opts: ParseOptions{DisableK8sNativeValidation: true}, target: `
  - target: admission.k8s.gatekeeper.sh
    code:
      - engine: K8sNativeValidation
        source: {validations: [{expression: "true"}]}
`, wantErr: "K8sNativeValidation is disabled"},
		{name: "CEL variable named params", kind: "K8sCelParams", target: `
  - target: admission.k8s.gatekeeper.sh
    code:
      - engine: K8sNativeValidation
        source: {variables: [{name: params, expression: "1"}], validations: [{expression: "true"}]}
`, wantErr: `"params" is a reserved keyword`},
		{name: "CEL variable named anyObject", kind: "K8sCelAny", target: `
  - target: admission.k8s.gatekeeper.sh
    code:
      - engine: K8sNativeValidation
        source: {variables: [{name: anyObject, expression: "1"}], validations: [{expression: "true"}]}
`, wantErr: `"anyObject" is a reserved keyword`},
		{name: "CEL reserved match condition", kind: "K8sCelMatch", target: `
  - target: admission.k8s.gatekeeper.sh
    code:
      - engine: K8sNativeValidation
        source: {matchCondition: [{name: gatekeeper_internal_x, expression: "true"}], validations: [{expression: "true"}]}
`, wantErr: "cannot have \"gatekeeper_internal_\" as a prefix"},
		{name: "CEL unknown failure policy", kind: "K8sCelPolicy", target: `
  - target: admission.k8s.gatekeeper.sh
    code:
      - engine: K8sNativeValidation
        source: {validations: [{expression: "true"}], failurePolicy: Sometimes}
`, wantErr: "unrecognized failure policy: Sometimes"},
		{name: "CEL source not an object", kind: "K8sCelNotObject", target: `
  - target: admission.k8s.gatekeeper.sh
    code:
      - engine: K8sNativeValidation
        source: "true"
`, wantErr: "source is not an object"},
		{name: "v1 syntax in a v0 field", kind: "K8sV1InV0", target: `
  - target: admission.k8s.gatekeeper.sh
    rego: |
      package x
      violation contains {"msg": "m"} if input.review.object.spec.hostNetwork
`, wantErr: "parse rego"},
		{name: "no violation rule", kind: "K8sNoViolation", target: `
  - target: admission.k8s.gatekeeper.sh
    rego: |
      package x
      deny[{"msg": "m"}] { true }
`, wantErr: "no violation rule"},
		{name: "data outside lib and inventory", kind: "K8sBadRef", target: `
  - target: admission.k8s.gatekeeper.sh
    rego: |
      package x
      violation[{"msg": "m"}] { data.secrets.x }
`, wantErr: "reference data.secrets.x is not allowed"},
		{name: "whole data document", kind: "K8sWholeData", target: `
  - target: admission.k8s.gatekeeper.sh
    rego: |
      package x
      violation[{"msg": "m"}] { x := data; x.y }
`, wantErr: "reference data is not allowed"},
		{name: "forbidden import", kind: "K8sBadImport", target: `
  - target: admission.k8s.gatekeeper.sh
    rego: |
      package x
      import data.other.thing
      violation[{"msg": "m"}] { thing }
`, wantErr: "import data.other.thing is not allowed"},
		{name: "lib outside data.lib", kind: "K8sBadLib", target: `
  - target: admission.k8s.gatekeeper.sh
    rego: |
      package x
      violation[{"msg": "m"}] { true }
    libs:
      - |
        package helpers
        f { true }
`, wantErr: "must be under data.lib"},
		{name: "CEL only", kind: "K8sCel", target: `
  - target: admission.k8s.gatekeeper.sh
    code:
      - engine: K8sNativeValidation
        source: {validations: [{expression: "true"}]}
`, wantEngine: EngineCEL, wantPolicy: FailurePolicyFail},
		{name: "no code of a known engine", kind: "K8sNone", target: `
  - target: admission.k8s.gatekeeper.sh
    code:
      - engine: Wasm
        source: {}
`, wantErr: "no code this engine runs"},
		{name: "two targets", kind: "K8sTwo", target: `
  - target: admission.k8s.gatekeeper.sh
    rego: "package x\nviolation[{\"msg\": \"m\"}] { true }"
  - target: admission.k8s.gatekeeper.sh
    rego: "package x\nviolation[{\"msg\": \"m\"}] { true }"
`, wantErr: "exactly one target"},
		{name: "unknown target", kind: "K8sOther", target: `
  - target: audit.example.com
    rego: "package x\nviolation[{\"msg\": \"m\"}] { true }"
`, wantErr: "not supported"},
		{name: "syntax error", kind: "K8sSyntax", target: `
  - target: admission.k8s.gatekeeper.sh
    rego: "package x\nviolation[{\"msg\": \"m\"}] { true "
`, wantErr: "parse rego"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tmpl, err := ParseTemplate(templateObject(t, tc.kind, tc.target), tc.opts)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				want := tc.wantEngine
				if want == "" {
					want = EngineRego
				}
				if tmpl.Engine != want || tmpl.FailurePolicy != tc.wantPolicy {
					t.Fatalf("engine %s, failure policy %q; want %s, %q", tmpl.Engine, tmpl.FailurePolicy, want, tc.wantPolicy)
				}
				modules, err := tmpl.Modules()
				if err != nil {
					t.Fatal(err)
				}
				if (tmpl.Engine == EngineCEL) != (len(modules) == 0) || len(modules) != len(tmpl.Texts) {
					t.Fatalf("engine %s with %d Rego modules and %d texts", tmpl.Engine, len(modules), len(tmpl.Texts))
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.wantErr)
			}
			if !errors.Is(err, ErrInvalidTemplate) {
				t.Errorf("error %v is not ErrInvalidTemplate", err)
			}
		})
	}
}

func TestTemplateNameMustBeLowerKind(t *testing.T) {
	u := templateObject(t, "K8sX", `
  - target: admission.k8s.gatekeeper.sh
    rego: "package x\nviolation[{\"msg\": \"m\"}] { true }"
`)
	u.SetName("something-else")
	if _, err := ParseTemplate(u, ParseOptions{}); err == nil || !strings.Contains(err.Error(), "lower-case kind") {
		t.Fatalf("error = %v", err)
	}
}

// Two templates with the same package and the same lib package must not
// see each other's rules: each lives in its own namespace.
func TestTemplatesAreIsolated(t *testing.T) {
	a, err := ParseTemplate(templateObject(t, "K8sA", `
  - target: admission.k8s.gatekeeper.sh
    rego: |
      package shared
      import data.lib.helpers.flag
      violation[{"msg": flag}] { true }
    libs:
      - |
        package lib.helpers
        flag := "from A"
`), ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	modules, err := a.Modules()
	if err != nil {
		t.Fatal(err)
	}
	for id, m := range modules {
		if !strings.Contains(m.Package.Path.String(), `"K8sA"`) && !strings.Contains(m.Package.Path.String(), "K8sA") {
			t.Errorf("module %s has package %v outside its template's namespace", id, m.Package.Path)
		}
	}
	if got := a.QueryRef().String(); got != "data.templates.K8sA.template.violation" {
		t.Errorf("query ref = %s", got)
	}
}

// Modules parses the template anew at each call: a compiler that changes
// the modules it was given leaves the next call's as the template's
// source says, with the ids of Texts.
func TestModulesParsedAnew(t *testing.T) {
	tmpl, err := ParseTemplate(templateObject(t, "K8sFresh", `
  - target: admission.k8s.gatekeeper.sh
    rego: |
      package fresh
      import data.lib.helpers.flag
      violation[{"msg": flag}] { input.review.object.kind == "Pod" }
    libs:
      - |
        package lib.helpers
        flag := "no"
`), ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := tmpl.Modules()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for id, m := range first {
		if _, ok := tmpl.Texts[id]; !ok {
			t.Errorf("module %s has no text", id)
		}
		want[id] = m.String()
		m.Rules = nil // as a compiler may rewrite what it is given
	}
	if len(first) != 2 || len(tmpl.Texts) != 2 {
		t.Fatalf("%d modules and %d texts, want 2 of each", len(first), len(tmpl.Texts))
	}
	again, err := tmpl.Modules()
	if err != nil {
		t.Fatal(err)
	}
	for id, m := range again {
		if m == first[id] || m.String() != want[id] {
			t.Errorf("module %s: the second call gave %p %s, want a new module %s", id, m, m, want[id])
		}
	}
}
