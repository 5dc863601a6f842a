// Package plugin_test runs the plugin build (cmd/opa-kube-scheduler:
// kube-scheduler with the OPAGatekeeper Scheduling Framework plugin)
// against a real kube-apiserver (bench/e2e/cluster): no extender, the
// profiles enable the plugin at PreFilter, Filter, PreScore and Score.
package plugin_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/cluster"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/harness"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/source"
)

const (
	evaluations = "opa_scheduler_extender_evaluations_total"
	constraints = "opa_scheduler_extender_constraints"
	decisions   = "opa_scheduler_extender_plugin_decisions_total"
	rejections  = "opa_scheduler_extender_plugin_pods_rejected_total"
	requeues    = "opa_scheduler_extender_plugin_requeues_total"
)

// policyReaderRole is the ClusterRole of deploy/plugin/rbac.yaml that lets
// the scheduler's identity read Gatekeeper's objects.
const policyReaderRole = "opa-kube-scheduler-policies"

// grantPolicyReader creates deploy/plugin/rbac.yaml's ClusterRole
// opa-kube-scheduler-policies (read from the manifest, so the test checks
// the rules that ship) and binds it to the user system:kube-scheduler, the
// harness's scheduler identity (the manifest binds a ServiceAccount).
func grantPolicyReader(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	ctx := context.Background()
	var role *rbacv1.ClusterRole
	for _, u := range harness.ReadObjects(t, "deploy/plugin/rbac.yaml") {
		if u.GetKind() == "ClusterRole" && u.GetName() == policyReaderRole {
			role = &rbacv1.ClusterRole{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, role); err != nil {
				t.Fatal(err)
			}
		}
	}
	if role == nil {
		t.Fatalf("deploy/plugin/rbac.yaml has no ClusterRole %s", policyReaderRole)
	}
	if _, err := c.Client().RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policyReaderRole + "-e2e"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: policyReaderRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "system:kube-scheduler"}},
	}
	if _, err := c.Client().RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestPluginPlacement: the example policies place pods through the
