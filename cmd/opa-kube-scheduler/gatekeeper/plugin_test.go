package gatekeeper

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/opatest"
)

// tablePath is the enforcement table the extender's tests run too.
const tablePath = "../../../server/testdata/enforcement.yaml"

// testMetrics are the plugin's series without an engine collector.
func testMetrics() *profileMetrics {
	m, err := newProfileMetrics("test", nil)
	if err != nil {
		panic(err)
	}
	return m
}

// tableEngine is the enforcement table and an engine with its objects,
// closed when the test ends.
func tableEngine(t *testing.T) (*opatest.EnforcementTable, *opa.Engine) {
	t.Helper()
	table, err := opatest.ReadEnforcementTable(tablePath)
	if err != nil {
		t.Fatal(err)
	}
	engine, err := table.Engine(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { engine.Close(context.Background()) })
	return table, engine
}

// fakeActivator records Activate calls.
type fakeActivator struct {
	mu    sync.Mutex
	calls []map[string]*v1.Pod
}

func (f *fakeActivator) Activate(_ klog.Logger, pods map[string]*v1.Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, pods)
}

func (f *fakeActivator) activated() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		for k := range c {
			out = append(out, k)
		}
	}
	return out
}

// testPlugin is a plugin over engine, always ready.
func testPlugin(engine policy) *Plugin {
	ready := func() (bool, string) { return true, "" }
	pl := &Plugin{profile: "test", engine: engine, pods: opa.NewPodDecoder(), ready: ready, metrics: testMetrics()}
	pl.requeue = newRequeuer(&fakeActivator{}, engine, ready, pl.metrics)
	return pl
}

func nodeInfos(nodes []*v1.Node) []fwk.NodeInfo {
	out := make([]fwk.NodeInfo, len(nodes))
	for i, n := range nodes {
		ni := framework.NewNodeInfo()
		ni.SetNode(n)
		out[i] = ni
	}
	return out
}

// cycle is one scheduling cycle's answers from the plugin, as the
// framework would collect them.
type cycle struct {
	preFilter *fwk.Status
	// result is PreFilter's node set (nil: all nodes). Filter is still
	// called on every node, so that tests see each node's verdict.
	result *fwk.PreFilterResult
	denied map[string]string // Filter's message per denied node
	scores map[string]int64  // Score per node that passed (nil: PreScore skipped)
}

func runCycle(t *testing.T, pl *Plugin, pod *v1.Pod, nodes []fwk.NodeInfo) cycle {
	t.Helper()
	ctx := context.Background()
	state := framework.NewCycleState()
	var c cycle
	if c.result, c.preFilter = pl.PreFilter(ctx, state, pod, nodes); !c.preFilter.IsSuccess() && !c.preFilter.IsSkip() {
		return c
	}
	c.denied = map[string]string{}
	var passed []fwk.NodeInfo
	for _, n := range nodes {
		if c.preFilter.IsSkip() {
			passed = append(passed, n)
			continue
		}
		st := pl.Filter(ctx, state, pod, n)
		switch st.Code() {
		case fwk.Success:
			passed = append(passed, n)
		case fwk.UnschedulableAndUnresolvable:
			c.denied[n.Node().Name] = st.Message()
		default:
			t.Fatalf("Filter on %s: %v", n.Node().Name, st)
		}
	}
	if st := pl.PreScore(ctx, state, pod, passed); st.IsSkip() {
		return c
	} else if !st.IsSuccess() {
		t.Fatalf("PreScore: %v", st)
	}
	c.scores = map[string]int64{}
	for _, n := range passed {
		s, st := pl.Score(ctx, state, pod, n)
		if !st.IsSuccess() {
			t.Fatalf("Score on %s: %v", n.Node().Name, st)
		}
		c.scores[n.Node().Name] = s
	}
	return c
}

