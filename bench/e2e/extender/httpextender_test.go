package extender_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler"
	schedulerapi "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/cluster"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/harness"
)

// nodeInfos is the little of the scheduler's snapshot that
// ProcessPreemption needs: node infos by name.
type nodeInfos map[string]fwk.NodeInfo

func (n nodeInfos) List() ([]fwk.NodeInfo, error) {
	out := make([]fwk.NodeInfo, 0, len(n))
	for _, ni := range n {
		out = append(out, ni)
	}
	return out, nil
}
func (n nodeInfos) HavePodsWithAffinityList() ([]fwk.NodeInfo, error)             { return nil, nil }
func (n nodeInfos) HavePodsWithRequiredAntiAffinityList() ([]fwk.NodeInfo, error) { return nil, nil }
func (n nodeInfos) HavePodsWithRequiredNonHostScopedAntiAffinityList() ([]fwk.NodeInfo, error) {
	return nil, nil
}
func (n nodeInfos) Get(name string) (fwk.NodeInfo, error) {
	if ni, ok := n[name]; ok {
		return ni, nil
	}
	return nil, fmt.Errorf("node %s not found", name)
}

// TestSchedulersOwnHTTPExtenderClient drives the service with
// kube-scheduler's own extender client (pkg/scheduler.NewHTTPExtender):
// Filter, Prioritize, ProcessPreemption and Bind round-trip without error
// and give the expected nodes, in both nodeCacheCapable modes.
func TestSchedulersOwnHTTPExtenderClient(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	harness.CreateNamespace(t, c, "alpha", map[string]string{"tenant": "alpha"})
	nodes := map[string]map[string]string{"alpha-1": {"tenant": "alpha"}, "beta-1": {"tenant": "beta"}, "shared-1": nil}
	harness.CreateNodes(t, c, nodes)
	tenantT, tenantC := harness.ExamplePolicy(t, "tenant-isolation")
	harness.InstallPolicy(t, c, tenantT, tenantC)
	svc := startService(t, c, serviceOptions{NoNudge: true})

	infos := nodeInfos{}
	var list []fwk.NodeInfo
	for _, name := range []string{"alpha-1", "beta-1", "shared-1"} {
		n, err := c.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ni := framework.NewNodeInfo()
		ni.SetNode(n)
		infos[name] = ni
		list = append(list, ni)
	}

	for _, nodeCache := range []bool{true, false} {
		t.Run(fmt.Sprintf("nodeCacheCapable=%v", nodeCache), func(t *testing.T) {
			ext, err := scheduler.NewHTTPExtender(&schedulerapi.Extender{
				URLPrefix: svc.URL, FilterVerb: "filter", PrioritizeVerb: "prioritize", PreemptVerb: "preempt", BindVerb: "bind",
				Weight: 1, NodeCacheCapable: nodeCache, HTTPTimeout: metav1.Duration{Duration: 5 * time.Second},
			})
			if err != nil {
				t.Fatal(err)
			}
			pod := harness.CreatePod(t, c, cluster.PausePod("alpha", fmt.Sprintf("client-%v", nodeCache), nil))

			passed, failed, unresolvable, err := ext.Filter(pod, list)
			if err != nil {
				t.Fatalf("Filter: %v", err)
			}
			if len(passed) != 1 || passed[0].Node().Name != "alpha-1" {
				t.Errorf("Filter passed %v, want [alpha-1]", nodeNames(passed))
			}
			if len(failed) != 0 || len(unresolvable) != 2 || unresolvable["beta-1"] == "" || unresolvable["shared-1"] == "" {
				t.Errorf("Filter failed %v, unresolvable %v", failed, unresolvable)
			}

			scores, weight, err := ext.Prioritize(pod, list)
			if err != nil {
				t.Fatalf("Prioritize: %v", err)
			}
			if weight != 1 || len(*scores) != 3 {
				t.Errorf("Prioritize: weight %d, scores %v", weight, *scores)
			}
			for _, s := range *scores {
				if s.Score < 0 || s.Score > extenderv1.MaxExtenderPriority {
					t.Errorf("score %v out of range", s)
				}
			}

			victim := func(node string) *extenderv1.Victims {
				v := cluster.PausePod("alpha", "victim-"+node, nil)
				v.UID = types.UID("uid-victim-" + node)
				v.Spec.NodeName = node
				return &extenderv1.Victims{Pods: []*corev1.Pod{v}}
			}
			// The victims must be in the snapshot for the client to map
			// their UIDs back.
			snap := nodeInfos{}
			for name, ni := range infos {
				cp := framework.NewNodeInfo(victim(name).Pods[0])
				cp.SetNode(ni.Node())
				snap[name] = cp
			}
			kept, err := ext.ProcessPreemption(pod, map[string]*extenderv1.Victims{"alpha-1": victim("alpha-1"), "beta-1": victim("beta-1")}, snap)
			if err != nil {
				t.Fatalf("ProcessPreemption: %v", err)
			}
			if len(kept) != 1 || kept["alpha-1"] == nil {
				t.Errorf("ProcessPreemption kept %v, want alpha-1 only", kept)
			}

			if err := ext.Bind(&corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID}, Target: corev1.ObjectReference{Kind: "Node", Name: "alpha-1"}}); err != nil {
				t.Fatalf("Bind: %v", err)
			}
			if n := harness.BoundNode(t, c, pod.Namespace, pod.Name, 10*time.Second); n != "alpha-1" {
				t.Errorf("bound to %s", n)
			}
			// A bind to a node the policy denies is refused with the reason.
			other := harness.CreatePod(t, c, cluster.PausePod("alpha", fmt.Sprintf("client-denied-%v", nodeCache), nil))
			err = ext.Bind(&corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: other.Name, Namespace: other.Namespace, UID: other.UID}, Target: corev1.ObjectReference{Kind: "Node", Name: "beta-1"}})
			if err == nil {
				t.Errorf("Bind to a denied node succeeded")
			} else {
				t.Logf("Bind to a denied node: %v", err)
			}
		})
	}
}

func nodeNames(ns []fwk.NodeInfo) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Node().Name)
	}
	sort.Strings(out)
	return out
}