// plugin as they do through the extender, with the scheduler's own
// identity (system:kube-scheduler) plus deploy/plugin/rbac.yaml's policy
// reader role; without that role the plugin never reports ready and
// rejects pods as not synced.
func TestPluginPlacement(t *testing.T) {
	c := newCluster(t)
	harness.CreateNamespace(t, c, "alpha", map[string]string{"tenant": "alpha"})
	harness.CreateNamespace(t, c, "shared", nil)
	harness.CreateNodes(t, c, map[string]map[string]string{
		"alpha-1":   {"tenant": "alpha", "topology.kubernetes.io/zone": "zone-b"},
		"beta-1":    {"tenant": "beta", "topology.kubernetes.io/zone": "zone-a"},
		"general-a": {"topology.kubernetes.io/zone": "zone-a"},
		"general-b": {"topology.kubernetes.io/zone": "zone-b"},
	})
	tenantT, tenantC := harness.ExamplePolicy(t, "tenant-isolation")
	prefT, prefC := harness.ExamplePolicy(t, "node-preference")
	harness.InstallPolicy(t, c, tenantT, tenantC)
	harness.InstallPolicy(t, c, prefT, prefC)
	// A dryrun constraint that would push the same pods the other way: it
	// must change nothing.
	dry := prefC.DeepCopy()
	dry.SetName("dryrun-prefer-zone-b")
	dry.SetAnnotations(nil)
	unstructured.SetNestedStringSlice(dry.Object, []string{"zone-b"}, "spec", "parameters", "values")
	harness.CreateConstraint(t, c, dry)

	// system:kube-scheduler alone cannot list templates: the plugin does
	// not place pods with a policy it has not read.
	unprivileged := startPlugin(t, c, cluster.SchedulerOptions{})
	harness.CreatePod(t, c, cluster.PausePod("alpha", "first", nil))
	msg := harness.FailedSchedulingMessage(t, c, "alpha", "first", "policies not synced yet", 30*time.Second)
	if !strings.Contains(msg, "constrainttemplates") {
		t.Errorf("not-synced message %q does not say what it waits for", msg)
	}
	harness.AssertPending(t, c, "alpha", "first")
	unprivileged.Stop()

	grantPolicyReader(t, c)
	sched := startPlugin(t, c, cluster.SchedulerOptions{})
	if n := harness.BoundNode(t, c, "alpha", "first", 30*time.Second); n != "alpha-1" {
		t.Errorf("the pod left pending by the unprivileged scheduler is on %s, want alpha-1", n)
	}

	start := time.Now()
	harness.CreatePod(t, c, cluster.PausePod("alpha", "tenant", nil))
	if n := harness.BoundNode(t, c, "alpha", "tenant", 30*time.Second); n != "alpha-1" {
		t.Errorf("tenant pod on %s, want alpha-1", n)
	}
	t.Logf("tenant pod bound %v after creation", time.Since(start).Round(time.Millisecond))

	harness.CreatePod(t, c, cluster.PausePod("shared", "shared", nil))
	if n := harness.BoundNode(t, c, "shared", "shared", 30*time.Second); n != "general-a" && n != "general-b" {
		t.Errorf("shared pod on %s, want a general node", n)
	}

	// warn steers (Score): every pod preferring zone-a lands on the only
	// zone-a node it may use; the dryrun constraint is ignored.
	for _, name := range []string{"prefer-a", "prefer-b", "prefer-c"} {
		harness.CreatePod(t, c, cluster.PausePod("shared", name, map[string]string{"prefer-zone": "a"}))
		if n := harness.BoundNode(t, c, "shared", name, 30*time.Second); n != "general-a" {
			t.Errorf("pod preferring zone-a on %s, want general-a", n)
		}
	}

	// No allowed node: pending, and the event says why.
	harness.CreatePod(t, c, pod("alpha", "stuck", nil, "", onNode("beta-1")))
	msg = harness.FailedSchedulingMessage(t, c, "alpha", "stuck", "reserved for tenant <beta>", 30*time.Second)
	t.Logf("the stuck pod's FailedScheduling event: %s", msg)
	if !strings.Contains(msg, "[tenant-nodes]") {
		t.Errorf("event message %q does not name the constraint", msg)
	}
	harness.StillPending(t, c, "alpha", "stuck", time.Second)

	// The engine's and the plugin's series on the scheduler's /metrics.
	m := scrape(t, sched)
	if v, _ := metricSum(m, evaluations, "profile", "default-scheduler"); v <= 0 {
		t.Errorf("%s{profile=default-scheduler} = %v, want > 0", evaluations, v)
	}
	for action, want := range map[string]float64{"deny": 1, "warn": 1, "dryrun": 1} {
		v, ok := metricSum(m, constraints, "profile", "default-scheduler", "enforcement_action", action, "status", "active")
		if !ok || v != want {
			t.Errorf("%s{profile=default-scheduler,enforcement_action=%s,status=active} = %v (present %v), want %v", constraints, action, v, ok, want)
		}
	}
	if v, _ := metricSum(m, constraints, "profile", "default-scheduler", "status", "error"); v != 0 {
		t.Errorf("%v constraints in error", v)
	}
	if v, _ := metricSum(m, decisions, "profile", "default-scheduler", "constraint", "tenant-nodes", "action", "deny"); v <= 0 {
		t.Errorf("%s for tenant-nodes = %v, want > 0", decisions, v)
	}
	// The dryrun constraint was evaluated and violated (on zone-a nodes),
	// and still changed no placement above.
	if v, _ := metricSum(m, decisions, "profile", "default-scheduler", "constraint", "dryrun-prefer-zone-b", "action", "dryrun"); v <= 0 {
		t.Errorf("%s for the dryrun constraint = %v, want > 0", decisions, v)
	}
}

