package perf

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// realisticNodes is enough kubelet-sized nodes for every pool in every
// zone, and a node under maintenance in every pool.
const realisticNodes = 230

// TestRealistic checks that the realistic workload is what it claims: the
// whole library, every library constraint warn, the five placement
// templates (three deny, two warn) each violated on some (pod, node)
// pairs of the workload and not on others, their messages naming the
// node and the pod, and each ReplicaSet placed where its namespace,
// tolerations and privileges let it go.
func TestRealistic(t *testing.T) {
	d := testDirs(t)
	ps, err := LoadRealistic(d)
	if err != nil {
		t.Fatal(err)
	}
	libCount, err := LibraryTemplates(d)
	if err != nil {
		t.Fatal(err)
	}
	if libCount < 40 {
		t.Fatalf("only %d library templates under %s", libCount, d.Library)
	}
	if len(ps) != libCount+RealisticPlacementTemplates {
		t.Fatalf("%d templates, want the library's %d + %d", len(ps), libCount, RealisticPlacementTemplates)
	}
	all, err := LoadAll(d)
	if err != nil {
		t.Fatal(err)
	}
	placement := map[string]bool{} // "kind/name" of the placement constraints
	lib := map[string]bool{}
	for i, p := range ps {
		if IsRealisticPlacement(p) {
			for _, c := range p.Constraints {
				placement[c.GetKind()+"/"+c.GetName()] = true
			}
			continue
		}
		// The library part is LoadAll's, constraint for constraint, plus
		// the annotation.
		if p.Source != all[i].Source || len(p.Constraints) != 1 || p.Constraints[0].GetName() != all[i].Constraints[0].GetName() {
			t.Errorf("library policy %d is %s, LoadAll has %s", i, p.Source, all[i].Source)
		}
		for _, c := range p.Constraints {
			if got := c.GetAnnotations()[ActionAnnotation]; got != "warn" {
				t.Errorf("%s: constraint %s has %s=%q, want warn", p.Source, c.GetName(), ActionAnnotation, got)
			}
			lib[c.GetKind()+"/"+c.GetName()] = true
		}
		if _, found := all[i].Constraints[0].GetAnnotations()[ActionAnnotation]; found {
			t.Errorf("LoadAll's %s constraint was changed", p.Source)
		}
	}
	if len(placement) != RealisticPlacementTemplates {
		t.Fatalf("%d placement constraints, want %d", len(placement), RealisticPlacementTemplates)
	}

	ctx := context.Background()
	e, err := NewEngine(ctx, opa.Options{}, ps, append(Namespaces(), KubeletNodes.Nodes(realisticNodes)...), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(ctx) })

	t.Run("actions", func(t *testing.T) {
		actions := map[opa.Action]int{}
		for _, c := range e.Status().Constraints {
			k := c.Kind + "/" + c.Name
			switch {
			case !c.Active:
				t.Errorf("%s is not active: %s", k, c.Error)
			case lib[k] && c.Action != opa.Warn:
				t.Errorf("library constraint %s is %q here, want warn", k, c.Action)
			case placement[k]:
				actions[c.Action]++
			case !lib[k]:
				t.Errorf("unexpected constraint %s", k)
			}
		}
		if actions[opa.Deny] != 3 || actions[opa.Warn] != 2 {
			t.Errorf("placement constraints: %v, want 3 deny and 2 warn", actions)
		}
		if deny := DenyConstraints(e); len(deny) != 3 {
			t.Errorf("deny constraints %v, want the 3 deny placement constraints", deny)
		}
	})

	t.Run("placements", func(t *testing.T) {
		// Under the three deny placement constraints each ReplicaSet goes
		// to the pools the mix's examples send it to.
		s := NewStream(1, 0, 0)
		for rs := range ReplicaSets {
			pod := s.Replica(rs, rs)
			p := evaluate(t, e, pod, len(Pools))
			var passed []string
			for i := range p.Nodes {
				if !p.Denied(i) {
					passed = append(passed, Pools[i].Name)
				}
			}
			if want := allowedPools[ReplicaSets[rs].App]; !slices.Equal(passed, want) {
				t.Errorf("%s passes on %v, want %v", ReplicaSets[rs].App, passed, want)
			}
		}
	})

	t.Run("violations", func(t *testing.T) {
		type count struct{ violated, allowed int }
		counts := map[string]*count{}
		for k := range placement {
			counts[k] = &count{}
		}
		s := NewStream(7, 0, 0.2)
		var pods []Pod
		for rs := range ReplicaSets {
			pods = append(pods, s.Replica(rs, 1000+rs))
		}
		for i := range 10 {
			pods = append(pods, s.Next(), s.OneOff(2000+i))
		}
		names := NodeNames(realisticNodes)
		for _, pod := range pods {
			p := evaluate(t, e, pod, realisticNodes)
			matched := p.Trace(0)
			for i := range p.Nodes {
				violated := map[string]bool{}
				for _, x := range p.Violations(i) {
					k := x.Constraint.String()
					if x.Error {
						if placement[k] {
							t.Errorf("%s on %s: %s failed: %s", pod.Name, names[i], k, x.Message)
						}
						continue
					}
					if lib[k] && x.Action != opa.Warn {
						t.Errorf("%s on %s: library constraint %s acted %q", pod.Name, names[i], k, x.Action)
					}
					if !placement[k] {
						continue
					}
					violated[k] = true
					if !strings.Contains(x.Message, names[i]) || !strings.Contains(x.Message, pod.Name) {
						t.Errorf("%s: message does not name node %s and pod %s: %q", k, names[i], pod.Name, x.Message)
					}
					if x.Constraint.Kind == "K8sTenantDedicatedNodes" {
						var det map[string]any
						if err := json.Unmarshal(x.Details, &det); err != nil || det["node"] != names[i] || det["pod"] != pod.Name {
							t.Errorf("%s: details %s, want node %s and pod %s", k, x.Details, names[i], pod.Name)
						}
					}
				}
				for _, tr := range matched {
					k := tr.Constraint.String()
					if c := counts[k]; c != nil {
						if violated[k] {
							c.violated++
						} else {
							c.allowed++
						}
					}
				}
			}
		}
		for k, c := range counts {
			t.Logf("%s: violated on %d (pod, node) pairs, not on %d", k, c.violated, c.allowed)
			if c.violated == 0 || c.allowed == 0 {
				t.Errorf("%s: violated on %d (pod, node) pairs and not on %d: want both", k, c.violated, c.allowed)
			}
		}
	})
}

