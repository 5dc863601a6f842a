package gatekeeper

import (
	"fmt"
	"sync/atomic"

	fwk "k8s.io/kube-scheduler/framework"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

const stateKey fwk.StateKey = Name

// cycleState is the pod's verdict from PreFilter, read by Filter, PreScore
// and Score. It is never changed after PreFilter, so Clone (preemption,
// nominated pods) shares it, and Filter and Score, run in parallel by the
// framework, read it without locks.
type cycleState struct {
	placement *opa.Placement
	nodes     *nodeIndex
	// pod is the pod's content as the engine takes it, for nodes the
	// verdict does not cover (judged one at a time).
	pod map[string]any
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
