package opa_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// celEngine is an engine holding testdata/cel/policies.yaml and celNodes.
func celEngine(t testing.TB, opts opa.Options) *opa.Engine {
	t.Helper()
	return celEngineOf(t, opts, "testdata/cel/policies.yaml")
}

// celEngineOf is an engine holding the policies at paths and celNodes'
// Nodes, two of them outside the gpu- prefix.
func celEngineOf(t testing.TB, opts opa.Options, paths ...string) *opa.Engine {
	t.Helper()
	e := newEngine(t, opts, paths...)
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
			"cpu-0 tier tier blocked: web",
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
				// CEL violations carry no details, as Gatekeeper's.
				if !strings.HasSuffix(f[2], " ") || strings.HasSuffix(f[2], "{} ") {
					t.Errorf("%q: want no details", line)
				}
				msg := strings.TrimSuffix(f[2], " ")
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

// TestCELExplain: the trace names each constraint's engine and, on CEL,
// the validation each violation failed.
func TestCELExplain(t *testing.T) {
	e := celEngine(t, opa.Options{})
	p := pod("default", "web")
	spec(p)["containers"] = []any{map[string]any{"name": "a", "image": "nginx:latest"}}
	pl, err := e.Evaluate(t.Context(), opa.PlacementRequest{Pod: p, Candidates: celNodes[:1], Explain: true})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, tr := range pl.Trace(0) {
		got[tr.Constraint.Name] = fmt.Sprintf("%s %v", tr.Engine, tr.Validations)
	}
	want := map[string]string{
		"owner-annotation": "K8sNativeValidation [1 3 4]",
		"team":             "K8sNativeValidation [1]",
		"no-gpu-nodes":     "K8sNativeValidation []",
		"team-ignored":     "K8sNativeValidation []",
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: engine and validations %q, want %q", name, got[name], w)
		}
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

// TestCELUnderChurn evaluates pods on several goroutines while the CEL
// placement constraint's parameters and a CEL template's code change
// underneath (run it with -race): the constraints nothing changes answer
// as an engine without memo, and each answer of the changing constraint
// is one of its versions'.
func TestCELUnderChurn(t *testing.T) {
	e := celEngine(t, opa.Options{Parallelism: 2})
	ref := celEngine(t, opa.Options{DisableMemo: true})
	objs := load(t, "testdata/cel/policies.yaml")
	var prefix, matched *unstructured.Unstructured
	for _, o := range objs {
		switch {
		case o.GetKind() == "K8sCelNodePrefix":
			prefix = o
		case o.GetName() == "k8scelmatched":
			matched = o
		}
	}
	allowed := map[string]bool{"": true, "pod web-0 may not run on node gpu-0": true, "pod web-0 may not run on node cpu-0": true, "pod web-0 may not run on node cpu-1": true}
	work := func(w, i int) error {
		p := pod("default", "web-0")
		p["metadata"].(map[string]any)["labels"] = map[string]any{"tier": []string{"blocked", "open"}[i%2], "team": "a"}
		churned := func(v opa.Violation) bool {
			return v.Constraint.Kind == "K8sCelNodePrefix" || v.Constraint.Kind == "K8sCelMatched"
		}
		got, err := agreeingBut(t, e, ref, p, churned)
		if err != nil {
			return err
		}
		for n := range got.Nodes {
			for _, v := range got.Violations(n) {
				if v.Constraint.Kind == "K8sCelNodePrefix" && !allowed[v.Message] {
					return fmt.Errorf("node %s: %q is no version's message", got.Nodes[n].Name, v.Message)
				}
			}
		}
		return nil
	}
	change := func(i int) error {
		c := prefix.DeepCopy()
		unstructured.SetNestedField(c.Object, []string{"gpu-", "cpu-"}[i%2], "spec", "parameters", "prefix")
		m := matched.DeepCopy()
		m.SetResourceVersion(fmt.Sprint(i))
		code, _, _ := unstructured.NestedSlice(m.Object, "spec", "targets")
		target := code[0].(map[string]any)
		src := target["code"].([]any)[0].(map[string]any)["source"].(map[string]any)
		src["validations"] = []any{map[string]any{"expression": []string{`object.metadata.labels["tier"] != "blocked"`, `true`}[i%2], "message": "tier blocked"}}
		if errs := e.Apply(t.Context(), []opa.Change{{Object: c}, {Object: m}}); len(errs) > 0 {
			return fmt.Errorf("apply: %v", errs)
		}
		return nil
	}
	churn(t, time.Second, 5*time.Millisecond, 3, work, change)
}

// agreeingBut evaluates p on e and on ref, an engine without memo, and
// says where their violations differ, but for those churned (constraints
// changing during the call, whose verdicts may be either version's): e's
// placement, or the difference as an error.
func agreeingBut(t *testing.T, e, ref *opa.Engine, p map[string]any, churned func(opa.Violation) bool) (*opa.Placement, error) {
	got, err := e.Evaluate(t.Context(), opa.PlacementRequest{Pod: p, Candidates: celNodes})
	if err != nil {
		return nil, err
	}
	want, err := ref.Evaluate(t.Context(), opa.PlacementRequest{Pod: p, Candidates: celNodes})
	if err != nil {
		return nil, err
	}
	for n := range got.Nodes {
		g := slices.DeleteFunc(slices.Clone(got.Violations(n)), churned)
		w := slices.DeleteFunc(slices.Clone(want.Violations(n)), churned)
		if !reflect.DeepEqual(g, w) {
			return nil, fmt.Errorf("node %s during churn:\n got  %v\n want %v", got.Nodes[n].Name, g, w)
		}
	}
	return got, nil
}

// FuzzCELPods judges fuzzed pods (names, labels, annotations, images,
// with quotes, spaces and newlines; token volume names, host-path volumes
// and their mounts, privileged containers, names printed from pairs and
// maps and looked up in annotations and finalizers) with testdata/cel/policies.yaml
// and filters.yaml on an engine with memo and one without: the same violations, whatever
// the values the memo key leaves out, the placeholders stand for, and the
// conditions under which a filter's body reads the rest of the pod.
func FuzzCELPods(f *testing.F) {
	f.Add("web", "blocked", "a", "nginx:latest", true, "abcde", false, false, false)
	f.Add(" web ", "open", "", "x", false, "abcde", true, false, false)
	f.Add("web ", "blocked", "a", "x", false, "data", true, true, true) // printed last: the message is trimmed
	f.Add("we\"b\n", "", "\x00", "nginx:1", true, "x y", true, false, true)
	f.Add("gpu-", "tier", "team", "a:latest:latest", false, "", false, true, true)
	f.Add("web", "blocked", "web", "x", true, "abcde", false, false, false) // a blocked profile, a finalizer holding the name
	f.Add("sidecar", "", "", "x", false, "abcde", false, false, true)       // two containers named alike: the sidecar's pair stands for both
	engine := func(opts opa.Options) *opa.Engine {
		return celEngineOf(f, opts, "testdata/cel/policies.yaml", "testdata/cel/filters.yaml")
	}
	memo, exact := engine(opa.Options{}), engine(opa.Options{DisableMemo: true})
	f.Fuzz(func(t *testing.T, name, tier, team, image string, owner bool, volume string, hostPath, readOnly, privileged bool) {
		p := pod("default", name)
		md := p["metadata"].(map[string]any)
		labels := map[string]any{}
		if tier != "" {
			labels["tier"] = tier
		}
		if team != "" {
			labels["team"] = team
		}
		md["labels"] = labels
		if owner {
			// A profile annotation keyed by the first container's name, and
			// a finalizer named after the team.
			md["annotations"] = map[string]any{"owner": name, "example.com/profile-" + name: tier}
			md["finalizers"] = []any{"hold-" + team}
		}
		token := "kube-api-access-" + volume
		volumes := []any{map[string]any{"name": token, "projected": map[string]any{}}}
		if hostPath {
			volumes = append(volumes, map[string]any{"name": volume, "hostPath": map[string]any{"path": "/var/" + name}})
		}
		spec(p)["volumes"] = volumes
		mounts := []any{map[string]any{"name": token, "mountPath": "/token", "readOnly": true}, map[string]any{"name": volume, "mountPath": "/data", "readOnly": readOnly}}
		spec(p)["containers"] = []any{
			map[string]any{"name": name, "image": image, "volumeMounts": mounts, "securityContext": map[string]any{"privileged": privileged}},
			map[string]any{"name": "sidecar", "image": "sidecar:1", "securityContext": map[string]any{"privileged": privileged && readOnly}},
		}
		lines := strings.Join(sameAsWithoutMemo(t, memo, exact, p, celNodes), "\n")
		if strings.Contains(lines, "compilation failed") {
			t.Fatalf("a template does not compile: %s", lines)
		}
		// A message that is not one line falls back to the expression.
		if want := hostPath && !readOnly && volume != token; want != strings.Contains(lines, "variables.writable") && want != strings.Contains(lines, "writable host paths") {
			t.Errorf("writable host path reported %v, want %v: %s", !want, want, lines)
		}
		if want := privileged; want != strings.Contains(lines, "privileged: ") && want != strings.Contains(lines, "variables.privileged") {
			t.Errorf("privileged container reported %v, want %v: %s", !want, want, lines)
		}
		if want := privileged; want != strings.Contains(lines, "escalated: {"+name) && want != strings.Contains(lines, "variables.escalated") {
			t.Errorf("escalated container reported by name %v, want %v: %s", !want, want, lines)
		}
		// Under one name the two containers' pairs stand for each other:
		// the pod fails only when neither is unprivileged.
		want := privileged
		if name == "sidecar" {
			want = privileged && readOnly
		}
		if want != strings.Contains(lines, "runs privileged under its name") {
			t.Errorf("a privileged container joined by name reported %v, want %v: %s", !want, want, lines)
		}
		if want := owner && tier == "blocked"; want != strings.Contains(lines, " runs a blocked profile") && want != strings.Contains(lines, "variables.profiled") {
			t.Errorf("blocked profile reported %v, want %v: %s", !want, want, lines)
		}
	})
}

// TestCELErrorsNameWhereThePathBroke: an error's text names the key that
// was missing (the labels, or the label in them), so pods that both lack
// the label but differ in having labels at all get their own verdicts.
func TestCELErrorsNameWhereThePathBroke(t *testing.T) {
	memo, exact := celEngine(t, opa.Options{}), celEngine(t, opa.Options{DisableMemo: true})
	withLabels := pod("default", "a")
	withLabels["metadata"].(map[string]any)["labels"] = map[string]any{"x": "y"}
	seen := map[string]bool{}
	for _, p := range []map[string]any{withLabels, pod("default", "b"), withLabels} {
		for _, line := range sameAsWithoutMemo(t, memo, exact, p, celNodes[:1]) {
			if strings.Contains(line, " team ") {
				seen[line[strings.Index(line, "no such key"):]] = true
			}
		}
	}
	if !seen["no such key: team "] || !seen["no such key: labels "] {
		t.Errorf("errors seen: %v, want both the missing label and the missing labels", seen)
	}
}

// TestCELJoinedNames: names that a template only compares with each other
// (testdata/cel/filters.yaml's joined-pairs, as the library's AppArmor
// template) get placeholders while they are pairwise distinct, so a pod
// whose containers have new names is the class of one with the same
// containers under other names; a pod with two containers of one name is
// keyed on its names, and judged as without memo.
func TestCELJoinedNames(t *testing.T) {
	e, exact := celEngineOf(t, opa.Options{}, "testdata/cel/filters.yaml"), celEngineOf(t, opa.Options{DisableMemo: true}, "testdata/cel/filters.yaml")
	withNames := func(names ...string) map[string]any {
		p := pod("default", "web")
		var containers []any
		for i, n := range names {
			containers = append(containers, map[string]any{"name": n, "image": "app:1", "securityContext": map[string]any{"privileged": i == 0}})
		}
		spec(p)["containers"] = containers
		return p
	}
	// evaluated: joined-pairs was evaluated (not memoised); keyed: what
	// explain says of the printed values kept in its key.
	evaluated := func(p map[string]any) (bool, []string) {
		t.Helper()
		pl, err := e.Evaluate(t.Context(), opa.PlacementRequest{Pod: p, Candidates: celNodes[:1], Explain: true})
		if err != nil {
			t.Fatal(err)
		}
		sameAsWithoutMemo(t, e, exact, p, celNodes[:1])
		for _, tr := range pl.Trace(0) {
			if tr.Constraint.Name == "joined-pairs" {
				return !tr.Memoised && tr.NotEvaluated == "", tr.Keyed
			}
		}
		t.Fatal("joined-pairs is not in the trace")
		return false, nil
	}
	const notDistinct = "input.review.object.spec.containers[_].name: the template compares its values with each other, and they are not pairwise distinct"
	tests := []struct {
		name  string
		names []string
		want  bool // joined-pairs evaluated, not memoised
		keyed []string
	}{
		{"the first pod", []string{"a", "b"}, true, nil},
		{"new names, pairwise distinct: the same class", []string{"c", "d"}, false, nil},
		{"two containers of one name: keyed on the names", []string{"x", "x"}, true, []string{notDistinct}},
		{"the same names again", []string{"x", "x"}, false, []string{notDistinct}},
		{"other distinct names after them", []string{"y", "z"}, false, nil},
	}
	for _, tc := range tests {
		got, keyed := evaluated(withNames(tc.names...))
		if got != tc.want || !reflect.DeepEqual(keyed, tc.keyed) {
			t.Errorf("%s: evaluated %v, keyed %q; want %v, %q", tc.name, got, keyed, tc.want, tc.keyed)
		}
	}
	lines := violationLines(t, e, withNames("x", "x"), celNodes[:1])
	if slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "runs privileged under its name") }) {
		t.Errorf("the second container's pair stands for the first under their one name, yet: %q", lines)
	}
}