// TestEnforcementTable runs the extender's enforcement table through the
// extension points: same denials, same messages, scores ten times the
// extender's.
func TestEnforcementTable(t *testing.T) {
	table, engine := tableEngine(t)
	pl := testPlugin(engine)
	nodes := nodeInfos(table.NodeObjects())
	for _, tc := range table.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			c := runCycle(t, pl, tc.PodObject(), nodes)
			if tc.RejectedEverywhere != "" {
				if c.preFilter.Code() != fwk.UnschedulableAndUnresolvable || c.preFilter.Message() != tc.RejectedEverywhere {
					t.Errorf("PreFilter: %v, want UnschedulableAndUnresolvable %q", c.preFilter, tc.RejectedEverywhere)
				}
				return
			}
			if !c.preFilter.IsSuccess() {
				t.Fatalf("PreFilter: %v", c.preFilter)
			}
			checkAllowedNodes(t, c, nodes)
			for n, want := range tc.Want {
				if got := c.denied[n]; got != want.Denied {
					t.Errorf("node %s: deny message %q, want %q", n, got, want.Denied)
				}
				if want.Denied == "" {
					got := int64(fwk.MaxNodeScore)
					if c.scores != nil {
						got = c.scores[n]
					}
					if got != want.Score*scoreScale {
						t.Errorf("node %s: score %d, want %d", n, got, want.Score*scoreScale)
					}
				}
			}
		})
	}
}

// checkAllowedNodes: PreFilter's node set is exactly the nodes Filter
// passes, when Filter denies some but not all; else there is none, and
// Filter says why for each node.
func checkAllowedNodes(t *testing.T, c cycle, nodes []fwk.NodeInfo) {
	t.Helper()
	passed := sets.New[string]()
	for _, n := range nodes {
		if _, denied := c.denied[n.Node().Name]; !denied {
			passed.Insert(n.Node().Name)
		}
	}
	some := len(c.denied) > 0 && passed.Len() > 0
	switch {
	case some && c.result == nil:
		t.Errorf("Filter denies %d nodes and passes %d, but PreFilter handed out no node set", len(c.denied), passed.Len())
	case !some && c.result != nil:
		t.Errorf("PreFilter handed out %v, but Filter denies %d nodes and passes %d", sets.List(c.result.NodeNames), len(c.denied), passed.Len())
	case c.result != nil && !c.result.NodeNames.Equal(passed):
		t.Errorf("PreFilter's nodes %v, Filter passes %v", sets.List(c.result.NodeNames), sets.List(passed))
	}
}

// TestNodeMessagesArg: with nodeMessages, PreFilter hands out no node set,
// so that every denied node is judged in Filter with its message.
func TestNodeMessagesArg(t *testing.T) {
	table, engine := tableEngine(t)
	pl := testPlugin(engine)
	pl.nodeMessages = true
	nodes := nodeInfos(table.NodeObjects())
	denials := 0
	for _, tc := range table.Cases {
		c := runCycle(t, pl, tc.PodObject(), nodes)
		if c.result != nil {
			t.Errorf("%s: PreFilter handed out %v with nodeMessages", tc.Name, sets.List(c.result.NodeNames))
		}
		denials += len(c.denied)
	}
	if denials == 0 {
		t.Error("no case denies a node: the test shows nothing")
	}
}

// TestPostFilterNamesTheDeniedNodes: for a pod that found no node among
// those PreFilter handed out, PostFilter's status gives the messages of
// the nodes policy left out (kube-scheduler appends them to its
// FailedScheduling message), and activates nothing.
func TestPostFilterNamesTheDeniedNodes(t *testing.T) {
	table, engine := tableEngine(t)
	pl := testPlugin(engine)
	act := &fakeActivator{}
	pl.requeue.activator = act
	nodes := nodeInfos(table.NodeObjects())
	ctx := context.Background()
	for _, tc := range table.Cases {
		pod := tc.PodObject()
		state := framework.NewCycleState()
		res, st := pl.PreFilter(ctx, state, pod, nodes)
		if res == nil || !st.IsSuccess() {
			continue // denied nowhere, or everywhere: nothing handed out
		}
		_, st = pl.PostFilter(ctx, state, pod, nil)
		if st.Code() != fwk.Unschedulable {
			t.Errorf("%s: PostFilter %v, want Unschedulable (it finds no room itself)", tc.Name, st)
		}
		c := runCycle(t, pl, pod, nodes)
		msg := st.Message()
		for node, why := range c.denied {
			if len(c.denied) <= maxDeniedReasons && !strings.Contains(msg, why) {
				t.Errorf("%s: PostFilter says %q, which leaves out node %s's %q", tc.Name, msg, node, why)
			}
		}
		if want := fmt.Sprintf("policy denies %d node(s)", len(c.denied)); len(c.denied) == 1 && !strings.Contains(msg, want) {
			t.Errorf("%s: PostFilter says %q, want %q", tc.Name, msg, want)
		}
		if got := act.activated(); len(got) != 0 {
			t.Errorf("%s: activated %v", tc.Name, got)
		}
		// A cycle without a node set has nothing to add.
		state = framework.NewCycleState()
		pl.nodeMessages = true
		pl.PreFilter(ctx, state, pod, nodes)
		if _, st := pl.PostFilter(ctx, state, pod, nil); st.Message() != "" {
			t.Errorf("%s: PostFilter after a cycle that judged every node says %q", tc.Name, st.Message())
		}
		return
	}
	t.Fatal("no case is denied on some nodes only: the test shows nothing")
}

