package gatekeeper

import (
	"fmt"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

const stateKey fwk.StateKey = Name

// blockSize is how many nodes of PreFilter's list are judged together the
// first time Filter or Score asks about one of them. With opportunistic
// batching the scheduler often filters a single hinted node: that costs
// one block, not the whole list; without it, blocks add up to the list.
const blockSize = 32

// cycleState is the pod prepared at PreFilter and where its node blocks'
// verdicts are kept: in blocks shared by the cycles of every pod with the
// same signature (same verdicts: the engine's memo keys, inventory and
// policy generations), and per cycle once rebound to this pod's printed
// values. Clone (preemption, nominated pods) shares the state; Filter and
// Score, run in parallel by the framework, take a block's lock only to
// judge it.
type cycleState struct {
	query  *opa.PodQuery
	nodes  *nodeIndex
	shared *classBlocks
	// rebound are the shared blocks as answers for this cycle's pod.
	rebound []block
	// infos is PreFilter's node list (in the index's order), for nodes
	// the engine has not received yet.
	infos []fwk.NodeInfo
	// denied is set by the first Filter call that denies a node.
	denied atomic.Bool
	// signable: shared holds the blocks of the pod's signature, not the
	// cycle's own; restricted: PreFilter handed out the allowed nodes.
	signable, restricted bool
}

// block is the verdict on one block of nodes, and the query it answers.
type block struct {
	mu      sync.Mutex // held while judging
	verdict atomic.Pointer[blockVerdict]
}

type blockVerdict struct {
	placement *opa.Placement
	by        *opa.PodQuery
}

// get is the block's placement, judged by judge on first need (readers
// of a judged block take no lock). Errors are not kept: a later caller
// judges again.
func (b *block) get(judge func() (*opa.Placement, *opa.PodQuery, error)) (*opa.Placement, *opa.PodQuery, error) {
	if v := b.verdict.Load(); v != nil {
		return v.placement, v.by, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if v := b.verdict.Load(); v != nil {
		return v.placement, v.by, nil
	}
	p, by, err := judge()
	if err != nil {
		return nil, nil, err
	}
	b.verdict.Store(&blockVerdict{placement: p, by: by})
	return p, by, nil
}

// Clone implements fwk.StateData.
func (s *cycleState) Clone() fwk.StateData { return s }

// classBlocks are the blocks judged for one signature on one node list.
type classBlocks struct {
	signature string
	index     *nodeIndex
	blocks    []block
	// allowed is the nodes policy allows the class (allowed.go).
	allowed allowedNodes
}

// maxClasses bounds the signatures whose blocks are kept: a few
// ReplicaSets scheduled in turn.
const maxClasses = 8

// blockCache keeps the classBlocks of the last maxClasses signatures.
type blockCache struct {
	mu      sync.Mutex
	entries []*classBlocks // most recent first
}

// of is the classBlocks for the signature on the index's list; signable
// false gives blocks of the cycle's own.
func (c *blockCache) of(signature string, signable bool, index *nodeIndex) *classBlocks {
	n := (len(index.names) + blockSize - 1) / blockSize
	if !signable {
		return &classBlocks{index: index, blocks: make([]block, n)}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, e := range c.entries {
		if e.signature == signature && e.index == index {
			copy(c.entries[1:i+1], c.entries[:i])
			c.entries[0] = e
			return e
		}
	}
	e := &classBlocks{signature: signature, index: index, blocks: make([]block, n)}
	if len(c.entries) < maxClasses {
		c.entries = append(c.entries, nil)
	}
	copy(c.entries[1:], c.entries)
	c.entries[0] = e
	return e
}

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

// nodeIndex maps nodes to their place in PreFilter's node list. The
// snapshot lists nodes in the same order from cycle to cycle until the
// node set changes (kube-scheduler then builds a new list), so the index
// is kept and reused while the list is the same.
type nodeIndex struct {
	names []string
	pos   map[string]int
	// byNode finds the snapshot's Node objects by pointer (informer
	// objects are never changed in place: one pointer is one version of
	// one Node), without hashing names; other objects (a Node updated
	// since the list was made) are found by name.
	byNode map[*v1.Node]int
	// list is the slice the index was built from: the same backing array
	// is the same list.
	list []fwk.NodeInfo
	// candidates are the names as the engine takes them (by name: the
	// engine's inventory holds the Nodes). Read only.
	candidates []opa.Candidate
}

func (x *nodeIndex) lookup(node *v1.Node) (int, bool) {
	if i, ok := x.byNode[node]; ok {
		return i, true
	}
	i, ok := x.pos[node.Name]
	return i, ok
}

// indexCache keeps the last nodeIndex.
type indexCache struct{ last atomic.Pointer[nodeIndex] }

func (c *indexCache) of(nodes []fwk.NodeInfo) *nodeIndex {
	if x := c.last.Load(); x != nil && (sameList(x.list, nodes) || sameNames(x.names, nodes)) {
		return x
	}
	x := &nodeIndex{list: nodes, names: make([]string, len(nodes)), pos: make(map[string]int, len(nodes)),
		byNode: make(map[*v1.Node]int, len(nodes)), candidates: make([]opa.Candidate, len(nodes))}
	for i, n := range nodes {
		node := n.Node()
		x.names[i] = node.Name
		x.candidates[i].Name = node.Name
		if _, dup := x.pos[node.Name]; !dup {
			x.pos[node.Name] = i
			x.byNode[node] = i
		}
	}
	c.last.Store(x)
	return x
}

// sameList reports whether b is the very slice a was (same array, same
// length): kube-scheduler never reorders a snapshot list in place.
func sameList(a, b []fwk.NodeInfo) bool {
	return len(a) == len(b) && len(a) > 0 && &a[0] == &b[0]
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
