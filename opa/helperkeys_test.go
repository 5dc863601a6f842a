package opa_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// exemptLibYAML is the library's exempt_container lib as a template's
// libs entry: every template that uses it carries its own copy.
const exemptLibYAML = `      libs:
        - |
          package lib.exempt_container
          is_exempt(container) {
            exempt_images := object.get(object.get(input, "parameters", {}), "exemptImages", [])
            img := container.image
            exemption := exempt_images[_]
            _matches_exemption(img, exemption)
          }
          _matches_exemption(img, exemption) {
            not endswith(exemption, "*")
            exemption == img
          }
          _matches_exemption(img, exemption) {
            endswith(exemption, "*")
            prefix := trim_suffix(exemption, "*")
            startswith(img, prefix)
          }
`

// helperPolicies are templates whose verdicts read the pod's images only
// through a boolean helper (analysis.Helper): the library's is_exempt
// with exemptImages, a helper with a constant argument, one whose two
// definitions conflict on some images (an evaluation error), a
// node-reading template that tests the pod's containers with is_exempt,
// one whose helper's argument may be absent (a container's
// securityContext), one whose helper also reads the pod through a rule
// of the template, which is no Helper (K8sHelperRuleRef), and one that
// compares the image itself besides is_exempt (K8sHelperRepos, the
// library's allowed repositories): its key holds the image, which decides
// is_exempt's answer, so that helper is never evaluated alone.
const helperPolicies = `
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8shelperpriv}
spec:
  crd:
    spec:
      names: {kind: K8sHelperPriv}
      validation: {openAPIV3Schema: {type: object, properties: {exemptImages: {type: array, items: {type: string}}}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8shelperpriv
        import data.lib.exempt_container.is_exempt
        violation[{"msg": msg, "details": {"container": c.name}}] {
          c := input_containers[_]
          not is_exempt(c)
          c.securityContext.privileged
          msg := sprintf("Privileged container is not allowed: %v", [c.name])
        }
        input_containers[c] { c := input.review.object.spec.containers[_] }
        input_containers[c] { c := input.review.object.spec.initContainers[_] }
` + exemptLibYAML + `---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sHelperPriv
metadata: {name: helper-priv}
spec:
  parameters: {exemptImages: ["safe.io/*", "tools.io/debug:1.0"]}
---
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8shelperrepos}
spec:
  crd:
    spec:
      names: {kind: K8sHelperRepos}
      validation: {openAPIV3Schema: {type: object, properties: {repos: {type: array, items: {type: string}}, exemptImages: {type: array, items: {type: string}}}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8shelperrepos
        import data.lib.exempt_container.is_exempt
        violation[{"msg": msg}] {
          c := input.review.object.spec.containers[_]
          not is_exempt(c)
          not strings.any_prefix_match(c.image, input.parameters.repos)
          msg := sprintf("container <%v> has an invalid image repo <%v>", [c.name, c.image])
        }
` + exemptLibYAML + `---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sHelperRepos
metadata: {name: helper-repos}
spec:
  parameters: {repos: ["registry.io/app", "debug/"], exemptImages: ["safe.io/*", "tools.io/debug:1.0"]}
---
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8shelperprefix}
spec:
  crd: {spec: {names: {kind: K8sHelperPrefix}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8shelperprefix
        violation[{"msg": msg}] {
          c := input.review.object.spec.containers[_]
          from(c, "debug/")
          msg := sprintf("%v runs a debug image", [c.name])
        }
        from(c, prefix) { startswith(c.image, prefix) }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sHelperPrefix
metadata: {name: helper-prefix}
---
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8shelperconflict}
spec:
  crd: {spec: {names: {kind: K8sHelperConflict}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8shelperconflict
        violation[{"msg": msg}] {
          c := input.review.object.spec.containers[_]
          not pinned(c)
          msg := sprintf("%v is not pinned", [c.name])
        }
        pinned(c) := true { contains(c.image, "@sha256:") }
        pinned(c) := false { endswith(c.image, ":latest") }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sHelperConflict
metadata: {name: helper-conflict}
---
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8shelperpool}
spec:
  crd:
    spec:
      names: {kind: K8sHelperPool}
      validation: {openAPIV3Schema: {type: object, properties: {allowed: {type: array, items: {type: string}}}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8shelperpool
        violation[{"msg": msg}] {
          node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
          node.metadata.labels.pool == "restricted"
          c := input.review.object.spec.containers[_]
          not exempt(c)
          msg := sprintf("%v may not run on %v", [c.name, node.metadata.name])
        }
        exempt(c) { startswith(c.image, input.parameters.allowed[_]) }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sHelperPool
metadata: {name: helper-pool}
spec:
  parameters: {allowed: ["safe.io/"]}

---
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8shelpernonroot}
spec:
  crd: {spec: {names: {kind: K8sHelperNonRoot}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8shelpernonroot
        violation[{"msg": msg}] {
          c := input.review.object.spec.containers[_]
          not has_field(c.securityContext, "runAsNonRoot")
          not host(input.review.object.spec)
          msg := sprintf("%v may run as root", [c.name])
        }
        has_field(o, f) { o[f] }
        host(s) { s.hostNetwork }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sHelperNonRoot
metadata: {name: helper-nonroot}
---
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8shelperruleref}
spec:
  crd: {spec: {names: {kind: K8sHelperRuleRef}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8shelperruleref
        violation[{"msg": msg}] {
          c := input.review.object.spec.containers[_]
          not ok(c)
          msg := sprintf("%v is not a safe image on the host network", [c.name])
        }
        ok(c) {
          startswith(c.image, "safe.io/")
          hostnet
        }
        hostnet {
          s := input.review.object.spec
          s.hostNetwork == true
        }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sHelperRuleRef
metadata: {name: helper-ruleref}
`

