package gatekeeper

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// Name is the plugin's name in profiles[].plugins and pluginConfig.
const Name = "OPAGatekeeper"

// scoreScale turns the engine's 0..10 score into the framework's 0..100
// (fwk.MaxNodeScore), as kube-scheduler scales an extender's prioritize
// score.
const scoreScale = fwk.MaxNodeScore / 10

// Plugin is the OPAGatekeeper plugin of one profile.
type Plugin struct {
	profile string
	engine  policy
	// pods decodes the scheduler's pods, remembering the last ones.
	pods    *opa.PodDecoder
	ready   func() (bool, string)
	index   indexCache
	requeue *requeuer
	metrics *profileMetrics
	signed  atomic.Pointer[signedPod]
	blocks  blockCache
	// nodeMessages: every node is judged in Filter (no PreFilterResult of
	// allowed nodes, see allowed.go).
	nodeMessages bool
}

// policy is the part of the engine the extension points use.
type policy interface {
	PreparePod(ctx context.Context, pod *opa.Pod) (*opa.PodQuery, error)
	Stats() opa.Stats
}

var (
	_ policy                = (*opa.Engine)(nil)
	_ fwk.PreFilterPlugin   = (*Plugin)(nil)
	_ fwk.FilterPlugin      = (*Plugin)(nil)
	_ fwk.PostFilterPlugin  = (*Plugin)(nil)
	_ fwk.PreScorePlugin    = (*Plugin)(nil)
	_ fwk.ScorePlugin       = (*Plugin)(nil)
	_ fwk.EnqueueExtensions = (*Plugin)(nil)
	_ fwk.SignPlugin        = (*Plugin)(nil)
)

// Name implements fwk.Plugin.
func (pl *Plugin) Name() string { return Name }

// PreFilter prepares the pod: it is matched against every constraint and
// judged on those that cannot see the node, once per cycle. Nodes are
// judged when Filter or Score first asks about them, a block at a time.
func (pl *Plugin) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if ok, why := pl.ready(); !ok {
		pl.requeue.rejected(pod, true)
		pl.metrics.rejectedPod(reasonNotReady)
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "policies not synced yet: "+why)
	}
	q, err := pl.prepare(ctx, pod)
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	index := pl.index.of(nodes)
	sig, signable := q.Signature()
	shared := pl.blocks.of(sig, signable, index)
	s := &cycleState{query: q, nodes: index, shared: shared, rebound: make([]block, len(shared.blocks)), infos: nodes, signable: signable}
	state.Write(stateKey, s)
	if denied, msg := q.PodDenied(); denied {
		pl.requeue.rejected(pod, false)
		pl.metrics.rejectedPod(reasonDenied)
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msg)
	}
	if !q.MayDenyNodes() {
		// No matched deny constraint sees the node: the framework skips
		// this plugin's Filter.
		return nil, fwk.NewStatus(fwk.Skip)
	}
	res, err := pl.preFilterResult(ctx, s)
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	if res != nil {
		// Denied somewhere, without a Filter call to say so: remembered
		// for a retry when the policy changes (requeue.go).
		s.denied.Store(true)
		s.restricted = true
		pl.requeue.rejected(pod, false)
	}
	return res, nil
}

// prepare is the engine's PodQuery for the pod: the one SignPod made for
// this very pod version under the same policy generation, or a new one.
func (pl *Plugin) prepare(ctx context.Context, pod *v1.Pod) (*opa.PodQuery, error) {
	if s := pl.signed.Load(); s != nil && s.uid == pod.UID && s.resourceVersion == pod.ResourceVersion && s.generation == pl.engine.Stats().PolicyGeneration {
		return s.query, nil
	}
	decoded, err := decodePod(pl.pods, pod)
	if err != nil {
		return nil, err
	}
	q, err := pl.engine.PreparePod(ctx, decoded)
	if err != nil {
		return nil, fmt.Errorf("evaluate policies: %w", err)
	}
	return q, nil
}

