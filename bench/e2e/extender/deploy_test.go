package extender_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	configv1 "k8s.io/kube-scheduler/config/v1"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/cluster"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/harness"
)

// manifests are the deploy/ files a user applies; the ServiceMonitor needs
// the Prometheus Operator's CRD, which this cluster does not have.
var manifests = []string{
	"deploy/base/namespace.yaml",
	"deploy/base/rbac.yaml",
	"deploy/base/deployment.yaml",
	"deploy/base/service.yaml",
	"deploy/second-scheduler/config.yaml",
	"deploy/second-scheduler/scheduler.yaml",
	"deploy/options/networkpolicy.yaml",
}

func mapper(t *testing.T, c *cluster.Cluster) meta.RESTMapper {
	t.Helper()
	disc, err := discovery.NewDiscoveryClientForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
}

func createObject(t *testing.T, c *cluster.Cluster, m meta.RESTMapper, u *unstructured.Unstructured, dryRun bool) error {
	t.Helper()
	gvk := u.GroupVersionKind()
	mapping, err := m.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return err
	}
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	r := c.Dynamic().Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		_, err = r.Namespace(u.GetNamespace()).Create(context.Background(), u, opts)
	} else {
		_, err = r.Create(context.Background(), u, opts)
	}
	return err
}

// TestManifestsAndLeastPrivilege: the API server accepts every manifest
// (server-side dry run), and the service does its whole job under the
// ClusterRole of deploy/base/rbac.yaml, and nothing more.
func TestManifestsAndLeastPrivilege(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	m := mapper(t, c)
	for i, f := range manifests {
		if i == 1 {
			// The namespace dry-ran; namespaced objects need it for real.
			harness.CreateNamespace(t, c, "opa-scheduler-extender", nil)
		}
		for _, u := range harness.ReadObjects(t, f) {
			if err := createObject(t, c, m, u, true); err != nil {
				t.Errorf("%s: %s %s refused by the API server: %v", f, u.GetKind(), u.GetName(), err)
			}
		}
	}
	// The RBAC for real, then the service under its ServiceAccount.
	for _, u := range harness.ReadObjects(t, "deploy/base/rbac.yaml") {
		if err := createObject(t, c, m, u, false); err != nil {
			t.Fatalf("rbac: %v", err)
		}
	}
	cfg, err := c.ServiceAccountConfig(ctx, "opa-scheduler-extender", "opa-scheduler-extender")
	if err != nil {
		t.Fatal(err)
	}
	harness.CreateNamespace(t, c, "alpha", map[string]string{"tenant": "alpha"})
	harness.CreateNodes(t, c, map[string]map[string]string{"alpha-1": {"tenant": "alpha"}, "shared-1": nil})
	tenantT, tenantC := harness.ExamplePolicy(t, "tenant-isolation")
	harness.InstallPolicy(t, c, tenantT, tenantC)

	svc := startService(t, c, serviceOptions{Config: cfg})
	sched := c.StartScheduler(t, cluster.SchedulerOptions{Extenders: []configv1.Extender{extender(svc.URL, true, true)}, ExtraConfig: fastRetries})
	defer sched.Stop()
	harness.CreatePod(t, c, cluster.PausePod("alpha", "under-least-privilege", nil))
	if n := harness.BoundNode(t, c, "alpha", "under-least-privilege", 30*time.Second); n != "alpha-1" {
		t.Errorf("bound to %s, want alpha-1", n)
	}
	if got := metricValue(t, svc.URL, `opa_scheduler_extender_request_duration_seconds_count{result="ok",verb="bind"}`); got < 1 {
		t.Errorf("the service did not bind (bind requests ok: %v)", got)
	}

	// And nothing beyond its job.
	sa, err := cluster.ClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sa.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing Secrets: %v, want Forbidden", err)
	}
	if err := sa.CoreV1().Pods("alpha").Delete(ctx, "under-least-privilege", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("deleting a pod: %v, want Forbidden", err)
	}
	if _, err := sa.CoreV1().Nodes().Update(ctx, cluster.FakeNode("shared-1", nil, nil), metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("updating a Node: %v, want Forbidden", err)
	}
	if err := c.Dynamic().Resource(cluster.ConstraintTemplateGVR).Delete(ctx, "nothing", metav1.DeleteOptions{}); err == nil {
		t.Errorf("admin delete of a missing template succeeded")
	}
	saDyn, err := clientDynamic(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := saDyn.Resource(cluster.ConstraintTemplateGVR).Delete(ctx, "k8stenantnodeisolation", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("deleting a ConstraintTemplate: %v, want Forbidden", err)
	}
	_ = filepath.Join
	_ = strings.Contains
}

func clientDynamic(cfg *rest.Config) (dynamic.Interface, error) { return dynamic.NewForConfig(cfg) }