// TestCELGeneratedRegressions are the differences from Gatekeeper that
// generated templates found (bench/diff TestGeneratedCEL), each shrunk to
// a template and the pods that show it, judged in order by an engine with
// the memo and one without; want is Gatekeeper's answer for the last pod.
func TestCELGeneratedRegressions(t *testing.T) {
	withPorts := func(p map[string]any) {
		spec(p)["containers"] = []any{map[string]any{"name": "app", "image": "x", "ports": []any{map[string]any{"containerPort": int64(80)}}}}
	}
	tests := []struct {
		name string
		// variables and validations of the template's source (YAML).
		source string
		pods   []map[string]any
		want   []string
	}{{
		// The mapped values' keys were dropped from the read set: the pod
		// without ports shared the key of the pod with them.
		name: "a mapped list only counted",
		source: `variables: [{name: ports, expression: "variables.anyObject.spec.containers.map(c, c.ports)"}]
validations: [{expression: "size(variables.ports) < 3"}]`,
		pods: []map[string]any{pod("default", "a", withPorts), pod("default", "b")},
		want: []string{
			`cpu-0 expression 'size(variables.ports) < 3' resulted in error: composited variable "ports" fails to evaluate: no such key: ports`,
			`gpu-0 expression 'size(variables.ports) < 3' resulted in error: composited variable "ports" fails to evaluate: no such key: ports`,
		},
	}, {
		// The second variable over a map literal was bound to nothing: the
		// node name unread, the template judged once per pod class.
		name:   "the node name in a map literal iterated with two variables",
		source: `validations: [{expression: '{"node": object.spec.nodeName}.all(k, v, !v.startsWith("gpu-"))'}]`,
		pods:   []map[string]any{pod("default", "a")},
		want:   []string{`gpu-0 failed expression: {"node": object.spec.nodeName}.all(k, v, !v.startsWith("gpu-"))`},
	}, {
		// A Namespace not in the inventory: Gatekeeper's validator gets
		// none; the engine handed it an empty one.
		name:   "namespaceObject of a namespace not synced",
		source: `validations: [{expression: 'namespaceObject.metadata.name != "x"'}]`,
		pods:   []map[string]any{pod("unsynced", "a")},
		want: []string{
			`cpu-0 expression 'namespaceObject.metadata.name != "x"' resulted in error: no such key: metadata`,
			`gpu-0 expression 'namespaceObject.metadata.name != "x"' resulted in error: no such key: metadata`,
		},
	}, {
		// A message printed labels.team, left out of the key and filled
		// in afterwards; the other validation iterates the labels (reads
		// labels[_]), so the placeholder decided its verdict.
		name: "a printed value that an iteration over its map also reads",
		source: `validations:
- {expression: "true", messageExpression: 'object.metadata.labels["team"]'}
- {expression: "object.metadata.labels.all(k, v, !object.spec.nodeName.startsWith(v) || object.spec.hostNetwork)"}`,
		pods: []map[string]any{pod("default", "a", func(p map[string]any) { p["metadata"].(map[string]any)["labels"] = map[string]any{"team": "gpu-"} })},
		want: []string{"gpu-0 expression 'object.metadata.labels.all(k, v, !object.spec.nodeName.startsWith(v) || object.spec.hostNetwork)' resulted in error: no such key: hostNetwork"},
	}, {
		// Every placement review has a spec (the candidate's name is in
		// it); the pod judged once per class had none.
		name:   "a pod without a spec",
		source: `validations: [{expression: '!has(object.spec.priorityClassName)'}]`,
		pods:   []map[string]any{{"metadata": map[string]any{"name": "a", "namespace": "default"}}},
	}, {
		// Gatekeeper's libraries hand namespaceObject to CEL as
		// unstructured content, where a null key is absent; the typed
		// Namespace of the 1.37 libraries failed on it.
		name:   "a null key in namespaceObject's labels",
		source: `validations: [{expression: '!(object.spec.?priorityClassName.orValue(null) in namespaceObject.metadata.labels)'}]`,
		pods:   []map[string]any{pod("team-a", "a")},
	}, {
		// The null is read straight from the object: its type is printed
		// as Gatekeeper's libraries print it.
		name:   "a null read from the object as a map key",
		source: `validations: [{expression: '{"a": 1}[object.spec.priorityClassName] == 1'}]`,
		pods:   []map[string]any{pod("team-a", "a", func(p map[string]any) { spec(p)["priorityClassName"] = nil })},
		want: []string{
			`cpu-0 expression '{"a": 1}[object.spec.priorityClassName] == 1' resulted in error: invalid qualifier type: <nil>`,
			`gpu-0 expression '{"a": 1}[object.spec.priorityClassName] == 1' resulted in error: invalid qualifier type: <nil>`,
		},
	}}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kind := fmt.Sprintf("K8sGenRegression%d", i)
			objs := []*unstructured.Unstructured{celTemplate(t, kind, tc.source), {Object: map[string]any{
				"apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": kind, "metadata": map[string]any{"name": "c"},
			}}}
			nodes := []opa.Candidate{{Name: "cpu-0"}, {Name: "gpu-0"}}
			memo, exact := newEngine(t, opa.Options{}), newEngine(t, opa.Options{DisableMemo: true})
			for _, e := range []*opa.Engine{memo, exact} {
				apply(t, e, objs...)
				apply(t, e, node("cpu-0", nil), node("gpu-0", nil), namespace("team-a", map[string]string{"team": "a"}))
			}
			var got []string
			for _, p := range tc.pods {
				got = sameAsWithoutMemo(t, memo, exact, p, nodes)
			}
			var short []string
			for _, line := range got {
				f := strings.SplitN(line, " ", 3) // node, constraint, message and details
				short = append(short, f[0]+" "+strings.TrimSuffix(f[2], " "))
			}
			if !slices.Equal(short, tc.want) {
				t.Errorf("violations:\n got  %q\n want %q", short, tc.want)
			}
		})
	}
}

// celTemplate is a CEL ConstraintTemplate of kind with source (YAML).
func celTemplate(t *testing.T, kind, source string) *unstructured.Unstructured {
	t.Helper()
	var src map[string]any
	if err := yaml.Unmarshal([]byte(source), &src); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "templates.gatekeeper.sh/v1", "kind": "ConstraintTemplate",
		"metadata": map[string]any{"name": strings.ToLower(kind)},
		"spec": map[string]any{
			"crd": map[string]any{"spec": map[string]any{"names": map[string]any{"kind": kind}}},
			"targets": []any{map[string]any{
				"target": "admission.k8s.gatekeeper.sh",
				"code":   []any{map[string]any{"engine": "K8sNativeValidation", "source": src}},
			}},
		},
	}}
}