// signedPod is the PodQuery SignPod made, for PreFilter of the same cycle.
type signedPod struct {
	uid             types.UID
	resourceVersion string
	generation      uint64
	query           *opa.PodQuery
}

// signatureKey is this plugin's fragment of a pod's signature.
const signatureKey = "opa-scheduler-extender.OPAGatekeeper.PolicyClass()"

// SignPod implements fwk.SignPlugin, so that kube-scheduler's
// opportunistic batching stays on with this plugin enabled: pods whose
// verdicts are decided by the same values (the engine's memo keys, printed
// names left out) get the same fragment, and are denied on the same nodes
// and score the same. Pods whose verdicts the engine cannot key (a
// template with nondeterministic builtins, or one that keys on the node's
// name together with the pod) are not signed.
func (pl *Plugin) SignPod(ctx context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	if ok, _ := pl.ready(); !ok {
		return nil, fwk.NewStatus(fwk.Unschedulable, "policies not synced yet")
	}
	gen := pl.engine.Stats().PolicyGeneration
	decoded, err := decodePod(pl.pods, pod)
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	q, err := pl.engine.PreparePod(ctx, decoded)
	if err != nil {
		return nil, fwk.AsStatus(fmt.Errorf("evaluate policies: %w", err))
	}
	pl.signed.Store(&signedPod{uid: pod.UID, resourceVersion: pod.ResourceVersion, generation: gen, query: q})
	sig, ok := q.Signature()
	if !ok {
		return nil, fwk.NewStatus(fwk.Unschedulable, "the policies' verdicts depend on this pod itself")
	}
	return []fwk.SignFragment{{Key: signatureKey, Value: sig}}, nil
}

// PreFilterExtensions implements fwk.PreFilterPlugin: the verdict does not
// depend on the pods on a node, so there is nothing to update.
func (pl *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter answers for one node.
func (pl *Plugin) Filter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	s, err := readState(state)
	if err != nil {
		return fwk.AsStatus(err)
	}
	p, i, err := pl.verdict(ctx, s, nodeInfo)
	if err != nil {
		return fwk.AsStatus(err)
	}
	if p.Denied(i) {
		if s.denied.CompareAndSwap(false, true) {
			// Remembered once per cycle, for a retry when the policy
			// changes (requeue.go).
			pl.requeue.rejected(pod, false)
		}
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, p.DenyMessage(i))
	}
	return nil
}

// verdict is the placement and position of a node: its block's, judged
// on first need, or, for a node PreFilter's list did not hold (the
// nominated node of a pod, a node added since), the node judged alone
// with the scheduler's object.
func (pl *Plugin) verdict(ctx context.Context, s *cycleState, nodeInfo fwk.NodeInfo) (*opa.Placement, int, error) {
	node := nodeInfo.Node()
	if node == nil {
		return nil, 0, fmt.Errorf("node info without a node")
	}
	i, ok := s.nodes.lookup(node)
	if !ok {
		obj, err := nodeContent(node)
		if err != nil {
			return nil, 0, err
		}
		p, err := s.query.Evaluate(ctx, []opa.Candidate{{Name: node.Name, Object: obj}})
		if err != nil {
			return nil, 0, fmt.Errorf("evaluate policies on node %s: %w", node.Name, err)
		}
		return p, 0, nil
	}
	k := i / blockSize
	p, err := pl.block(ctx, s, k)
	if err != nil {
		return nil, 0, err
	}
	return p, i - k*blockSize, nil
}