// TestNodesTheEngineHasNotSeen: a node in the scheduler's snapshot that
// the engine's inventory does not hold yet, and a node outside PreFilter's
// list (a nominated node), are judged with the scheduler's own object.
func TestNodesTheEngineHasNotSeen(t *testing.T) {
	table, engine := tableEngine(t)
	ctx := context.Background()
	pl := testPlugin(engine)
	pod := table.Cases[0].PodObject()
	fresh := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "fresh-spot", Labels: map[string]string{"lifecycle": "spot"}}}
	nodes := nodeInfos(append(table.NodeObjects(), fresh))
	c := runCycle(t, pl, pod, nodes)
	if want := "[no-spot] node fresh-spot has lifecycle=spot, pod " + pod.Name + " may not run there"; c.denied["fresh-spot"] != want {
		t.Errorf("a node new to the engine: %q, want %q", c.denied["fresh-spot"], want)
	}

	state := framework.NewCycleState()
	if _, st := pl.PreFilter(ctx, state, pod, nodeInfos(table.NodeObjects())); !st.IsSuccess() {
		t.Fatalf("PreFilter: %v", st)
	}
	outside := nodeInfos([]*v1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "nominated", Labels: map[string]string{"zone": "z3"}}}})[0]
	if st := pl.Filter(ctx, state, pod, outside); st.Code() != fwk.UnschedulableAndUnresolvable || !strings.HasPrefix(st.Message(), "[scoped-here] node nominated") {
		t.Errorf("a node outside PreFilter's list: %v, want the scoped-here denial", st)
	}
}

// TestNotReady: until its sources have synced, the plugin rejects every
// pod as unresolvable (no preemption), remembers it, and activates it
// once ready.
func TestNotReady(t *testing.T) {
	table, engine := tableEngine(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	ready := false
	check := func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return ready, "cluster sync: constrainttemplates"
	}
	act := &fakeActivator{}
	pl := &Plugin{profile: "test", engine: engine, ready: check, metrics: testMetrics()}
	pl.requeue = newRequeuer(act, engine, check, pl.metrics)
	pl.requeue.interval = 5 * time.Millisecond
	go pl.requeue.run(ctx)
	pod := table.Cases[0].PodObject()
	_, st := pl.PreFilter(ctx, framework.NewCycleState(), pod, nodeInfos(table.NodeObjects()))
	if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), "policies not synced yet: cluster sync: constrainttemplates") {
		t.Errorf("PreFilter before the sync: %v", st)
	}
	mu.Lock()
	ready = true
	mu.Unlock()
	waitFor(t, "the pod activated once ready", func() bool { return len(act.activated()) == 1 })
	if got := act.activated()[0]; got != pod.Namespace+"/"+pod.Name {
		t.Errorf("activated %q", got)
	}
}

// TestPolicyChangeActivatesRejectedPods: pods denied somewhere are
// activated when the policy generation moves; a Namespace change
// activates that namespace's pods only, once the engine has applied
// something after it.
func TestPolicyChangeActivatesRejectedPods(t *testing.T) {
	// The Namespace change is applied 60ms after it arrived (a busy
	// cluster: a later apply than the change's own), or 20ms after (a
	// quiet one: the change's own apply, within the source's batch
	// window, is the last).
	for _, delay := range []time.Duration{60 * time.Millisecond, 20 * time.Millisecond} {
		t.Run(fmt.Sprintf("namespace applied after %s", delay), func(t *testing.T) {
			requeueAfterChanges(t, delay)
		})
	}
}

