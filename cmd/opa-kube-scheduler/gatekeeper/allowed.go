package gatekeeper

import (
	"context"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// Allowed nodes. A node a deny constraint forbids costs the scheduler more
// than this plugin's Filter call: every Filter plugin before it runs on
// the node, the framework keeps its status, and the scheduler visits more
// nodes to find as many feasible ones as it would without policy. So, for
// a pod whose verdicts the engine can sign, PreFilter hands the scheduler
// the nodes policy allows (a PreFilterResult, judged once per signature
// and node list, shared by every pod of the class) and no plugin visits
// the others. kube-scheduler reports the others as "node(s) didn't
// satisfy plugin(s) [OPAGatekeeper]" instead of the constraints' messages,
// so a pod that finds no node keeps its reasons two ways: when policy
// allows no node at all, no set is handed out and each node is judged in
// Filter with its message; when the allowed nodes fail for other reasons
// (resources, the pod's own node selector), PostFilter activates the pod
// again and its later cycles judge every node in Filter (explained), so
// that its FailedScheduling event names each denied node's constraint. The
// nodeMessages arg turns the set off.

// allowedNodes is the names of the nodes policy allows for the class,
// judged on first need; all is true when it allows every node (no
// PreFilterResult needed), and the set is empty when it allows none.
type allowedNodes struct {
	mu    sync.Mutex
	done  bool
	all   bool
	names sets.Set[string]
}

// allowed judges every block of the class (the shared blocks Filter would
// judge anyway) and keeps the result in the class's blocks. Errors are
// not kept: the next cycle judges again.
func (pl *Plugin) allowed(ctx context.Context, s *cycleState) (all bool, names sets.Set[string], err error) {
	a := &s.shared.allowed
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done {
		return a.all, a.names, nil
	}
	names = sets.New[string]()
	all = true
	for k := range s.shared.blocks {
		p, err := pl.block(ctx, s, k)
		if err != nil {
			return false, nil, err
		}
		for j := range p.Nodes {
			if p.Denied(j) {
				all = false
			} else {
				names.Insert(s.nodes.names[k*blockSize+j])
			}
		}
	}
	a.done, a.all, a.names = true, all, names
	return all, names, nil
}

// preFilterResult is PreFilter's node set for a signable pod: nil when
// every node is allowed, or none (Filter then writes each node's reason).
func (pl *Plugin) preFilterResult(ctx context.Context, s *cycleState, pod *v1.Pod) (*fwk.PreFilterResult, error) {
	if pl.nodeMessages || !s.signable || pl.explained.has(pod.UID) {
		return nil, nil
	}
	all, names, err := pl.allowed(ctx, s)
	if err != nil || all || names.Len() == 0 {
		return nil, err
	}
	return &fwk.PreFilterResult{NodeNames: names}, nil
}

// PostFilter implements fwk.PostFilterPlugin (after DefaultPreemption,
// which may still find room): a pod that found no node among those
// PreFilter handed out is activated again, to be judged node by node.
func (pl *Plugin) PostFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, _ fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	s, err := readState(state)
	if err == nil && s.restricted && pl.explained.add(pod.UID) {
		pl.requeue.activate(klog.FromContext(ctx), map[types.UID]*v1.Pod{pod.UID: pod}, requeueExplain)
	}
	return nil, fwk.NewStatus(fwk.Unschedulable)
}

// maxExplained bounds the pods remembered as judged node by node.
const maxExplained = 4096

// explainedPods are the pods whose cycles judge every node in Filter,
// oldest first out.
type explainedPods struct {
	mu    sync.Mutex
	set   map[types.UID]struct{}
	order []types.UID
}

func (e *explainedPods) has(uid types.UID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.set[uid]
	return ok
}

// add remembers uid; false if it already was.
func (e *explainedPods) add(uid types.UID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.set[uid]; ok {
		return false
	}
	if e.set == nil {
		e.set = map[types.UID]struct{}{}
	}
	if len(e.order) >= maxExplained {
		delete(e.set, e.order[0])
		e.order = e.order[1:]
	}
	e.set[uid] = struct{}{}
	e.order = append(e.order, uid)
	return true
}
