package opa_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// celEngine is an engine holding testdata/cel/policies.yaml and three
// Nodes, two of them outside the gpu- prefix.
func celEngine(t *testing.T, opts opa.Options) *opa.Engine {
	t.Helper()
	e := newEngine(t, opts, "testdata/cel/policies.yaml")
	apply(t, e, node("cpu-0", nil), node("cpu-1", nil), node("gpu-0", nil))
	return e
}

var celNodes = []opa.Candidate{{Name: "cpu-0"}, {Name: "cpu-1"}, {Name: "gpu-0"}}

// TestCELTemplates checks the CEL driver's verdicts and messages as
// Gatekeeper's k8scel driver gives them: messageExpression, message, the
// fallback text (also for a multi-line messageExpression), duplicates kept
// in validation order, matchCondition, params through variables.params
// with the schema's defaults, spec.nodeName set to the candidate, and
// runtime errors denying under Fail and admitting under Ignore.
func TestCELTemplates(t *testing.T) {
	latest := `failed expression: object.spec.containers.all(c, !c.image.endsWith(":latest"))`
	tests := []struct {
		name   string
		mutate func(map[string]any)
		want   []string
	}{{
		name: "plain pod",
		// In the answer's order: by node, then by constraint kind.
		want: []string{
			"cpu-0 team <error>",
			"cpu-0 owner-annotation annotation owner is required",
			"cpu-1 team <error>",
			"cpu-1 owner-annotation annotation owner is required",
			"gpu-0 team <error>",
			"gpu-0 no-gpu-nodes pod web may not run on node gpu-0",
			"gpu-0 owner-annotation annotation owner is required",
		},
	}, {
		name: "annotated, labelled, two latest images",
		mutate: func(p map[string]any) {
			md := p["metadata"].(map[string]any)
			md["annotations"] = map[string]any{"owner": "me"}
			md["labels"] = map[string]any{"team": "a", "tier": "blocked"}
			spec(p)["containers"] = []any{
				map[string]any{"name": "a", "image": "nginx:latest"},
				map[string]any{"name": "b", "image": "nginx:1.27"},
			}
		},
		want: []string{
			"cpu-0 tier tier blocked",
			"cpu-0 owner-annotation too many containers",
			"cpu-0 owner-annotation " + latest,
			"cpu-0 owner-annotation " + latest,
		},
	}}
	memo, exact := celEngine(t, opa.Options{}), celEngine(t, opa.Options{DisableMemo: true})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := pod("default", "web")
			if tc.mutate != nil {
				tc.mutate(p)
			}
			got := sameAsWithoutMemo(t, memo, exact, p, celNodes)
			var short []string
			for _, line := range got {
				if !strings.HasPrefix(line, "cpu-0 ") && tc.mutate != nil {
					continue
				}
				f := strings.SplitN(line, " ", 3)
				msg := strings.TrimSuffix(f[2], " {}")
				if f[1] == "team" {
					t.Logf("evaluation error: %s", msg)
					if !strings.Contains(msg, "no such key") {
						t.Errorf("team: %q, want the evaluation error", msg)
					}
					msg = "<error>"
				}
				short = append(short, f[0]+" "+f[1]+" "+msg)
			}
			if !reflect.DeepEqual(short, tc.want) {
				t.Errorf("violations:\n got  %q\n want %q", short, tc.want)
			}
		})
	}
}

// TestCELEvaluationCounts: a CEL template that does not read spec.nodeName
// is judged once per pod class, one that does once per node; a value only
// printed in a message (the pod's name) is not part of the class, and a
// value read (an annotation) is.
func TestCELEvaluationCounts(t *testing.T) {
	e := celEngine(t, opa.Options{})
	evals := func(name string, annotations map[string]any) uint64 {
		p := pod("default", name)
		if annotations != nil {
			p["metadata"].(map[string]any)["annotations"] = annotations
		}
		before := e.Stats().Evaluations
		violationLines(t, e, p, celNodes)
		return e.Stats().Evaluations - before
	}
	// Four per-pod-class templates once, the placement one per node.
	if n := evals("web", nil); n != 4+3 {
		t.Errorf("first pod: %d evaluations, want 7", n)
	}
	if n := evals("web-2", nil); n != 0 {
		t.Errorf("a pod of the same class, with another name: %d evaluations, want 0", n)
	}
	// Only K8sCelRequiredAnnotation reads annotations.
	if n := evals("web-3", map[string]any{"owner": "me"}); n != 1 {
		t.Errorf("a pod with an annotation: %d evaluations, want 1", n)
	}
}

// TestCELEngineChoice: with K8sNativeValidation disabled, CEL-only
// templates are refused and say why; with it, they run.
func TestCELEngineChoice(t *testing.T) {
	objs := load(t, "testdata/cel/policies.yaml")
	e := newEngine(t, opa.Options{DisableK8sNativeValidation: true})
	changes := make([]opa.Change, len(objs))
	for i, o := range objs {
		changes[i] = opa.Change{Object: o}
	}
	errs := e.Apply(t.Context(), changes)
	refused := 0
	for _, err := range errs {
		if strings.Contains(err.Error(), "K8sNativeValidation is disabled") {
			refused++
		}
	}
	if refused != 5 {
		t.Errorf("%d templates refused as CEL-only, want 5: %v", refused, errs)
	}
	if _, err := opa.New(t.Context(), opa.Options{DefaultK8sNativeValidationFailurePolicy: "Sometimes"}); err == nil {
		t.Error("an unknown default failure policy was accepted")
	}
}
