package inventory

import (
	"maps"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"
)

// The node index. Every filter call looks up each candidate by name in the
// inventory's Node object: at 5000 candidates, hashing and comparing AST
// strings was a tenth of the call. The index is a Go map from name to the
// Node value, for one inventory generation, used by the requests that read
// that generation in their own transaction.
//
// The writer keeps it (Advance, after each commit that moves the
// generation), never a request: built by the first request after each
// write, at 5000 Nodes it cost that request a millisecond, and a cluster
// whose Node labels change 20 times a second made it the slowest percent
// of calls. A write changes a few Nodes, so the next generation's map is
// the last one's, cloned (a copy of its memory, tens of microseconds at
// 5000 Nodes), with those Nodes replaced. A request that finds no index
// for its generation (one reading between a commit and the Advance after
// it) looks its Nodes up directly.
//
// Requests also number the names they are sent (package memo's Names,
// whose table holds the very strings the service read them into, so
// that finding them compares pointers), and the index keeps the Nodes it
// found by that number (NodeNumbered): looking a name up in byName reads
// the map's own copy of the name, a string of the store's somewhere in
// the heap, and 500 candidates' such reads were a twentieth of a
// replica's cycle, mostly cache misses. The numbered slots are filled by
// the requests, on first need, and carried to the next generation's
// index but for the Nodes the commit wrote.

// Index maps each Node's name to its value, for one inventory generation.
type Index struct {
	generation ast.Value
	byName     map[string]*ast.Term // terms of Node objects only; never written once stored
	// byNum holds the Nodes byName gave for the names numbered under
	// numGen, by number. Written by requests, once per slot and index.
	numGen uint64
	byNum  []numberedNode
}

// numberedNode is a slot of Index.byNum: the Node's value itself, not its
// term, so that a call's candidates (successive names, numbered one
// after the other as kube-scheduler's window moves through the cluster)
// are read from one run of memory: reading each term's value was a
// cache miss per candidate, 4% of a cycle's CPU with the window moving.
// One request fills a slot (state empty -> filling, value written, then
// filled); the others read value only once they see it filled. A filled
// slot with a nil value: no Node has that name.
type numberedNode struct {
	state atomic.Uint32
	value ast.Value
}

const (
	slotEmpty uint32 = iota
	slotFilling
	slotFilled
)

// Node is the Node named name, nil when absent.
func (idx *Index) Node(name string) ast.Value {
	if t := idx.byName[name]; t != nil {
		return t.Value
	}
	return nil
}

// NodeNumbered is Node(name) for a name that numbering gen numbers num
// (Numbering): found by number after its first lookup.
func (idx *Index) NodeNumbered(name string, num int32, gen uint64) ast.Value {
	if gen != idx.numGen || num < 0 || int(num) >= len(idx.byNum) {
		return idx.Node(name)
	}
	slot := &idx.byNum[num]
	if slot.state.Load() == slotFilled {
		return slot.value
	}
	v := idx.Node(name)
	if slot.state.CompareAndSwap(slotEmpty, slotFilling) {
		slot.value = v
		slot.state.Store(slotFilled)
	}
	return v
}

// Numbering is how requests number node names (package memo's Names):
// a name's number is fixed within a generation of the numbering.
type Numbering interface {
	// Size is how many names are numbered, and the generation.
	Size() (n int, gen uint64)
	// Numbered is the number of name, if it has one, and the generation.
	Numbered(name string) (num int32, gen uint64, ok bool)
}

// An index keeps a slot for each number given so far and for as many
// again as it has Nodes, plus numberedSlack: every Node of the index
// numbered after it was made (a still cluster's first calls, whose
// candidates change from call to call) still finds its slot; names
// numbered past that look their Nodes up by name until the next commit.
// maxSparseNumbers bounds, as a multiple of the index's Nodes, the
// numbers given so far: a numbering that grew with names long gone is not
// worth a slot each.
const (
	numberedSlack    = 1024
	maxSparseNumbers = 4
)

