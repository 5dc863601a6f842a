package opa_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// lookupKeyPolicies look a container's annotation up by a key built from
// the container's name, and print the name, as the library's AppArmor
// template does (sprintf; bound, negated, through functions that take the
// pod) and as its seccomp template does (concat in a function, the key
// passed to another, printed into the value of a definition that
// requires the annotation).
const lookupKeyPolicies = `
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8sprofiles}
spec:
  crd:
    spec:
      names: {kind: K8sProfiles}
      validation:
        openAPIV3Schema:
          type: object
          properties:
            allowed: {type: array, items: {type: string}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8sprofiles
        violation[{"msg": msg}] {
          c := input.review.object.spec.containers[_]
          not allowed(input.review.object, c)
          msg := sprintf("pod %v, container %v: profile %v is not allowed", [input.review.object.metadata.name, c.name, profile(input.review.object, c)])
        }
        allowed(pod, c) { profile(pod, c) == input.parameters.allowed[_] }
        profile(pod, c) = out {
          out := pod.metadata.annotations[sprintf("container.apparmor.security.beta.kubernetes.io/%v", [c.name])]
        }
        profile(pod, c) = "runtime/default" {
          not pod.metadata.annotations[sprintf("container.apparmor.security.beta.kubernetes.io/%v", [c.name])]
        }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sProfiles
metadata: {name: profiles}
spec:
  parameters: {allowed: ["localhost/ok"]}
---
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8sprofilesconcat}
spec:
  crd: {spec: {names: {kind: K8sProfilesConcat}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8sprofilesconcat
        prefix = "container.apparmor.security.beta.kubernetes.io/"
        violation[{"msg": msg}] {
          c := input.review.object.spec.containers[_]
          result := get_profile(c)
          result.profile != "localhost/ok"
          msg := sprintf("container %v: profile %v found at %v", [c.name, result.profile, result.location])
        }
        get_profile(c) = {"profile": profile, "location": location} {
          key := annotation_key(c.name)
          has_annotation(key)
          profile := input.review.object.metadata.annotations[key]
          location := sprintf("annotation %v", [key])
        }
        get_profile(c) = {"profile": "none", "location": "nowhere"} {
          not has_annotation(annotation_key(c.name))
        }
        annotation_key(name) = k { k := concat("", [prefix, name]) }
        has_annotation(k) { input.review.object.metadata.annotations[k] }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sProfilesConcat
metadata: {name: profiles-concat}
`

const apparmorKey = "container.apparmor.security.beta.kubernetes.io/"

// profilesPod is a pod with the named containers and annotations.
func profilesPod(name string, containers []string, annotations map[string]any) map[string]any {
	return pod("default", name, func(p map[string]any) {
		var cs []any
		for _, c := range containers {
			cs = append(cs, map[string]any{"name": c, "image": "nginx:1.27"})
		}
		spec(p)["containers"] = cs
		if annotations != nil {
			p["metadata"].(map[string]any)["annotations"] = annotations
		}
	})
}

// violationsOf evaluates pod p on cands: one line per violation, "node
// message details error".
func violationsOf(t testing.TB, e *opa.Engine, p map[string]any, cands []opa.Candidate) []string {
	t.Helper()
	res, err := e.Evaluate(context.Background(), opa.PlacementRequest{Pod: p, Candidates: cands})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, n := range res.Nodes {
		for _, v := range res.Violations(i) {
			out = append(out, fmt.Sprintf("%s %s %s %v", n.Name, v.Message, v.Details, v.Error))
		}
	}
	return out
}

