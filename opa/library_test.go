package opa_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// TestEvaluationClasses lists every template of Gatekeeper's library (with
// every sample constraint) and of deploy/examples with how often the
// engine evaluates it, and why. None may be evaluated per (pod, node):
// the templates that print the pod's or the node's name share verdicts
// between pods and nodes that agree on everything else.
//
// The library's 16 templates with both engines run on CEL by default
// (K8sNativeValidation, as in Gatekeeper) and on Rego with it disabled:
// both are listed, and each engine judges every one once per pod class:
// K8sPSPHostFilesystem compares volume and mount names (the token volume's
// differs from pod to pod) only for a pod with a host-path volume, in its
// Rego and in its CEL code alike (opa/internal/drivers/cel/members.go).
func TestEvaluationClasses(t *testing.T) {
	if _, err := os.Stat(libraryDir); err != nil {
		t.Skipf("gatekeeper-library not found at %s: %v", libraryDir, err)
	}
	for _, engine := range libraryEngineChoices {
		t.Run(engine.name, func(t *testing.T) {
			evaluationClasses(t, engine.opts, engine.perPod)
		})
	}
}

// libraryEngineChoices run the library's dual templates on each engine;
// perPod are the templates an engine judges per pod beside those every
// engine does.
var libraryEngineChoices = []struct {
	name   string
	opts   opa.Options
	perPod []string
}{
	{name: "CEL", opts: opa.Options{}},
	{name: "Rego", opts: opa.Options{DisableK8sNativeValidation: true}},
}

func evaluationClasses(t *testing.T, opts opa.Options, perPod []string) {
	e := newEngine(t, opts)
	apply(t, e, libraryObjects(t)...)

	// Every library and example template, by kind: its class with the
	// sample constraints' parameters (the worst over its constraints).
	want := map[string]string{
		// Templates that cannot see the node and read nothing unique to a
		// pod: once per pod class (pods that agree on what they read).
		"*": "per pod class",
		// Placement templates of deploy/examples read node labels.
		"K8sTenantNodeIsolation": "per (pod class, node class)",
		"K8sSpotNodeToleration":  "per (pod class, node class)",
		"K8sPrivilegedNodePool":  "per (pod class, node class)",
		"K8sNodeLabelPreference": "per (pod class, node class)",
		// The object's name decides: compared with other objects' names
		// or with a constant. Each begins with a test of the kind or the
		// name that Pods fail, so pods never evaluate them
		// (TestLibraryGuards).
		"K8sBlockEndpointEditDefaultRole": "per pod",
		"K8sUniqueIngressHost":            "per pod",
		"K8sUniqueServiceSelector":        "per pod",
	}
	for _, k := range perPod {
		want[k] = "per pod"
	}
	worst := map[string]string{}
	why := map[string][]string{}
	rank := map[string]int{"per pod class": 0, "per (pod class, node class)": 1, "per pod": 2, "per (pod, node class)": 3, "per (pod class, node)": 4, "per (pod, node)": 5, "never memoised": 6}
	st := e.Status()
	for _, c := range st.Constraints {
		if !c.Active {
			t.Errorf("constraint %s/%s is not active: %s", c.Kind, c.Name, c.Error)
			continue
		}
		if cur, ok := worst[c.Kind]; !ok || rank[c.Evaluated] > rank[cur] {
			worst[c.Kind] = c.Evaluated
			why[c.Kind] = c.Why
		}
	}
	kinds := make([]string, 0, len(worst))
	for k := range worst {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	counts := map[string]int{}
	for _, k := range kinds {
		w, ok := want[k]
		if !ok {
			w = want["*"]
		}
		counts[worst[k]]++
		t.Logf("%-40s %-28s %s", k, worst[k], strings.Join(why[k], "; "))
		if worst[k] != w {
			t.Errorf("%s is evaluated %s, want %s: %s", k, worst[k], w, strings.Join(why[k], "; "))
		}
	}
	if len(kinds) < 53 {
		t.Errorf("%d templates with constraints, want the library's 49 and the 4 examples", len(kinds))
	}
	t.Logf("classes: %v", counts)
}

// libraryObjects are every template of Gatekeeper's library with every
// sample constraint, and deploy/examples (constraints named twice kept
// once).
func libraryObjects(t testing.TB) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	tmpls, _ := filepath.Glob(filepath.Join(libraryDir, "*", "*", "template.yaml"))
	for _, tf := range tmpls {
		objs = append(objs, load(t, tf)...)
		samples, _ := filepath.Glob(filepath.Join(filepath.Dir(tf), "samples", "*", "constraint.yaml"))
		for _, s := range samples {
			objs = append(objs, load(t, s)...)
		}
	}
	objs = append(objs, load(t, filepath.Join("..", "deploy", "examples"))...)
	// Samples of different templates may share a constraint name.
	seen := map[string]bool{}
	var unique []*unstructured.Unstructured
	for _, o := range objs {
		k := o.GetKind() + "/" + o.GetName()
		if !seen[k] {
			seen[k] = true
			unique = append(unique, o)
		}
	}
	return unique
}

