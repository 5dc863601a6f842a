package inventory

import (
	"hash/maphash"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Values Nodes hold alike. The Nodes of a pool differ in their names and
// addresses; what policies read of them besides (a zone label, a pool's
// taints, an empty annotations object, every key) is one value held by
// hundreds of Nodes. As each Node's own OPA values, a Node cut to its name
// and one label is some 30 objects and 1.6 KB that every garbage
// collection marks again: 5000 of them were a third of the objects the
// service kept live. sharedValues remembers a value (a string, a number,
// an object or array below the Node's top) that two Nodes have held, and
// gives that term to every later Node holding the same value, so that a
// Node allocates only what is its own. A Node's top-level value is always
// its own: the node index and node classes tell Nodes apart by it.
//
// OPA's values are immutable to their readers, and the store writes a Node
// as a whole at its own path, inserting into the objects above it only, so
// one term may sit in any number of Nodes. Values are shared only when they
// are identical (same keys, same scalars written the same way: 1 and 1.0
// are equal to Rego, not to sprintf), never merely equal.
//
// Only the inventory's writer uses it (commits are serial). The table is
// bounded in entries and in the terms their values hold, and starts over
// past either bound; Nodes keep the terms they were given.
type sharedValues struct {
	seed maphash.Seed
	// seen notes values read in one Node, one per slot of a table whose
	// slot is the value's hash's low bits: a Node's own values (its name,
	// its addresses, a metadata object holding its name) are read again at
	// each of its writes, and must not be kept for that.
	seen  []sighting
	terms map[uint64]*ast.Term
	// weight is the terms held under terms' values.
	weight int
	limits sharedLimits
}

// sighting is a value's hash and the hash of the Node it was read in.
type sighting struct{ value, node uint64 }

type sharedLimits struct {
	entries int // values kept
	weight  int // terms under the values kept
	// valueWeight is the most terms a value kept may hold: larger values
	// (a Node's image list, when a policy reads it whole) are rarely held
	// alike, and cost their comparison on every write.
	valueWeight int
}

var defaultSharedLimits = sharedLimits{entries: 8192, weight: 1 << 16, valueWeight: 256}

func newSharedValues(limits sharedLimits) *sharedValues {
	slots := 1
	for slots < 4*limits.entries {
		slots <<= 1
	}
	return &sharedValues{seed: maphash.MakeSeed(), seen: make([]sighting, slots), terms: map[uint64]*ast.Term{}, limits: limits}
}

// Value converts a Node's content (as view.Cut gives it: what JSON or
// unstructured decoding gives, numbers as json.Number, int64 or float64)
// as ast.InterfaceToValue does, with the values Nodes hold alike shared.
func (s *sharedValues) Value(node string, content map[string]any) (ast.Value, error) {
	c := converting{s: s, node: maphash.String(s.seed, node) | 1} // 0: an empty slot
	t, _, err := c.term(content, 0)
	if err != nil {
		return nil, err
	}
	return t.Value, nil
}

// converting is one Node's conversion.
type converting struct {
	s    *sharedValues
	node uint64
}

// term converts x, giving also its weight (the terms it holds, itself
// included).
func (c converting) term(x any, depth int) (*ast.Term, int, error) {
	var t *ast.Term
	weight := 1
	switch x := x.(type) {
	case string:
		h := maphash.String(c.s.seed, x)
		if t := c.s.terms[h]; t != nil {
			if v, ok := t.Value.(ast.String); ok && string(v) == x {
				return t, 1, nil
			}
		}
		return c.s.offer(h, ast.StringTerm(x), 1, c.node), 1, nil
	case map[string]any:
		items := make([][2]*ast.Term, 0, len(x))
		for k, e := range x {
			et, w, err := c.term(e, depth+1)
			if err != nil {
				return nil, 0, err
			}
			kt, _, _ := c.term(k, depth+1)
			items = append(items, [2]*ast.Term{kt, et})
			weight += 1 + w
		}
		t = ast.ObjectTerm(items...)
	case []any:
		elems := make([]*ast.Term, len(x))
		for i, e := range x {
			et, w, err := c.term(e, depth+1)
			if err != nil {
				return nil, 0, err
			}
			elems[i] = et
			weight += w
		}
		t = ast.ArrayTerm(elems...)
	default:
		v, err := ast.InterfaceToValue(x)
		if err != nil {
			return nil, 0, err
		}
		t = ast.NewTerm(v)
	}
	if depth == 0 || weight > c.s.limits.valueWeight {
		return t, weight, nil
	}
	h := uint64(t.Value.Hash())
	if known := c.s.known(h, t.Value); known != nil {
		return known, weight, nil
	}
	return c.s.offer(h, t, weight, c.node), weight, nil
}

// known is the term kept for a value identical to v, nil when none.
func (s *sharedValues) known(h uint64, v ast.Value) *ast.Term {
	if t := s.terms[h]; t != nil && identical(t.Value, v) {
		return t
	}
	return nil
}

// offer gives t back, keeping it when another Node has held its value.
func (s *sharedValues) offer(h uint64, t *ast.Term, weight int, node uint64) *ast.Term {
	slot := &s.seen[h&uint64(len(s.seen)-1)]
	if slot.node == 0 || slot.value != h || slot.node == node {
		*slot = sighting{value: h, node: node}
		return t
	}
	if _, taken := s.terms[h]; taken {
		return t // another value under the same hash keeps its place
	}
	if len(s.terms) >= s.limits.entries || s.weight+weight > s.limits.weight {
		clear(s.terms)
		s.weight = 0
	}
	s.terms[h] = t
	s.weight += weight
	return t
}

// identical reports whether a and b are the same value written the same
// way: scalars of one type with the same text, objects with the same keys
// holding identical values, arrays with identical elements in order.
func identical(a, b ast.Value) bool {
	switch a := a.(type) {
	case ast.Object:
		b, ok := b.(ast.Object)
		if !ok || a.Len() != b.Len() {
			return false
		}
		same := true
		a.Until(func(k, v *ast.Term) bool {
			bv := b.Get(k)
			same = bv != nil && identicalTerms(v, bv)
			return !same
		})
		return same
	case *ast.Array:
		b, ok := b.(*ast.Array)
		if !ok || a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !identicalTerms(a.Elem(i), b.Elem(i)) {
				return false
			}
		}
		return true
	case ast.String, ast.Number, ast.Boolean, ast.Null:
		return a == b
	}
	return false
}

func identicalTerms(a, b *ast.Term) bool { return a == b || identical(a.Value, b.Value) }
