package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	configv1 "k8s.io/kube-scheduler/config/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/cluster"
)

// filterExtender is a names-only (nodeCacheCapable) filter extender that
// keeps only the node called keep.
type filterExtender struct {
	keep  string
	calls atomic.Int64
	bad   atomic.Value // string: last protocol complaint
}

func (f *filterExtender) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/filter" || r.Method != http.MethodPost {
		http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
		return
	}
	f.calls.Add(1)
	var args extenderv1.ExtenderArgs
	var res extenderv1.ExtenderFilterResult
	switch err := json.NewDecoder(r.Body).Decode(&args); {
	case err != nil:
		res.Error = "decoding ExtenderArgs: " + err.Error()
	case args.NodeNames == nil:
		res.Error = "expected NodeNames (nodeCacheCapable: true)"
	case args.Nodes != nil:
		res.Error = "did not expect full Nodes with nodeCacheCapable: true"
	default:
		kept := []string{}
		res.FailedNodes = extenderv1.FailedNodesMap{}
		for _, n := range *args.NodeNames {
			if n == f.keep {
				kept = append(kept, n)
			} else {
				res.FailedNodes[n] = "filtered out by the smoke-test extender"
			}
		}
		res.NodeNames = &kept
	}
	if res.Error != "" {
		f.bad.Store(res.Error)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&res)
}

func TestSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	phase := time.Now()
	lap := func(name string) {
		t.Logf("PHASE %-28s %8s", name, time.Since(phase).Round(time.Millisecond))
		phase = time.Now()
	}

	c := cluster.Start(t, cluster.Options{})
	lap("build+etcd+apiserver")
	cs := c.Client()

	// Gatekeeper CRDs, a template, its constraint CRD and a constraint.
	if err := c.InstallGatekeeperCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateConstraintCRD(ctx, "K8sSmokeAny"); err != nil {
		t.Fatal(err)
	}
	lap("gatekeeper CRDs installed")
	tmpl := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "templates.gatekeeper.sh/v1",
		"kind":       "ConstraintTemplate",
		"metadata":   map[string]any{"name": "k8srequiredlabels"},
		"spec": map[string]any{
			"crd": map[string]any{"spec": map[string]any{
				"names": map[string]any{"kind": "K8sRequiredLabels"},
				"validation": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object",
					"properties": map[string]any{
						"labels": map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
					},
				}},
			}},
			"targets": []any{map[string]any{
				"target": "admission.k8s.gatekeeper.sh",
				"rego":   "package k8srequiredlabels\nviolation[{\"msg\": \"x\"}] { false }\n",
			}},
		},
	}}
	created, err := c.Dynamic().Resource(cluster.ConstraintTemplateGVR).Create(ctx, tmpl, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating ConstraintTemplate: %v", err)
	}
	lap("ConstraintTemplate created")
	if err := c.CreateConstraintCRDForTemplate(ctx, created); err != nil {
		t.Fatal(err)
	}
	lap("constraint CRD for template")
	constraint := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": cluster.ConstraintsGroup + "/v1beta1",
		"kind":       "K8sRequiredLabels",
		"metadata":   map[string]any{"name": "must-have-team"},
		"spec": map[string]any{
			"match":      map[string]any{"kinds": []any{map[string]any{"apiGroups": []any{""}, "kinds": []any{"Pod"}}}},
			"parameters": map[string]any{"labels": []any{"team"}, "dropped": "pruned by the schema"},
		},
	}}
	got, err := c.Dynamic().Resource(cluster.ConstraintGVR("K8sRequiredLabels")).Create(ctx, constraint, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating constraint: %v", err)
	}
	lap("constraint created")
	if ea, _, _ := unstructured.NestedString(got.Object, "spec", "enforcementAction"); ea != "deny" {
		t.Errorf("enforcementAction = %q, want the CRD default \"deny\"", ea)
	}
	if labels, _, _ := unstructured.NestedStringSlice(got.Object, "spec", "parameters", "labels"); len(labels) != 1 || labels[0] != "team" {
		t.Errorf("parameters.labels = %v, want [team]", labels)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(got.Object, "spec", "parameters", "dropped"); found {
		t.Errorf("parameters.dropped survived although the v1 template's schema does not declare it")
	}
	any1 := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": cluster.ConstraintsGroup + "/v1alpha1",
		"kind":       "K8sSmokeAny",
		"metadata":   map[string]any{"name": "anything"},
		"spec":       map[string]any{"parameters": map[string]any{"free": map[string]any{"form": true}}},
	}}
	v1alpha1 := cluster.ConstraintGVR("K8sSmokeAny")
	v1alpha1.Version = "v1alpha1"
	if got, err = c.Dynamic().Resource(v1alpha1).Create(ctx, any1, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating K8sSmokeAny: %v", err)
	}
	if v, _, _ := unstructured.NestedBool(got.Object, "spec", "parameters", "free", "form"); !v {
		t.Errorf("K8sSmokeAny parameters were not preserved: %v", got.Object["spec"])
	}
	lap("v1alpha1 constraint created")

	// Nodes.
	nodes, err := c.CreateNodes(ctx, 3, func(i int) *corev1.Node {
		return cluster.FakeNode(fmt.Sprintf("node-%d", i), map[string]string{"zone": fmt.Sprintf("z%d", i)}, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Status.Allocatable.Cpu().IsZero() || len(n.Status.Conditions) == 0 {
			t.Fatalf("node %s lost its status: %+v", n.Name, n.Status)
		}
	}
	lap("3 nodes")

	// Extender + scheduler.
	ext := &filterExtender{keep: "node-1"}
	srv := httptest.NewServer(ext)
	defer srv.Close()
	extenders := []configv1.Extender{{
		URLPrefix:        srv.URL,
		FilterVerb:       "filter",
		NodeCacheCapable: true,
		HTTPTimeout:      metav1.Duration{Duration: 5 * time.Second},
	}}
	sched := c.StartScheduler(t, cluster.SchedulerOptions{Extenders: extenders, QPS: 200, Burst: 400})
	lap("scheduler #1 ready")

	schedulePod := func(name string) {
		t.Helper()
		start := time.Now()
		if _, err := cs.CoreV1().Pods("default").Create(ctx, cluster.PausePod("default", name, nil), metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating pod %s: %v", name, err)
		}
		p, err := c.WaitForPodBound(ctx, "default", name, 30*time.Second)
		if err != nil {
			t.Fatalf("%v (extender calls %d, complaint %v)", err, ext.calls.Load(), ext.bad.Load())
		}
		if p.Spec.NodeName != "node-1" {
			t.Fatalf("pod %s bound to %s, want node-1", name, p.Spec.NodeName)
		}
		t.Logf("pod %s bound to %s in %s", name, p.Spec.NodeName, time.Since(start).Round(time.Millisecond))
	}
	schedulePod("pod-a")
	if ext.calls.Load() == 0 {
		t.Fatal("the extender was never called")
	}
	if bad := ext.bad.Load(); bad != nil {
		t.Fatalf("extender protocol complaint: %v", bad)
	}
	lap("pod-a bound via extender")

	metrics, err := sched.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(metrics), "scheduler_schedule_attempts_total") {
		t.Errorf("scheduler metrics lack scheduler_schedule_attempts_total")
	}

	// A second scheduler cycle with another configuration.
	sched.Stop()
	if sched.Running() {
		t.Fatal("scheduler #1 still running after Stop")
	}
	sched2 := c.StartScheduler(t, cluster.SchedulerOptions{
		ExtendersYAML: fmt.Sprintf("- urlPrefix: %s\n  filterVerb: filter\n  nodeCacheCapable: true\n  ignorable: false\n", srv.URL),
		ExtraConfig:   map[string]any{"podInitialBackoffSeconds": 1, "podMaxBackoffSeconds": 2},
	})
	schedulePod("pod-b")
	lap("scheduler #2 + pod-b")

	// Identities.
	checkUser := func(what string, cfg *rest.Config, want string) {
		t.Helper()
		cli, err := cluster.ClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r, err := cli.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: SelfSubjectReview: %v", what, err)
		}
		if r.Status.UserInfo.Username != want {
			t.Fatalf("%s: user %q, want %q", what, r.Status.UserInfo.Username, want)
		}
		if _, err := cli.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
			t.Fatalf("%s: listing nodes succeeded without any RBAC grant", what)
		}
	}
	saCfg, err := c.ServiceAccountConfig(ctx, "extender-system", "extender")
	if err != nil {
		t.Fatal(err)
	}
	checkUser("service account", saCfg, "system:serviceaccount:extender-system:extender")
	certCfg, err := c.ClientCertConfig("alice", "team-a")
	if err != nil {
		t.Fatal(err)
	}
	checkUser("client cert", certCfg, "alice")
	checkUser("impersonation", c.ImpersonatedConfig("bob", "team-b"), "bob")
	lap("identities")

	// API server restart: the shared client and the running scheduler recover.
	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("listing nodes worked with the API server stopped")
	}
	lap("apiserver stopped")
	if err := c.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	lap("apiserver restarted")
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("client after API server restart: %v", err)
	}
	if len(list.Items) != 3 {
		t.Fatalf("%d nodes after restart, want 3", len(list.Items))
	}
	if _, err := c.APIExtensions().ApiextensionsV1().CustomResourceDefinitions().Get(ctx, cluster.ConstraintTemplateCRDName, metav1.GetOptions{}); err != nil {
		t.Fatalf("ConstraintTemplate CRD after restart: %v", err)
	}
	schedulePod("pod-c")
	if !sched2.Running() {
		t.Fatal("scheduler #2 died during the API server restart")
	}
	lap("pod-c bound after restart")

	// A kill (SIGKILL) and restart.
	if err := c.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := c.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	schedulePod("pod-d")
	lap("apiserver kill+restart+pod-d")
}

