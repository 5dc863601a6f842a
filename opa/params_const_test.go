package opa_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// paramLabelTemplate reads the node's label named by a parameter, and the
// pod's team label (so that pods of different teams are different
// classes).
const paramLabelTemplate = `
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8sparamlabel}
spec:
  crd: {spec: {names: {kind: K8sParamLabel}, validation: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8sparamlabel
        violation[{"msg": msg}] {
          node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
          input.review.object.metadata.labels.team != "ops"
          not node.metadata.labels[input.parameters.label]
          msg := sprintf("node %v lacks label %v", [node.metadata.name, input.parameters.label])
        }
        violation[{"msg": msg}] {
          node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
          input.review.object.metadata.labels.team != "ops"
          value := node.metadata.labels[input.parameters.label]
          value != input.parameters.value
          msg := sprintf("node %v has %v=%v, not %v", [node.metadata.name, input.parameters.label, value, input.parameters.value])
        }
`

// paramKeyTemplates look labels up by keys made from parameters in the
// other ways the analysis follows: a list, a list of objects, an object's
// keys, every, a function, object.get, a rule with a default, builtins.
const paramKeyTemplates = `---
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8sparamkeys}
spec:
  crd: {spec: {names: {kind: K8sParamKeys}, validation: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8sparamkeys
        import future.keywords.every
        import future.keywords.in
        default label := "zone"
        label := input.parameters.label
        violation[{"msg": msg}] {
          node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
          l := input.parameters.labels[_]
          not node.metadata.labels[l]
          msg := sprintf("list: node %v lacks %v", [node.metadata.name, l])
        }
        violation[{"msg": msg}] {
          node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
          p := input.parameters.pairs[_]
          node.metadata.labels[p.key] != p.value
          msg := sprintf("pairs: node %v has not %v=%v", [node.metadata.name, p.key, p.value])
        }
        violation[{"msg": msg}] {
          node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
          some k, want in input.parameters.want
          object.get(node.metadata.labels, k, "<none>") != want
          msg := sprintf("object: node %v has not %v=%v", [node.metadata.name, k, want])
        }
        violation[{"msg": msg}] {
          node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
          every l in input.parameters.labels { node.metadata.labels[l] }
          msg := sprintf("every: node %v has them all", [node.metadata.name])
        }
        violation[{"msg": msg}] {
          node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
          not has_label(node, label)
          msg := sprintf("default: node %v lacks %v", [node.metadata.name, label])
        }
        violation[{"msg": msg}] {
          node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
          k := concat("/", [lower(input.parameters.prefix), "zone"])
          has_label(node, k)
          msg := sprintf("built: node %v has %v", [node.metadata.name, k])
        }
        has_label(n, k) { n.metadata.labels[k] }
`

func paramConstraint(kind, name, params string) string {
	return fmt.Sprintf("---\napiVersion: constraints.gatekeeper.sh/v1beta1\nkind: %s\nmetadata: {name: %s}\nspec:\n  parameters: %s\n", kind, name, params)
}

// paramNodes are n nodes, each its own hostname; zone cycles through
// values, absent on every fourth.
func paramNodes(n int) ([]*unstructured.Unstructured, []opa.Candidate) {
	zones := []string{"a", "b", "c", ""}
	var nodes []*unstructured.Unstructured
	var cands []opa.Candidate
	for i := range n {
		name := fmt.Sprintf("node-%02d", i)
		labels := map[string]string{"rack": fmt.Sprintf("r%d", i%2)}
		if z := zones[i%len(zones)]; z != "" {
			labels["zone"] = z
			labels["example.com/zone"] = z
		}
		if i%3 == 0 {
			labels["gpu"] = "true"
		}
		nodes = append(nodes, node(name, labels))
		cands = append(cands, opa.Candidate{Name: name})
	}
	return nodes, cands
}

func paramEngine(t *testing.T, opts opa.Options, policies string, nodes []*unstructured.Unstructured) *opa.Engine {
	t.Helper()
	objs, err := readObjects(strings.NewReader(policies))
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, opts)
	apply(t, e, objs...)
	apply(t, e, nodes...)
	for _, c := range e.Status().Constraints {
		if !c.Active {
			t.Fatalf("constraint %s/%s not active: %s", c.Kind, c.Name, c.Error)
		}
	}
	return e
}

func teamPod(name, team string) map[string]any {
	p := pod("default", name)
	p["metadata"].(map[string]any)["labels"] = map[string]any{"team": team}
	return p
}

