package gatekeeper

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
	ready   func() (bool, string)
	index   indexCache
	requeue *requeuer
	metrics *profileMetrics
}

// policy is the part of the engine the extension points use.
type policy interface {
	Evaluate(ctx context.Context, req opa.PlacementRequest) (*opa.Placement, error)
	Stats() opa.Stats
}

var (
	_ policy                = (*opa.Engine)(nil)
	_ fwk.PreFilterPlugin   = (*Plugin)(nil)
	_ fwk.FilterPlugin      = (*Plugin)(nil)
	_ fwk.PreScorePlugin    = (*Plugin)(nil)
	_ fwk.ScorePlugin       = (*Plugin)(nil)
	_ fwk.EnqueueExtensions = (*Plugin)(nil)
)

// Name implements fwk.Plugin.
func (pl *Plugin) Name() string { return Name }

// PreFilter judges the pod on every node of the snapshot, once per cycle.
func (pl *Plugin) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if ok, why := pl.ready(); !ok {
		pl.requeue.rejected(pod)
		pl.metrics.rejectedPod(reasonNotReady)
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "policies not synced yet: "+why)
	}
	content, err := podContent(pod)
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	index := pl.index.of(nodes)
	p, err := pl.engine.Evaluate(ctx, opa.PlacementRequest{Pod: content, Candidates: index.candidates})
	if err != nil {
		return nil, fwk.AsStatus(fmt.Errorf("evaluate policies: %w", err))
	}
	if p, err = pl.judgeUnknown(ctx, content, nodes, p); err != nil {
		return nil, fwk.AsStatus(err)
	}
	state.Write(stateKey, &cycleState{placement: p, nodes: index, pod: content})
	pl.metrics.decisions(p)
	if denied, msg := p.PodDenied(); denied {
		pl.requeue.rejected(pod)
		pl.metrics.rejectedPod(reasonDenied)
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msg)
	}
	if !p.AnyDenied() {
		// Nothing to filter out: the framework skips this plugin's Filter.
		return nil, fwk.NewStatus(fwk.Skip)
	}
	pl.requeue.rejected(pod)
	return nil, nil
}

// judgeUnknown re-judges, with the scheduler's own Node objects, the nodes
// the engine's inventory has not received yet (a node just added): the
// verdict is then the same as once the inventory has it.
func (pl *Plugin) judgeUnknown(ctx context.Context, pod map[string]any, nodes []fwk.NodeInfo, p *opa.Placement) (*opa.Placement, error) {
	var cands []opa.Candidate
	for i := range p.Nodes {
		if !p.Nodes[i].Unknown {
			continue
		}
		if cands == nil {
			cands = make([]opa.Candidate, len(nodes))
			for j, n := range nodes {
				cands[j].Name = n.Node().Name
			}
		}
		obj, err := nodeContent(nodes[i].Node())
		if err != nil {
			return nil, err
		}
		cands[i].Object = obj
	}
	if cands == nil {
		return p, nil
	}
	p, err := pl.engine.Evaluate(ctx, opa.PlacementRequest{Pod: pod, Candidates: cands})
	if err != nil {
		return nil, fmt.Errorf("evaluate policies: %w", err)
	}
	return p, nil
}

// PreFilterExtensions implements fwk.PreFilterPlugin: the verdict does not
// depend on the pods on a node, so there is nothing to update.
func (pl *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter answers for one node from PreFilter's verdict.
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
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, p.DenyMessage(i))
	}
	return nil
}

// verdict is the placement and position of a node: PreFilter's, or, for a
// node its list did not hold (the nominated node of a pod, a node added
// since), the node judged alone with the scheduler's object.
func (pl *Plugin) verdict(ctx context.Context, s *cycleState, nodeInfo fwk.NodeInfo) (*opa.Placement, int, error) {
	node := nodeInfo.Node()
	if node == nil {
		return nil, 0, fmt.Errorf("node info without a node")
	}
	if i, ok := s.nodes.lookup(node.Name); ok {
		return s.placement, i, nil
	}
	obj, err := nodeContent(node)
	if err != nil {
		return nil, 0, err
	}
	p, err := pl.engine.Evaluate(ctx, opa.PlacementRequest{Pod: s.pod, Candidates: []opa.Candidate{{Name: node.Name, Object: obj}}})
	if err != nil {
		return nil, 0, fmt.Errorf("evaluate policies on node %s: %w", node.Name, err)
	}
	return p, 0, nil
}

// PreScore skips Score when no warn constraint matches the pod: every node
// would score the same.
func (pl *Plugin) PreScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	s, err := readState(state)
	if err != nil {
		return fwk.AsStatus(err)
	}
	if s.placement.MatchedWarnConstraints == 0 {
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

// podContent is the pod as the engine takes it (the extender decodes the
// same object from the scheduler's JSON).
func podContent(pod *v1.Pod) (map[string]any, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pod)
	if err != nil {
		return nil, fmt.Errorf("convert pod %s: %w", klog.KObj(pod), err)
	}
	m["apiVersion"], m["kind"] = "v1", "Pod"
	return m, nil
}

func nodeContent(node *v1.Node) (map[string]any, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(node)
	if err != nil {
		return nil, fmt.Errorf("convert node %s: %w", node.Name, err)
	}
	m["apiVersion"], m["kind"] = "v1", "Node"
	return m, nil
}
