package opa_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

func obj(t testing.TB, y string) *unstructured.Unstructured {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(y), &m); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func regoTemplate(t testing.TB, kind, rego string) *unstructured.Unstructured {
	t.Helper()
	u := obj(t, `
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata:
  name: `+strings.ToLower(kind)+`
spec:
  crd:
    spec:
      names:
        kind: `+kind+`
      validation:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
  targets:
    - target: admission.k8s.gatekeeper.sh
`)
	targets := u.Object["spec"].(map[string]any)["targets"].([]any)
	targets[0].(map[string]any)["rego"] = rego
	return u
}

func constraintObj(t testing.TB, kind, name string, params map[string]any) *unstructured.Unstructured {
	t.Helper()
	u := obj(t, `
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: `+kind+`
metadata:
  name: `+name+`
spec:
  match:
    kinds: [{apiGroups: [""], kinds: ["Pod"]}]
`)
	if params != nil {
		u.Object["spec"].(map[string]any)["parameters"] = params
	}
	return u
}

const nodeLabelRego = `package nodelabel
violation[{"msg": msg}] {
  node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
  not node.metadata.labels[input.parameters.key] == input.parameters.value
  msg := sprintf("node lacks %v=%v", [input.parameters.key, input.parameters.value])
}`

func verdicts(t testing.TB, e *opa.Engine, p map[string]any, cands []opa.Candidate) []string {
	t.Helper()
	res, err := e.Evaluate(context.Background(), opa.PlacementRequest{Pod: p, Candidates: cands})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(res.Nodes))
	for i, v := range res.Nodes {
		var msgs []string
		for _, x := range res.Violations(i) {
			msgs = append(msgs, fmt.Sprintf("%s:%s:%s", x.Constraint.Name, x.Action, x.Message))
		}
		out[i] = fmt.Sprintf("%s unknown=%v %s", v.Name, v.Unknown, strings.Join(msgs, "|"))
	}
	return out
}

func TestBrokenTemplateKeepsPreviousVersion(t *testing.T) {
	e := newEngine(t, opa.Options{})
	ctx := context.Background()
	apply(t, e, regoTemplate(t, "K8sNodeLabel", nodeLabelRego), constraintObj(t, "K8sNodeLabel", "need-ssd", map[string]any{"key": "disk", "value": "ssd"}),
		node("n1", map[string]string{"disk": "ssd"}), node("n2", nil))
	before := verdicts(t, e, pod("default", "p"), []opa.Candidate{{Name: "n1"}, {Name: "n2"}})
	gen := e.Status().Generation

	broken := regoTemplate(t, "K8sNodeLabel", "package nodelabel\nviolation[{\"msg\": m}] { m := }")
	errs := e.Apply(ctx, []opa.Change{{Object: broken}})
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "k8snodelabel") {
		t.Fatalf("errors = %v, want one naming the template", errs)
	}
	if after := verdicts(t, e, pod("default", "p"), []opa.Candidate{{Name: "n1"}, {Name: "n2"}}); !reflect.DeepEqual(before, after) {
		t.Errorf("verdicts changed after a broken update:\n%v\n%v", before, after)
	}
	st := e.Status()
	if st.Generation != gen {
		t.Errorf("generation moved from %d to %d on a refused change", gen, st.Generation)
	}
	if len(st.Templates) != 1 || !st.Templates[0].Active || !strings.Contains(st.Templates[0].Error, "parse rego") {
		t.Errorf("template status = %+v", st.Templates)
	}
	if e.Stats().CompileErrors != 1 {
		t.Errorf("compile errors = %d", e.Stats().CompileErrors)
	}
	// A good version clears the error.
	apply(t, e, regoTemplate(t, "K8sNodeLabel", nodeLabelRego+"\n# v3"))
	if st := e.Status(); st.Templates[0].Error != "" || st.Generation == gen {
		t.Errorf("status after fix = %+v", st)
	}
}

