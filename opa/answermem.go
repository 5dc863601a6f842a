package opa

import (
	"sync"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/freelist"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/verdict"
)

// Answer memory. An answer holds one NodeVerdict per candidate and one
// cell per candidate in each column a constraint violated: at 5000
// candidates, half a megabyte per filter call and as much for the
// prioritize call after it. Made fresh per call, that memory was most of
// what a scheduling cycle allocated, and the garbage collection it paced
// was the slowest one percent of calls. A front end that knows when it is
// done with an answer (the extender's handlers, once the answer is
// written) calls Release, and the slices go to the next answers.
//
// An answer may be read by more than its caller: filter's answer is kept
// for the prioritize call that follows (reuse.go), and an answer cut from
// it reads its cells. So the memory is counted: the caller holds one
// reference, a kept answer one more, an answer cut from another one on
// its source; the last Release recycles. An answer nobody releases (the
// plugin's, those built by NewPlacement, Rebind's) is collected as any
// value is: Release is an optimisation, never a duty.

// answerMemory is what an answer took from the pools, and its references.
type answerMemory struct {
	// pools are the engine's, which the memory goes back to.
	pools *pools
	mu    sync.Mutex
	refs  int
	nodes *[]NodeVerdict
	cells []*[]cell
	// columns holds the answer's columns: an answer's p.columns is this
	// slice (or what appending to it made, which is kept instead).
	columns *[]column
	// common is the same for the answer's Common.
	common *[]Violation
	at     *[]int32
	// binds are the chunks holding the bindings its columns read
	// (keepBindings).
	binds  []*verdict.Bindings
	source *Placement // the answer this one was cut from (restrict)
}

// pools are an engine's free lists of the memory its answers and requests
// reuse (package freelist says why not sync.Pool), each bounded. An
// answer has a column of cells for each constraint that denied or scored
// one of its candidates: more cell lists than answers are in use at once.
type pools struct {
	verdicts   freelist.List[*[]NodeVerdict]
	columns    freelist.List[*[]column]
	commons    freelist.List[*[]Violation]
	cells      freelist.List[*[]cell]
	ats        freelist.List[*[]int32]
	positions  freelist.List[*[]int] // reuse.go
	binds      freelist.List[*verdict.Bindings]
	scratch    freelist.List[*scratch]
	podBuffers freelist.List[*podBuffers]
}

func newPools() *pools {
	return &pools{
		verdicts:   freelist.List[*[]NodeVerdict]{New: newSlice[NodeVerdict]},
		columns:    freelist.List[*[]column]{New: newSlice[column]},
		commons:    freelist.List[*[]Violation]{New: newSlice[Violation]},
		cells:      freelist.List[*[]cell]{New: newSlice[cell], Max: 128},
		ats:        freelist.List[*[]int32]{New: newSlice[int32]},
		positions:  freelist.List[*[]int]{New: newSlice[int]},
		binds:      freelist.List[*verdict.Bindings]{New: func() *verdict.Bindings { return new(verdict.Bindings) }, Max: 32},
		scratch:    freelist.List[*scratch]{New: func() *scratch { return new(scratch) }},
		podBuffers: freelist.List[*podBuffers]{New: func() *podBuffers { return new(podBuffers) }},
	}
}

// newSlice is a List's New for lists of T.
func newSlice[T any]() *[]T { return new([]T) }

// newPlacement is an answer for n candidates whose node verdicts come from
// the pools, with one reference (the caller's); for none, an answer whose
// memory is not counted.
func (ps *pools) newPlacement(n int) *Placement {
	if n == 0 {
		// A pod's query without candidates (PreparePod keeps it): nothing
		// to recycle, and no pooled array to pin.
		return &Placement{}
	}
	nodes := ps.verdicts.Get()
	*nodes = zeroed(*nodes, n) // Release clears it before it goes back
	return &Placement{Nodes: *nodes, mem: &answerMemory{refs: 1, nodes: nodes, pools: ps}}
}