// TestPrintedLookupKeys: container names that only key an annotation
// lookup and are printed are left out of the memo key when no annotation
// key holds them: the answers equal an engine's without memo, whatever the
// names and annotations, and new container names cost no evaluation.
func TestPrintedLookupKeys(t *testing.T) {
	nodeNames := []string{"n-1", "n-2"}
	cands := []opa.Candidate{{Name: "n-1"}, {Name: "n-2"}}
	memo := printingEngineOf(t, opa.Options{}, nodeNames, lookupKeyPolicies)
	exact := printingEngineOf(t, opa.Options{DisableMemo: true}, nodeNames, lookupKeyPolicies)
	cases := []struct {
		containers  []string
		annotations map[string]any
	}{
		{[]string{"app"}, nil},
		{[]string{"web"}, nil},
		{[]string{"app"}, map[string]any{apparmorKey + "app": "localhost/ok"}},
		{[]string{"web"}, map[string]any{apparmorKey + "app": "localhost/ok"}},
		{[]string{"app"}, map[string]any{apparmorKey + "app": "unconfined"}},
		{[]string{"app", "sidecar"}, map[string]any{apparmorKey + "sidecar": "localhost/ok"}},
		{[]string{"sidecar", "app"}, map[string]any{apparmorKey + "sidecar": "localhost/ok"}},
		// A name inside a key that is not its own (a prefix of one, part of
		// the key's prefix): keyed as it is, judged as without memo.
		{[]string{"ap"}, map[string]any{apparmorKey + "app": "localhost/ok"}},
		{[]string{"apparmor"}, map[string]any{apparmorKey + "x": "localhost/ok"}},
		{[]string{"beta.kubernetes.io/app"}, map[string]any{apparmorKey + "app": "localhost/ok"}},
		{[]string{""}, map[string]any{apparmorKey: "localhost/ok"}},
		{[]string{""}, nil},
		{[]string{`a"b`, `c\d`, "%v", "日本"}, map[string]any{"team": "x"}},
		{[]string{"same", "same"}, nil},
		{[]string{"app"}, map[string]any{apparmorKey + "app": false}},
		{[]string{"app"}, map[string]any{apparmorKey + "app": map[string]any{"x": 1}}},
	}
	for i, tc := range cases {
		p := profilesPod(fmt.Sprintf("pod-%d", i), tc.containers, tc.annotations)
		got, want := violationsOf(t, memo, p, cands), violationsOf(t, exact, p, cands)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("containers %q, annotations %v:\n memo    %q\n no memo %q", tc.containers, tc.annotations, got, want)
		}
	}
	// New names (a new Job's containers), with and without unrelated
	// annotations: one evaluation per annotation set, none per name.
	for _, ann := range []map[string]any{nil, {"team": "x"}} {
		violationsOf(t, memo, profilesPod("warm", []string{"warm", "warm-sidecar"}, ann), cands)
	}
	before := memo.Stats().Evaluations
	for i := range 40 {
		for _, ann := range []map[string]any{nil, {"team": "x"}} {
			p := profilesPod(fmt.Sprintf("job-%d", i), []string{fmt.Sprintf("job-%d", i), "sidecar-" + fmt.Sprint(i)}, ann)
			got, want := violationsOf(t, memo, p, cands), violationsOf(t, exact, p, cands)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("job %d:\n memo    %q\n no memo %q", i, got, want)
			}
		}
	}
	if evals := memo.Stats().Evaluations - before; evals != 0 {
		t.Errorf("80 pods with new container names ran %d evaluations, want 0: the names should be left out of the key", evals)
	}
	// Explain names the values kept in the key for this pod, and why.
	for _, tc := range []struct {
		pod  map[string]any
		want []string
	}{
		{profilesPod("p", []string{"web", "app"}, map[string]any{apparmorKey + "app": "unconfined"}),
			[]string{"input.review.object.spec.containers[1].name: it is empty or a key of input.review.object.metadata.annotations holds it"}},
		{profilesPod("p", []string{"web", "app"}, nil), nil},
		{profilesPod("p", []string{"web", ""}, nil),
			[]string{"input.review.object.spec.containers[1].name: it is empty or a key of input.review.object.metadata.annotations holds it"}},
	} {
		res, err := memo.Evaluate(context.Background(), opa.PlacementRequest{Pod: tc.pod, Candidates: cands, Explain: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range res.Trace(0) {
			if !reflect.DeepEqual(tr.Keyed, tc.want) {
				t.Errorf("%s: keyed %q, want %q", tr.Constraint.Kind, tr.Keyed, tc.want)
			}
		}
	}
}

// FuzzPrintedLookupKeys checks the memo against no memo on arbitrary
// container names and annotation keys.
func FuzzPrintedLookupKeys(f *testing.F) {
	for _, s := range [][3]string{{"app", "app", "web"}, {"a", "ap", "p"}, {"", "", "x"}, {"日本", "%v", `"`}, {"x", apparmorKey, "y"}} {
		f.Add(s[0], s[1], s[2])
	}
	cands := []opa.Candidate{{Name: "n-1"}}
	memo := printingEngineOf(f, opa.Options{}, []string{"n-1"}, lookupKeyPolicies)
	exact := printingEngineOf(f, opa.Options{DisableMemo: true}, []string{"n-1"}, lookupKeyPolicies)
	f.Fuzz(func(t *testing.T, name, annotated, other string) {
		for _, p := range []map[string]any{
			profilesPod("p", []string{name}, map[string]any{apparmorKey + annotated: "localhost/ok"}),
			profilesPod("p", []string{name, other}, map[string]any{apparmorKey + annotated: "unconfined", other: "x"}),
			profilesPod("p", []string{other}, nil),
		} {
			got, want := violationsOf(t, memo, p, cands), violationsOf(t, exact, p, cands)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("pod %v:\n memo    %q\n no memo %q", p, got, want)
			}
		}
	})
}
