// Package extender_test runs opa-scheduler-extender against a real
// kube-apiserver and the stock kube-scheduler (bench/e2e/cluster): the
// scheduler calls the service through the `extenders:` list of its
// KubeSchedulerConfiguration, in both nodeCacheCapable modes.
package extender_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	configv1 "k8s.io/kube-scheduler/config/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/cluster"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/harness"
)

func TestPlacementThroughTheScheduler(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
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

	svc := startService(t, c, serviceOptions{})
	for _, nodeCache := range []bool{true, false} {
		name := map[bool]string{true: "nodeCacheCapable", false: "full-nodes"}[nodeCache]
		t.Run(name, func(t *testing.T) {
			sched := c.StartScheduler(t, cluster.SchedulerOptions{Extenders: []configv1.Extender{extender(svc.URL, nodeCache, false)}})
			defer sched.Stop()
			p := strings.ToLower(name)

			start := time.Now()
			harness.CreatePod(t, c, cluster.PausePod("alpha", p+"-tenant", nil))
			if n := harness.BoundNode(t, c, "alpha", p+"-tenant", 30*time.Second); n != "alpha-1" {
				t.Errorf("tenant pod on %s, want alpha-1", n)
			}
			t.Logf("tenant pod bound %v after creation", time.Since(start).Round(time.Millisecond))

			harness.CreatePod(t, c, cluster.PausePod("shared", p+"-shared", nil))
			if n := harness.BoundNode(t, c, "shared", p+"-shared", 30*time.Second); n != "general-a" && n != "general-b" {
				t.Errorf("shared pod on %s, want a general node", n)
			}

			// warn steers: every pod preferring zone-a lands on the only
			// zone-a node it may use; the dryrun constraint is ignored.
			for i := 0; i < 3; i++ {
				pod := withLabels(cluster.PausePod("shared", p+"-prefer-"+string(rune('a'+i)), nil), map[string]string{"prefer-zone": "a"})
				harness.CreatePod(t, c, pod)
				if n := harness.BoundNode(t, c, "shared", pod.Name, 30*time.Second); n != "general-a" {
					t.Errorf("pod preferring zone-a on %s, want general-a", n)
				}
			}

			// No allowed node: pending, and the event says why.
			stuck := cluster.PausePod("alpha", p+"-stuck", nil)
			stuck.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "beta-1"}
			harness.CreatePod(t, c, stuck)
			msg := harness.FailedSchedulingMessage(t, c, "alpha", stuck.Name, "reserved for tenant <beta>", 30*time.Second)
			if !strings.Contains(msg, "[tenant-nodes]") {
				t.Errorf("event message %q does not name the constraint", msg)
			}
			harness.StillPending(t, c, "alpha", stuck.Name, time.Second)
			if err := c.Client().CoreV1().Pods("alpha").Delete(ctx, stuck.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		})
	}
	if s := svc.Engine.Stats(); s.MemoHits == 0 || s.Evaluations == 0 {
		t.Errorf("engine stats %+v: the scheduler's requests did not reach the engine", s)
	}
}

