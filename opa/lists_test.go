package opa_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// listPolicies read containers element by element, the way most of
// Gatekeeper's library does: directly, through the library's
// input_containers set over three lists, through a helper, through an
// object of the containers by name (seccomp v2), printing each
// container's name and using its other fields in conditions.
const listPolicies = `
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8slistdirect}
spec:
  crd: {spec: {names: {kind: K8sListDirect}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8slistdirect
        violation[{"msg": msg, "details": {"container": c.name}}] {
          c := input.review.object.spec.containers[_]
          c.securityContext.privileged
          msg := sprintf("container %v of %v is privileged", [c.name, input.review.object.metadata.name])
        }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sListDirect
metadata: {name: list-direct}
---
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8slistset}
spec:
  crd: {spec: {names: {kind: K8sListSet}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8slistset
        violation[{"msg": msg}] {
          c := input_containers[_]
          not is_exempt(c)
          not c.resources.limits.memory
          msg := sprintf("container <%v> has no memory limit", [c.name])
        }
        is_exempt(container) {
          startswith(container.image, "registry.example.com/exempt/")
        }
        input_containers[c] {
          c := input.review.object.spec.containers[_]
        }
        input_containers[c] {
          c := input.review.object.spec.initContainers[_]
        }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sListSet
metadata: {name: list-set}
---
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8slistnamecheck}
spec:
  crd: {spec: {names: {kind: K8sListNameCheck}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8slistnamecheck
        violation[{"msg": msg}] {
          c := input.review.object.spec.containers[_]
          startswith(c.name, "debug")
          msg := sprintf("debug container %v", [c.name])
        }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sListNameCheck
metadata: {name: list-name-check}
---
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8slistmap}
spec:
  crd: {spec: {names: {kind: K8sListMap}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8slistmap
        violation[{"msg": msg}] {
          c := input_containers[name]
          not c.resources.limits.memory
          msg := sprintf("container [%v] has no memory limit", [name])
        }
        input_containers[c.name] = c {
          c := input.review.object.spec.containers[_]
        }
        input_containers[c.name] = c {
          c := input.review.object.spec.initContainers[_]
        }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sListMap
metadata: {name: list-map}
`

func listEngine(t testing.TB, opts opa.Options) *opa.Engine {
	t.Helper()
	objs, err := readObjects(strings.NewReader(listPolicies))
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, opts)
	apply(t, e, objs...)
	apply(t, e, node("n-1", nil), node("n-2", nil))
	return e
}

// listPod is a pod with containers named names; privileged and limited
// say which are privileged and which have a memory limit.
func listPod(name string, names []any, privileged, limited []bool, init []any) map[string]any {
	return pod("default", name, func(p map[string]any) {
		var cs []any
		for i, n := range names {
			c := map[string]any{"image": "nginx:1.27"}
			if n != nil {
				c["name"] = n
			}
			if privileged[i] {
				c["securityContext"] = map[string]any{"privileged": true}
			}
			if limited[i] {
				c["resources"] = map[string]any{"limits": map[string]any{"memory": "1Gi"}}
			}
			cs = append(cs, c)
		}
		spec(p)["containers"] = cs
		if init != nil {
			var ics []any
			for _, n := range init {
				ics = append(ics, map[string]any{"name": n, "image": "busybox"})
			}
			spec(p)["initContainers"] = ics
		}
	})
}

// TestListElementsPrintedNotKeyed: pods whose containers differ only in
// their names share verdicts (one evaluation per constraint), their
// messages name their own containers exactly as the engine without memo
// writes them, and a name that decides (startswith) or that cannot stand
// as a placeholder (not a string, quotes under %v are fine) stays keyed.
func TestListElementsPrintedNotKeyed(t *testing.T) {
	memo := listEngine(t, opa.Options{})
	exact := listEngine(t, opa.Options{DisableMemo: true})
	cands := []opa.Candidate{{Name: "n-1"}, {Name: "n-2"}}
	shape := []bool{true, false, true}
	limits := []bool{false, true, false}
	check := func(p map[string]any) {
		t.Helper()
		sameAsWithoutMemo(t, memo, exact, p, cands)
	}
	check(listPod("job-a-x1", []any{"job-a", "sidecar", "job-a-helper"}, shape, limits, []any{"init-a"}))
	before := memo.Stats().Evaluations
	for i := range 20 {
		// A new Job each time: new pod and container names, same shape.
		p := listPod(fmt.Sprintf("job-%d-x1", i), []any{fmt.Sprintf("job-%d", i), "sidecar", fmt.Sprintf("job-%d-helper", i)}, shape, limits, []any{fmt.Sprintf("init-%d", i)})
		check(p)
	}
	// The name-checking template is keyed on the names: once per pod.
	// The other three share the first pod's verdicts.
	if evals := memo.Stats().Evaluations - before; evals > 20 {
		t.Errorf("20 renamed pods ran %d evaluations, want at most 20 (only the template whose condition reads the names)", evals)
	}
	// Odd names, a debug container, a missing name, a non-string name,
	// equal names (the object by name merges equal containers and fails
	// on different ones), another shape: always as the engine without
	// memo says.
	for _, names := range [][]any{
		{`q"uote`, `back\slash`, "%v"}, {"debug-1", "x", "y"}, {nil, "x", "y"}, {42, "x", "y"},
		{"same", "same", "same"}, {"ünï", "日本", ""},
	} {
		check(listPod("odd", names, shape, limits, nil))
		check(listPod("odd", names, []bool{false, true, true}, []bool{true, false, false}, []any{"same"}))
	}
}
