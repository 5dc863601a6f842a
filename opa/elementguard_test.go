package opa_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// guardedPolicies collect, in a comprehension, the names of the
// containers a test keeps, sort them into a message and count them, as the
// realistic mix's privileged pool does: through a function of the
// container (a field test and == true), on nodes of one pool; and with a
// lone field test, whatever the node.
const guardedPolicies = `
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8sguardedpool}
spec:
  crd: {spec: {names: {kind: K8sGuardedPool}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8sguardedpool
        violation[{"msg": msg, "details": {"reasons": reasons}}] {
          node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
          node.metadata.labels.pool == "blocked"
          reasons := {sprintf("container %v is privileged", [c.name]) | c := input.review.object.spec.containers[_]; privileged(c)}
          count(reasons) > 0
          msg := sprintf("pod %v: %v (%d) on %v", [input.review.object.metadata.name, concat(", ", sort(reasons)), count(reasons), node.metadata.name])
        }
        privileged(c) {
          has_field(c, "securityContext")
          c.securityContext.privileged == true
        }
        has_field(object, field) = true { object[field] }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sGuardedPool
metadata: {name: guarded-pool}
---
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8sguardedmounts}
spec:
  crd: {spec: {names: {kind: K8sGuardedMounts}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8sguardedmounts
        violation[{"msg": msg}] {
          names := [c.name | c := input.review.object.spec.initContainers[_]; c.securityContext.runAsRoot]
          count(names) > 0
          msg := sprintf("root init containers: %v", [names])
        }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sGuardedMounts
metadata: {name: guarded-mounts}
`

// guardedContainer is a container named name with securityContext sc
// (none when nil).
func guardedContainer(name string, sc any) map[string]any {
	c := map[string]any{"name": name, "image": "nginx:1.27"}
	if sc != nil {
		c["securityContext"] = sc
	}
	return c
}

func guardedPod(name string, containers, inits []any) map[string]any {
	return pod("default", name, func(p map[string]any) {
		spec(p)["containers"] = containers
		if inits != nil {
			spec(p)["initContainers"] = inits
		}
	})
}