func TestConstraintWaitsForItsTemplate(t *testing.T) {
	e := newEngine(t, opa.Options{})
	apply(t, e, constraintObj(t, "K8sNodeLabel", "need-ssd", map[string]any{"key": "disk", "value": "ssd"}), node("n1", nil))
	st := e.Status()
	if len(st.Constraints) != 1 || st.Constraints[0].Active || !strings.Contains(st.Constraints[0].Inactive, "no ConstraintTemplate") || st.Constraints[0].Error != "" {
		t.Fatalf("constraint status = %+v", st.Constraints)
	}
	if v := verdicts(t, e, pod("default", "p"), []opa.Candidate{{Name: "n1"}}); strings.Contains(v[0], "need-ssd") {
		t.Fatalf("inactive constraint was enforced: %v", v)
	}
	apply(t, e, regoTemplate(t, "K8sNodeLabel", nodeLabelRego))
	if v := verdicts(t, e, pod("default", "p"), []opa.Candidate{{Name: "n1"}}); !strings.Contains(v[0], "need-ssd:deny:node lacks disk=ssd") {
		t.Fatalf("verdict = %v", v)
	}
	// Deleting the template deactivates the constraint again.
	ref := opa.ObjectRef{GroupVersionKind: schema.GroupVersionKind{Group: opa.TemplateGroup, Version: "v1", Kind: "ConstraintTemplate"}, Name: "k8snodelabel"}
	if errs := e.Apply(context.Background(), []opa.Change{{Delete: &ref}}); len(errs) > 0 {
		t.Fatal(errs)
	}
	if v := verdicts(t, e, pod("default", "p"), []opa.Candidate{{Name: "n1"}}); strings.Contains(v[0], "need-ssd") {
		t.Fatalf("constraint of a deleted template was enforced: %v", v)
	}
}