// numberFrom gives idx its numbered slots: old's, for the numbering
// generation it had, but for the Nodes named in changed; empty when the
// numbering started over (or old is nil). The copy comes before the
// changed names are looked up: a changed name numbered after its lookup
// was numbered after the copy too, so no slot of it was copied.
func (idx *Index) numberFrom(old *Index, changed []string, nums Numbering) {
	if nums == nil {
		return
	}
	n, gen := nums.Size()
	if n > maxSparseNumbers*len(idx.byName)+numberedSlack {
		return
	}
	size := n + len(idx.byName) + numberedSlack
	idx.numGen, idx.byNum = gen, make([]numberedNode, size)
	if old == nil || old.numGen != gen {
		return
	}
	// idx is not published yet: its slots are written plainly, but for
	// the states, which its readers load atomically.
	for i := range min(len(old.byNum), size) {
		if from := &old.byNum[i]; from.state.Load() == slotFilled {
			idx.byNum[i].value = from.value
			idx.byNum[i].state.Store(slotFilled)
		}
	}
	for _, name := range changed {
		num, g, ok := nums.Numbered(name)
		switch {
		case g != gen:
			// Started over since Size: numbers of this generation mean
			// other names; none of the slots can be trusted.
			clear(idx.byNum)
			return
		case ok && int(num) < size:
			idx.byNum[num].value = nil
			idx.byNum[num].state.Store(slotEmpty)
		}
	}
}

// IndexCache holds the index of the newest generation.
type IndexCache struct{ cur atomic.Pointer[Index] }

// Of gives the index for the inventory generation gen, or nil.
func (c *IndexCache) Of(gen ast.Value) *Index {
	if gen == nil {
		return nil
	}
	if idx := c.cur.Load(); idx != nil && idx.generation.Compare(gen) == 0 {
		return idx
	}
	return nil
}

// Advance makes the index of generation gen, whose Nodes are nodes (read
// after the commit that made gen): from the one held when that is of prev
// and changed names every Node the commit wrote, anew otherwise (whole:
// every Node was cut anew; the first index; a generation missed). Only
// the writer calls it, one commit after the other.
func (c *IndexCache) Advance(prev, gen ast.Value, nodes ast.Object, changed []string, whole bool, nums Numbering) {
	if gen == nil {
		return
	}
	old := c.cur.Load()
	if whole || old == nil || prev == nil || old.generation.Compare(prev) != 0 {
		next := build(gen, nodes)
		next.numberFrom(nil, nil, nums)
		c.cur.Store(next)
		return
	}
	next := &Index{generation: gen, byName: maps.Clone(old.byName)}
	key := &ast.Term{}
	for _, name := range changed {
		var t *ast.Term
		if nodes != nil {
			key.Value = ast.String(name)
			t = nodeAt(nodes.Get(key))
		}
		if t == nil {
			delete(next.byName, name)
		} else {
			next.byName[name] = t
		}
	}
	next.numberFrom(old, changed, nums)
	c.cur.Store(next)
}

// build indexes every Node of nodes.
func build(gen ast.Value, nodes ast.Object) *Index {
	if nodes == nil {
		nodes = ast.NewObject()
	}
	// byName is never nil: Advance clones it and writes to the clone.
	idx := &Index{generation: gen, byName: make(map[string]*ast.Term, nodes.Len())}
	nodes.Foreach(func(k, v *ast.Term) {
		if name, ok := k.Value.(ast.String); ok {
			if node := nodeAt(v); node != nil {
				idx.byName[string(name)] = node
			}
		}
	})
	return idx
}

// nodeAt is t when it holds a Node object, nil otherwise.
func nodeAt(t *ast.Term) *ast.Term {
	if t == nil {
		return nil
	}
	if _, ok := t.Value.(ast.Object); !ok {
		return nil
	}
	return t
}
