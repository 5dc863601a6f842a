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

// Index maps each Node's name to its value, for one inventory generation.
type Index struct {
	generation ast.Value
	byName     map[string]ast.Value // Node objects only; never written once stored
}

// Node is the Node named name, nil when absent.
func (idx *Index) Node(name string) ast.Value { return idx.byName[name] }

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
func (c *IndexCache) Advance(prev, gen ast.Value, nodes ast.Object, changed []string, whole bool) {
	if gen == nil {
		return
	}
	old := c.cur.Load()
	if whole || old == nil || prev == nil || old.generation.Compare(prev) != 0 {
		c.cur.Store(build(gen, nodes))
		return
	}
	next := &Index{generation: gen, byName: maps.Clone(old.byName)}
	key := &ast.Term{}
	for _, name := range changed {
		var v ast.Value
		if nodes != nil {
			key.Value = ast.String(name)
			v = nodeAt(nodes.Get(key))
		}
		if v == nil {
			delete(next.byName, name)
		} else {
			next.byName[name] = v
		}
	}
	c.cur.Store(next)
}

// build indexes every Node of nodes.
func build(gen ast.Value, nodes ast.Object) *Index {
	if nodes == nil {
		nodes = ast.NewObject()
	}
	// byName is never nil: Advance clones it and writes to the clone.
	idx := &Index{generation: gen, byName: make(map[string]ast.Value, nodes.Len())}
	nodes.Foreach(func(k, v *ast.Term) {
		if name, ok := k.Value.(ast.String); ok {
			if node := nodeAt(v); node != nil {
				idx.byName[string(name)] = node
			}
		}
	})
	return idx
}

// nodeAt is the Node object t holds, nil when none.
func nodeAt(t *ast.Term) ast.Value {
	if t == nil {
		return nil
	}
	if _, ok := t.Value.(ast.Object); !ok {
		return nil
	}
	return t.Value
}