func helperEngine(t testing.TB, opts opa.Options) *opa.Engine {
	t.Helper()
	objs, err := readObjects(strings.NewReader(helperPolicies))
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, opts)
	apply(t, e, objs...)
	apply(t, e, node("n-1", nil), node("n-2", map[string]string{"pool": "restricted"}), node("n-3", map[string]string{"pool": "restricted"}))
	return e
}

// helperPod is a pod whose containers run images, each privileged.
func helperPod(name string, images ...any) map[string]any {
	return pod("default", name, func(p map[string]any) {
		var cs []any
		for i, img := range images {
			c := map[string]any{"name": fmt.Sprintf("c%d-%s", i, name), "securityContext": map[string]any{"privileged": true}}
			if img != nil {
				c["image"] = img
			}
			cs = append(cs, c)
		}
		spec(p)["containers"] = cs
	})
}

// TestHelperKeys: pods whose images are new to the engine share the
// verdicts of templates that read images only through a boolean helper:
// the helper is evaluated once per image, the templates not at all; and
// every pod's violations are those of the engine without memo, over
// exempt and non-exempt images, helper errors and odd values.
func TestHelperKeys(t *testing.T) {
	for _, workers := range []int{1, 4} { // in keyTerms; deferred and run in parallel by prefetch
		t.Run(fmt.Sprintf("parallelism %d", workers), func(t *testing.T) { testHelperKeys(t, workers) })
	}
}

func testHelperKeys(t *testing.T, workers int) {
	memo := helperEngine(t, opa.Options{Parallelism: workers})
	exact := helperEngine(t, opa.Options{DisableMemo: true})
	cands := []opa.Candidate{{Name: "n-1"}, {Name: "n-2"}, {Name: "n-3"}}
	check := func(p map[string]any) []string {
		t.Helper()
		return sameAsWithoutMemo(t, memo, exact, p, cands)
	}
	if first := check(helperPod("job-0", "registry.io/report-0:1.0")); len(first) != 17 { // priv, conflict, non-root, rule-ref and repos on each node, pool on n-2 and n-3
		t.Fatalf("the first pod's violations %q, want 17", first)
	}
	before := memo.Stats()
	const pods = 20
	for i := range pods {
		check(helperPod(fmt.Sprintf("job-%d", i+1), fmt.Sprintf("registry.io/report-%d:1.0", i+1)))
	}
	after := memo.Stats()
	// The rule-ref template's (its helper also reads the pod through a
	// rule, which an evaluation of the helper alone would not see) and the
	// repos template's, which compares the image itself.
	if evals := after.Evaluations - before.Evaluations; evals != 2*pods {
		t.Errorf("%d pods with new images ran %d evaluations, want %d: the others read the image only through a helper", pods, evals, 2*pods)
	}
	// One per image and helper: is_exempt, from, pinned, exempt. Not the
	// repos template's is_exempt: its key holds the image, which decides
	// the helper's answer.
	if helpers := after.HelperEvaluations - before.HelperEvaluations; helpers != 4*pods {
		t.Errorf("%d pods with new images ran %d helper evaluations, want %d", pods, helpers, 4*pods)
	}
	check(helperPod("job-again", "registry.io/report-3:1.0"))
	if helpers := memo.Stats().HelperEvaluations - after.HelperEvaluations; helpers != 0 {
		t.Errorf("an image seen before ran %d helper evaluations, want none", helpers)
	}
	cases := map[string][]any{
		"exempt by prefix":          {"safe.io/agent:2"},
		"exempt exactly":            {"tools.io/debug:1.0"},
		"not exempt, close to one":  {"tools.io/debug:1.1"},
		"a debug image":             {"debug/shell:1"},
		"pinned":                    {"registry.io/app@sha256:0123"},
		"latest":                    {"registry.io/app:latest"},
		"pinned and latest: error":  {"registry.io/app@sha256:01:latest"},
		"mixed":                     {"safe.io/agent:2", "registry.io/app:latest", "debug/x"},
		"no image":                  {nil},
		"image not a string":        {42},
		"two containers, one image": {"safe.io/a", "safe.io/a"},
	}
	// A shape seen once is not evaluated again for pods that differ only
	// in their names: the answers found from the key cache
	// (knownAnswers) make the key the helpers' own calls made.
	same := func(name string, p func(name string) map[string]any) {
		t.Helper()
		check(p(name + "-0"))
		before := memo.Stats().Evaluations
		for i := 1; i < 3; i++ {
			check(p(fmt.Sprintf("%s-%d", name, i)))
		}
		if evals := memo.Stats().Evaluations - before; evals != 0 {
			t.Errorf("%s: pods renamed ran %d evaluations, want none", name, evals)
		}
	}
	for name, images := range cases {
		same(strings.ReplaceAll(name, " ", "-"), func(n string) map[string]any { return helperPod(n, images...) })
	}
	securityContexts := map[string]any{"none": nil, "empty": map[string]any{}, "non-root": map[string]any{"runAsNonRoot": true},
		"root": map[string]any{"runAsNonRoot": false}, "not an object": "x"}
	for name, sc := range securityContexts {
		for _, hostNetwork := range []bool{false, true} {
			same(fmt.Sprintf("sc-%s-%v", name, hostNetwork), func(n string) map[string]any {
				p := helperPod(n, "registry.io/app:1", "safe.io/b")
				for _, c := range spec(p)["containers"].([]any) {
					if sc == nil {
						delete(c.(map[string]any), "securityContext")
					} else {
						c.(map[string]any)["securityContext"] = sc
					}
				}
				if hostNetwork {
					spec(p)["hostNetwork"] = true
				}
				return p
			})
		}
	}
	check(pod("default", "not-objects", func(p map[string]any) { spec(p)["containers"] = []any{"web", 3} }))
	check(pod("default", "no-list", func(p map[string]any) { spec(p)["containers"] = map[string]any{"image": "debug/x"} }))
	check(pod("default", "init", func(p map[string]any) {
		spec(p)["initContainers"] = []any{map[string]any{"name": "i", "image": "registry.io/init", "securityContext": map[string]any{"privileged": true}}}
	}))
}