func TestEvaluationErrorsFailClosed(t *testing.T) {
	e := newEngine(t, opa.Options{})
	apply(t, e,
		regoTemplate(t, "K8sConflict", "package c\nr := 1 { true }\nr := 2 { true }\nviolation[{\"msg\": \"never\"}] { r == 3 }"),
		constraintObj(t, "K8sConflict", "conflict", nil),
		regoTemplate(t, "K8sBadMsg", "package b\nviolation[{\"msg\": 42}] { true }"),
		constraintObj(t, "K8sBadMsg", "bad-msg", nil),
		regoTemplate(t, "K8sNoMsg", "package n\nviolation[{\"text\": \"dropped\"}] { true }\nviolation[{\"msg\": \"kept\"}] { true }"),
		constraintObj(t, "K8sNoMsg", "no-msg", nil),
		node("n1", nil))
	res, err := e.Evaluate(context.Background(), opa.PlacementRequest{Pod: pod("default", "p"), Candidates: []opa.Candidate{{Name: "n1"}}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]opa.Violation{}
	for _, v := range res.Violations(0) {
		got[v.Constraint.Name] = v
	}
	if v := got["conflict"]; !v.Error || !strings.Contains(v.Message, "conflict") {
		t.Errorf("conflict: %+v", v)
	}
	if v := got["bad-msg"]; !v.Error || !strings.Contains(v.Message, "msg is") {
		t.Errorf("bad-msg: %+v", v)
	}
	if v := got["no-msg"]; v.Error || v.Message != "kept" || string(v.Details) != "{}" {
		t.Errorf("no-msg: %+v", v)
	}
	if !res.Denied(0) {
		t.Error("node with evaluation errors is not denied")
	}
}

func TestDeadlineStopsSlowTemplate(t *testing.T) {
	e := newEngine(t, opa.Options{})
	slow := `package slow
violation[{"msg": "slow"}] {
  count([x | numbers.range(1, 100000000)[x]; x % 7 == 0]) > 0
}`
	apply(t, e, regoTemplate(t, "K8sSlow", slow), constraintObj(t, "K8sSlow", "slow", nil), node("n1", nil))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: pod("default", "p"), Candidates: []opa.Candidate{{Name: "n1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("evaluation took %v after a 100ms deadline", d)
	}
	v := res.Violations(0)
	if !res.Denied(0) || len(v) != 1 || !v[0].Error || !strings.Contains(v[0].Message, "deadline") {
		t.Fatalf("verdict %+v: want the node denied because the deadline stopped the evaluation", v)
	}
}

func TestRequestNodesOverrideInventory(t *testing.T) {
	e := newEngine(t, opa.Options{})
	apply(t, e, regoTemplate(t, "K8sNodeLabel", nodeLabelRego), constraintObj(t, "K8sNodeLabel", "need-ssd", map[string]any{"key": "disk", "value": "ssd"}),
		node("n1", nil))
	// Inventory says n1 has no ssd; the request's node object says it has.
	withSSD := node("n1", map[string]string{"disk": "ssd"}).Object
	// As the scheduler sends them: JSON.
	ssdJSON, err := json.Marshal(node("n1", map[string]string{"disk": "ssd"}).Object)
	if err != nil {
		t.Fatal(err)
	}
	v := verdicts(t, e, pod("default", "p"), []opa.Candidate{{Name: "n1", Object: withSSD}, {Name: "n9", Object: node("n9", nil).Object},
		{Name: "n1", JSON: ssdJSON}, {Name: "n8", JSON: []byte(`{"metadata": {"name": "n8", "labels": {"disk": "hdd"}}}`)}})
	if strings.Contains(v[0], "need-ssd") || strings.Contains(v[2], "need-ssd") {
		t.Errorf("request node ignored: %v", v)
	}
	if !strings.Contains(v[1], "need-ssd") || strings.Contains(v[1], "unknown=true") || !strings.Contains(v[3], "need-ssd") {
		t.Errorf("node given only in the request: %v", v)
	}
	if _, err := e.Evaluate(context.Background(), opa.PlacementRequest{Pod: pod("default", "p"), Candidates: []opa.Candidate{{Name: "n7", JSON: []byte(`[1]`)}}}); err == nil || !strings.Contains(err.Error(), "node n7") {
		t.Errorf("a Node that is not an object: error %v, want one naming the node", err)
	}
}

// The memo must never change a verdict: random pods and nodes, with the
// inventory changing between rounds, judged with and without it.
func TestMemoNeverChangesVerdicts(t *testing.T) {
	memo := newEngine(t, opa.Options{}, examples)
	plain := newEngine(t, opa.Options{DisableMemo: true}, examples)
	rng := rand.New(rand.NewSource(1))
	labelSets := []map[string]string{
		{}, {"tenant": "alpha"}, {"tenant": "beta"}, {"node.kubernetes.io/lifecycle": "spot"},
		{"node.example.com/privileged-pods": "allowed"}, {"topology.kubernetes.io/zone": "zone-a"}, {"topology.kubernetes.io/zone": "zone-b", "tenant": "alpha"},
	}
	nss := []string{"alpha", "beta", "default", "nolabels"}
	var cands []opa.Candidate
	for i := 0; i < 30; i++ {
		cands = append(cands, opa.Candidate{Name: fmt.Sprintf("r-%d", i)})
	}
	cands = append(cands, opa.Candidate{Name: "missing"})
	for round := 0; round < 6; round++ {
		var objs []*unstructured.Unstructured
		for i := 0; i < 30; i++ {
			objs = append(objs, node(fmt.Sprintf("r-%d", i), labelSets[rng.Intn(len(labelSets))]))
		}
		objs = append(objs, namespace("nolabels", nil), namespace("alpha", map[string]string{"tenant": []string{"alpha", "beta"}[round%2]}))
		apply(t, memo, objs...)
		apply(t, plain, objs...)
		for i := 0; i < 25; i++ {
			p := pod(nss[rng.Intn(len(nss))], fmt.Sprintf("p-%d-%d", round, i), func(p map[string]any) {
				if rng.Intn(2) == 0 {
					spec(p)["tolerations"] = []any{map[string]any{"key": "spot", "operator": "Exists"}}
				}
				if rng.Intn(3) == 0 {
					spec(p)["hostNetwork"] = true
				}
				if rng.Intn(2) == 0 {
					p["metadata"].(map[string]any)["labels"] = map[string]any{"prefer-zone": "a"}
				}
			})
			a, b := verdicts(t, memo, p, cands), verdicts(t, plain, p, cands)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("round %d pod %d: memo and plain disagree\nmemo:  %v\nplain: %v", round, i, a, b)
			}
		}
	}
	if s := memo.Stats(); s.MemoHits == 0 {
		t.Errorf("memo never hit: %+v", s)
	}
}

// Evaluations run while templates, constraints and nodes change; -race
// checks the request path, and every answer must be one a consistent
// policy set gives.
func TestConcurrentEvaluationWhilePoliciesChange(t *testing.T) {
	e := newEngine(t, opa.Options{}, examples)
	ctx := context.Background()
	cands := names("c", 40)
	var objs []*unstructured.Unstructured
	for i := range cands {
		objs = append(objs, node(cands[i].Name, map[string]string{"tenant": []string{"alpha", "beta", ""}[i%3]}))
	}
	apply(t, e, objs...)
	work := func(w, i int) error {
		// Pods of two workloads, which the workers share: each request
		// takes key values another's pod kept (workloadkeys.go).
		p := pod([]string{"alpha", "default"}[i%2], fmt.Sprintf("w%d-%d", w, i), func(p map[string]any) {
			p["metadata"].(map[string]any)["generateName"] = "w-"
			spec(p)["containers"].([]any)[0].(map[string]any)["image"] = []string{"nginx:1.27", "nginx:latest", "busybox"}[(w+i)%3]
		})
		res, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: p, Candidates: cands})
		if err != nil {
			return err
		}
		for i := range res.Nodes {
			for _, x := range res.Violations(i) {
				if x.Error {
					return fmt.Errorf("evaluation error during churn: %s", x.Message)
				}
			}
		}
		return nil
	}
	change := func(i int) error {
		tmpl := regoTemplate(t, "K8sNodeLabel", nodeLabelRego+fmt.Sprintf("\n# revision %d", i))
		cons := constraintObj(t, "K8sNodeLabel", "churn", map[string]any{"key": "tenant", "value": fmt.Sprint(i % 2)})
		n := node(cands[i%len(cands)].Name, map[string]string{"tenant": []string{"alpha", "beta"}[i%2]})
		if errs := e.Apply(ctx, []opa.Change{{Object: tmpl}, {Object: cons}, {Object: n}}); len(errs) > 0 {
			return fmt.Errorf("apply: %v", errs)
		}
		return nil
	}
	churn(t, 2*time.Second, 5*time.Millisecond, 4, work, change)
	if e.Stats().KeysReused == 0 {
		t.Error("no request took a key value another one kept")
	}
}