// libraryEngines are the library in an engine and in one without memo
// (the reference), both with nodes n1 (pool a) and n2, and those as
// candidates.
func libraryEngines(t testing.TB, opts opa.Options) (memo, ref *opa.Engine, cands []opa.Candidate) {
	t.Helper()
	objs := libraryObjects(t)
	memoOpts, refOpts := opts, opts
	memoOpts.Parallelism = 4 // misses in parallel (prefetch.go)
	refOpts.DisableMemo = true
	memo, ref = newEngine(t, memoOpts), newEngine(t, refOpts)
	for _, e := range []*opa.Engine{memo, ref} {
		apply(t, e, objs...)
		apply(t, e, node("n1", map[string]string{"pool": "a"}), node("n2", nil))
	}
	return memo, ref, []opa.Candidate{{Name: "n1"}, {Name: "n2"}}
}

// judgeAsReference evaluates pod on both engines, fails t where their
// violations differ, and returns the memoised engine's placement.
func judgeAsReference(t *testing.T, memo, ref *opa.Engine, pod map[string]any, cands []opa.Candidate, explain bool) *opa.Placement {
	t.Helper()
	got, err := memo.Evaluate(t.Context(), opa.PlacementRequest{Pod: pod, Candidates: cands, Explain: explain})
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.Evaluate(t.Context(), opa.PlacementRequest{Pod: pod, Candidates: cands})
	if err != nil {
		t.Fatal(err)
	}
	for i := range cands {
		if g, w := got.Violations(i), want.Violations(i); !reflect.DeepEqual(g, w) {
			t.Errorf("pod %v on %s:\n memo    %+v\n no memo %+v", pod["metadata"], cands[i].Name, g, w)
		}
	}
	return got
}

// TestLibraryGuards lists the library templates whose violation rules all
// begin with a test of the review (the kind, the object's name), and
// checks that pods failing them are answered without evaluating them, and
// with the verdicts of an engine that evaluates everything.
func TestLibraryGuards(t *testing.T) {
	if _, err := os.Stat(libraryDir); err != nil {
		t.Skipf("gatekeeper-library not found at %s: %v", libraryDir, err)
	}
	e, ref, cands := libraryEngines(t, opa.Options{})
	want := map[string][]string{
		"K8sBlockEndpointEditDefaultRole": {`input.review.object.metadata.name == "system:aggregate-to-edit"`},
		"K8sUniqueIngressHost":            {`input.review.kind.kind == "Ingress"`},
		"K8sUniqueServiceSelector":        {`input.review.kind.kind == "Service" && input.review.kind.version == "v1" && input.review.kind.group == ""`},
	}
	got := map[string][]string{}
	for _, ts := range e.Status().Templates {
		if len(ts.Guards) > 0 {
			got[ts.Kind] = ts.Guards
			t.Logf("%-40s %s", ts.Kind, strings.Join(ts.Guards, " | "))
		}
	}
	for k, w := range want {
		if !slices.Equal(got[k], w) {
			t.Errorf("%s: guards %q, want %q", k, got[k], w)
		}
	}

	pods := []map[string]any{pod("default", "web-1"), pod("default", "system:aggregate-to-edit")}
	for _, pod := range pods {
		p := judgeAsReference(t, e, ref, pod, cands, true)
		// Every matched guarded template is skipped for a Pod (they serve
		// other kinds), but the role's is evaluated for a pod that bears
		// the role's name.
		name := pod["metadata"].(map[string]any)["name"]
		skipped := 0
		for _, tr := range p.Trace(0) {
			k := tr.Constraint.Kind
			if got[k] == nil {
				continue
			}
			wantSkip := !(k == "K8sBlockEndpointEditDefaultRole" && name == "system:aggregate-to-edit")
			if (tr.NotEvaluated != "") != wantSkip {
				t.Errorf("pod %s: %s not evaluated %q, want skipped %v", name, tr.Constraint, tr.NotEvaluated, wantSkip)
			}
			if tr.NotEvaluated != "" {
				skipped++
			}
		}
		if skipped == 0 {
			t.Errorf("pod %s: no guarded constraint matched and skipped", name)
		}
	}
}

