package opa

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/inventory"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/policy"
)

// TestNodeIndexFollowsWrites: after every Apply, whatever it changed (a
// label a policy reads, a heartbeat it does not, a Node removed and made
// again, a Namespace, a new template that re-cuts every Node), the node
// index is there for the generation requests read and gives the very
// values they would find in the store: the writer keeps it, so that no
// request builds one.
func TestNodeIndexFollowsWrites(t *testing.T) {
	ctx := context.Background()
	e := newInternalEngine(t)
	template := func(kind, label string) string {
		name := strings.ToLower(kind)
		return `
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: ` + name + `}
spec:
  crd: {spec: {names: {kind: ` + kind + `}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package ` + name + `
        violation[{"msg": "no"}] {
          node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
          node.metadata.labels.` + label + ` == "b"
        }
`
	}
	node := func(i int, pool, beat string) policy.Change {
		return changesOf(mustObjs(t, fmt.Sprintf("apiVersion: v1\nkind: Node\nmetadata: {name: n%d, labels: {pool: %s, zone: z%d}, annotations: {beat: %q}}\n", i, pool, i%3, beat)))[0]
	}
	nodeRef := &policy.ObjectRef{GroupVersionKind: schema.GroupVersionKind{Version: "v1", Kind: "Node"}, Name: "n3"}
	var all []policy.Change
	for i := range 20 {
		all = append(all, node(i, "a", "0"))
	}
	for _, step := range []struct {
		name    string
		changes []policy.Change
	}{
		{"a template, a constraint and the Nodes", append(changesOf(mustObjs(t, template("K8sPool", "pool"),
			"apiVersion: constraints.gatekeeper.sh/v1beta1\nkind: K8sPool\nmetadata: {name: pool}\n")), all...)},
		{"a label the policy reads", []policy.Change{node(1, "b", "0"), node(2, "b", "0")}},
		{"a heartbeat", []policy.Change{node(1, "b", "1")}},
		{"a Node removed", []policy.Change{{Delete: nodeRef}}},
		{"the Node made again", []policy.Change{node(3, "b", "2")}},
		{"a Namespace", changesOf(mustObjs(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: ns}\n"))},
		{"a template that reads another label", changesOf(mustObjs(t, template("K8sZone", "zone"),
			"apiVersion: constraints.gatekeeper.sh/v1beta1\nkind: K8sZone\nmetadata: {name: zone}\n"))},
		{"that label changed", []policy.Change{node(4, "a", "3")}},
	} {
		if errs := e.Apply(ctx, step.changes); len(errs) > 0 {
			t.Fatalf("%s: %v", step.name, errs)
		}
		txn, err := e.store.NewTransaction(ctx)
		if err != nil {
			t.Fatal(err)
		}
		gen := e.inv.Value(ctx, txn, inventory.GenerationPath)
		nodes, _ := e.inv.Value(ctx, txn, inventory.NodesPath).(ast.Object)
		e.store.Abort(ctx, txn)
		idx := e.nodeIndex.Of(gen)
		if idx == nil {
			t.Fatalf("%s: no node index for generation %v", step.name, gen)
		}
		for i := range 21 {
			name := fmt.Sprintf("n%d", i)
			var want ast.Value
			if t := nodes.Get(ast.StringTerm(name)); t != nil {
				want = t.Value
			}
			if got := idx.Node(name); got != want {
				t.Fatalf("%s: the index gives %s as %v, the store holds %v", step.name, name, got, want)
			}
		}
	}
}

func mustObjs(t *testing.T, ys ...string) []*unstructured.Unstructured {
	t.Helper()
	out := make([]*unstructured.Unstructured, len(ys))
	for i, y := range ys {
		out[i] = mustObj(t, y)
	}
	return out
}
