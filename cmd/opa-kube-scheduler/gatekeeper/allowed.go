package gatekeeper

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
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
// (resources, the pod's own node selector), PostFilter's status gives the
// messages of the nodes policy left out, which kube-scheduler appends to
// its FailedScheduling message. The nodeMessages arg turns the set off.

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
func (pl *Plugin) preFilterResult(ctx context.Context, s *cycleState) (*fwk.PreFilterResult, error) {
	if pl.nodeMessages || !s.signable {
		return nil, nil
	}
	all, names, err := pl.allowed(ctx, s)
	if err != nil || all || names.Len() == 0 {
		return nil, err
	}
	return &fwk.PreFilterResult{NodeNames: names}, nil
}

// PostFilter implements fwk.PostFilterPlugin (after DefaultPreemption,
// which may still find room): for a pod that found no node among those
// PreFilter handed out, the status says why policy left out the others.
// kube-scheduler appends PostFilter reasons to its message, so the
// FailedScheduling event and the pod's PodScheduled condition name the
// constraints, where the framework alone says "didn't satisfy plugin(s)
// [OPAGatekeeper]". (A later cycle could not: the scheduler's events
// recorder keeps a pod's first FailedScheduling message and counts the
// later ones as its series.)
func (pl *Plugin) PostFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, _ fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	s, err := readState(state)
	if err != nil || !s.restricted {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	reasons, err := pl.deniedReasons(ctx, s)
	if err != nil {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	return nil, fwk.NewStatus(fwk.Unschedulable, reasons...)
}

// Bounds of PostFilter's reasons: the scheduler truncates its message at
// the event note's limit (1 kB), so a few distinct messages, each cut.
const (
	maxDeniedReasons   = 3
	maxDeniedReasonLen = 240
)

// deniedReasons summarises the nodes policy denies for the cycle's pod,
// from the blocks PreFilter judged: one reason per distinct message, most
// common first, "policy denies N node(s): [constraint] message".
func (pl *Plugin) deniedReasons(ctx context.Context, s *cycleState) ([]string, error) {
	var order []string
	count := map[string]int{}
	for k := range s.shared.blocks {
		p, err := pl.block(ctx, s, k)
		if err != nil {
			return nil, err
		}
		for j := range p.Nodes {
			if !p.Denied(j) {
				continue
			}
			msg := p.DenyMessage(j)
			if count[msg] == 0 {
				order = append(order, msg)
			}
			count[msg]++
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return count[order[a]] > count[order[b]] })
	var reasons []string
	rest := 0
	for i, msg := range order {
		if i >= maxDeniedReasons {
			rest += count[msg]
			continue
		}
		if len(msg) > maxDeniedReasonLen {
			msg = strings.ToValidUTF8(msg[:maxDeniedReasonLen], "") + "..."
		}
		reasons = append(reasons, fmt.Sprintf("policy denies %d node(s): %s", count[order[i]], msg))
	}
	if rest > 0 {
		reasons = append(reasons, fmt.Sprintf("policy denies %d more node(s) for other reasons", rest))
	}
	return reasons, nil
}
