package extender_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/harness"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/source"
)

var gatekeeperConfigGVR = schema.GroupVersionResource{Group: "config.gatekeeper.sh", Version: "v1alpha1", Resource: "configs"}

// gatekeeperConfigCRD is enough of Gatekeeper's Config CRD for the API
// server to store Configs (the service reads spec.sync.syncOnly only).
func gatekeeperConfigCRD() *apiextensionsv1.CustomResourceDefinition {
	preserve := true
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "configs.config.gatekeeper.sh"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "config.gatekeeper.sh",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "configs", Singular: "config", Kind: "Config", ListKind: "ConfigList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1alpha1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &preserve,
				}},
			}},
		},
	}
}

func gatekeeperConfig(name string, syncOnly ...map[string]any) *unstructured.Unstructured {
	entries := make([]any, len(syncOnly))
	for i, e := range syncOnly {
		entries[i] = e
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "config.gatekeeper.sh/v1alpha1", "kind": "Config",
		"metadata": map[string]any{"name": name, "namespace": "gatekeeper-system"},
		"spec":     map[string]any{"sync": map[string]any{"syncOnly": entries}},
	}}
}

// TestGatekeeperConfigSyncOnly: a template that reads an inventory kind
// only Gatekeeper's Config syncs (ConfigMaps) sees those objects once the
// Config names the kind, and loses them when the Config stops naming it; a
// Config with another name is ignored, as Gatekeeper ignores it.
func TestGatekeeperConfigSyncOnly(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	if err := c.ApplyCRD(ctx, gatekeeperConfigCRD()); err != nil {
		t.Fatal(err)
	}
	harness.CreateNamespace(t, c, "gatekeeper-system", nil)
	harness.CreateNodes(t, c, map[string]map[string]string{"node-a": nil, "node-b": nil})
	policy, err := source.ReadObjects(strings.NewReader(`
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8sblockednodes}
spec:
  crd: {spec: {names: {kind: K8sBlockedNodes}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8sblockednodes
        violation[{"msg": msg}] {
          cm := data.inventory.namespace["default"]["v1"]["ConfigMap"]["blocked-nodes"]
          cm.data[input.review.object.spec.nodeName]
          msg := sprintf("node %v is listed in ConfigMap default/blocked-nodes", [input.review.object.spec.nodeName])
        }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sBlockedNodes
metadata: {name: blocked-nodes}
`))
	if err != nil {
		t.Fatal(err)
	}
	harness.InstallPolicy(t, c, policy[0], policy[1])
	if _, err := c.Client().CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "blocked-nodes"}, Data: map[string]string{"node-a": "maintenance"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	configMaps := map[string]any{"group": "", "version": "v1", "kind": "ConfigMap"}
	configs := c.Dynamic().Resource(gatekeeperConfigGVR).Namespace("gatekeeper-system")
	if _, err := configs.Create(ctx, gatekeeperConfig("not-the-config", configMaps), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	svc := startService(t, c, serviceOptions{NoNudge: true})
	denied := func() []string {
		t.Helper()
		p, err := svc.Engine.Evaluate(ctx, opa.PlacementRequest{
			Pod:        map[string]any{"metadata": map[string]any{"name": "p", "namespace": "default"}, "spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "x"}}}},
			Candidates: []opa.Candidate{{Name: "node-a"}, {Name: "node-b"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for i, v := range p.Nodes {
			if v.Unknown {
				t.Fatalf("node %s not in the inventory", v.Name)
			}
			if p.Denied(i) {
				out = append(out, v.Name+": "+p.Violations(i)[0].Message)
			}
		}
		return out
	}
	waitFor := func(what string, want int) []string {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := denied()
			if len(got) == want {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: denied %q after 10s, want %d denied nodes", what, got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// Only the Config named "config" counts: nothing is synced yet.
	time.Sleep(time.Second)
	if got := denied(); len(got) != 0 {
		t.Fatalf("a Config not named config was followed: denied %q", got)
	}

	start := time.Now()
	if _, err := configs.Create(ctx, gatekeeperConfig("config", configMaps), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitFor("Config syncs ConfigMaps", 1)
	if !strings.HasPrefix(got[0], "node-a: node node-a is listed") {
		t.Fatalf("denied %q, want node-a only", got)
	}
	t.Logf("Config created -> ConfigMaps in the inventory and the policy denying: %v", time.Since(start).Round(time.Millisecond))

	cur, err := configs.Get(ctx, "config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedSlice(cur.Object, []any{}, "spec", "sync", "syncOnly"); err != nil {
		t.Fatal(err)
	}
	if _, err := configs.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("Config no longer syncs ConfigMaps", 0)
}
