package gatekeeper

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/source"
)

// benchNode is a node of the throughput e2e's examples cluster: ten pools,
// three zones, every tenth node a tenant's, every tenth a spot node.
func benchNode(i int) *v1.Node {
	labels := map[string]string{"pool": fmt.Sprintf("pool-%d", i%10), "topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", i%3),
		"kubernetes.io/hostname": fmt.Sprintf("node-%04d", i)}
	switch i % 10 {
	case 0:
		labels["tenant"] = "alpha"
	case 1:
		labels["node.kubernetes.io/lifecycle"] = "spot"
	}
	res := v1.ResourceList{v1.ResourceCPU: resource.MustParse("8"), v1.ResourceMemory: resource.MustParse("32Gi"), v1.ResourcePods: resource.MustParse("110")}
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%04d", i), Labels: labels},
		Status: v1.NodeStatus{Capacity: res, Allocatable: res}}
}

// examplesEngine loads deploy/examples' templates and constraints and the
// nodes.
func examplesEngine(b testing.TB, nodes []*v1.Node) *opa.Engine {
	ctx := context.Background()
	e, err := opa.New(ctx, opa.Options{})
	if err != nil {
		b.Fatal(err)
	}
	var changes []opa.Change
	for _, pattern := range []string{"template.yaml", "constraint.yaml"} {
		files, _ := filepath.Glob(filepath.Join("..", "..", "..", "deploy", "examples", "*", pattern))
		for _, f := range files {
			objs, err := source.ReadFile(f)
			if err != nil {
				b.Fatal(err)
			}
			for _, o := range objs {
				changes = append(changes, opa.Change{Object: o})
			}
		}
	}
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "run"}}}
	changes = append(changes, opa.Change{Object: ns})
	for _, n := range nodes {
		content, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(n)
		u := &unstructured.Unstructured{Object: content}
		u.SetAPIVersion("v1")
		u.SetKind("Node")
		changes = append(changes, opa.Change{Object: u})
	}
	if errs := e.Apply(ctx, changes); len(errs) > 0 {
		b.Fatal(errs)
	}
	return e
}

// BenchmarkCycle is one scheduling cycle's plugin work on 1000 nodes with
// the example policies, each pod with its own name (four ReplicaSets):
// "every node" as kube-scheduler calls it without batching (SignPod,
// PreFilter, Filter on every node, PreScore and Score on the nodes that
// passed); "hinted node" as it calls it when opportunistic batching hands
// it the node the previous pod of the same signature would have taken
// (SignPod, PreFilter, Filter on that node only).
//
//	cd cmd/opa-kube-scheduler && go test -run '^$' -bench Cycle -benchmem ./gatekeeper/
func BenchmarkCycle(b *testing.B) {
	var nodes []*v1.Node
	for i := range 1000 {
		nodes = append(nodes, benchNode(i))
	}
	engine := examplesEngine(b, nodes)
	defer engine.Close(context.Background())
	pl := testPlugin(engine)
	infos := nodeInfos(nodes)
	ctx := context.Background()
	pod := func(i int) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "run", Name: fmt.Sprintf("p-%06d", i), UID: types.UID(fmt.Sprintf("uid-%d", i)),
			Labels: map[string]string{"app": fmt.Sprintf("rs-%d", i%4)}},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}}}}
	}
	for _, hinted := range []bool{false, true} {
		b.Run(map[bool]string{false: "every node", true: "hinted node"}[hinted], func(b *testing.B) {
			b.ReportAllocs()
			before := engine.Stats().Evaluations
			i := 0
			for b.Loop() {
				p := pod(i)
				i++
				if _, st := pl.SignPod(ctx, p); !st.IsSuccess() {
					b.Fatalf("SignPod: %v", st)
				}
				state := framework.NewCycleState()
				res, st := pl.PreFilter(ctx, state, p, infos)
				if !st.IsSuccess() && !st.IsSkip() {
					b.Fatalf("PreFilter: %v", st)
				}
				if hinted {
					pl.Filter(ctx, state, p, infos[(i*7)%len(infos)])
					continue
				}
				passed := infos
				if st.IsSuccess() {
					// As the framework does: only the nodes PreFilter
					// handed out, if it did.
					passed = passed[:0:0]
					for _, n := range infos {
						if res != nil && !res.NodeNames.Has(n.Node().Name) {
							continue
						}
						if pl.Filter(ctx, state, p, n).IsSuccess() {
							passed = append(passed, n)
						}
					}
				}
				if pl.PreScore(ctx, state, p, passed).IsSkip() {
					continue
				}
				for _, n := range passed {
					if _, st := pl.Score(ctx, state, p, n); !st.IsSuccess() {
						b.Fatal(st)
					}
				}
			}
			b.ReportMetric(float64(engine.Stats().Evaluations-before)/float64(i), "evals/cycle")
		})
	}
}

var _ fwk.NodeInfo = framework.NewNodeInfo()
