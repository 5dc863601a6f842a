package opa_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// A living cluster writes its Nodes all the time (heartbeats, conditions,
// labels). These tests prove that the memo stays sound under such writes
// and that a write costs what it changed: the evaluation counts are
// asserted, so the cheap path is shown to be the one taken.

// tenantNodeRego reads a label of the candidate node and prints the node's
// and the pod's names.
const tenantNodeRego = `package tenantnode
violation[{"msg": msg}] {
  node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
  node.metadata.labels.tenant != input.review.object.metadata.namespace
  msg := sprintf("node %v is for tenant %v, pod %v is not", [input.review.object.spec.nodeName, node.metadata.labels.tenant, input.review.object.metadata.name])
}`

// namespaceTierRego reads the pod's Namespace from the inventory (a kind
// other than Node) beside the candidate node.
const namespaceTierRego = `package namespacetier
violation[{"msg": msg}] {
  ns := data.inventory.cluster["v1"].Namespace[input.review.object.metadata.namespace]
  tier := object.get(ns.metadata.labels, "tier", "standard")
  node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
  node.metadata.labels.tier != tier
  msg := sprintf("namespace tier %v, node tier %v", [tier, node.metadata.labels.tier])
}`

// namespacePoolRego reads the pod's Namespace from the inventory and
// prints the pod's and the candidate's names: the names stay out of the
// key (the candidate is replaced under a placeholder; only the Nodes are).
const namespacePoolRego = `package namespacepool
violation[{"msg": msg}] {
  ns := data.inventory.cluster["v1"].Namespace[input.review.object.metadata.namespace]
  tier := object.get(ns.metadata.labels, "tier", "standard")
  node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
  node.metadata.labels.tier != tier
  msg := sprintf("pod %v wants tier %v; node %v is %v", [input.review.object.metadata.name, tier, input.review.object.spec.nodeName, node.metadata.labels.tier])
}`

// nodeQuotaRego looks another kind up by the candidate's name: the name
// is a key there, so it stays in the memo key.
const nodeQuotaRego = `package nodequota
violation[{"msg": msg}] {
  q := data.inventory.cluster["example.com/v1"].NodeQuota[input.review.object.spec.nodeName]
  q.spec.full == true
  msg := sprintf("node %v is full", [input.review.object.spec.nodeName])
}`

// zoneSpreadRego reads every Node: a candidate is refused while its zone
// has fewer than two Nodes marked ready.
const zoneSpreadRego = `package zonespread
violation[{"msg": msg}] {
  node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
  zone := node.metadata.labels.zone
  ready := [n | n := data.inventory.cluster["v1"].Node[_]; n.metadata.labels.zone == zone; n.metadata.labels.ready == "true"]
  count(ready) < 2
  msg := sprintf("zone %v has %v ready nodes", [zone, count(ready)])
}`

// churnNode is a Node as a kubelet reports it: labels and a heartbeat
// that no policy here reads, and a resourceVersion.
func churnNode(name string, labels map[string]string, heartbeat int) *unstructured.Unstructured {
	n := node(name, labels)
	n.SetResourceVersion(fmt.Sprint(1000 + heartbeat))
	n.Object["status"] = map[string]any{
		"conditions": []any{map[string]any{"type": "Ready", "status": "True",
			"lastHeartbeatTime": time.Unix(1764000000+int64(heartbeat)*10, 0).UTC().Format(time.RFC3339)}},
	}
	return n
}

// churnCluster is the state the tests write: each node's labels and its
// heartbeat count.
type churnCluster struct {
	labels    []map[string]string
	heartbeat []int
	gone      []bool
}

func newChurnCluster(n int, rng *rand.Rand) *churnCluster {
	c := &churnCluster{labels: make([]map[string]string, n), heartbeat: make([]int, n), gone: make([]bool, n)}
	for i := range c.labels {
		c.labels[i] = randomChurnLabels(rng)
	}
	return c
}

func randomChurnLabels(rng *rand.Rand) map[string]string {
	return map[string]string{
		"tenant": []string{"alpha", "beta", "gamma"}[rng.Intn(3)],
		"tier":   []string{"standard", "gold"}[rng.Intn(2)],
		"zone":   []string{"a", "b"}[rng.Intn(2)],
		"ready":  []string{"true", "false"}[rng.Intn(2)],
	}
}

func (c *churnCluster) name(i int) string { return fmt.Sprintf("churn-%02d", i) }