// librarySamplePods are the Pods among the library's samples (allowed and
// disallowed examples), in namespace default when they name none.
func librarySamplePods(t testing.TB) []map[string]any {
	t.Helper()
	var samples []map[string]any
	files, _ := filepath.Glob(filepath.Join(libraryDir, "*", "*", "samples", "*", "example_*.yaml"))
	for _, f := range files {
		for _, o := range load(t, f) {
			if o.GetKind() == "Pod" {
				if o.GetNamespace() == "" {
					o.SetNamespace("default")
				}
				samples = append(samples, o.Object)
			}
		}
	}
	if len(samples) < 50 {
		t.Fatalf("%d sample pods, want the library's", len(samples))
	}
	return samples
}

// renamed is a copy of pod p with the pod and every container renamed, as
// a new Job's pod is.
func renamed(p map[string]any, k int) map[string]any {
	c := runtime.DeepCopyJSON(p)
	md := c["metadata"].(map[string]any)
	md["name"] = fmt.Sprintf("%v-job-%d", md["name"], k)
	eachContainer(c, func(m map[string]any) { m["name"] = fmt.Sprintf("%v-job-%d", m["name"], k) })
	return c
}

// eachContainer calls f on every container, init and ephemeral container.
func eachContainer(pod map[string]any, f func(map[string]any)) {
	spec, _ := pod["spec"].(map[string]any)
	for _, list := range []string{"containers", "initContainers", "ephemeralContainers"} {
		cs, _ := spec[list].([]any)
		for _, x := range cs {
			if m, ok := x.(map[string]any); ok {
				f(m)
			}
		}
	}
}