func TestParametersFollowTheSchema(t *testing.T) {
	e := newEngine(t, opa.Options{})
	ctx := context.Background()
	tmpl := regoTemplate(t, "K8sNodeLabel", nodeLabelRego)
	unstructured.SetNestedMap(tmpl.Object, map[string]any{
		"type": "object",
		"properties": map[string]any{
			"key":   map[string]any{"type": "string", "default": "disk"},
			"value": map[string]any{"type": "string", "enum": []any{"ssd", "hdd"}},
		},
	}, "spec", "crd", "spec", "validation", "openAPIV3Schema")
	apply(t, e, tmpl, node("n1", map[string]string{"disk": "hdd"}))

	for name, params := range map[string]map[string]any{
		"wrong type":    {"key": 3, "value": "ssd"},
		"not in enum":   {"value": "nvme"},
		"unknown field": {"value": "ssd", "kee": "disk"},
	} {
		errs := e.Apply(ctx, []opa.Change{{Object: constraintObj(t, "K8sNodeLabel", "c", params)}})
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), "spec.parameters") {
			t.Errorf("%s: errors = %v", name, errs)
		}
	}
	// The default fills the missing key.
	apply(t, e, constraintObj(t, "K8sNodeLabel", "c", map[string]any{"value": "ssd"}))
	if v := verdicts(t, e, pod("default", "p"), []opa.Candidate{{Name: "n1"}}); !strings.Contains(v[0], "node lacks disk=ssd") {
		t.Errorf("verdict = %v", v)
	}
	// A later bad version is refused and the good one stays.
	if errs := e.Apply(ctx, []opa.Change{{Object: constraintObj(t, "K8sNodeLabel", "c", map[string]any{"value": 1})}}); len(errs) != 1 {
		t.Fatalf("errors = %v", errs)
	}
	if v := verdicts(t, e, pod("default", "p"), []opa.Candidate{{Name: "n1"}}); !strings.Contains(v[0], "node lacks disk=ssd") {
		t.Errorf("verdict after a refused update = %v", v)
	}
}