func TestPolicyChangesTakeEffectWithoutRestart(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	harness.CreateNamespace(t, c, "alpha", map[string]string{"tenant": "alpha"})
	harness.CreateNodes(t, c, map[string]map[string]string{"general-1": nil, "general-2": nil})
	tenantT, tenantC := harness.ExamplePolicy(t, "tenant-isolation")
	harness.InstallPolicy(t, c, tenantT, tenantC)
	svc := startService(t, c, serviceOptions{})
	// The scheduler's own retry of unschedulable pods is left at its
	// defaults (backoff up to 10s, unschedulable timeout 5 minutes): a pod
	// scheduled within seconds after the policy change was requeued by the
	// service's nudge.
	sched := c.StartScheduler(t, cluster.SchedulerOptions{Extenders: []configv1.Extender{extender(svc.URL, true, false)}})
	defer sched.Stop()

	harness.CreatePod(t, c, cluster.PausePod("alpha", "waits", nil))
	harness.FailedSchedulingMessage(t, c, "alpha", "waits", "run only on nodes labelled tenant=alpha", 30*time.Second)
	// Let the pod settle in the unschedulable queue.
	harness.StillPending(t, c, "alpha", "waits", 3*time.Second)

	start := time.Now()
	harness.DeleteConstraint(t, c, "K8sTenantNodeIsolation", "tenant-nodes")
	harness.BoundNode(t, c, "alpha", "waits", 30*time.Second)
	t.Logf("pending pod bound %v after its constraint was deleted (nudged pods: %d)", time.Since(start).Round(time.Millisecond), svc.Nudger.Nudged())
	if svc.Nudger.Nudged() == 0 {
		t.Errorf("the pod was scheduled but never nudged")
	}

	// Created again, with a label key that no node has: new pods wait.
	harness.CreateConstraint(t, c, tenantC)
	waitGeneration := func(what string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			for _, cs := range svc.Engine.Status().Constraints {
				if cs.Name == "tenant-nodes" && cs.Active {
					return
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%s: constraint not active", what)
	}
	waitGeneration("recreated")
	harness.CreatePod(t, c, cluster.PausePod("alpha", "waits-again", nil))
	harness.FailedSchedulingMessage(t, c, "alpha", "waits-again", "tenant=alpha", 30*time.Second)

	// A template update through the API (a version that allows tenant pods
	// on shared nodes) takes effect, and the pod is scheduled.
	tmpl, err := c.Dynamic().Resource(cluster.ConstraintTemplateGVR).Get(ctx, "k8stenantnodeisolation", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	targets, _, _ := unstructured.NestedSlice(tmpl.Object, "spec", "targets")
	rego := targets[0].(map[string]any)["rego"].(string)
	i := strings.Index(rego, "violation[{\"msg\": msg}] {\n  node_known")
	if i < 0 {
		t.Fatalf("unexpected template text:\n%s", rego)
	}
	// Drop the first violation rule (tenant pod on an untenanted node).
	j := strings.Index(rego[i+1:], "violation[") + i + 1
	targets[0].(map[string]any)["rego"] = rego[:i] + rego[j:]
	unstructured.SetNestedSlice(tmpl.Object, targets, "spec", "targets")
	start = time.Now()
	if _, err := c.Dynamic().Resource(cluster.ConstraintTemplateGVR).Update(ctx, tmpl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.BoundNode(t, c, "alpha", "waits-again", 30*time.Second)
	t.Logf("pending pod bound %v after the template update", time.Since(start).Round(time.Millisecond))

	// A broken template update is refused; the version in force stays.
	broken := tmpl.DeepCopy()
	broken.SetResourceVersion("")
	tmpl, _ = c.Dynamic().Resource(cluster.ConstraintTemplateGVR).Get(ctx, "k8stenantnodeisolation", metav1.GetOptions{})
	targets, _, _ = unstructured.NestedSlice(tmpl.Object, "spec", "targets")
	targets[0].(map[string]any)["rego"] = "package broken\nviolation[{\"msg\": m}] { m := }"
	unstructured.SetNestedSlice(tmpl.Object, targets, "spec", "targets")
	if _, err := c.Dynamic().Resource(cluster.ConstraintTemplateGVR).Update(ctx, tmpl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := svc.Engine.Status()
		if len(st.Templates) == 1 && st.Templates[0].Error != "" {
			if !st.Templates[0].Active {
				t.Fatalf("the previous version is no longer in force: %+v", st.Templates[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("broken template not reported: %+v", st.Templates)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = broken
}

func TestBindAndPreemption(t *testing.T) {
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
	svc := startService(t, c, serviceOptions{})
	sched := c.StartScheduler(t, cluster.SchedulerOptions{Extenders: []configv1.Extender{extender(svc.URL, true, true)}, ExtraConfig: fastRetries})
	defer sched.Stop()

	big := func(name, priority string, labels map[string]string, node string) *corev1.Pod {
		p := withLabels(cluster.PausePod("work", name, nil), labels)
		p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("3")
		p.Spec.PriorityClassName = priority
		if node != "" {
			p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		}
		return p
	}
	harness.CreatePod(t, c, big("low-a", "low", nil, "node-za"))
	harness.CreatePod(t, c, big("low-b", "low", nil, "node-zb"))
	if n := harness.BoundNode(t, c, "work", "low-a", 30*time.Second); n != "node-za" {
		t.Fatalf("low-a on %s", n)
	}
	harness.BoundNode(t, c, "work", "low-b", 30*time.Second)
	if got := metricValue(t, svc.URL, `opa_scheduler_extender_request_duration_seconds_count{result="ok",verb="bind"}`); got < 2 {
		t.Errorf("the service bound %v pods, want 2 (bindVerb is set)", got)
	}

	// The preemptor may only use zone-a: preemption must evict low-a,
	// never low-b.
	harness.CreatePod(t, c, big("high", "high", map[string]string{"prefer-zone": "a"}, ""))
	n := harness.BoundNode(t, c, "work", "high", 60*time.Second)
	if n != "node-za" {
		t.Errorf("preemptor bound to %s, want node-za", n)
	}
	if _, err := c.Client().CoreV1().Pods("work").Get(ctx, "low-b", metav1.GetOptions{}); err != nil {
		t.Errorf("low-b on the node the preemptor may not use was evicted: %v", err)
	}
	if p, err := c.Client().CoreV1().Pods("work").Get(ctx, "low-a", metav1.GetOptions{}); err == nil && p.DeletionTimestamp == nil {
		t.Errorf("low-a was not preempted")
	}

	// A bind racing with another binder (here: for a pod that was
	// replaced under the same name) fails cleanly, with the reason.
	body, _ := json.Marshal(extenderv1.ExtenderBindingArgs{PodName: "high", PodNamespace: "work", PodUID: types.UID("not-its-uid"), Node: "node-zb"})
	resp, err := http.Post(svc.URL+"/bind", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var res extenderv1.ExtenderBindingResult
	_ = json.NewDecoder(resp.Body).Decode(&res)
	resp.Body.Close()
	if res.Error == "" {
		t.Errorf("a bind with a stale UID succeeded")
	}
	t.Logf("racing bind answered: %s", res.Error)
}

func metricValue(t *testing.T, url, series string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, series+" ") {
			var v float64
			if err := json.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(line, series))), &v); err == nil {
				return v
			}
		}
	}
	return 0
}

func TestAPIServerOutage(t *testing.T) {
	c := newTenantCluster(t, map[string]map[string]string{"alpha-1": {"tenant": "alpha"}, "shared-1": nil})
	ctx := context.Background()
	svc := startService(t, c, serviceOptions{NoNudge: true})

	filter := func() *extenderv1.ExtenderFilterResult {
		t.Helper()
		pod := cluster.PausePod("alpha", "probe", nil)
		names := []string{"alpha-1", "shared-1"}
		body, _ := json.Marshal(extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names})
		resp, err := http.Post(svc.URL+"/filter", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var res extenderv1.ExtenderFilterResult
		if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || res.Error != "" {
			t.Fatalf("filter: %d %s", resp.StatusCode, res.Error)
		}
		return &res
	}
	if r := filter(); len(*r.NodeNames) != 1 || (*r.NodeNames)[0] != "alpha-1" {
		t.Fatalf("before the outage: %+v", r)
	}
	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// Still answering from the last synced state, and saying so.
	if r := filter(); len(*r.NodeNames) != 1 {
		t.Fatalf("during the outage: %+v", r)
	}
	var ready string
	for time.Since(start) < 15*time.Second {
		resp, err := http.Get(svc.URL + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			ready = string(b)
			if resp.StatusCode == 200 && strings.Contains(ready, "API server unreachable") {
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(ready, "API server unreachable") {
		t.Fatalf("/readyz during the outage: %q", ready)
	}
	t.Logf("/readyz during the outage: %q", strings.TrimSpace(ready))
	if err := c.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	// A change made after the API server is back reaches the answers.
	n, err := c.Client().CoreV1().Nodes().Get(ctx, "shared-1", metav1.GetOptions{})
	for i := 0; err != nil && i < 50; i++ {
		time.Sleep(200 * time.Millisecond)
		n, err = c.Client().CoreV1().Nodes().Get(ctx, "shared-1", metav1.GetOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	n.Labels["tenant"] = "alpha"
	if _, err := c.Client().CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if r := filter(); len(*r.NodeNames) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a node change made after the outage never reached the answers")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("informers caught up %v after the API server came back", time.Since(start).Round(time.Millisecond))
	if err := waitReady(svc.URL, 15*time.Second); err != nil {
		t.Fatal(err)
	}
}

var _ = apierrors.IsNotFound

// TestServiceRestart: while the service is down the scheduler cannot
// place pods (the extender is not ignorable); once it is back, the pending
// pods are scheduled without anyone touching them.
func TestServiceRestart(t *testing.T) {
	c := newTenantCluster(t, map[string]map[string]string{"alpha-1": {"tenant": "alpha"}, "shared-1": nil})
	svc := startService(t, c, serviceOptions{})
	addr := strings.TrimPrefix(svc.URL, "http://")
	sched := c.StartScheduler(t, cluster.SchedulerOptions{Extenders: []configv1.Extender{extender(svc.URL, true, false)}, ExtraConfig: fastRetries})
	defer sched.Stop()
	harness.CreatePod(t, c, cluster.PausePod("alpha", "before", nil))
	harness.BoundNode(t, c, "alpha", "before", 30*time.Second)

	svc.Stop()
	for i := 0; i < 3; i++ {
		harness.CreatePod(t, c, cluster.PausePod("alpha", "while-down-"+string(rune('a'+i)), nil))
	}
	harness.FailedSchedulingMessage(t, c, "alpha", "while-down-a", "", 30*time.Second)
	harness.StillPending(t, c, "alpha", "while-down-a", 2*time.Second)

	start := time.Now()
	startService(t, c, serviceOptions{Addr: addr})
	for i := 0; i < 3; i++ {
		if n := harness.BoundNode(t, c, "alpha", "while-down-"+string(rune('a'+i)), 60*time.Second); n != "alpha-1" {
			t.Errorf("pod bound to %s, want alpha-1", n)
		}
	}
	t.Logf("pending pods scheduled %v after the service came back", time.Since(start).Round(time.Millisecond))
}
