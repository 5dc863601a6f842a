package opa

import (
	"bytes"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/policyset"
)

// Answers reused between the verbs of one scheduling cycle. kube-scheduler
// calls filter with the pod and its candidates, then prioritize with the
// same pod and the candidates that passed: the second answer is the first
// one for fewer nodes. A request with ReuseKeep (the extender's filter)
// leaves its answer in Engine.recent; one with ReuseTake (prioritize,
// whose answer can only change scores, never deny a node) gets it,
// restricted to its candidates, when nothing the verdicts depend on can
// have changed:
//
//   - the pod is the same *Pod: a PodDecoder gives the pod it made moments
//     before for the same JSON, byte for byte (podCache), and a Pod is
//     never changed once made;
//   - the candidates are all named, none carried as an object, and all
//     were candidates of the kept answer (an unknown node stays unknown:
//     the inventory did not change);
//   - the policy set and the inventory are those in force now: the same
//     snapshot (the very value; generation numbers are unique within an
//     engine, but the value needs no argument) and the same inventory
//     generation, read in the request's own store transaction;
//   - the kept answer is repeatable: no constraint it judged calls a
//     nondeterministic builtin, and its request's context was not done
//     (no verdict was cut short by a deadline);
//   - neither request asked for explain, and the engine has its memo (an
//     engine without it is the reference, which evaluates every review).
//
// Only what Evaluate computed is shared: the restricted answer has its own
// node list, and reads the kept answer's columns (read-only once made)
// through its own index.

// recentAnswers is how many answers Evaluate keeps, and recentPods how
// many pods a PodDecoder remembers: one per scheduler profile or replica
// calling at once is plenty.
const (
	recentAnswers = 4
	recentPods    = 4
)

var podDigestSeed = maphash.MakeSeed()

// podDigest finds a pod's JSON among the remembered ones quickly; the
// bytes themselves are compared before a pod is given out.
type podDigest struct {
	sum  uint64
	size int
}

func digestOf(b []byte) podDigest {
	return podDigest{sum: maphash.Bytes(podDigestSeed, b), size: len(b)}
}

// podCache are the pods a PodDecoder made last, with the JSON they were
// read from (a copy: the caller's buffer is reused).
type podCache struct {
	mu   sync.Mutex
	pods [recentPods]struct {
		digest podDigest
		src    []byte
		pod    *Pod
	}
	next int
}

func (c *podCache) find(d podDigest, b []byte) *Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.pods {
		if e := &c.pods[i]; e.pod != nil && e.digest == d && bytes.Equal(e.src, b) {
			return e.pod
		}
	}
	return nil
}

func (c *podCache) add(d podDigest, b []byte, p *Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := &c.pods[c.next]
	// The evicted entry's buffer takes the copy: only find reads it, under
	// the lock, and a decoded pod holds none of its bytes.
	e.digest, e.src, e.pod = d, append(e.src[:0], b...), p
	c.next = (c.next + 1) % recentPods
}

type keptAnswer struct {
	pod       *Pod
	snap      *policyset.Snapshot
	inventory ast.Value
	p         *Placement
	once      sync.Once
	index     map[string]int // node name -> index in p.Nodes, built on first need (positions)
}

type recent struct {
	mu      sync.Mutex
	answers [recentAnswers]*keptAnswer
	next    int
	reused  atomic.Uint64
}

// reusable reports whether req may take or give a kept answer.
func (e *Engine) reusable(req PlacementRequest) bool {
	if req.Reuse == ReuseNone || req.Explain || e.opts.DisableMemo || len(req.Candidates) == 0 {
		return false
	}
	for i := range req.Candidates {
		if req.Candidates[i].Object != nil || req.Candidates[i].JSON != nil {
			return false
		}
	}
	return true
}

// reuse gives a kept answer for pod under the policy set and inventory
// generation in force, restricted to cands, or nil.
func (c *recent) reuse(snap *policyset.Snapshot, inventory ast.Value, pod *Pod, cands []Candidate) *Placement {
	if inventory == nil {
		return nil
	}
	c.mu.Lock()
	var k *keptAnswer
	for _, a := range c.answers {
		if a != nil && a.pod == pod && a.snap == snap && a.inventory.Compare(inventory) == 0 {
			k = a
			break
		}
	}
	// The reference the restricted answer will hold, taken while the
	// kept one's keeps k.p alive.
	if k != nil && !k.p.retain() {
		k = nil
	}
	c.mu.Unlock()
	if k == nil {
		return nil
	}
	buf := k.p.mem.pools.positions.Get()
	defer k.p.mem.pools.positions.Put(buf)
	idx, ok := k.positions(cands, *buf)
	*buf = idx
	if !ok {
		k.p.Release()
		return nil
	}
	c.reused.Add(1)
	return k.p.restrict(idx)
}

// positions gives each candidate's index in the kept answer, false when
// one is not there. kube-scheduler sends prioritize the nodes that passed
// filter, in filter's order: a walk along the kept nodes finds them
// without an index; a list in another order builds the index once.
func (k *keptAnswer) positions(cands []Candidate, buf []int) ([]int, bool) {
	idx := resize(buf, len(cands))
	nodes := k.p.Nodes
	i := 0
	for j := range cands {
		for i < len(nodes) && nodes[i].Name != cands[j].Name {
			i++
		}
		if i == len(nodes) {
			return k.indexed(cands, idx)
		}
		idx[j] = i
		i++
	}
	return idx, true
}

func (k *keptAnswer) indexed(cands []Candidate, idx []int) ([]int, bool) {
	k.once.Do(func() {
		k.index = make(map[string]int, len(k.p.Nodes))
		for i := range k.p.Nodes {
			k.index[k.p.Nodes[i].Name] = i
		}
	})
	for j := range cands {
		i, ok := k.index[cands[j].Name]
		if !ok {
			return nil, false
		}
		idx[j] = i
	}
	return idx, true
}

// keep remembers p, r's answer, when it is repeatable.
func (c *recent) keep(r *request, pod *Pod, p *Placement) {
	if r.unrepeatable || r.ctx.Err() != nil || r.invGen.Value == nil {
		return
	}
	if !p.retain() {
		return // its memory is not counted: a restricted answer could not share it
	}
	k := &keptAnswer{pod: pod, snap: r.snap, inventory: r.invGen.Value, p: p}
	c.mu.Lock()
	old := c.answers[c.next]
	c.answers[c.next] = k
	c.next = (c.next + 1) % recentAnswers
	c.mu.Unlock()
	if old != nil {
		old.p.Release()
	}
}

// restrict is p for the nodes at idx (indexes into p.Nodes, in the new
// answer's order): the same verdicts, no evaluation of its own. The
// columns and their cells are p's, read through the new answer's at (a
// prioritize call at 5000 candidates copied half a megabyte of cells
// before); the new answer holds a reference on p, which the caller took.
func (p *Placement) restrict(idx []int) *Placement {
	out := p.mem.pools.newPlacement(len(idx))
	out.Common = p.Common
	out.MatchedWarnConstraints = p.MatchedWarnConstraints
	out.Generation = p.Generation
	out.commonDeny, out.commonWarn = p.commonDeny, p.commonWarn
	out.columns = p.columns
	at := out.newAt(len(idx), p)
	for j, i := range idx {
		out.Nodes[j] = p.Nodes[i]
		at[j] = int32(p.cellOf(i))
	}
	out.at = at
	return out
}