func TestNetworkBuiltinsAreUnavailable(t *testing.T) {
	send := `package send
violation[{"msg": "reached out"}] {
  resp := http.send({"method": "GET", "url": "http://127.0.0.1:1/"})
  resp.status_code == 200
}`
	for name, rego := range map[string]string{
		"http.send":          send,
		"net.lookup_ip_addr": "package lookup\nviolation[{\"msg\": \"x\"}] { net.lookup_ip_addr(\"example.com\") }",
		"opa.runtime":        "package rt\nviolation[{\"msg\": \"x\"}] { opa.runtime().env }",
	} {
		t.Run(name, func(t *testing.T) {
			e := newEngine(t, opa.Options{})
			errs := e.Apply(context.Background(), []opa.Change{{Object: regoTemplate(t, "K8sNet", rego)}})
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), "undefined function") {
				t.Fatalf("errors = %v, want the builtin refused at compile time", errs)
			}
		})
	}
	// Allowed on request.
	e := newEngine(t, opa.Options{AllowNetworkBuiltins: true})
	if errs := e.Apply(context.Background(), []opa.Change{{Object: regoTemplate(t, "K8sNet", send)}}); len(errs) > 0 {
		t.Fatalf("with AllowNetworkBuiltins: %v", errs)
	}
}

// A template that prints the pod's name in its message (as many library
// templates do) is evaluated once per (pod class, node class): replicas
// with other names reuse the verdicts, each with its own name put back.
func TestPrintedPodNameSharesVerdicts(t *testing.T) {
	objs, err := readObjects(strings.NewReader(`
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8snamedpool}
spec:
  crd: {spec: {names: {kind: K8sNamedPool}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8snamedpool
        violation[{"msg": msg}] {
          node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
          node.metadata.labels.pool == "blocked"
          msg := sprintf("pod %v may not use a blocked node", [input.review.object.metadata.name])
        }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sNamedPool
metadata: {name: no-blocked-pool}
`))
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, opa.Options{})
	apply(t, e, objs...)
	cands := names("n", 10)
	for i, c := range cands {
		apply(t, e, node(c.Name, map[string]string{"pool": []string{"blocked", "open"}[i%2]}))
	}
	ctx := context.Background()
	evaluate := func(name string) (msgs []string, evaluations uint64) {
		t.Helper()
		before := e.Stats().Evaluations
		p, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: pod("default", name), Candidates: cands})
		if err != nil {
			t.Fatal(err)
		}
		for i := range p.Nodes {
			for _, x := range p.Violations(i) {
				msgs = append(msgs, x.Message)
			}
		}
		return msgs, e.Stats().Evaluations - before
	}
	msgs, n := evaluate("first")
	if n != 2 || len(msgs) != 5 || msgs[0] != "pod first may not use a blocked node" {
		t.Fatalf("first call: %d evaluations (want 2, one per node class), messages %q", n, msgs)
	}
	if _, n := evaluate("first"); n != 0 {
		t.Errorf("the same pod's next call ran %d evaluations, want 0 (memo)", n)
	}
	for i := range 200 {
		name := fmt.Sprintf("replica-%d", i)
		msgs, n = evaluate(name)
		if n != 0 || len(msgs) != 5 || msgs[0] != "pod "+name+" may not use a blocked node" {
			t.Fatalf("replica %s: %d evaluations (want 0: the name is only printed), messages %q", name, n, msgs)
		}
	}
}

