// Package memo holds the engine's remembered verdicts and node classes.
//
// It owns two bounded caches and their contracts. A Memo maps (owner, pod
// key, node class) to a result, where owner names one constraint's memo
// (kept across policy changes that leave the constraint and its template
// as they were), the pod key is the values of the input paths the template
// reads, and the class names the node's values at the node paths it reads.
// Keys are compared exactly, never by hash alone. It is bounded by the
// number of results and by their bytes. A new entry starts in probation,
// which holds an eighth of the budget and is dropped whole when full; a
// second lookup of its key moves it into the current generation (so does
// the first lookup after its drop, by its remembered hash). The rest of
// the budget is two generations: a lookup that finds an entry of the
// previous generation moves it into the current one, and when the current
// one holds half of that rest the previous one is dropped. What is used
// keeps being found; what is not ages out in two rotations; keys that
// never recur (one-off pods) hold at most probation's eighth, and a full
// memo never thrashes a working set that fits half of the rest. Classes
// gives each node the class of its projection, remembering nodes by name
// so that a replaced Node value is never kept alive.
//
// It does not know Rego, templates or what a result holds: the engine
// decides keys and results, this package only remembers them.
package memo

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Options bound a Memo. Zero values take the defaults.
type Options struct {
	// MaxResults bounds the results held (default 1<<18).
	MaxResults int
	// MaxBytes bounds their estimated size (default DefaultMaxBytes).
	// The estimate counts every key and result whole, also where they
	// share values with others; the heap a full memo takes is about the
	// estimate (keys, results, the pod values the keys hold and the
	// collector's slack among them).
	MaxBytes int64
}

// DefaultMaxBytes is the default MaxBytes. A full memo is about that much
// live heap, which the process's RSS carries too, so it is sized for what a
// memo must hold: a ReplicaSet's pod class on the realistic policy set
// (bench/README.md) with 5000 Nodes takes 47 KB of estimate, so the half
// of the generations that a working set may fill without thrashing holds
// about 150 pod classes; the one-off pods' classes (new Jobs, new images)
// stay in probation's eighth. Before probation, a stream of one-off pods
// filled the whole budget: at 32 MiB it took the service's live heap from
// 34 to 63 MiB and RSS to 164 MiB at 5000 kubelet-sized Nodes; at 16 MiB,
// to 50 MiB and 155 MiB. With probation, a minute of 500-candidate calls
// (5% one-off pods) then one of 5000 left 42 MiB of live heap where it
// had left 48.7.
const DefaultMaxBytes = 16 << 20

// Memo remembers results; R is the engine's result type. Safe for
// concurrent use.
type Memo[R any] struct {
	opts Options

	mu        sync.RWMutex
	cur, prev *generation[R]
	// probation holds the entries found once: a second Find moves one
	// into cur. A stream of keys that never recur (one-off pods: a new
	// Job's image, its own labels) fills probation only, and probation
	// is dropped whole when it holds its share of the budget, so such
	// keys keep at most that share of heap instead of the whole budget.
	probation *generation[R]
	// seen holds the hashes of the entries dropped with probation, found
	// once and not yet again: a later Find of one is its second sighting,
	// and the new entry goes straight to cur. So a working set whose keys
	// recur only after more others than probation holds (many classes
	// scheduled in turn) is evaluated twice, not at every turn. Bounded
	// by maxSeen, cleared whole.
	seen      map[uint64]struct{}
	rotations atomic.Uint64
}

// maxSeen bounds Memo.seen (under 1.5 MiB of map at the bound).
const maxSeen = 1 << 16

type generation[R any] struct {
	entries map[uint64][]*Entry[R]
	results int
	bytes   int64
}

func newGeneration[R any]() *generation[R] {
	return &generation[R]{entries: map[uint64][]*Entry[R]{}}
}