// newCells gives n zeroed cells for one of p's columns, from the pool
// when p's memory is counted.
func (p *Placement) newCells(n int) []cell {
	if p.mem == nil {
		return make([]cell, n)
	}
	c := p.mem.pools.cells.Get()
	*c = zeroed(*c, n) // Release clears it before it goes back
	p.mem.mu.Lock()
	p.mem.cells = append(p.mem.cells, c)
	p.mem.mu.Unlock()
	return *c
}

// newColumns gives p an empty column list of capacity n, from the pool
// when p's memory is counted.
func (p *Placement) newColumns(n int) []column {
	if p.mem == nil {
		return make([]column, 0, n)
	}
	return takeList(&p.mem.pools.columns, &p.mem.columns, n)
}

// newCommon is the same for p's Common.
func (p *Placement) newCommon(n int) []Violation {
	if p.mem == nil {
		return make([]Violation, 0, n)
	}
	return takeList(&p.mem.pools.commons, &p.mem.common, n)
}

// takeList takes from pool an empty list of capacity at least n, and
// notes it in *slot for giveList.
func takeList[T any](pool *freelist.List[*[]T], slot **[]T, n int) []T {
	c := pool.Get()
	if cap(*c) < n {
		*c = make([]T, 0, n)
	}
	*slot = c
	return (*c)[:0]
}

// giveList clears the list noted in *slot, or grown, the answer's cur
// (appending past the pooled capacity made a new one: the larger is
// kept), and gives it back to pool.
func giveList[T any](pool *freelist.List[*[]T], slot **[]T, cur []T) {
	c := *slot
	if c == nil {
		return
	}
	if cap(cur) > cap(*c) {
		*c = cur
	}
	all := (*c)[:cap(*c)]
	clear(all) // cells, messages, details: the pool must not keep them alive
	*c = all[:0]
	pool.Put(c)
	*slot = nil
}

// newAt gives p (an answer being cut from source, which must hold a
// reference taken for p) its node map of n entries.
func (p *Placement) newAt(n int, source *Placement) []int32 {
	at := p.mem.pools.ats.Get()
	*at = resize(*at, n)
	p.mem.at, p.mem.source = at, source
	return *at
}

// retain takes one more reference on p's memory, for a reader beside the
// caller (a kept answer, an answer cut from p). It is false when p's
// memory is not counted, or already recycled: a reader must then not
// share p's slices.
func (p *Placement) retain() bool {
	if p.mem == nil {
		return false
	}
	p.mem.mu.Lock()
	defer p.mem.mu.Unlock()
	if p.mem.refs == 0 {
		return false
	}
	p.mem.refs++
	return true
}

// Release says the caller is done with p: p and everything read from it
// that is not a string (its Nodes, violations' Details) must not be used
// after. When no other reader holds p, its per-candidate memory goes to
// later answers. Releasing an answer whose memory is not counted does
// nothing; releasing one more often than it was handed out panics.
func (p *Placement) Release() {
	m := p.mem
	if m == nil {
		return
	}
	m.mu.Lock()
	if m.refs <= 0 {
		m.mu.Unlock()
		panic("opa: Placement released more often than it was handed out")
	}
	m.refs--
	last := m.refs == 0
	m.mu.Unlock()
	if !last {
		return
	}
	clear(*m.nodes) // names: the pool must not keep them alive
	m.pools.verdicts.Put(m.nodes)
	for _, c := range m.cells {
		clear(*c) // printed values
		m.pools.cells.Put(c)
	}
	if m.at != nil {
		m.pools.ats.Put(m.at)
	}
	for _, b := range m.binds {
		clear((*b)[:cap(*b)]) // printed values
		*b = (*b)[:0]
		m.pools.binds.Put(b)
	}
	giveList(&m.pools.columns, &m.columns, p.columns)
	giveList(&m.pools.commons, &m.common, p.Common)
	m.nodes, m.cells, m.at, m.binds = nil, nil, nil, nil
	// A reader that breaks the contract finds nothing rather than another
	// answer's verdicts (and the race detector sees it).
	p.Nodes, p.columns, p.at, p.Common = nil, nil, nil, nil
	if m.source != nil {
		m.source.Release()
	}
}