func (c *churnCluster) object(i int) *unstructured.Unstructured {
	return churnNode(c.name(i), c.labels[i], c.heartbeat[i])
}

func (c *churnCluster) all() []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for i := range c.labels {
		out = append(out, c.object(i))
	}
	return out
}

// sent are the cluster's Nodes as a request carries them
// (nodeCacheCapable: false): every third one with a label changed since
// the inventory saw it.
func (c *churnCluster) sent(round int) []opa.Candidate {
	var out []opa.Candidate
	for i := range c.labels {
		if c.gone[i] {
			continue
		}
		n := c.object(i)
		if (i+round)%3 == 0 {
			labels := n.GetLabels()
			labels["zone"], labels["ready"] = "b", "true"
			n.SetLabels(labels)
		}
		out = append(out, candidateOf(c.name(i), n, i%2 == 1))
	}
	return out
}

// candidateOf is n sent in a request: as an object, or as JSON.
func candidateOf(name string, n *unstructured.Unstructured, asJSON bool) opa.Candidate {
	if !asJSON {
		return opa.Candidate{Name: name, Object: n.Object}
	}
	b, err := json.Marshal(n.Object)
	if err != nil {
		panic(fmt.Sprintf("node %s: %v", name, err))
	}
	return opa.Candidate{Name: name, JSON: b}
}

func (c *churnCluster) candidates() []opa.Candidate {
	out := make([]opa.Candidate, len(c.labels))
	for i := range out {
		out[i].Name = c.name(i)
	}
	return out
}

// churnEngines are an engine with the memo and one without, with the
// templates given (kind -> Rego), a constraint each, the namespaces and
// the cluster's nodes.
func churnEngines(t *testing.T, c *churnCluster, regos map[string]string) (memo, exact *opa.Engine) {
	t.Helper()
	var objs []*unstructured.Unstructured
	for kind, rego := range regos {
		objs = append(objs, regoTemplate(t, kind, rego), constraintObj(t, kind, "c-"+kind, nil))
	}
	objs = append(objs, namespace("alpha", map[string]string{"tier": "gold"}), namespace("beta", nil))
	objs = append(objs, c.all()...)
	memo = newEngine(t, opa.Options{Parallelism: 1})
	exact = newEngine(t, opa.Options{DisableMemo: true})
	apply(t, memo, objs...)
	apply(t, exact, objs...)
	return memo, exact
}

func churnPods(round int) []map[string]any {
	var out []map[string]any
	for i, ns := range []string{"alpha", "beta", "alpha", "beta"} {
		out = append(out, pod(ns, fmt.Sprintf("web-%d-%d", round, i)))
	}
	return out
}

// evaluations runs f and counts the evaluations e made.
func evaluations(e *opa.Engine, f func()) uint64 {
	before := e.Stats().Evaluations
	f()
	return e.Stats().Evaluations - before
}

// TestHeartbeatsCostNoEvaluation: with templates that read the candidate
// node's labels, the pod's Namespace from the inventory, and names only
// printed, Node writes that change only the heartbeat and the
// resourceVersion re-evaluate nothing; a label flip re-evaluates at most
// (flipped nodes x constraints x pod classes); verdicts stay those of an
// engine without memo throughout.
func TestHeartbeatsCostNoEvaluation(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	c := newChurnCluster(40, rng)
	regos := map[string]string{"K8sTenantNode": tenantNodeRego, "K8sNamespaceTier": namespaceTierRego, "K8sNamespacePool": namespacePoolRego}
	memo, exact := churnEngines(t, c, regos)
	cands := c.candidates()
	check := func(round int) {
		for _, p := range churnPods(round) {
			sameAsWithoutMemo(t, memo, exact, p, cands)
		}
	}
	check(0) // fills the memo
	for round := 1; round <= 5; round++ {
		var writes []*unstructured.Unstructured
		for i := range c.labels {
			c.heartbeat[i]++
			writes = append(writes, c.object(i))
		}
		apply(t, memo, writes...)
		apply(t, exact, writes...)
		if n := evaluations(memo, func() { check(round) }); n != 0 {
			t.Fatalf("round %d: every node's heartbeat cost %d evaluations, want 0", round, n)
		}
	}
	const flipped, podClasses = 3, 2
	for round := 6; round <= 10; round++ {
		for k := range flipped {
			i := (round*7 + k*11) % len(c.labels)
			c.labels[i]["tenant"] = []string{"alpha", "beta", "delta", "epsilon"}[(round+k)%4]
			c.heartbeat[i]++
			apply(t, memo, c.object(i))
			apply(t, exact, c.object(i))
		}
		bound := uint64(flipped * len(regos) * podClasses)
		if n := evaluations(memo, func() { check(round) }); n > bound {
			t.Fatalf("round %d: %d label flips cost %d evaluations, want at most %d", round, flipped, n, bound)
		}
	}
	// A Namespace change re-evaluates the template that reads it, not
	// the one that reads only the candidate node.
	apply(t, memo, namespace("beta", map[string]string{"tier": "gold"}))
	apply(t, exact, namespace("beta", map[string]string{"tier": "gold"}))
	if n := evaluations(memo, func() { check(11) }); n == 0 || n > uint64(podClasses*nodeClassesOf(c)) {
		t.Fatalf("a Namespace change cost %d evaluations, want 1 to %d", n, podClasses*nodeClassesOf(c))
	}
}