// Entry holds the results of one (owner, pod key), per node class.
type Entry[R any] struct {
	owner uint64
	key   *ast.Array
	hash  uint64

	mu sync.RWMutex
	// class0 is class 0's result, held in the entry: most entries hold
	// that one only (a pod-only constraint's verdict, every helper
	// answer), and a map each for it took more heap than the entry.
	// byClass holds the other classes, made at the first of them.
	class0    R
	hasClass0 bool
	byClass   map[int]R

	// gen, results and bytes belong to the memo's lock.
	gen     *generation[R]
	results int
	bytes   int64
}

// New makes an empty memo.
func New[R any](o Options) *Memo[R] {
	if o.MaxResults <= 0 {
		o.MaxResults = 1 << 18
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	return &Memo[R]{opts: o, cur: newGeneration[R](), prev: newGeneration[R](), probation: newGeneration[R](), seen: map[uint64]struct{}{}}
}

// probationShare is the part of each budget that entries found once may
// hold (1/probationShare); the generations share the rest.
const probationShare = 8

// hashOf is the hash of (owner, the key of terms): the key's as an
// ast.Array would hash it (the sum of its elements' hashes), mixed with
// the owner.
func hashOf(owner uint64, terms []*ast.Term) uint64 {
	var h int
	for _, t := range terms {
		h += t.Value.Hash()
	}
	return uint64(h) ^ (owner * 0x9e3779b97f4a7c15)
}

// Find finds or creates the entry of (owner, the key whose elements are
// terms). terms may be the caller's buffer: the key is made of a copy, and
// only when the entry is created, as is its size estimate (Size), so that
// lookups that find one, most of them, neither allocate nor walk the key
// twice.
func (m *Memo[R]) Find(owner uint64, terms []*ast.Term) *Entry[R] {
	h := hashOf(owner, terms)
	m.mu.RLock()
	e := m.cur.find(h, owner, terms)
	m.mu.RUnlock()
	if e != nil {
		return e
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.cur.find(h, owner, terms); e != nil {
		return e
	}
	for _, g := range [...]*generation[R]{m.prev, m.probation} {
		if e := g.find(h, owner, terms); e != nil {
			g.take(e)
			m.adopt(e)
			return e
		}
	}
	key := ast.NewArray(slices.Clone(terms)...)
	e = &Entry[R]{owner: owner, key: key, hash: h, results: 0, bytes: int64(Size(key)) + entryOverhead}
	if _, again := m.seen[h]; again {
		delete(m.seen, h)
		m.adopt(e)
		return e
	}
	m.probation.put(e)
	m.maybeRotate()
	return e
}

const (
	entryOverhead  = 160 // the entry and its slot (and, for a node-reading constraint, the map of its classes)
	resultOverhead = 48  // a map slot and the slice header
)

func (m *Memo[R]) adopt(e *Entry[R]) {
	m.cur.put(e)
	m.maybeRotate()
}

// put adds e, with its results and bytes, to g.
func (g *generation[R]) put(e *Entry[R]) {
	e.gen = g
	g.entries[e.hash] = append(g.entries[e.hash], e)
	g.results += e.results
	g.bytes += e.bytes
}

// take removes e, with its results and bytes, from g.
func (g *generation[R]) take(e *Entry[R]) {
	g.remove(e)
	g.results -= e.results
	g.bytes -= e.bytes
}

// maybeRotate drops probation when it holds its share of the budget, and
// the previous generation when the current one holds half of the rest.
// An entry dropped while a call holds it keeps its results for that call.
// Callers hold m.mu.
func (m *Memo[R]) maybeRotate() {
	if m.probation.results*probationShare >= m.opts.MaxResults || m.probation.bytes*probationShare >= m.opts.MaxBytes {
		if len(m.seen)+len(m.probation.entries) > maxSeen {
			clear(m.seen)
		}
		for h := range m.probation.entries {
			m.seen[h] = struct{}{}
		}
		m.probation = newGeneration[R]()
		m.rotations.Add(1)
	}
	maxResults := m.opts.MaxResults - m.opts.MaxResults/probationShare
	maxBytes := m.opts.MaxBytes - m.opts.MaxBytes/probationShare
	if m.cur.results*2 < maxResults && m.cur.bytes*2 < maxBytes {
		return
	}
	m.prev = m.cur
	m.cur = newGeneration[R]()
	m.rotations.Add(1)
}

func (g *generation[R]) find(h, owner uint64, terms []*ast.Term) *Entry[R] {
	for _, e := range g.entries[h] {
		if e.owner == owner && equalKey(e.key, terms) {
			return e
		}
	}
	return nil
}

// equalKey reports whether key's elements are terms, as Rego compares
// values (key.Compare of the array of terms is 0). A term that is the
// key's own element is equal to it without a look inside, and that is
// the common case: the arrays a key reads through lists and the helpers'
// answers are interned (lookup.Tables.Array), so a replica's key
// holds the very terms its class's entry was made with.
func equalKey(key *ast.Array, terms []*ast.Term) bool {
	if key.Len() != len(terms) {
		return false
	}
	for i, t := range terms {
		if x := key.Elem(i); x != t && ast.Compare(x.Value, t.Value) != 0 {
			return false
		}
	}
	return true
}

func (g *generation[R]) remove(e *Entry[R]) {
	list := g.entries[e.hash]
	for i, x := range list {
		if x == e {
			list[i] = list[len(list)-1]
			list = list[:len(list)-1]
			break
		}
	}
	if len(list) == 0 {
		delete(g.entries, e.hash)
	} else {
		g.entries[e.hash] = list
	}
}

// Get finds the result of a class.
func (e *Entry[R]) Get(class int) (R, bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if class == 0 {
		return e.class0, e.hasClass0
	}
	r, ok := e.byClass[class]
	return r, ok
}

// Put stores the result of a class in e; bytes estimates its size.
func (m *Memo[R]) Put(e *Entry[R], class int, r R, bytes int) {
	e.mu.Lock()
	var had bool
	if class == 0 {
		had, e.class0, e.hasClass0 = e.hasClass0, r, true
	} else {
		if e.byClass == nil {
			e.byClass = map[int]R{}
		}
		_, had = e.byClass[class]
		e.byClass[class] = r
	}
	e.mu.Unlock()
	if had {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n := int64(bytes) + resultOverhead
	e.results++
	e.bytes += n
	if e.gen == m.cur || e.gen == m.prev || e.gen == m.probation {
		e.gen.results++
		e.gen.bytes += n
	}
	m.maybeRotate()
}

// Stats are the memo's size and how often it rotated.
type Stats struct {
	Results   int
	Bytes     int64
	Rotations uint64
}

// Stats reports the results and bytes held in both generations and in
// probation.
func (m *Memo[R]) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Stats{
		Results:   m.cur.results + m.prev.results + m.probation.results,
		Bytes:     m.cur.bytes + m.prev.bytes + m.probation.bytes,
		Rotations: m.rotations.Load(),
	}
}

// Size estimates the heap bytes of an AST value, for byte budgets.
func Size(v ast.Value) int {
	switch x := v.(type) {
	case ast.String:
		return 16 + len(x)
	case ast.Number:
		return 16 + len(x)
	case *ast.Array:
		n := 24
		x.Foreach(func(t *ast.Term) { n += 16 + Size(t.Value) })
		return n
	case ast.Object:
		n := 48
		x.Foreach(func(k, t *ast.Term) { n += 48 + Size(k.Value) + Size(t.Value) })
		return n
	case ast.Set:
		n := 48
		x.Foreach(func(t *ast.Term) { n += 32 + Size(t.Value) })
		return n
	case ast.Call: // the engine's marker of a value keyed whole
		n := 24
		for _, t := range x {
			n += 16 + Size(t.Value)
		}
		return n
	}
	return 16
}