// TestHelperKeysWhilePoliciesChange evaluates pods with images from a
// small pool (helper memo hits and misses) on several goroutines while
// is_exempt's constraint changes its exemptImages underneath: -race
// checks the helper path, the constraints that do not change answer as
// the engine without memo does, and once the churn stops the changed
// constraint answers as an engine that only ever saw its last version.
func TestHelperKeysWhilePoliciesChange(t *testing.T) {
	memo := helperEngine(t, opa.Options{})
	exact := helperEngine(t, opa.Options{DisableMemo: true})
	cands := []opa.Candidate{{Name: "n-1"}, {Name: "n-2"}}
	images := []any{"safe.io/a:1", "registry.io/b:1", "registry.io/c:latest", "debug/d", "tools.io/debug:1.0", "registry.io/e@sha256:00"}
	withExempt := func(i int) *unstructured.Unstructured {
		objs, err := readObjects(strings.NewReader(helperPolicies))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if o.GetKind() == "K8sHelperPriv" {
				exempt := []any{"safe.io/*"}
				if i%2 == 1 {
					exempt = []any{"registry.io/*"}
				}
				unstructured.SetNestedSlice(o.Object, exempt, "spec", "parameters", "exemptImages")
				return o
			}
		}
		t.Fatal("no K8sHelperPriv constraint")
		return nil
	}
	unchanging := func(lines []string) []string {
		var out []string
		for _, l := range lines {
			if !strings.Contains(l, " helper-priv ") {
				out = append(out, l)
			}
		}
		return out
	}
	work := func(w, i int) error {
		p := helperPod(fmt.Sprintf("w%d-%d", w, i), images[(i+w)%len(images)], images[(i*5+w)%len(images)])
		got, want := unchanging(violationLines(t, memo, p, cands)), unchanging(violationLines(t, exact, p, cands))
		if !reflect.DeepEqual(got, want) {
			return fmt.Errorf("pod %v during churn:\n memo    %q\n no memo %q", p["metadata"], got, want)
		}
		return nil
	}
	last := 0
	change := func(i int) error {
		last = i
		if errs := memo.Apply(context.Background(), []opa.Change{{Object: withExempt(i)}}); len(errs) > 0 {
			return fmt.Errorf("apply: %v", errs)
		}
		return nil
	}
	churn(t, time.Second, 5*time.Millisecond, 3, work, change)
	apply(t, exact, withExempt(last))
	for i, img := range images {
		sameAsWithoutMemo(t, memo, exact, helperPod(fmt.Sprintf("after-%d", i), img), cands)
	}
}

