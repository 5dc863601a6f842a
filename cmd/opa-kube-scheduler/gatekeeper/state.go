package gatekeeper

import (
	"fmt"
	"sync"
	"sync/atomic"

	fwk "k8s.io/kube-scheduler/framework"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

const stateKey fwk.StateKey = Name

// blockSize is how many nodes of PreFilter's list are judged together the
// first time Filter or Score asks about one of them. With opportunistic
// batching the scheduler often filters a single hinted node: that costs
// one block, not the whole list; without it, blocks add up to the list.
const blockSize = 32

// cycleState is the pod prepared at PreFilter, and the verdicts of the
// node blocks judged so far, read by Filter, PreScore and Score. Blocks
// are judged once (sync.Once) and never changed, so Clone (preemption,
// nominated pods) shares the state, and Filter and Score, run in parallel
// by the framework, read it without other locks.
type cycleState struct {
	query  *opa.PodQuery
	nodes  *nodeIndex
	blocks []block
	// pod is the pod's content as the engine takes it.
	pod map[string]any
	// infos is PreFilter's node list (in the index's order), for nodes
	// the engine has not received yet.
	infos []fwk.NodeInfo
}

type block struct {
	once      sync.Once
	placement *opa.Placement
	err       error
}

// Clone implements fwk.StateData.
func (s *cycleState) Clone() fwk.StateData { return s }

func readState(state fwk.CycleState) (*cycleState, error) {
	d, err := state.Read(stateKey)
	if err != nil {
		return nil, fmt.Errorf("read %s cycle state: %w", Name, err)
	}
	s, ok := d.(*cycleState)
	if !ok {
		return nil, fmt.Errorf("%s cycle state has type %T", Name, d)
	}
	return s, nil
}

// nodeIndex maps node names to their place in PreFilter's node list. The
// snapshot lists nodes in the same order from cycle to cycle until the
// node set changes, so the index is kept and reused while the names match
// (comparing names is cheaper than building a map per pod).
type nodeIndex struct {
	names []string
	pos   map[string]int
	// candidates are the names as the engine takes them (by name: the
	// engine's inventory holds the Nodes). Read only.
	candidates []opa.Candidate
}

func (x *nodeIndex) lookup(name string) (int, bool) {
	i, ok := x.pos[name]
	return i, ok
}

// indexCache keeps the last nodeIndex.
type indexCache struct{ last atomic.Pointer[nodeIndex] }

func (c *indexCache) of(nodes []fwk.NodeInfo) *nodeIndex {
	if x := c.last.Load(); x != nil && sameNames(x.names, nodes) {
		return x
	}
	x := &nodeIndex{names: make([]string, len(nodes)), pos: make(map[string]int, len(nodes)), candidates: make([]opa.Candidate, len(nodes))}
	for i, n := range nodes {
		name := n.Node().Name
		x.names[i] = name
		x.candidates[i].Name = name
		if _, dup := x.pos[name]; !dup {
			x.pos[name] = i
		}
	}
	c.last.Store(x)
	return x
}

func sameNames(names []string, nodes []fwk.NodeInfo) bool {
	if len(names) != len(nodes) {
		return false
	}
	for i, n := range nodes {
		if names[i] != n.Node().Name {
			return false
		}
	}
	return true
}