func TestReviewInput(t *testing.T) {
	e := newEngine(t, opa.Options{})
	apply(t, e, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": "alpha", "labels": map[string]any{"tenant": "alpha"}}}})
	review, err := e.ReviewInput(context.Background(), pod("alpha", "web-1"), "n1")
	if err != nil {
		t.Fatal(err)
	}
	obj, _ := review["object"].(map[string]any)
	spec, _ := obj["spec"].(map[string]any)
	nsObj, _ := review["namespaceObject"].(map[string]any)
	if review["operation"] != "CREATE" || review["name"] != "web-1" || review["namespace"] != "alpha" || spec["nodeName"] != "n1" || obj["kind"] != "Pod" {
		t.Errorf("review %v", review)
	}
	if md, _ := nsObj["metadata"].(map[string]any); md["name"] != "alpha" {
		t.Errorf("namespaceObject %v", nsObj)
	}
	if _, err := e.ReviewInput(context.Background(), nil, "n1"); err == nil {
		t.Error("no pod: no error")
	}
}

const guardedRego = `package guarded
violation[{"msg": msg}] {
  input.review.object.metadata.namespace == "restricted"
  node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
  not node.metadata.labels.restricted
  msg := sprintf("pod %v needs a restricted node, %v is not", [input.review.object.metadata.name, node.metadata.name])
}
violation[{"msg": "no host network here"}] {
  "restricted-hostnet" = input.review.object.metadata.namespace
  input.review.object.spec.hostNetwork
}`

// A template whose violation rules all begin with a test of the review is
// not evaluated for pods that fail them, and answers as an engine that
// evaluates everything does, for pods that fail and pods that pass them.
func TestGuardedTemplateNotEvaluated(t *testing.T) {
	objs := []*unstructured.Unstructured{
		regoTemplate(t, "K8sGuarded", guardedRego), constraintObj(t, "K8sGuarded", "guarded", nil),
		node("plain", nil), node("safe", map[string]string{"restricted": "true"}),
	}
	fast := newEngine(t, opa.Options{})
	apply(t, fast, objs...)
	plain := newEngine(t, opa.Options{DisableMemo: true})
	apply(t, plain, objs...)
	cands := []opa.Candidate{{Name: "plain"}, {Name: "safe"}}
	hostNet := func(p map[string]any) { spec(p)["hostNetwork"] = true }
	cases := []struct {
		pod       map[string]any
		evaluated bool
		denied    []bool
	}{
		{pod("default", "a"), false, []bool{false, false}},
		{pod("default", "b", hostNet), false, []bool{false, false}},
		{pod("restricted", "c"), true, []bool{true, false}},
		{pod("restricted-hostnet", "d"), true, []bool{false, false}},
		{pod("restricted-hostnet", "e", hostNet), true, []bool{true, true}},
	}
	for _, tc := range cases {
		name := tc.pod["metadata"].(map[string]any)["name"]
		before := fast.Stats().Evaluations
		p, err := fast.Evaluate(context.Background(), opa.PlacementRequest{Pod: tc.pod, Candidates: cands, Explain: true})
		if err != nil {
			t.Fatal(err)
		}
		if evaluated := fast.Stats().Evaluations > before; evaluated != tc.evaluated {
			t.Errorf("pod %s: evaluated %v, want %v", name, evaluated, tc.evaluated)
		}
		if tr := p.Trace(0); len(tr) != 1 || (tr[0].NotEvaluated != "") == tc.evaluated {
			t.Errorf("pod %s: explain %+v", name, tr)
		}
		for i := range cands {
			if got := p.Denied(i); got != tc.denied[i] {
				t.Errorf("pod %s on %s: denied %v, want %v", name, cands[i].Name, got, tc.denied[i])
			}
		}
		if a, b := verdicts(t, fast, tc.pod, cands), verdicts(t, plain, tc.pod, cands); !reflect.DeepEqual(a, b) {
			t.Errorf("pod %s: %v, an engine evaluating everything says %v", name, a, b)
		}
	}
}

// TestNamespaceLabelsFollowTheInventory: a constraint's namespaceSelector
// reads the namespace's labels as the inventory holds them now, also
// after they change under requests that matched before (the engine keeps
// the labels of the namespace objects it has read).
func TestNamespaceLabelsFollowTheInventory(t *testing.T) {
	e := newEngine(t, opa.Options{})
	c := constraintObj(t, "K8sNodeLabel", "tenant-x-needs-ssd", map[string]any{"key": "disk", "value": "ssd"})
	c.Object["spec"].(map[string]any)["match"].(map[string]any)["namespaceSelector"] = map[string]any{"matchLabels": map[string]any{"tenant": "x"}}
	apply(t, e, regoTemplate(t, "K8sNodeLabel", nodeLabelRego), c, node("n1", nil), namespace("a", map[string]string{"tenant": "x"}))
	cands := []opa.Candidate{{Name: "n1"}}
	for i, tenant := range []string{"x", "y", "x", "", "x"} {
		if i > 0 {
			labels := map[string]string{"tenant": tenant}
			if tenant == "" {
				labels = nil
			}
			apply(t, e, namespace("a", labels))
		}
		v := verdicts(t, e, pod("a", fmt.Sprintf("p-%d", i)), cands)
		if matched := strings.Contains(v[0], "tenant-x-needs-ssd"); matched != (tenant == "x") {
			t.Errorf("step %d, namespace labelled tenant=%q: matched %v (%v)", i, tenant, matched, v)
		}
	}
}

// TestNamespaceThatIsNotOneIsRefused: a Namespace whose labels are not all
// strings does not decode as a Namespace; Gatekeeper's cache refuses it,
// and so does the engine, keeping the Namespace it held.
func TestNamespaceThatIsNotOneIsRefused(t *testing.T) {
	e := newEngine(t, opa.Options{})
	apply(t, e, namespace("team-a", map[string]string{"team": "a"}))
	bad := namespace("team-a", nil)
	bad.Object["metadata"].(map[string]any)["labels"] = map[string]any{"team": int64(7)}
	errs := e.Apply(context.Background(), []opa.Change{{Object: bad}})
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "Namespace") || !strings.Contains(errs[0].Error(), "team-a") {
		t.Fatalf("errors = %v, want the Namespace team-a refused", errs)
	}
	t.Log(errs[0])
	st := e.Status()
	if st.Inventory["v1/Namespace"] != 1 {
		t.Errorf("inventory = %v, want the Namespace held before", st.Inventory)
	}
}