// block is block k's verdict for this cycle's pod: the shared block's,
// judged by the first pod of the class that needed it, rebound to this
// pod. The judging is not cancelled with the cycle (Filter stops early
// once enough nodes pass): the block serves the class's later pods.
func (pl *Plugin) block(ctx context.Context, s *cycleState, k int) (*opa.Placement, error) {
	start, end := k*blockSize, min((k+1)*blockSize, len(s.nodes.names))
	judge := func() (*opa.Placement, *opa.PodQuery, error) {
		p, err := pl.judgeBlock(context.WithoutCancel(ctx), s, start, end)
		return p, s.query, err
	}
	p, by, err := s.shared.blocks[k].get(judge)
	if err != nil || by == s.query {
		return p, err
	}
	p, _, err = s.rebound[k].get(func() (*opa.Placement, *opa.PodQuery, error) {
		if mine, ok := s.query.Rebind(p); ok {
			return mine, s.query, nil
		}
		return judge()
	})
	return p, err
}

// judgeBlock judges nodes [start, end) of PreFilter's list. Nodes the
// engine's inventory has not received yet (a node just added) are judged
// with the scheduler's own Node objects: the verdict is then the same as
// once the inventory has them.
func (pl *Plugin) judgeBlock(ctx context.Context, s *cycleState, start, end int) (*opa.Placement, error) {
	cands := s.nodes.candidates[start:end]
	p, err := s.query.Evaluate(ctx, cands)
	if err != nil {
		return nil, fmt.Errorf("evaluate policies: %w", err)
	}
	var fixed []opa.Candidate
	for j := range p.Nodes {
		if !p.Nodes[j].Unknown {
			continue
		}
		if fixed == nil {
			fixed = append([]opa.Candidate(nil), cands...)
		}
		obj, err := nodeContent(s.infos[start+j].Node())
		if err != nil {
			return nil, err
		}
		fixed[j].Object = obj
	}
	if fixed != nil {
		if p, err = s.query.Evaluate(ctx, fixed); err != nil {
			return nil, fmt.Errorf("evaluate policies: %w", err)
		}
	}
	pl.metrics.decisions(p)
	return p, nil
}

// PreScore skips Score when no warn constraint matches the pod: every node
// would score the same.
func (pl *Plugin) PreScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	s, err := readState(state)
	if err != nil {
		return fwk.AsStatus(err)
	}
	if s.query.MatchedWarnConstraints() == 0 {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// Score is the extender's prioritize score, 0..10, times 10.
func (pl *Plugin) Score(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	s, err := readState(state)
	if err != nil {
		return 0, fwk.AsStatus(err)
	}
	p, i, err := pl.verdict(ctx, s, nodeInfo)
	if err != nil {
		return 0, fwk.AsStatus(err)
	}
	if p.Nodes[i].Unknown || p.Denied(i) {
		return fwk.MinNodeScore, nil
	}
	return min(fwk.MaxNodeScore, max(fwk.MinNodeScore, p.Score(i)*scoreScale)), nil
}

// ScoreExtensions implements fwk.ScorePlugin: scores are already 0..100.
func (pl *Plugin) ScoreExtensions() fwk.ScoreExtensions { return nil }

// decodePod is the pod as the engine takes it: its JSON (what the
// extender receives from the scheduler) read straight into the engine's
// values, which costs half the bytes of converting it to unstructured
// content and that to values. The scheduler's pods come from an informer
// and carry no apiVersion and kind: they are set on a shallow copy (the
// scheduler's object is shared and must not change), so that the JSON is
// the object's as the API server would write it.
func decodePod(pods *opa.PodDecoder, pod *v1.Pod) (*opa.Pod, error) {
	typed := *pod
	typed.APIVersion, typed.Kind = "v1", "Pod"
	b, err := json.Marshal(&typed)
	if err != nil {
		return nil, fmt.Errorf("convert pod %s: encode JSON: %w", klog.KObj(pod), err)
	}
	decoded, err := pods.Decode(b)
	if err != nil {
		return nil, fmt.Errorf("convert pod %s: %w", klog.KObj(pod), err)
	}
	return decoded, nil
}

func nodeContent(node *v1.Node) (map[string]any, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(node)
	if err != nil {
		return nil, fmt.Errorf("convert node %s: %w", node.Name, err)
	}
	m["apiVersion"], m["kind"] = "v1", "Node"
	return m, nil
}
