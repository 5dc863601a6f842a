package opa

import (
	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/freelist"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/lookup"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/verdict"
)

// scratch is a request's per-candidate working memory: its node slots and
// the node classes' buffers, one element per candidate. At 5000 candidates
// they are about 600 KB per request that nothing keeps once the answer is
// made, so requests reuse them (the engine's pools) instead of handing them to
// the garbage collector. What the answer keeps (Placement.Nodes, the
// columns' cells) is never taken from here.
type scratch struct {
	slots      []nodeSlot
	names      []string
	slotValues []ast.Value
	slotNums   []int32
	classIDs   []int
	classAux   []any
}

// grow gives s's slices n elements each, zeroed: those release clears
// are zero already.
func (s *scratch) grow(n int) {
	s.slots = zeroed(s.slots, n)
	s.names = zeroed(s.names, n)
	s.slotValues = zeroed(s.slotValues, n)
	s.slotNums = resize(s.slotNums, n)
	s.classIDs = resize(s.classIDs, n)
	s.classAux = zeroed(s.classAux, n)
}

// resize gives xs n elements, zeroed.
func resize[T any](xs []T, n int) []T {
	if cap(xs) < n {
		return make([]T, n)
	}
	xs = xs[:n]
	clear(xs)
	return xs
}

// zeroed gives xs n elements, zeroed, where xs is a list cleared when it
// was given back, so that its whole capacity is zero already: it does not
// clear it again. While the collector marks, clearing a list of pointers
// costs a write barrier per element; at 5000 candidates the per-request
// lists cleared twice (given back, then taken) were a sixth of a call's
// time in a mark phase.
func zeroed[T any](xs []T, n int) []T {
	if cap(xs) < n {
		return make([]T, n)
	}
	return xs[:n]
}

// release clears what s refers to (nodes, reviews, printed values: the
// pool must not keep them alive) and returns it to pool.
func (s *scratch) release(pool *freelist.List[*scratch]) {
	clear(s.slots)
	clear(s.names)
	clear(s.slotValues)
	clear(s.classAux)
	pool.Put(s)
}

// podBuffers are a request's per-constraint working memory: the matched
// constraints' steps, the pod-only ones to prefetch, their prefetched
// verdicts (by place in the policy set) and the pod review's values at
// key paths. About 15 KB per request with the whole library, which every
// new pod (each replica has its own name) made anew.
type podBuffers struct {
	steps   []podStep
	podOnly []int
	// fetched are the pod-only constraints' memo entries and prefetched
	// evaluations, by place in the policy set (prefetch.go; set marks
	// those prefetch looked at).
	fetched []prefetched
	// keyCache holds the pod review's values at key paths, by their
	// number in Engine.keyPaths.
	keyCache lookup.Slots
	// lists holds the pod review's values at the lists key paths read
	// through (lookup.Lists).
	lists lookup.Lists
	// key is the memo key being looked up (keyTerms), helperRead a
	// helper's (callHelper), helperRaw the values a helper's answers are
	// found from (helperKey).
	key, helperRead, helperRaw []*ast.Term
	// views are the pod's reviews with placeholders (podView), by the set
	// of paths they replace; every replica makes a few. Their key
	// buffers are kept with them; their bindings are not, since an
	// answer keeps those.
	viewsBySig map[string]*podView
	views      []*podView
	usedViews  int
	// bindScratch collects a view's bindings before they are kept
	// (request.keepBindings).
	bindScratch verdict.Bindings
	// moved are the numbers of the key paths whose kept value the pod's
	// differences can move, and differ finds those differences
	// (request.reuseKeys).
	moved  []int
	differ lookup.Differ
}

// newView is a cleared podView of b's.
func (b *podBuffers) newView() *podView {
	if b.usedViews == len(b.views) {
		b.views = append(b.views, new(podView))
	}
	v := b.views[b.usedViews]
	b.usedViews++
	*v = podView{key: v.key[:0]}
	return v
}

// buffers gives the request its podBuffers, taken from the pool on first
// use and given back by release.
func (r *request) buffers() *podBuffers {
	if r.pb == nil {
		r.pb = r.e.pools.podBuffers.Get()
	}
	return r.pb
}

// release clears what b refers to (constraints, entries, verdicts, the
// review's values) and returns it to pool.
func (b *podBuffers) release(pool *freelist.List[*podBuffers]) {
	clear(b.steps)
	clear(b.fetched)
	b.keyCache.Reset()
	b.lists.Reset()
	clear(b.key[:cap(b.key)])
	b.steps, b.podOnly, b.fetched, b.key = b.steps[:0], b.podOnly[:0], b.fetched[:0], b.key[:0]
	clear(b.viewsBySig)
	for _, v := range b.views[:b.usedViews] {
		clear(v.key[:cap(v.key)])
		*v = podView{key: v.key[:0]}
	}
	b.usedViews = 0
	clear(b.bindScratch[:cap(b.bindScratch)])
	b.differ.Reset()
	pool.Put(b)
}