// TestParameterTestIsNoGuard: a violation rule that begins by testing a
// parameter (input.parameters.key == "team") was read as a guard, tested
// on the review, where no parameters are: the memo path skipped every pod.
// Found by bench/diff TestGeneratedRego.
func TestParameterTestIsNoGuard(t *testing.T) {
	policies := `apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8sparamtest}
spec:
  crd:
    spec:
      names: {kind: K8sParamTest}
      validation: {openAPIV3Schema: {type: object, properties: {key: {type: string}}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8sparamtest
        violation[{"msg": msg}] {
          input.parameters.key == "team"
          msg := sprintf("pod %v", [input.review.object.metadata.name])
        }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sParamTest
metadata: {name: c}
spec: {parameters: {key: team}}
`
	dir := t.TempDir()
	path := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(path, []byte(policies), 0o644); err != nil {
		t.Fatal(err)
	}
	memo, exact := newEngine(t, opa.Options{}, path), newEngine(t, opa.Options{DisableMemo: true}, path)
	for _, e := range []*opa.Engine{memo, exact} {
		apply(t, e, node("n1", nil))
	}
	got := sameAsWithoutMemo(t, memo, exact, pod("default", "web"), []opa.Candidate{{Name: "n1"}})
	if len(got) != 1 || !strings.Contains(got[0], "pod web") {
		t.Errorf("violations %q, want the pod's", got)
	}
}