// evaluate judges the pod on nodes 0..n-1, with explain (which lists the
// constraints that matched the pod).
func evaluate(t *testing.T, e *opa.Engine, pod Pod, n int) *opa.Placement {
	t.Helper()
	obj, err := ServerView(pod.JSON)
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Evaluate(context.Background(), opa.PlacementRequest{Pod: obj, Candidates: Candidates(n), Explain: true})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestKubeletNodes checks the kubelet-sized nodes: 8 to 14 KB of JSON,
// the pools' placement labels and taints, what a kubelet reports, and
// per-node values that differ between nodes of one pool and zone.
func TestKubeletNodes(t *testing.T) {
	const n = 5000
	minB, maxB, sum := 1<<30, 0, 0
	seen := map[string]map[string]int{} // field -> value -> node
	for i := range n {
		node := KubeletNode(i)
		b, err := json.Marshal(node.Object)
		if err != nil {
			t.Fatal(err)
		}
		minB, maxB, sum = min(minB, len(b)), max(maxB, len(b)), sum+len(b)
		if len(b) < 8000 || len(b) > 14000 {
			t.Errorf("node %d: %d B of JSON, want 8 to 14 KB", i, len(b))
		}
		if node.GetName() != NodeName(i) {
			t.Fatalf("node %d is named %s, want %s", i, node.GetName(), NodeName(i))
		}
		small := Node(i)
		for k, v := range small.GetLabels() {
			if node.GetLabels()[k] != v && k != "example.com/pool" {
				t.Fatalf("node %d: label %s=%q, the small node has %q", i, k, node.GetLabels()[k], v)
			}
		}
		if (node.GetLabels()[MaintenanceLabel] == "true") != UnderMaintenance(i) {
			t.Errorf("node %d: maintenance label %q", i, node.GetLabels()[MaintenanceLabel])
		}
		st := fmt.Sprint(small.Object["spec"].(map[string]any)["taints"])
		if got := fmt.Sprint(node.Object["spec"].(map[string]any)["taints"]); got != st {
			t.Fatalf("node %d: taints %s, the small node has %s", i, got, st)
		}
		for _, k := range []string{"node.alpha.kubernetes.io/ttl", "volumes.kubernetes.io/controller-managed-attach-detach", "csi.volume.kubernetes.io/nodeid"} {
			if node.GetAnnotations()[k] == "" {
				t.Fatalf("node %d: no annotation %s", i, k)
			}
		}
		status := node.Object["status"].(map[string]any)
		images := status["images"].([]any)
		if len(images) < 30 || len(images) > 50 {
			t.Errorf("node %d: %d images, want 30 to 50", i, len(images))
		}
		var imageSet []string
		for j, im := range images {
			m := im.(map[string]any)
			names := m["names"].([]any)
			if !strings.Contains(names[0].(string), "@sha256:") {
				t.Fatalf("node %d: image %v has no digest", i, names)
			}
			if j > 0 && m["sizeBytes"].(int64) > images[j-1].(map[string]any)["sizeBytes"].(int64) {
				t.Fatalf("node %d: images not largest first", i)
			}
			imageSet = append(imageSet, names[0].(string))
		}
		if conds := status["conditions"].([]any); len(conds) != 4 {
			t.Fatalf("node %d: %d conditions", i, len(conds))
		}
		info := status["nodeInfo"].(map[string]any)
		for _, k := range []string{"machineID", "systemUUID", "bootID", "kernelVersion", "osImage", "containerRuntimeVersion", "kubeletVersion", "kubeProxyVersion", "operatingSystem", "architecture"} {
			if s, _ := info[k].(string); s == "" {
				t.Fatalf("node %d: nodeInfo.%s empty", i, k)
			}
		}
		var ip string
		for _, a := range status["addresses"].([]any) {
			if a.(map[string]any)["type"] == "InternalIP" {
				ip = a.(map[string]any)["address"].(string)
			}
		}
		// Values unique to each node.
		for field, v := range map[string]string{
			"hostname": node.GetLabels()["kubernetes.io/hostname"], "uid": string(node.GetUID()), "internalIP": ip,
			"machineID": info["machineID"].(string), "systemUUID": info["systemUUID"].(string), "bootID": info["bootID"].(string),
			"providerID": node.Object["spec"].(map[string]any)["providerID"].(string),
		} {
			if seen[field] == nil {
				seen[field] = map[string]int{}
			}
			if j, dup := seen[field][v]; dup {
				t.Fatalf("nodes %d and %d have the same %s %q", j, i, field, v)
			}
			seen[field][v] = i
		}
		// The image list differs from the node's pool and zone neighbour.
		if i >= 30 {
			var prev []string
			for _, im := range KubeletNode(i - 30).Object["status"].(map[string]any)["images"].([]any) {
				prev = append(prev, im.(map[string]any)["names"].([]any)[0].(string))
			}
			if slices.Equal(prev, imageSet) {
				t.Errorf("nodes %d and %d hold the same images", i-30, i)
			}
		}
	}
	t.Logf("%d kubelet-sized nodes: %d to %d B of JSON, mean %d B (small nodes: %d B)", n, minB, maxB, sum/n, len(mustJSON(t, Node(0).Object)))
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestStreamPodsUnique checks that the replicas' names and uids change on
// every request, within a stream and across the streams of concurrent
// workers and scenarios, as a ReplicaSet's pods do.
func TestStreamPodsUnique(t *testing.T) {
	names := map[string]bool{}
	uids := map[string]bool{}
	replicas, total := 0, 0
	for w, n := range []int{101000, 3000, 3000} { // past 100000 requests: no wrap-around
		s := NewStream(1, w+1, 0.05)
		for range n {
			p := s.Next()
			var obj struct {
				Metadata struct{ Name, UID string }
			}
			if err := json.Unmarshal(p.JSON, &obj); err != nil {
				t.Fatal(err)
			}
			uid := obj.Metadata.UID
			if names[p.Name] || uids[uid] || obj.Metadata.Name != p.Name || uid == "" {
				t.Fatalf("worker %d: pod %s (uid %q) seen before", w, p.Name, uid)
			}
			names[p.Name], uids[uid] = true, true
			total++
			if p.Kind == "replica" {
				replicas++
			}
		}
	}
	if replicas < total*9/10 {
		t.Errorf("%d replicas of %d pods", replicas, total)
	}
}

// TestNextIntoIsNext: NextInto gives the pods Next gives, in its reused
// buffer, and a replica is its ReplicaSet's template with the name, uid
// and token volume name replaced (the reference, with bytes.Replace).
func TestNextIntoIsNext(t *testing.T) {
	a, b := NewStream(3, 2, 0.05), NewStream(3, 2, 0.05)
	var buf []byte
	replicas := 0
	for i := range 2000 {
		want, got := a.Next(), b.NextInto(&buf)
		if want.Kind != got.Kind || want.Name != got.Name || want.Namespace != got.Namespace || !bytes.Equal(want.JSON, got.JSON) {
			t.Fatalf("pod %d: NextInto gives %s %s\n%s\nNext gives %s %s\n%s", i, got.Kind, got.Name, got.JSON, want.Kind, want.Name, want.JSON)
		}
		if got.Kind != "replica" {
			continue
		}
		replicas++
		rs := -1
		for k, r := range ReplicaSets {
			if strings.HasPrefix(got.Name, r.App+"-"+r.Hash+"-") {
				rs = k
			}
		}
		if rs < 0 {
			t.Fatalf("pod %d: %s is no ReplicaSet's", i, got.Name)
		}
		var obj struct{ Metadata struct{ UID string } }
		if err := json.Unmarshal(got.JSON, &obj); err != nil {
			t.Fatal(err)
		}
		ref := bytes.Replace(a.templates[rs], []byte(namePlaceholder), []byte(got.Name), 1)
		ref = bytes.Replace(ref, []byte(uidPlaceholder), []byte(obj.Metadata.UID), 1)
		ref = bytes.ReplaceAll(ref, []byte(tokenPlaceholder), []byte(tokenVolume(2, a.n)))
		if !bytes.Equal(ref, got.JSON) {
			t.Fatalf("pod %d:\n%s\nwant\n%s", i, got.JSON, ref)
		}
	}
	if replicas < 1800 {
		t.Fatalf("%d replicas", replicas)
	}
}