// TestGuardedElements: what a comprehension reads of its elements after a
// test is keyed for the elements that pass the test only; the answers
// equal an engine's without memo whatever the names and flags, and pods
// whose containers pass no test cost no evaluation for new names.
func TestGuardedElements(t *testing.T) {
	nodeNames := []string{"n-1", "n-2", "n-3"}
	cands := []opa.Candidate{{Name: "n-1"}, {Name: "n-2"}, {Name: "n-3"}}
	memo := printingEngineOf(t, opa.Options{}, nodeNames, guardedPolicies)
	exact := printingEngineOf(t, opa.Options{DisableMemo: true}, nodeNames, guardedPolicies)
	priv := map[string]any{"privileged": true}
	for i, tc := range []struct{ containers, inits []any }{
		{[]any{guardedContainer("app", nil)}, nil},
		{[]any{guardedContainer("app", priv)}, nil},
		{[]any{guardedContainer("web", priv)}, nil},
		{[]any{guardedContainer("web", priv), guardedContainer("app", nil)}, nil},
		{[]any{guardedContainer("app", nil), guardedContainer("web", priv)}, nil},
		{[]any{guardedContainer("b", priv), guardedContainer("a", priv)}, nil},
		{[]any{guardedContainer("a", priv), guardedContainer("a", priv)}, nil},
		// Values the filter lets through that the template's test does not
		// keep, and the other way round: judged as without memo.
		{[]any{guardedContainer("app", map[string]any{"privileged": "yes"})}, nil},
		{[]any{guardedContainer("app", map[string]any{"privileged": false})}, nil},
		{[]any{guardedContainer("app", map[string]any{"privileged": nil})}, nil},
		{[]any{guardedContainer("app", map[string]any{})}, nil},
		{[]any{guardedContainer("app", false)}, nil},
		{[]any{guardedContainer("app", "privileged")}, nil},
		{[]any{guardedContainer(`a"b`, priv), guardedContainer("%v", priv), guardedContainer("日本", priv), guardedContainer("", priv)}, nil},
		{[]any{guardedContainer("app", nil)}, []any{guardedContainer("init", map[string]any{"runAsRoot": true})}},
		{[]any{guardedContainer("app", nil)}, []any{guardedContainer("setup", map[string]any{"runAsRoot": true}), guardedContainer("init", map[string]any{"runAsRoot": false})}},
		{[]any{guardedContainer("app", nil)}, []any{guardedContainer("init", map[string]any{"runAsRoot": 1})}},
		{[]any{guardedContainer("app", nil)}, []any{guardedContainer("init", nil)}},
	} {
		p := guardedPod(fmt.Sprintf("pod-%d", i), tc.containers, tc.inits)
		got, want := violationsOf(t, memo, p, cands), violationsOf(t, exact, p, cands)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("case %d (containers %v, init containers %v):\n memo    %q\n no memo %q", i, tc.containers, tc.inits, got, want)
		}
	}
	// A new Job's pod without a privileged or root container: no
	// evaluation for its new names once the shape is known.
	job := func(i int) map[string]any {
		return guardedPod(fmt.Sprintf("job-%d", i),
			[]any{guardedContainer(fmt.Sprintf("job-%d", i), map[string]any{"privileged": false}), guardedContainer(fmt.Sprintf("sidecar-%d", i), nil)},
			[]any{guardedContainer(fmt.Sprintf("init-%d", i), map[string]any{"runAsRoot": false})})
	}
	violationsOf(t, memo, job(-1), cands)
	before := memo.Stats().Evaluations
	for i := range 40 {
		got, want := violationsOf(t, memo, job(i), cands), violationsOf(t, exact, job(i), cands)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("job %d:\n memo    %q\n no memo %q", i, got, want)
		}
	}
	if evals := memo.Stats().Evaluations - before; evals != 0 {
		t.Errorf("40 pods with new names and no privileged container ran %d evaluations, want 0", evals)
	}
	// A privileged container's name decides the message: each new one is
	// evaluated (once per node class that reads it).
	before = memo.Stats().Evaluations
	for i := range 3 {
		p := guardedPod(fmt.Sprintf("priv-%d", i), []any{guardedContainer(fmt.Sprintf("priv-%d", i), priv)}, nil)
		got, want := violationsOf(t, memo, p, cands), violationsOf(t, exact, p, cands)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("privileged %d:\n memo    %q\n no memo %q", i, got, want)
		}
	}
	if evals := memo.Stats().Evaluations - before; evals == 0 {
		t.Error("pods with new privileged containers' names ran no evaluation: their names must stay in the key")
	}
}

// FuzzGuardedElements checks the memo against no memo on arbitrary names
// and flags.
func FuzzGuardedElements(f *testing.F) {
	for _, s := range []struct {
		a, b   string
		pa, pb bool
	}{{"app", "web", true, false}, {"a", "a", true, true}, {"", "x", false, true}, {"%v", `"`, true, true}} {
		f.Add(s.a, s.b, s.pa, s.pb)
	}
	cands := []opa.Candidate{{Name: "n-1"}, {Name: "n-2"}}
	memo := printingEngineOf(f, opa.Options{}, []string{"n-1", "n-2"}, guardedPolicies)
	exact := printingEngineOf(f, opa.Options{DisableMemo: true}, []string{"n-1", "n-2"}, guardedPolicies)
	f.Fuzz(func(t *testing.T, a, b string, pa, pb bool) {
		p := guardedPod("p",
			[]any{guardedContainer(a, map[string]any{"privileged": pa}), guardedContainer(b, map[string]any{"privileged": pb})},
			[]any{guardedContainer(b, map[string]any{"runAsRoot": pa}), guardedContainer(a, map[string]any{"runAsRoot": pb})})
		got, want := violationsOf(t, memo, p, cands), violationsOf(t, exact, p, cands)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("pod %v:\n memo    %q\n no memo %q", p, got, want)
		}
	})
}