func requeueAfterChanges(t *testing.T, namespaceDelay time.Duration) {
	table, engine := tableEngine(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	act := &fakeActivator{}
	pl := testPlugin(engine)
	pl.requeue = newRequeuer(act, engine, pl.ready, pl.metrics)
	pl.requeue.interval = 5 * time.Millisecond
	nodes := nodeInfos(table.NodeObjects())
	for _, tc := range table.Cases[:3] {
		runCycle(t, pl, tc.PodObject(), nodes)
	}
	go pl.requeue.run(ctx)

	pl.requeue.namespaceChanged("tenant-a")
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": "tenant-a", "labels": map[string]any{"tier": "gold"}}}}
	time.Sleep(namespaceDelay)
	if errs := engine.Apply(ctx, []opa.Change{{Object: ns}}); len(errs) > 0 {
		t.Fatal(errs)
	}
	waitFor(t, "tenant-a's pod activated", func() bool { return len(act.activated()) == 1 })
	if got := act.activated(); got[0] != "tenant-a/api-0" {
		t.Errorf("a Namespace change activated %v, want tenant-a/api-0 only", got)
	}

	con := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": "K8sNodeLabeled",
		"metadata": map[string]any{"name": "new-one"}, "spec": map[string]any{"parameters": map[string]any{"key": "x", "value": "y"}}}}
	if errs := engine.Apply(ctx, []opa.Change{{Object: con}}); len(errs) > 0 {
		t.Fatal(errs)
	}
	waitFor(t, "the other rejected pods activated", func() bool { return len(act.activated()) == 3 })
	got := strings.Join(act.activated()[1:], ",")
	for _, want := range []string{"default/web-7d9f-x2x4z", "strict/batch-1"} {
		if !strings.Contains(got, want) {
			t.Errorf("the policy change activated %s, want %s among them", got, want)
		}
	}
}

// TestConcurrentCyclesWithPolicyChurn runs cycles whose Filter and Score
// calls run in parallel, as the framework runs them, while constraints
// change underneath (go test -race).
func TestConcurrentCyclesWithPolicyChurn(t *testing.T) {
	table, engine := tableEngine(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pl := testPlugin(engine)
	nodes := nodeInfos(table.NodeObjects())
	var churn sync.WaitGroup
	churn.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			con := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": "K8sNodeLabeled",
				"metadata": map[string]any{"name": "churn"}, "spec": map[string]any{"enforcementAction": []string{"deny", "warn"}[i%2],
					"parameters": map[string]any{"key": "zone", "value": fmt.Sprintf("z%d", i%4)}}}}
			if errs := engine.Apply(ctx, []opa.Change{{Object: con}}); len(errs) > 0 {
				t.Error(errs)
				return
			}
		}
	})
	var cycles sync.WaitGroup
	for w := range 4 {
		cycles.Go(func() {
			for i := range 50 {
				pod := table.Cases[i%len(table.Cases)].PodObject()
				pod.Name = fmt.Sprintf("%s-%d-%d", pod.Name, w, i)
				state := framework.NewCycleState()
				if _, st := pl.PreFilter(ctx, state, pod, nodes); !st.IsSuccess() && !st.IsSkip() && st.Code() != fwk.UnschedulableAndUnresolvable {
					t.Errorf("PreFilter: %v", st)
					return
				}
				if _, err := readState(state); err != nil {
					continue // rejected at PreFilter before the state was written
				}
				var par sync.WaitGroup
				for _, n := range nodes {
					par.Go(func() {
						if st := pl.Filter(ctx, state, pod, n); st.Code() == fwk.Error {
							t.Errorf("Filter: %v", st)
						}
						if s, st := pl.Score(ctx, state, pod, n); !st.IsSuccess() || s < 0 || s > fwk.MaxNodeScore {
							t.Errorf("Score: %d %v", s, st)
						}
					})
				}
				par.Wait()
			}
		})
	}
	cycles.Wait()
	cancel()
	churn.Wait()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