// denyPodsTemplate denies every pod its constraints match, without
// reading the node: a pod-only deny (PreFilter rejects the whole cycle).
const denyPodsTemplate = `
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata:
  name: k8sdenypods
spec:
  crd:
    spec:
      names:
        kind: K8sDenyPods
      validation:
        openAPIV3Schema:
          type: object
          properties:
            reason: {type: string}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8sdenypods

        violation[{"msg": msg}] {
          msg := sprintf("pod %v is not scheduled: %v", [input.review.object.metadata.name, input.parameters.reason])
        }
`

// TestPluginPolicyChange: pods the policy keeps pending are scheduled
// within seconds of a change that admits them, with the scheduler's
// default retry settings (backoff up to 10s, unschedulable pods flushed
// after 5 minutes) and no pod update: the plugin activates the pods it
// rejected (Handle.Activate) when the policy generation moves, and the
// pods of a Namespace once the engine applied that Namespace's change.
func TestPluginPolicyChange(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	harness.CreateNamespace(t, c, "alpha", map[string]string{"tenant": "alpha"})
	harness.CreateNamespace(t, c, "shared", nil)
	harness.CreateNamespace(t, c, "quarantined", map[string]string{"quarantine": "true"})
	harness.CreateNodes(t, c, map[string]map[string]string{"general-1": nil, "general-2": nil})
	tenantT, tenantC := harness.ExamplePolicy(t, "tenant-isolation")
	harness.InstallPolicy(t, c, tenantT, tenantC)
	blocked := objectsOf(t, `
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sDenyPods
metadata:
  name: no-blocked-pods
spec:
  match:
    kinds: [{apiGroups: [""], kinds: ["Pod"]}]
    labelSelector: {matchLabels: {blocked: "true"}}
  parameters: {reason: blocked pods wait}
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sDenyPods
metadata:
  name: quarantine
spec:
  match:
    kinds: [{apiGroups: [""], kinds: ["Pod"]}]
    namespaceSelector: {matchLabels: {quarantine: "true"}}
  parameters: {reason: the namespace is quarantined}
`)
	harness.InstallPolicy(t, c, objectsOf(t, denyPodsTemplate)[0], blocked...)
	sched := startPlugin(t, c, cluster.SchedulerOptions{AsAdmin: true})

	harness.CreatePod(t, c, cluster.PausePod("alpha", "waits", nil))
	harness.CreatePod(t, c, cluster.PausePod("shared", "blocked", map[string]string{"blocked": "true"}))
	harness.CreatePod(t, c, cluster.PausePod("quarantined", "held", nil))
	if msg := harness.FailedSchedulingMessage(t, c, "alpha", "waits", "run only on nodes labelled tenant=alpha", 30*time.Second); !strings.Contains(msg, "[tenant-nodes]") {
		t.Errorf("event %q does not name the constraint", msg)
	}
	harness.FailedSchedulingMessage(t, c, "shared", "blocked", "[no-blocked-pods] pod blocked is not scheduled: blocked pods wait", 30*time.Second)
	harness.FailedSchedulingMessage(t, c, "quarantined", "held", "[quarantine] pod held is not scheduled: the namespace is quarantined", 30*time.Second)
	// Let the pods settle in the unschedulable queue: nothing retries them.
	harness.StillPending(t, c, "alpha", "waits", 3*time.Second)
	if v, _ := schedulerMetric(t, sched, rejections, "profile", "default-scheduler", "reason", "denied"); v < 2 {
		t.Errorf("%s{reason=denied} = %v, want >= 2 (the two pod-only denies)", rejections, v)
	}

	// A changed constraint (deny -> dryrun) admits the tenant pod.
	start := time.Now()
	updateConstraint(t, c, "K8sTenantNodeIsolation", "tenant-nodes", func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, "dryrun", "spec", "enforcementAction")
	})
	harness.BoundNode(t, c, "alpha", "waits", 10*time.Second)
	t.Logf("pending pod bound %v after its constraint became dryrun", time.Since(start).Round(time.Millisecond))
	if v, _ := schedulerMetric(t, sched, requeues, "profile", "default-scheduler", "reason", "policy"); v < 1 {
		t.Errorf("%s{reason=policy} = %v: the pod was scheduled without the plugin activating it", requeues, v)
	}
	harness.AssertPending(t, c, "shared", "blocked")
	harness.AssertPending(t, c, "quarantined", "held")

	// A deleted pod-only constraint admits the pod it rejected in PreFilter.
	start = time.Now()
	harness.DeleteConstraint(t, c, "K8sDenyPods", "no-blocked-pods")
	harness.BoundNode(t, c, "shared", "blocked", 10*time.Second)
	t.Logf("pod rejected by a pod-only deny bound %v after the constraint was deleted", time.Since(start).Round(time.Millisecond))
	harness.AssertPending(t, c, "quarantined", "held")

	// A Namespace label change: the quarantine constraint no longer
	// matches the namespace. The policy generation does not move (it is
	// inventory); the plugin activates that namespace's pods.
	ns, err := c.Client().CoreV1().Namespaces().Get(ctx, "quarantined", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(ns.Labels, "quarantine")
	start = time.Now()
	if _, err := c.Client().CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.BoundNode(t, c, "quarantined", "held", 10*time.Second)
	t.Logf("pod of the unquarantined namespace bound %v after the label change", time.Since(start).Round(time.Millisecond))
	if v, _ := schedulerMetric(t, sched, requeues, "profile", "default-scheduler", "reason", "namespace"); v < 1 {
		t.Errorf("%s{reason=namespace} = %v, want >= 1", requeues, v)
	}

	// Nobody touched the pods (the extender's nudger would have annotated
	// them).
	for _, ref := range [][2]string{{"alpha", "waits"}, {"shared", "blocked"}, {"quarantined", "held"}} {
		p, err := c.Client().CoreV1().Pods(ref[0]).Get(ctx, ref[1], metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := p.Annotations[source.NudgeAnnotation]; ok || p.Generation != 1 {
			t.Errorf("pod %s/%s was updated (generation %d, annotations %v)", ref[0], ref[1], p.Generation, p.Annotations)
		}
	}
}

// TestPluginPreemption: a preemptor only preempts on nodes the policy
// allows (Filter answers UnschedulableAndUnresolvable on denied nodes, so
// PostFilter never picks them).
func TestPluginPreemption(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	harness.CreateNamespace(t, c, "work", nil)
	// Two nodes of 4 CPUs; every pod here asks for 3.
	if _, err := c.CreateNodes(ctx, 2, func(i int) *corev1.Node {
		n := cluster.FakeNode([]string{"node-za", "node-zb"}[i], map[string]string{"topology.kubernetes.io/zone": []string{"zone-a", "zone-b"}[i]}, nil)
		for _, l := range []corev1.ResourceList{n.Status.Capacity, n.Status.Allocatable} {
			l[corev1.ResourceCPU] = resource.MustParse("4")
		}
		return n
	}); err != nil {
		t.Fatal(err)
	}
	prefT, prefC := harness.ExamplePolicy(t, "node-preference")
	// deny here: pods labelled prefer-zone=a may only use zone-a.
	prefC = harness.SetAnnotation(prefC, "opa-scheduler-extender/enforcement-action", "deny")
	harness.InstallPolicy(t, c, prefT, prefC)
	for name, value := range map[string]int32{"low": 10, "high": 1000} {
		if _, err := c.Client().SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	startPlugin(t, c, cluster.SchedulerOptions{AsAdmin: true, ExtraConfig: fastRetries})

	big := func(name, priority string, labels map[string]string, node string) *corev1.Pod {
		p := cluster.PausePod("work", name, labels)
		p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("3")
		p.Spec.PriorityClassName = priority
		if node != "" {
			p.Spec.NodeSelector = onNode(node)
		}
		return p
	}
	harness.CreatePod(t, c, big("low-a", "low", nil, "node-za"))
	harness.CreatePod(t, c, big("low-b", "low", nil, "node-zb"))
	if n := harness.BoundNode(t, c, "work", "low-a", 30*time.Second); n != "node-za" {
		t.Fatalf("low-a on %s", n)
	}
	if n := harness.BoundNode(t, c, "work", "low-b", 30*time.Second); n != "node-zb" {
		t.Fatalf("low-b on %s", n)
	}

	// The preemptor may only use zone-a: preemption must evict low-a,
	// never low-b.
	harness.CreatePod(t, c, big("high", "high", map[string]string{"prefer-zone": "a"}, ""))
	if n := harness.BoundNode(t, c, "work", "high", 60*time.Second); n != "node-za" {
		t.Errorf("preemptor bound to %s, want node-za", n)
	}
	if p, err := c.Client().CoreV1().Pods("work").Get(ctx, "low-b", metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil || p.Spec.NodeName != "node-zb" {
		t.Errorf("low-b, on the node the preemptor may not use, was evicted or moved: %v", err)
	}
	if p, err := c.Client().CoreV1().Pods("work").Get(ctx, "low-a", metav1.GetOptions{}); err == nil && p.DeletionTimestamp == nil {
		t.Errorf("low-a was not preempted")
	}
}

// TestPluginRestart: the policy changes while the plugin scheduler is
// down; the new process enforces the new policy from its first pod (it
// rejects pods as not ready until its sources synced, then activates them).
func TestPluginRestart(t *testing.T) {
	c := newCluster(t)
	// The policy keys tenants on label "tenant" first, then on "team":
	// the alpha pods' only allowed node flips from alpha-1 to shared-1.
	harness.CreateNamespace(t, c, "alpha", map[string]string{"tenant": "alpha", "team": "alpha"})
	harness.CreateNodes(t, c, map[string]map[string]string{"alpha-1": {"tenant": "alpha"}, "shared-1": {"team": "alpha"}})
	tenantT, tenantC := harness.ExamplePolicy(t, "tenant-isolation")
	harness.InstallPolicy(t, c, tenantT, tenantC)

	sched := startPlugin(t, c, cluster.SchedulerOptions{AsAdmin: true})
	harness.CreatePod(t, c, cluster.PausePod("alpha", "before", nil))
	if n := harness.BoundNode(t, c, "alpha", "before", 30*time.Second); n != "alpha-1" {
		t.Fatalf("before the change: pod on %s, want alpha-1", n)
	}
	sched.Stop()

	updateConstraint(t, c, "K8sTenantNodeIsolation", "tenant-nodes", func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, "team", "spec", "parameters", "labelKey")
	})
	var names []string
	for _, s := range []string{"a", "b", "c"} {
		names = append(names, "while-down-"+s)
		harness.CreatePod(t, c, cluster.PausePod("alpha", "while-down-"+s, nil))
	}
	start := time.Now()
	sched = startPlugin(t, c, cluster.SchedulerOptions{AsAdmin: true, NoWait: true})
	// Pods created while the new process starts.
	for _, s := range []string{"a", "b", "c"} {
		names = append(names, "at-start-"+s)
		harness.CreatePod(t, c, cluster.PausePod("alpha", "at-start-"+s, nil))
	}
	for _, name := range names {
		if n := harness.BoundNode(t, c, "alpha", name, 30*time.Second); n != "shared-1" {
			t.Errorf("pod %s on %s after the restart, want shared-1 (the policy changed while the scheduler was down)", name, n)
		}
	}
	t.Logf("%d pods scheduled %v after the new scheduler started", len(names), time.Since(start).Round(time.Millisecond))
	// A pod rejected as not ready comes back through the plugin: activated
	// once ready, or, when the first policy set is installed before the
	// sources are all synced, by that policy change (no Node event here,
	// and the pods were bound far sooner than the scheduler's own flush).
	notReady, _ := schedulerMetric(t, sched, rejections, "profile", "default-scheduler", "reason", "not_ready")
	onReady, _ := schedulerMetric(t, sched, requeues, "profile", "default-scheduler", "reason", "ready")
	onPolicy, _ := schedulerMetric(t, sched, requeues, "profile", "default-scheduler", "reason", "policy")
	t.Logf("pods rejected as not ready: %v; activated once ready: %v, on a policy change: %v", notReady, onReady, onPolicy)
	if notReady > 0 && onReady+onPolicy == 0 {
		t.Errorf("%v pods were rejected as not ready but the plugin activated none", notReady)
	}
}

// denyPoolTemplate denies nodes whose label pool is the parameter's.
const denyPoolTemplate = `
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata:
  name: k8sdenypool
spec:
  crd:
    spec:
      names:
        kind: K8sDenyPool
      validation:
        openAPIV3Schema:
          type: object
          properties:
            pool: {type: string}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8sdenypool

        violation[{"msg": msg}] {
          node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
          node.metadata.labels.pool == input.parameters.pool
          msg := sprintf("node %v is in pool %v", [node.metadata.name, input.parameters.pool])
        }
`

func denyPoolConstraint(name, pool string) string {
	return `
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sDenyPool
metadata:
  name: ` + name + `
spec:
  match:
    kinds: [{apiGroups: [""], kinds: ["Pod"]}]
  parameters: {pool: ` + pool + `}
`
}

// TestPluginTenantProfiles: one scheduler, one engine per profile: two
// tenants with their own policy folders and none of the cluster's
// policies, one profile at its own enforcement point, and the default
// profile with the cluster's policies.
func TestPluginTenantProfiles(t *testing.T) {
	c := newCluster(t)
	harness.CreateNamespace(t, c, "work", nil)
	harness.CreateNodes(t, c, map[string]map[string]string{
		"a-1": {"pool": "a"}, "a-2": {"pool": "a"},
		"b-1": {"pool": "b"}, "b-2": {"pool": "b"},
		"c-1": {"pool": "c"},
	})
	// The cluster's policies: pool c is denied everywhere; pool a only at
	// the enforcement point tenant-c-scheduler.
	scoped := objectsOf(t, denyPoolConstraint("scoped-no-pool-a", "a"))[0]
	_ = unstructured.SetNestedField(scoped.Object, "scoped", "spec", "enforcementAction")
	_ = unstructured.SetNestedSlice(scoped.Object, []any{map[string]any{
		"action": "deny", "enforcementPoints": []any{map[string]any{"name": "tenant-c-scheduler"}},
	}}, "spec", "scopedEnforcementActions")
	harness.InstallPolicy(t, c, objectsOf(t, denyPoolTemplate)[0], objectsOf(t, denyPoolConstraint("no-pool-c", "c"))[0], scoped)

	dirA, dirB := t.TempDir(), t.TempDir()
	writeFiles(t, dirA, map[string]string{"template.yaml": denyPoolTemplate, "constraint.yaml": denyPoolConstraint("tenant-a-not-pool-b", "b")})
	writeFiles(t, dirB, map[string]string{"template.yaml": denyPoolTemplate, "constraint.yaml": denyPoolConstraint("tenant-b-not-pool-a", "a")})
	sched := startPlugin(t, c, cluster.SchedulerOptions{AsAdmin: true},
		profile{name: "default-scheduler"},
		profile{name: "tenant-a", args: map[string]any{"policyDir": dirA, "clusterPolicies": false}},
		profile{name: "tenant-b", args: map[string]any{"policyDir": dirB, "clusterPolicies": false}},
		profile{name: "tenant-c", args: map[string]any{"enforcementPoint": "tenant-c-scheduler"}},
	)

	type placed struct {
		name, scheduler string
		selector        map[string]string
		pools           string // pools allowed ("" : must stay pending)
		reason          string // the pending pod's event must contain this
	}
	cases := []placed{
		{name: "ta-1", scheduler: "tenant-a", pools: "ac"},
		{name: "ta-2", scheduler: "tenant-a", pools: "ac"},
		{name: "ta-on-c", scheduler: "tenant-a", selector: onNode("c-1"), pools: "c"}, // the cluster's no-pool-c is not tenant-a's
		{name: "ta-on-b", scheduler: "tenant-a", selector: onNode("b-1"), reason: "[tenant-a-not-pool-b] node b-1 is in pool b"},
		{name: "tb-1", scheduler: "tenant-b", pools: "bc"},
		{name: "tb-2", scheduler: "tenant-b", pools: "bc"},
		{name: "tb-on-a", scheduler: "tenant-b", selector: onNode("a-2"), reason: "[tenant-b-not-pool-a] node a-2 is in pool a"},
		{name: "tc-1", scheduler: "tenant-c", pools: "b"},
		{name: "tc-2", scheduler: "tenant-c", pools: "b"},
		{name: "tc-on-a", scheduler: "tenant-c", selector: onNode("a-1"), reason: "[scoped-no-pool-a] node a-1 is in pool a"},
		{name: "default-on-a", selector: onNode("a-1"), pools: "a"}, // scoped-no-pool-a is not in force here
		{name: "default-on-c", selector: onNode("c-1"), reason: "[no-pool-c] node c-1 is in pool c"},
	}
	for _, tc := range cases {
		harness.CreatePod(t, c, pod("work", tc.name, nil, tc.scheduler, tc.selector))
	}
	for _, tc := range cases {
		if tc.pools == "" {
			harness.FailedSchedulingMessage(t, c, "work", tc.name, tc.reason, 30*time.Second)
			continue
		}
		n := harness.BoundNode(t, c, "work", tc.name, 30*time.Second)
		if !strings.Contains(tc.pools, n[:1]) {
			t.Errorf("pod %s (scheduler %q) on %s, want a node of pools %q", tc.name, tc.scheduler, n, tc.pools)
		}
	}
	for _, tc := range cases {
		if tc.pools == "" {
			harness.AssertPending(t, c, "work", tc.name)
		}
	}

	// One engine per profile, each with its own policy set.
	m := scrape(t, sched)
	for _, want := range []struct {
		profile, action string
		n               float64
	}{
		{"default-scheduler", "deny", 1}, {"default-scheduler", "none", 1},
		{"tenant-a", "deny", 1}, {"tenant-a", "none", 0},
		{"tenant-b", "deny", 1},
		{"tenant-c", "deny", 2}, {"tenant-c", "none", 0},
	} {
		v, ok := metricSum(m, constraints, "profile", want.profile, "enforcement_action", want.action, "status", "active")
		if !ok || v != want.n {
			t.Errorf("%s{profile=%s,enforcement_action=%s,status=active} = %v (present %v), want %v", constraints, want.profile, want.action, v, ok, want.n)
		}
	}
}

// TestPluginArgsRejected: bad pluginConfig args (a missing policy folder,
// nothing to enforce, a misspelt arg) stop the plugin build at startup,
// with the reason in its log.
func TestPluginArgsRejected(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	missing := filepath.Join(t.TempDir(), "no-such-folder")
	for _, tc := range []struct {
		name string
		args map[string]any
		want []string // in the log, as klog writes the error
	}{
		{"policyDir-missing", map[string]any{"policyDir": missing}, []string{"OPAGatekeeper args: policyDir: stat " + missing + ": no such file or directory"}},
		{"nothing-to-enforce", map[string]any{"clusterPolicies": false}, []string{"OPAGatekeeper args: clusterPolicies is false and no policyDir is given: nothing to enforce"}},
		{"misspelt-arg", map[string]any{"policyDirectory": missing}, []string{"decode OPAGatekeeper args: json: unknown field", "policyDirectory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startPlugin(t, c, cluster.SchedulerOptions{AsAdmin: true, NoWait: true}, profile{name: "default-scheduler", args: tc.args})
			waitExited(t, s, 30*time.Second)
			tail := fileTail(s.LogPath, 30)
			for _, want := range tc.want {
				if !strings.Contains(tail, want) {
					t.Errorf("log does not say %q:\n%s", want, tail)
				}
			}
			// The harness logs how the process ended.
			if !strings.Contains(tail, "exited: exit status") {
				t.Errorf("the scheduler did not exit with a non-zero status:\n%s", tail)
			}
		})
	}
}