// TestParameterKeyEvaluations: with the label a constraint names known,
// the template reads that one label of the node, so nodes whose hostnames
// differ share verdicts: a pod of a new class costs one evaluation per
// distinct value of the label (absent included), a second pod of the same
// class none, whatever the number of nodes.
func TestParameterKeyEvaluations(t *testing.T) {
	nodes, cands := paramNodes(24)
	policies := paramLabelTemplate + paramConstraint("K8sParamLabel", "need-zone", `{label: zone, value: a}`)
	e := paramEngine(t, opa.Options{}, policies, nodes)
	cs := e.Status().Constraints[0]
	if cs.Evaluated != "per (pod class, node class)" || !slices.Contains(cs.Reads, "node.metadata.labels.zone") || slices.Contains(cs.Reads, "node.metadata.labels") {
		t.Fatalf("constraint evaluated %s, reads %q, why %q", cs.Evaluated, cs.Reads, cs.Why)
	}
	distinct := 4 // zone a, b, c, absent
	for i, tc := range []struct {
		pod  map[string]any
		want uint64
	}{
		{teamPod("web-1", "web"), uint64(distinct)},
		{teamPod("web-2", "web"), 0},
		{teamPod("db-1", "db"), uint64(distinct)},
		{teamPod("db-2", "db"), 0},
		{teamPod("web-3", "web"), 0},
	} {
		before := e.Stats().Evaluations
		lines := violationLines(t, e, tc.pod, cands)
		if got := e.Stats().Evaluations - before; got != tc.want {
			t.Errorf("pod %d: %d evaluations on %d nodes, want %d", i, got, len(cands), tc.want)
		}
		if len(lines) != 24*3/4 {
			t.Errorf("pod %d: %d violations, want %d (every node without zone=a): %q", i, len(lines), 24*3/4, lines)
		}
	}
}

// TestParameterKeysMemoIsExact: for the label a parameter names (present,
// absent, different on each node) and for the parameters the analysis
// must read around (an object, a missing parameter, a number, a list too
// long to read key by key), the memo's verdicts are those of an engine
// without it.
func TestParameterKeysMemoIsExact(t *testing.T) {
	nodes, cands := paramNodes(12)
	policies := paramLabelTemplate +
		paramConstraint("K8sParamLabel", "zone", `{label: zone, value: a}`) +
		paramConstraint("K8sParamLabel", "rack", `{label: rack, value: r1}`) +
		paramConstraint("K8sParamLabel", "hostname", `{label: kubernetes.io/hostname, value: node-03}`) +
		paramConstraint("K8sParamLabel", "object", `{label: {zone: a}, value: a}`) +
		paramConstraint("K8sParamLabel", "missing", `{value: a}`) +
		paramConstraint("K8sParamLabel", "number", `{label: 3, value: a}`) +
		paramKeyTemplates +
		paramConstraint("K8sParamKeys", "keys", `{labels: [zone, gpu], pairs: [{key: zone, value: b}, {key: rack, value: r0}], want: {zone: c, gpu: "true"}, prefix: Example.COM}`) +
		paramConstraint("K8sParamKeys", "keys-default", `{labels: [gpu], pairs: [], want: {}, prefix: other}`) +
		paramConstraint("K8sParamKeys", "keys-many", `{labels: [l0, l1, l2, l3, l4, l5, l6, l7, l8, l9, l10, l11, l12, l13, l14, l15, zone], pairs: [{key: zone}], want: {zone: [a]}, prefix: 7, label: rack}`)
	memo := paramEngine(t, opa.Options{}, policies, nodes)
	exact := paramEngine(t, opa.Options{DisableMemo: true}, policies, nodes)
	for _, c := range memo.Status().Constraints {
		t.Logf("%s/%s: %s %q", c.Kind, c.Name, c.Evaluated, c.Why)
	}
	total := 0
	for round := range 3 {
		for _, team := range []string{"web", "db", "ops"} {
			p := teamPod(fmt.Sprintf("%s-%d", team, round), team)
			total += len(sameAsWithoutMemo(t, memo, exact, p, cands))
		}
	}
	if total == 0 {
		t.Fatal("no violations: the test shows nothing")
	}
	// The constraints that name string labels are per node class (but the
	// hostname label is unique to each node); the others read the labels
	// whole, and Why says what their key is.
	for _, c := range memo.Status().Constraints {
		wholeLabels := c.Name == "object" || c.Name == "missing" || c.Name == "keys-many"
		if got := c.Evaluated == "per (pod class, node)"; got != (wholeLabels || c.Name == "hostname") {
			t.Errorf("%s/%s evaluated %s; why %q", c.Kind, c.Name, c.Evaluated, c.Why)
		}
		if wholeLabels && !strings.Contains(strings.Join(c.Why, " "), "its key") {
			t.Errorf("%s/%s: why %q does not say what the key is", c.Kind, c.Name, c.Why)
		}
	}
}