func TestConstraintCRDForTemplate(t *testing.T) {
	tmpl := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "templates.gatekeeper.sh/v1beta1",
		"kind":       "ConstraintTemplate",
		"metadata":   map[string]any{"name": "k8sfoo", "labels": map[string]any{"x": "y"}},
		"spec": map[string]any{"crd": map[string]any{"spec": map[string]any{
			"names": map[string]any{"kind": "K8sFoo", "shortNames": []any{"foo"}},
			"validation": map[string]any{"openAPIV3Schema": map[string]any{
				"properties": map[string]any{"a": map[string]any{"type": "object"}},
			}},
		}}},
	}}
	crd, err := cluster.ConstraintCRDForTemplate(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	if crd.Name != "k8sfoo.constraints.gatekeeper.sh" || crd.Spec.Scope != apiextensionsv1.ClusterScoped ||
		crd.Spec.Names.Plural != "k8sfoo" || crd.Spec.Names.ShortNames[0] != "foo" || crd.Labels["x"] != "y" ||
		crd.Labels["gatekeeper.sh/constraint"] != "yes" {
		t.Fatalf("unexpected CRD metadata: %+v %+v", crd.ObjectMeta, crd.Spec.Names)
	}
	if len(crd.Spec.Versions) != 2 || crd.Spec.Versions[0].Name != "v1beta1" || !crd.Spec.Versions[0].Storage || crd.Spec.Versions[1].Name != "v1alpha1" {
		t.Fatalf("unexpected versions: %+v", crd.Spec.Versions)
	}
	params := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["parameters"]
	if params.XPreserveUnknownFields == nil || !*params.XPreserveUnknownFields ||
		params.Properties["a"].XPreserveUnknownFields == nil || !*params.Properties["a"].XPreserveUnknownFields {
		t.Fatalf("legacySchema (v1beta1 default) did not add x-kubernetes-preserve-unknown-fields: %+v", params)
	}
	if _, ok := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["match"].Properties["kinds"]; !ok {
		t.Fatal("spec.match lacks Gatekeeper's kinds")
	}
}
