package opa_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// viewTemplate is a template whose constraint denies when cond holds of
// the candidate node.
func viewTemplate(t *testing.T, kind, cond string) []*unstructured.Unstructured {
	t.Helper()
	rego := `package x
violation[{"msg": "no"}] {
  node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
  ` + cond + `
}`
	return []*unstructured.Unstructured{regoTemplate(t, kind, rego), constraintObj(t, kind, strings.ToLower(kind), nil)}
}

func bigNode(name, version string) *unstructured.Unstructured {
	n := node(name, map[string]string{"pool": "a"})
	images := []any{}
	for i := range 40 {
		images = append(images, map[string]any{"names": []any{strings.Repeat("registry.example/image-", 3) + string(rune('a'+i%26))}, "sizeBytes": int64(100000000 + i)})
	}
	n.Object["status"] = map[string]any{
		"images":   images,
		"nodeInfo": map[string]any{"kubeletVersion": version},
	}
	// 2^53+1: a float64 would round it; it must survive being kept as
	// JSON and cut again.
	n.Object["spec"] = map[string]any{"podCIDR": "10.0.0.0/24", "bigNumber": int64(9007199254740993)}
	return n
}

// TestNodesCutToWhatPoliciesRead: the store keeps each Node cut to what
// the constraints in force read, and a policy that reads more (a field
// nothing read before, all Nodes) sees it as soon as it is in force; the
// cut shrinks again when it goes.
func TestNodesCutToWhatPoliciesRead(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, opa.Options{})
	apply(t, e, viewTemplate(t, "K8sPoolB", `node.metadata.labels.pool == "b"`)...)
	apply(t, e, bigNode("n1", "v1.37.2"), bigNode("n2", "v1.36.0"))
	denied := func() []string {
		t.Helper()
		p, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: pod("default", "p"), Candidates: []opa.Candidate{{Name: "n1"}, {Name: "n2"}}})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for i, v := range p.Nodes {
			for _, x := range p.Violations(i) {
				out = append(out, v.Name+":"+x.Constraint.Name)
			}
		}
		return out
	}
	if got := denied(); len(got) != 0 {
		t.Fatalf("denied %v, want none", got)
	}
	// A field nothing read before.
	old := viewTemplate(t, "K8sOldKubelet", `node.status.nodeInfo.kubeletVersion == "v1.36.0"`)
	apply(t, e, old...)
	if got := strings.Join(denied(), ","); got != "n2:k8soldkubelet" {
		t.Fatalf("after a template reading nodeInfo: denied %q, want n2:k8soldkubelet", got)
	}
	// A number JSON cannot carry as a float64.
	apply(t, e, viewTemplate(t, "K8sBigNumber", `node.spec.bigNumber == 9007199254740993`)...)
	if got := strings.Join(denied(), ","); got != "n1:k8sbignumber,n2:k8sbignumber,n2:k8soldkubelet" {
		t.Fatalf("big number: denied %q", got)
	}
	// Reading every Node: the store holds them whole.
	apply(t, e, regoTemplate(t, "K8sCountNodes", `package x
violation[{"msg": "many"}] {
  count(data.inventory.cluster["v1"].Node) > 1
  images := {i | i := data.inventory.cluster["v1"].Node[_].status.images[_]}
  count(images) > 30
}`), constraintObj(t, "K8sCountNodes", "count-nodes", nil))
	if got := strings.Join(denied(), ","); !strings.Contains(got, "n1:count-nodes") {
		t.Fatalf("a template reading all Nodes: denied %q, want count-nodes on n1", got)
	}
	// Gone again: cut from the store's whole values, same verdicts.
	e.Apply(ctx, []opa.Change{{Delete: &opa.ObjectRef{GroupVersionKind: schema.GroupVersionKind{Group: opa.TemplateGroup, Version: "v1", Kind: "ConstraintTemplate"}, Name: "k8scountnodes"}}})
	apply(t, e, bigNode("n2", "v1.36.0"))
	if got := strings.Join(denied(), ","); got != "n1:k8sbignumber,n2:k8sbignumber,n2:k8soldkubelet" {
		t.Fatalf("after the all-Nodes template went: denied %q", got)
	}
}

// TestNodeIndexFollowsTheInventory: requests large enough to look their
// candidates up through the node index see every change of the inventory
// at once: a Node changed, added, deleted, and the Nodes re-cut when a
// template reads a field nothing read before.
func TestNodeIndexFollowsTheInventory(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, opa.Options{})
	apply(t, e, viewTemplate(t, "K8sPoolB", `node.metadata.labels.pool == "b"`)...)
	var cands []opa.Candidate
	for i := range 80 {
		name := fmt.Sprintf("n%02d", i)
		version := "v1.37.2"
		if i == 9 {
			version = "v1.36.0" // cut away until a template reads it
		}
		apply(t, e, bigNode(name, version))
		cands = append(cands, opa.Candidate{Name: name})
	}
	denied := func() string {
		t.Helper()
		p, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: pod("default", "p"), Candidates: cands})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for i, v := range p.Nodes {
			if v.Unknown {
				out = append(out, v.Name+":unknown")
			}
			for _, x := range p.Violations(i) {
				out = append(out, v.Name+":"+x.Constraint.Name)
			}
		}
		return strings.Join(out, ",")
	}
	if got := denied(); got != "" {
		t.Fatalf("denied %q, want none", got)
	}
	changed := bigNode("n07", "v1.37.2")
	changed.SetLabels(map[string]string{"pool": "b"})
	apply(t, e, changed)
	if got := denied(); got != "n07:k8spoolb" {
		t.Fatalf("after n07 moved to pool b: %q", got)
	}
	// A re-cut alone (a template reading a field nothing read before, no
	// Node written): the index must not serve the Nodes cut before it.
	apply(t, e, viewTemplate(t, "K8sOldKubelet", `node.status.nodeInfo.kubeletVersion == "v1.36.0"`)...)
	if got := denied(); got != "n07:k8spoolb,n09:k8soldkubelet" {
		t.Fatalf("after a template reading nodeInfo: %q", got)
	}
	e.Apply(ctx, []opa.Change{{Delete: &opa.ObjectRef{GroupVersionKind: schema.GroupVersionKind{Version: "v1", Kind: "Node"}, Name: "n79"}}})
	if got := denied(); !strings.HasSuffix(got, "n79:unknown") {
		t.Fatalf("after n79 was deleted: %q", got)
	}
}