// nodeClassesOf counts the distinct (tenant, tier) label pairs: the most
// node classes a template here can see.
func nodeClassesOf(c *churnCluster) int {
	seen := map[string]bool{}
	for _, l := range c.labels {
		seen[l["tenant"]+"/"+l["tier"]] = true
	}
	return len(seen)
}

// TestNodeChurnKeepsVerdicts writes random Node changes (label flips,
// heartbeats, deletion and re-creation under the same name) with a
// template that reads every Node among them, and compares every answer
// with an engine without memo.
func TestNodeChurnKeepsVerdicts(t *testing.T) {
	for seed := int64(1); seed <= 3; seed++ {
		rng := rand.New(rand.NewSource(seed))
		c := newChurnCluster(24, rng)
		memo, exact := churnEngines(t, c, map[string]string{
			"K8sTenantNode": tenantNodeRego, "K8sNamespaceTier": namespaceTierRego, "K8sZoneSpread": zoneSpreadRego,
			"K8sNamespacePool": namespacePoolRego, "K8sNodeQuota": nodeQuotaRego,
		})
		for i := range c.labels {
			if i%4 == 0 {
				q := obj(t, fmt.Sprintf("apiVersion: example.com/v1\nkind: NodeQuota\nmetadata: {name: %s}\nspec: {full: true}\n", c.name(i)))
				apply(t, memo, q)
				apply(t, exact, q)
			}
		}
		for round := range 30 {
			runChurnStep(t, rng, c, memo, exact)
			for _, p := range churnPods(round) {
				sameAsWithoutMemo(t, memo, exact, p, c.candidates())
				sameAsWithoutMemo(t, memo, exact, p, c.sent(round))
			}
		}
	}
}

// runChurnStep applies one random change to both engines.
func runChurnStep(t *testing.T, rng *rand.Rand, c *churnCluster, engines ...*opa.Engine) {
	t.Helper()
	i := rng.Intn(len(c.labels))
	var ch opa.Change
	switch op := rng.Intn(4); {
	case op == 0 && !c.gone[i]:
		c.gone[i] = true
		ch = opa.Change{Delete: &opa.ObjectRef{GroupVersionKind: c.object(i).GroupVersionKind(), Name: c.name(i)}}
	case op == 1:
		c.labels[i] = randomChurnLabels(rng)
		c.gone[i] = false
		ch = opa.Change{Object: c.object(i)}
	default:
		c.heartbeat[i]++
		c.gone[i] = false
		ch = opa.Change{Object: c.object(i)}
	}
	for _, e := range engines {
		if errs := e.Apply(context.Background(), []opa.Change{ch}); len(errs) > 0 {
			t.Fatalf("apply: %v", errs)
		}
	}
}

