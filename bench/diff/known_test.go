package diff

import (
	"fmt"
	"strings"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/gen"
)

// TestCELKnownCases judges hand-written templates as TestGeneratedCEL
// judges generated ones: cases where the engine once differed from
// Gatekeeper, or where Gatekeeper's behaviour is easy to miss.
func TestCELKnownCases(t *testing.T) {
	hundred := make([]string, 100)
	for i := range hundred {
		hundred[i] = fmt.Sprint(i)
	}
	list := "[" + strings.Join(hundred, ",") + "]"
	// A million iterations: past CEL's per-call cost budget.
	costly := fmt.Sprintf("string(%s.all(i, %[1]s.all(j, %[1]s.all(k, k >= 0))))", list)
	lit := func(t gen.Type, text string) *gen.Expr { return &gen.Expr{Form: "literal", Type: t, Text: text} }
	tmpls := []gen.Policy{&gen.Template{
		// The validator evaluates message expressions for every review:
		// out of budget, they deny a pod that passes every validation.
		Kind:        "K8sKnownCostlyMessagePass",
		Validations: []gen.Validation{{Expr: lit(gen.Bool, "true"), MessageExpression: lit(gen.String, costly)}},
	}, &gen.Template{
		Kind:        "K8sKnownCostlyMessageFail",
		Validations: []gen.Validation{{Expr: lit(gen.Bool, `!object.spec.nodeName.startsWith("gpu-")`), MessageExpression: lit(gen.String, costly)}},
	}, &gen.Template{
		Kind:          "K8sKnownCostlyMessageIgnore",
		FailurePolicy: "Ignore",
		Validations:   []gen.Validation{{Expr: lit(gen.Bool, "true"), MessageExpression: lit(gen.String, costly)}},
	}, &gen.Template{
		// A Namespace with a label that is not a string is refused by both
		// (Gatekeeper's cache cannot hold it): its pods have none.
		Kind:        "K8sKnownNamespace",
		Validations: []gen.Validation{{Expr: lit(gen.Bool, `has(namespaceObject.metadata) && namespaceObject.metadata.name != "x"`)}},
	}, &gen.Template{
		// namespaceObject is unstructured content in Gatekeeper: a null
		// key is absent, not an error.
		Kind:        "K8sKnownNullNamespaceKey",
		Validations: []gen.Validation{{Expr: lit(gen.Bool, `!(object.spec.?priorityClassName.orValue(null) in namespaceObject.?metadata.?labels.orValue({}))`)}},
	}, &gen.Template{
		// A null read from the object as a map key: the error prints its
		// type as Gatekeeper's libraries do.
		Kind:        "K8sKnownNullQualifier",
		Validations: []gen.Validation{{Expr: lit(gen.Bool, `{"a": 1}[object.spec.priorityClassName] == 1`)}},
	}}
	var pods []genPod
	objs := gen.NewObjects(1)
	for i, ns := range gen.Namespaces {
		p := objs.Pod(i)
		p["metadata"].(map[string]any)["namespace"] = ns
		pods = append(pods, genPod{obj: p, nodes: []string{"gpu-0", "cpu-0"}})
	}
	// A pod whose priorityClassName is null, in a Namespace with labels.
	nullClass := objs.Pod(len(pods))
	nullClass["metadata"].(map[string]any)["namespace"] = gen.Namespaces[0]
	nullClass["spec"] = map[string]any{"priorityClassName": nil, "containers": []any{}}
	pods = append(pods, genPod{obj: nullClass, nodes: []string{"gpu-0"}})
	j := judge(t, buildCELPeer(t), tmpls, pods)
	if len(j.refused) > 0 {
		t.Errorf("templates refused: %v", j.refused)
	}
	for kind, d := range j.diffs {
		t.Errorf("%s: %s", kind, d)
	}
	if j.violations == 0 {
		t.Error("no violation from Gatekeeper: the cases test nothing")
	}
	t.Logf("%d comparisons, %d violations from Gatekeeper", j.comparisons, j.violations)
}
