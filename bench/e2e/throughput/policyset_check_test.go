package throughput

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/cluster"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/policyset"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// TestRealisticPolicySet checks the realistic set without a cluster: the
// whole library plus the five placement templates load into the engine
// and are all in force, the nodes (cluster.KubeletNode) are
// kubelet-sized, and every kind of pod policyset.RealisticPod makes has
// nodes it may go to (deny constraints and NoSchedule taints considered)
// in the pools it is meant for.
func TestRealisticPolicySet(t *testing.T) {
	ex, err := policyset.Load(policyset.Examples, *library)
	if err != nil {
		t.Fatal(err)
	}
	if len(ex) != 4 || policyset.CountConstraints(ex) != 4 {
		t.Errorf("examples: %d templates, %d constraints, want 4 and 4", len(ex), policyset.CountConstraints(ex))
	}
	ps, err := policyset.Load(policyset.Realistic, *library)
	if err != nil {
		t.Fatal(err)
	}
	var warn int
	for _, p := range ps {
		if strings.HasPrefix(p.Source, "library/") && p.Constraints[0].GetAnnotations()[opa.ActionAnnotation] == "warn" {
			warn++
		}
	}
	if warn != len(ps)-policyset.RealisticPlacementTemplates {
		t.Errorf("%d of %d library constraints annotated warn", warn, len(ps)-policyset.RealisticPlacementTemplates)
	}

	// Node shape.
	const n = 230 // every pool in every zone, a node under maintenance in every pool
	var total, minB, maxB, minImg, maxImg int
	minB, minImg = 1<<30, 1<<30
	for i := 0; i < n; i++ {
		b, err := json.Marshal(cluster.KubeletNode(i))
		if err != nil {
			t.Fatal(err)
		}
		total += len(b)
		minB, maxB = min(minB, len(b)), max(maxB, len(b))
		k := len(cluster.KubeletNode(i).Status.Images)
		minImg, maxImg = min(minImg, k), max(maxImg, k)
	}
	t.Logf("kubelet nodes: %d bytes of JSON on average (%d to %d), %d to %d images", total/n, minB, maxB, minImg, maxImg)
	if avg := total / n; avg < 8000 || avg > 14000 || minImg < 30 || maxImg > 50 {
		t.Errorf("kubelet nodes: %d bytes on average, %d to %d images; want about 10 KB and 30 to 50", avg, minImg, maxImg)
	}

	// The engine, as the service holds them.
	ctx := context.Background()
	e, err := opa.New(ctx, opa.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	var tmpls, cons, inv []opa.Change
	for _, p := range ps {
		tmpls = append(tmpls, opa.Change{Object: p.Template.DeepCopy()})
		for _, c := range p.Constraints {
			cons = append(cons, opa.Change{Object: c.DeepCopy()})
		}
	}
	toU := func(obj runtime.Object) *unstructured.Unstructured {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			t.Fatal(err)
		}
		return &unstructured.Unstructured{Object: m}
	}
	const ns = "run-1"
	nsObj := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"kubernetes.io/metadata.name": ns}}}
	for k, v := range policyset.RealisticNamespaceLabels {
		nsObj.Labels[k] = v
	}
	inv = append(inv, opa.Change{Object: toU(nsObj)})
	nodes := make([]*corev1.Node, n)
	for i := range nodes {
		nodes[i] = cluster.KubeletNode(i)
		nodes[i].TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}
		inv = append(inv, opa.Change{Object: toU(nodes[i])})
	}
	for _, batch := range [][]opa.Change{tmpls, cons, inv} {
		if errs := e.Apply(ctx, batch); len(errs) > 0 {
			t.Fatalf("engine refused %d changes, first: %v", len(errs), errs[0])
		}
	}
	st := e.Status()
	if !policyset.Loaded(st, len(ps), policyset.CountConstraints(ps)) {
		for _, c := range st.Constraints {
			if !c.Active || c.Error != "" {
				t.Errorf("constraint %s/%s not in force: %s", c.Kind, c.Name, c.Error)
			}
		}
		t.Fatalf("%d templates, %d constraints in the engine; want %d, %d, all in force", len(st.Templates), len(st.Constraints), len(ps), policyset.CountConstraints(ps))
	}
	actions := map[opa.Action]int{}
	for _, c := range st.Constraints {
		actions[c.Action]++
	}
	t.Logf("realistic set: %d templates, %d constraints, actions %v", len(ps), policyset.CountConstraints(ps), actions)

	cands := make([]opa.Candidate, n)
	for i := range cands {
		cands[i].Name = nodes[i].Name
	}
	want := map[string][]string{
		"plain":      {"general-a", "general-b", "general-c", "general-d", "system"},
		"spot":       {"general-a", "general-b", "general-c", "general-d", "spot-a", "spot-b", "system"},
		"node-agent": {"system"},
	}
	for i := 0; i < 8; i++ {
		pod := policyset.RealisticPod(ns, i)
		pod.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
		pl, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: toU(pod).Object, Candidates: cands})
		if err != nil {
			t.Fatal(err)
		}
		allowed := map[string]bool{}
		denied := map[string]bool{}
		for j, node := range nodes {
			if !tolerated(pod, node) {
				continue
			}
			pool := cluster.KubeletNodePool(j)
			if pl.Denied(j) {
				denied[pool] = true
			} else {
				allowed[pool] = true
			}
		}
		kind := "plain"
		switch {
		case pod.Spec.HostNetwork:
			kind = "node-agent"
		case len(pod.Spec.Tolerations) > 0:
			kind = "spot"
		}
		got := keys(allowed)
		t.Logf("pod %d (%s, app %s): %d evaluations; allowed on %v, denied on %v", i, kind, pod.Labels["app"], pl.Evaluations, got, keys(denied))
		if !slices.Equal(got, want[kind]) {
			t.Errorf("pod %d (%s): allowed on pools %v, want %v", i, kind, got, want[kind])
		}
	}
}

// tolerated reports whether the pod tolerates the node's NoSchedule and
// NoExecute taints (the scheduler's TaintToleration filter).
func tolerated(p *corev1.Pod, n *corev1.Node) bool {
	for _, taint := range n.Spec.Taints {
		if taint.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		ok := false
		for _, tol := range p.Spec.Tolerations {
			if (tol.Effect == "" || tol.Effect == taint.Effect) &&
				((tol.Key == "" && tol.Operator == corev1.TolerationOpExists) ||
					(tol.Key == taint.Key && (tol.Operator == corev1.TolerationOpExists || tol.Value == taint.Value))) {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
