package inventory

import (
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"
)

// The node index. Every filter call looks up each candidate by name in the
// inventory's Node object: at 5000 candidates, hashing and comparing AST
// strings was a tenth of the call. The index is a Go map from name to the
// Node value, built once per inventory generation by the first request
// large enough to pay for it, and used by the requests that read the same
// generation in their own transaction. The generation changes with every
// inventory write that changes what the store holds and every re-cut of
// the Nodes (commit), so an index never serves a content other than the
// one it was built from; a Node heartbeat, which leaves the cut Node as it
// was, keeps the index.

// MinIndexedCandidates is the request size from which building the index
// (one pass over the Nodes) is worth it when none fits.
const minIndexedCandidates = 64

// Index maps each Node's name to its value, for one inventory generation.
type Index struct {
	generation ast.Value
	byName     map[string]ast.Value // Node objects only
}

// IndexCache holds the newest Index built.
type IndexCache struct{ cur atomic.Pointer[Index] }

// Of gives the index for the inventory generation gen, whose Nodes are
// nodes (read in the same transaction), or nil: nodes is then looked up
// directly.
func (c *IndexCache) Of(gen ast.Value, nodes ast.Object, candidates int) *Index {
	if gen == nil || nodes == nil {
		return nil
	}
	idx := c.cur.Load()
	if idx != nil && idx.generation.Compare(gen) == 0 {
		return idx
	}
	if candidates < minIndexedCandidates {
		if idx != nil && idx.generation.Compare(gen) < 0 {
			// Outdated: let its Node values go (the Nodes replaced since
			// are not kept alive while only small requests come).
			c.cur.CompareAndSwap(idx, nil)
		}
		return nil
	}
	idx = &Index{generation: gen, byName: make(map[string]ast.Value, nodes.Len())}
	nodes.Foreach(func(k, v *ast.Term) {
		name, ok := k.Value.(ast.String)
		if _, isObj := v.Value.(ast.Object); ok && isObj {
			idx.byName[string(name)] = v.Value
		}
	})
	for {
		// A request reading an older generation never replaces a newer index.
		cur := c.cur.Load()
		if cur != nil && cur.generation.Compare(gen) > 0 || c.cur.CompareAndSwap(cur, idx) {
			return idx
		}
	}
}

// Node is the Node named name, nil when absent.
func (idx *Index) Node(name string) ast.Value { return idx.byName[name] }