// TestLibraryListElements runs the library's sample Pods, and the same
// pods with every container renamed (as a new Job's pods are), through the
// memoised engine and one without memo: the same violations, and the
// renamed pods re-evaluate only the templates whose conditions read the
// containers' names.
//
// The counts are the Rego analysis's (dual templates on Rego). On CEL the
// verdicts are checked the same way, but the containers' names stay in the
// key of the dual templates that print them: their CEL code maps the
// containers it finds to messages (`.map(c, "..." + c.name)`), a value the
// CEL analysis reads, element by element, where Rego's leaves a placeholder
// (opa/internal/drivers/cel/reads.go). Their other fields are read element
// by element on both.
func TestLibraryListElements(t *testing.T) {
	if _, err := os.Stat(libraryDir); err != nil {
		t.Skipf("gatekeeper-library not found at %s: %v", libraryDir, err)
	}
	t.Run("CEL", func(t *testing.T) {
		e, ref, cands := libraryEngines(t, opa.Options{})
		for _, p := range librarySamplePods(t) {
			judgeAsReference(t, e, ref, p, cands, false)
			judgeAsReference(t, e, ref, renamed(p, 1), cands, false)
		}
	})
	e, ref, cands := libraryEngines(t, opa.Options{DisableK8sNativeValidation: true})
	objs := libraryObjects(t)
	samples := librarySamplePods(t)
	reEvaluated := map[string]int{}
	judge := func(p map[string]any, count bool) {
		got := judgeAsReference(t, e, ref, p, cands, count)
		if count {
			for _, tr := range got.Trace(0) {
				if !tr.Memoised && tr.NotEvaluated == "" {
					reEvaluated[tr.Constraint.Kind]++
				}
			}
		}
	}
	for _, p := range samples {
		judge(p, false)
	}
	for _, p := range samples {
		judge(renamed(p, 1), true)
	}
	// New images too (a new tag): the templates that exempt images only
	// through an empty exemptImages list do not read them (dead bodies);
	// whatever does is evaluated again. Verdicts as without memo.
	for _, p := range samples {
		c := renamed(p, 2)
		eachContainer(c, func(m map[string]any) { m["image"] = fmt.Sprintf("%v-rebuilt", m["image"]) })
		judge(c, false)
	}
	// Without resources: the container templates read them (through the
	// library's relay general_violation[{"msg": msg, "field": "containers"}],
	// each list element-wise), so their verdicts change, as without memo.
	for _, p := range samples {
		c := renamed(p, 3)
		eachContainer(c, func(m map[string]any) { delete(m, "resources") })
		judge(c, false)
	}
	// The templates that still re-evaluate, and why (their /debug/explain
	// reads): AppArmor and seccomp, whose annotation keys are built from
	// the container's name, only where an annotation key holds the name
	// (the lookup is checked per pod, opa/internal/analysis/lookupkey.go;
	// below), or the names of the privileged containers in a set that is
	// counted and joined into the message (the example's privileged pool;
	// only for the samples with one, below). The automount template, which compares
	// each mount's path through the library's set of lists inside a
	// function, no longer is. The other library templates that print
	// container names (allowed and disallowed repos and tags, image
	// digests, privileged, capabilities, host filesystem, read-only root
	// filesystem, limits, requests, ratios, required resources, ephemeral
	// storage, procMount, SELinux, host ports, allowed users through its
	// functions with several definitions, seccomp v2 through its object
	// of the containers by name, ...) no longer are.
	allowed := map[string]bool{"K8sPrivilegedNodePool": true}
	// AppArmor and seccomp re-evaluate only the samples with an
	// annotation key that holds a container's name (their profile
	// annotations): those were keyed by the name, their renamed copies are
	// not. The privileged pool only those with a privileged container: it
	// reads the names of the containers its comprehension's test keeps
	// (opa/internal/analysis, guardElements). The others keep their class.
	annotated, privileged := 0, 0
	for _, p := range samples {
		held := false
		eachContainer(p, func(c map[string]any) {
			sc, _ := c["securityContext"].(map[string]any)
			held = held || (sc["privileged"] != nil && sc["privileged"] != false)
		})
		if held {
			privileged++
		}
		ann, _ := p["metadata"].(map[string]any)["annotations"].(map[string]any)
		named := false
		eachContainer(p, func(c map[string]any) {
			for k := range ann {
				named = named || strings.Contains(k, fmt.Sprint(c["name"]))
			}
		})
		if named {
			annotated++
		}
	}
	if n := reEvaluated["K8sPrivilegedNodePool"]; n > privileged {
		t.Errorf("K8sPrivilegedNodePool was evaluated again for %d renamed pods, %d of which have a privileged container: the other containers' names should be left out of the key", n, privileged)
	}
	for _, k := range []string{"K8sPSPAppArmor", "K8sPSPSeccomp"} {
		if n := reEvaluated[k]; n > annotated {
			t.Errorf("%s was evaluated again for %d renamed pods, %d of which annotate a container: container names in its annotation lookups should be left out of the key", k, n, annotated)
		}
	}
	kinds := make([]string, 0, len(reEvaluated))
	for k, n := range reEvaluated {
		kinds = append(kinds, fmt.Sprintf("%s:%d", k, n))
		if !allowed[k] && k != "K8sPSPAppArmor" && k != "K8sPSPSeccomp" {
			t.Errorf("%s was evaluated again for %d renamed pods: its container names should be left out of the key", k, n)
		}
	}
	sort.Strings(kinds)
	t.Logf("%d sample pods; re-evaluated for renamed containers: %v", len(samples), kinds)
	for _, k := range []string{"K8sAllowedRepos", "K8sDisallowedTags", "K8sPSPPrivilegedContainer", "K8sPSPCapabilities", "K8sPSPHostFilesystem",
		"K8sContainerLimits", "K8sContainerRequests", "K8sContainerRatios", "K8sRequiredResources", "K8sContainerEphemeralStorageLimit",
		"K8sPSPProcMount", "K8sPSPSELinuxV2", "K8sPSPHostNetworkingPorts", "K8sPSPAllowedUsers", "K8sPSPSeccompV2"} {
		if reEvaluated[k] == 0 && !slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == k }) {
			t.Errorf("%s has no constraint: the test no longer covers it", k)
		}
	}
}
