package opa

import (
	"context"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/inventory"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/verdict"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/policy"
)

// newInternalEngine is an engine with default options, closed when the
// test ends: the internal tests' own, as package opa_test's newEngine
// cannot be called from package opa.
func newInternalEngine(t *testing.T) *Engine {
	t.Helper()
	ctx := context.Background()
	e, err := New(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(ctx) })
	return e
}

func mustObj(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(y), &m); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// poolPolicy is a template and its constraint that read one label of the
// candidate Node, metadata.labels.pool.
func poolPolicy(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	return []*unstructured.Unstructured{
		mustObj(t, `
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8spool}
spec:
  crd: {spec: {names: {kind: K8sPool}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8spool
        violation[{"msg": "no"}] {
          node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
          node.metadata.labels.pool == "b"
        }
`),
		mustObj(t, "apiVersion: constraints.gatekeeper.sh/v1beta1\nkind: K8sPool\nmetadata: {name: pool}\n"),
	}
}

// The store holds the cut, the engine the whole Node.
func TestStoreHoldsNodesCut(t *testing.T) {
	ctx := context.Background()
	e := newInternalEngine(t)
	objs := append(poolPolicy(t),
		mustObj(t, "apiVersion: v1\nkind: Node\nmetadata: {name: n1, labels: {pool: a, other: x}}\nstatus: {images: [{names: [a, b]}], nodeInfo: {kubeletVersion: v1}}\n"))
	if errs := e.Apply(ctx, changesOf(objs)); len(errs) > 0 {
		t.Fatal(errs)
	}
	txn, _ := e.store.NewTransaction(ctx)
	defer e.store.Abort(ctx, txn)
	v := e.inv.Value(ctx, txn, append(inventory.NodesPath[:len(inventory.NodesPath):len(inventory.NodesPath)], "n1"))
	got := v.String()
	if strings.Contains(got, "images") || strings.Contains(got, "other") || !strings.Contains(got, `"pool": "a"`) {
		t.Errorf("the store holds %s, want only metadata.labels.pool", got)
	}
	whole, ok := e.inv.WholeNode("n1")
	if !ok || !strings.Contains(string(whole), "kubeletVersion") {
		t.Errorf("the whole Node is not kept: %s", whole)
	}
}

// The store's Nodes hold the values they hold alike as one term, and a
// Node written anew changes its own value only.
func TestStoreSharesWhatNodesHoldAlike(t *testing.T) {
	ctx := context.Background()
	e := newInternalEngine(t)
	node := func(name, pool string) *unstructured.Unstructured {
		return mustObj(t, "apiVersion: v1\nkind: Node\nmetadata: {name: "+name+", labels: {pool: "+pool+", kubernetes.io/hostname: "+name+"}}\n")
	}
	objs := append(poolPolicy(t), node("n1", "a"), node("n2", "a"), node("n3", "a"))
	if errs := e.Apply(ctx, changesOf(objs)); len(errs) > 0 {
		t.Fatal(errs)
	}
	labels := func(name string) *ast.Term {
		txn, _ := e.store.NewTransaction(ctx)
		defer e.store.Abort(ctx, txn)
		path := append(inventory.NodesPath[:len(inventory.NodesPath):len(inventory.NodesPath)], name)
		v, _ := e.inv.Value(ctx, txn, path).(ast.Object)
		if v == nil {
			t.Fatalf("node %s not in the store", name)
		}
		return v.Get(ast.StringTerm("metadata")).Value.(ast.Object).Get(ast.StringTerm("labels"))
	}
	if labels("n2") != labels("n3") {
		t.Error("the labels n2 and n3 hold alike are two terms")
	}
	if errs := e.Apply(ctx, changesOf([]*unstructured.Unstructured{node("n2", "b")})); len(errs) > 0 {
		t.Fatal(errs)
	}
	for name, want := range map[string]string{"n1": `{"pool": "a"}`, "n2": `{"pool": "b"}`, "n3": `{"pool": "a"}`} {
		if got := labels(name).String(); got != want {
			t.Errorf("%s holds labels %s, want %s", name, got, want)
		}
	}
}

func changesOf(objs []*unstructured.Unstructured) []policy.Change {
	out := make([]policy.Change, len(objs))
	for i, o := range objs {
		out[i] = policy.Change{Object: o}
	}
	return out
}

// TestPrintedValuesShared: the printed values of a node are one object
// for every constraint that prints the same single value at the same
// place (the node classes keep one per node and constraint).
func TestPrintedValuesShared(t *testing.T) {
	name := verdict.NewBinding(0, "node-shared-a")
	var once printedOnce
	a := once.shared((*nodePrinted)(nil).withValue(name))
	b := once.shared((*nodePrinted)(nil).withValue(name))
	if a != b || len(a.bindings) != 1 || a.bindings[0] != name {
		t.Errorf("one printed value made twice: %p and %p (%v), want one object", a, b, a.bindings)
	}
	if c := once.shared((*nodePrinted)(nil).withValue(verdict.NewBinding(1, "node-shared-a"))); c == a {
		t.Error("the value printed at another place shares its object")
	}
	two := (*nodePrinted)(nil).withValue(name).withValue(verdict.NewBinding(1, "x"))
	if once.shared(two) != two || len(two.bindings) != 2 {
		t.Error("two printed values are not kept as made")
	}
	if once.shared(nil) != nothingPrinted {
		t.Error("no printed value is not nothingPrinted")
	}
	var another printedOnce // another engine's
	if another.shared((*nodePrinted)(nil).withValue(name)) == a {
		t.Error("two engines share a printed value")
	}
}