// sharedHelperPolicies are four templates that test each container with
// is_exempt: k8ssharea and k8sshareb ship the library's lib and exempt the
// same images (their constraints differ in other parameters), k8ssharec
// ships it with other exemptImages, and k8sshared ships a lib whose
// is_exempt matches exact images only (other code, same exemptImages).
func sharedHelperPolicies(cExempt string) string {
	template := func(kind, test, lib, params string) string {
		name := strings.ToLower(kind)
		return `apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: ` + name + `}
spec:
  crd:
    spec:
      names: {kind: ` + kind + `}
      validation: {openAPIV3Schema: {type: object, properties: {exemptImages: {type: array, items: {type: string}}, level: {type: integer}}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package ` + name + `
        import data.lib.exempt_container.is_exempt
        violation[{"msg": msg}] {
          c := input.review.object.spec.containers[_]
          not is_exempt(c)
          ` + test + `
          msg := sprintf("` + kind + `: %v", [c.name])
        }
` + lib + `---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: ` + kind + `
metadata: {name: ` + name + `}
spec:
  parameters: ` + params + `
---
`
	}
	exactOnly := strings.Replace(exemptLibYAML, `          _matches_exemption(img, exemption) {
            endswith(exemption, "*")
            prefix := trim_suffix(exemption, "*")
            startswith(img, prefix)
          }
`, "", 1)
	return template("K8sShareA", "c.securityContext.privileged", exemptLibYAML, `{exemptImages: ["safe.io/*"], level: 1}`) +
		template("K8sShareB", "c.securityContext.runAsUser == 0", exemptLibYAML, `{exemptImages: ["safe.io/*"], level: 2}`) +
		template("K8sShareC", "c.securityContext.privileged", exemptLibYAML, `{exemptImages: [`+cExempt+`]}`) +
		template("K8sShareD", "c.securityContext.privileged", exactOnly, `{exemptImages: ["safe.io/*"]}`)
}

// TestSharedHelperAnswers: templates that ship the same helper share its
// answers where the parameters it reads agree, so that a new image costs
// one evaluation per distinct (code, exemptImages), not one per template;
// changing a constraint's exemptImages moves it to the answers of its new
// value; verdicts stay those of the engine without memo.
func TestSharedHelperAnswers(t *testing.T) {
	policies := func(cExempt string) []*unstructured.Unstructured {
		objs, err := readObjects(strings.NewReader(sharedHelperPolicies(cExempt)))
		if err != nil {
			t.Fatal(err)
		}
		return objs
	}
	memo, exact := newEngine(t, opa.Options{}), newEngine(t, opa.Options{DisableMemo: true})
	apply(t, memo, policies(`"registry.io/*"`)...)
	apply(t, exact, policies(`"registry.io/*"`)...)
	cands := []opa.Candidate{{Name: "n-1"}}
	for _, e := range []*opa.Engine{memo, exact} {
		apply(t, e, node("n-1", nil))
	}
	sharePod := func(name string, images ...string) map[string]any {
		var args []any
		for _, img := range images {
			args = append(args, img)
		}
		p := helperPod(name, args...)
		for _, c := range spec(p)["containers"].([]any) {
			c.(map[string]any)["securityContext"].(map[string]any)["runAsUser"] = 0
		}
		return p
	}
	newImages := func(want uint64, round string) {
		t.Helper()
		before := memo.Stats().HelperEvaluations
		const pods = 10
		for i := range pods {
			sameAsWithoutMemo(t, memo, exact, sharePod(fmt.Sprintf("%s-%d", round, i), fmt.Sprintf("registry.io/%s-%d:1", round, i)), cands)
		}
		if got := memo.Stats().HelperEvaluations - before; got != want*pods {
			t.Errorf("%s: %d pods with a new image each ran %d helper evaluations, want %d (%d per image)", round, pods, got, want*pods, want)
		}
	}
	// A and B share; C reads other exemptImages; D runs other code.
	newImages(3, "three")
	for _, img := range []string{"safe.io/a", "safe.io/*", "registry.io/b", "other.io/c"} {
		if got := sameAsWithoutMemo(t, memo, exact, sharePod("known-"+img, img), cands); len(got) == 0 {
			t.Errorf("%s: no violation, want some (every template does not exempt it)", img)
		}
	}
	// C now exempts what A and B do: it joins their answers.
	apply(t, memo, policies(`"safe.io/*"`)...)
	apply(t, exact, policies(`"safe.io/*"`)...)
	newImages(2, "two")
	for _, img := range []string{"safe.io/a", "registry.io/b", "safe.io/*"} {
		sameAsWithoutMemo(t, memo, exact, sharePod("after-"+img, img), cands)
	}
}