// TestNodeWritesRacingCalls writes heartbeats and label flips while
// requests run (-race checks the request path); every answer must be
// free of evaluation errors.
func TestNodeWritesRacingCalls(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	c := newChurnCluster(30, rng)
	memo, _ := churnEngines(t, c, map[string]string{"K8sTenantNode": tenantNodeRego, "K8sNamespaceTier": namespaceTierRego, "K8sZoneSpread": zoneSpreadRego})
	cands := c.candidates()
	ctx := context.Background()
	work := func(w, i int) error {
		res, err := memo.Evaluate(ctx, opa.PlacementRequest{Pod: pod([]string{"alpha", "beta"}[i%2], fmt.Sprintf("w%d-%d", w, i)), Candidates: cands})
		if err != nil {
			return err
		}
		defer res.Release()
		for n := range res.Nodes {
			for _, x := range res.Violations(n) {
				if x.Error {
					return fmt.Errorf("evaluation error: %s", x.Message)
				}
			}
		}
		return nil
	}
	writer := rand.New(rand.NewSource(4))
	change := func(i int) error {
		k := i % len(c.labels)
		n := churnNode(c.name(k), map[string]string{"tenant": []string{"alpha", "beta"}[writer.Intn(2)], "zone": "a", "ready": "true"}, i)
		if errs := memo.Apply(ctx, []opa.Change{{Object: n}}); len(errs) > 0 {
			return fmt.Errorf("apply: %v", errs)
		}
		return nil
	}
	churn(t, time.Second, time.Millisecond, 3, work, change)
}

// FuzzNodeChurn runs random sequences of Node changes and compares every
// answer with an engine without memo.
func FuzzNodeChurn(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7})
	f.Add([]byte{3, 3, 3, 0, 0, 9, 9, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 24 {
			ops = ops[:24]
		}
		c := newChurnCluster(6, rand.New(rand.NewSource(1)))
		memo, exact := churnEngines(t, c, map[string]string{"K8sTenantNode": tenantNodeRego, "K8sZoneSpread": zoneSpreadRego, "K8sNamespaceTier": namespaceTierRego})
		for step, op := range ops {
			runChurnStep(t, rand.New(rand.NewSource(int64(op))), c, memo, exact)
			sameAsWithoutMemo(t, memo, exact, pod([]string{"alpha", "beta"}[step%2], fmt.Sprintf("f-%d", step)), c.candidates())
		}
	})
}

// TestRequestNodesShareInventoryClasses: Nodes sent with a request (the
// scheduler's nodeCacheCapable: false) that equal, in what the policies
// read, the inventory's Nodes of the same names cost no evaluation once
// the inventory's classes are known, whatever else differs (heartbeats,
// managedFields); a sent Node that differs in a read label is judged as
// sent. Verdicts equal an engine's without memo.
func TestRequestNodesShareInventoryClasses(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		t.Run(map[bool]string{false: "objects", true: "JSON"}[asJSON], func(t *testing.T) {
			requestNodesShareInventoryClasses(t, asJSON)
		})
	}
}

// requestNodesShareInventoryClasses sends the Nodes as objects, or as the
// JSON the scheduler sends (opa.Candidate.JSON).
func requestNodesShareInventoryClasses(t *testing.T, asJSON bool) {
	rng := rand.New(rand.NewSource(11))
	c := newChurnCluster(30, rng)
	memo, exact := churnEngines(t, c, map[string]string{"K8sTenantNode": tenantNodeRego, "K8sNamespaceTier": namespaceTierRego})
	sent := func(mutate func(i int, n *unstructured.Unstructured)) []opa.Candidate {
		out := c.candidates()
		for i := range out {
			n := churnNode(c.name(i), c.labels[i], c.heartbeat[i]+100)
			n.SetManagedFields(nil)
			n.Object["metadata"].(map[string]any)["managedFields"] = []any{map[string]any{"manager": "kubelet", "operation": "Update"}}
			if mutate != nil {
				mutate(i, n)
			}
			out[i] = candidateOf(c.name(i), n, asJSON)
		}
		return out
	}
	for _, p := range churnPods(0) { // the inventory's classes, by name
		sameAsWithoutMemo(t, memo, exact, p, c.candidates())
	}
	cands := sent(nil)
	if n := evaluations(memo, func() {
		for _, p := range churnPods(1) {
			sameAsWithoutMemo(t, memo, exact, p, cands)
		}
	}); n != 0 {
		t.Fatalf("Nodes sent as the inventory holds them cost %d evaluations, want 0", n)
	}
	flipped := sent(func(i int, n *unstructured.Unstructured) {
		if i%10 == 0 {
			labels := n.GetLabels()
			labels["tenant"] = "sent-" + labels["tenant"]
			n.SetLabels(labels)
		}
	})
	for _, p := range churnPods(2) {
		got := sameAsWithoutMemo(t, memo, exact, p, flipped)
		found := false
		for _, line := range got {
			found = found || strings.Contains(line, "tenant sent-")
		}
		if !found {
			t.Fatalf("a sent Node's own label is not what the policy saw: %q", got)
		}
	}
}
