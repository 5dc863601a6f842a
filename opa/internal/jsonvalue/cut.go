package jsonvalue

import (
	"github.com/open-policy-agent/opa/v1/ast"
)

// A Cut reads part of a document: the values at some paths, the
// existence of others, and nothing else. A kubelet's Node is 10 KB of JSON
// of which policies read a few labels and taints; a Node sent in a
// scheduler's call is read through the cut of what the policy set reads,
// and the rest of it is only scanned over, never built.
//
// What ParseCut gives is what Parse would give of the document after this
// walk over its decoded content (Cut's own rules, mirrored by the
// inventory's View.Cut over maps):
//   - a kept path's value is kept whole, but for the paths omitted below it;
//   - a followed path (one that goes on below) keeps, of an object, the
//     keys followed and kept below it, and the object even when none is
//     there; an array or a scalar met on the way is kept whole (indexes
//     must not move);
//   - a path kept for its existence keeps an object as {}, an array as
//     [], a scalar as it is;
//   - an omitted path is never kept.
//
// The document is still read whole as JSON: malformed JSON is refused
// wherever it is, as Parse refuses it. Numbers that are only scanned over
// are held to JSON's grammar, not to what OPA can represent (the values
// built from them never exist).
type Cut struct {
	root cutNode
}

// cutNode is what a Cut does at one key.
type cutNode struct {
	whole, follow, exists, omit bool
	children                    map[string]*cutNode
}

// NewCut is a cut that keeps nothing (the empty object of any object).
func NewCut() *Cut { return &Cut{root: cutNode{follow: true}} }

// Keep keeps the value at path whole. A path of no keys keeps the whole
// document.
func (c *Cut) Keep(path ...string) { c.node(path, true).whole = true }

// KeepExistence keeps the existence of the value at path: {} for an
// object, [] for an array, a scalar as it is.
func (c *Cut) KeepExistence(path ...string) {
	if len(path) == 0 {
		c.root.whole = true // the document exists: keep it as a kept path would keep it
		return
	}
	c.node(path, true).exists = true
}

// Follow follows path: of an object there, the keys followed below it
// (and the object even when none is), an array or a scalar whole.
func (c *Cut) Follow(path ...string) { c.node(path, true).follow = true }

// Omit never keeps the value at path, even below a kept path.
func (c *Cut) Omit(path ...string) {
	if len(path) > 0 {
		c.node(path, false).omit = true
	}
}

// node is the node at path, made if need be; follow marks the nodes above
// it as followed.
func (c *Cut) node(path []string, follow bool) *cutNode {
	n := &c.root
	for _, k := range path {
		if follow {
			n.follow = true
		}
		child := n.children[k]
		if child == nil {
			if n.children == nil {
				n.children = map[string]*cutNode{}
			}
			child = &cutNode{}
			n.children[k] = child
		}
		n = child
	}
	return n
}

// keeps says whether the node keeps anything of its value.
func (n *cutNode) keeps() bool { return !n.omit && (n.whole || n.follow || n.exists) }

// omits says whether some path below n is omitted: only then does a kept
// value need more than Parse.
func (n *cutNode) omits() bool {
	for _, c := range n.children {
		if c.omit || c.omits() {
			return true
		}
	}
	return false
}

// ParseCut reads one JSON value, with only whitespace around it, keeping
// what c keeps of it.
func ParseCut(b []byte, c *Cut) (ast.Value, error) {
	return parse(parser{b: b}, &c.root)
}

// cutValue reads the value at p.i as n keeps it (n keeps something).
func (p *parser) cutValue(n *cutNode, depth int) (*ast.Term, error) {
	if p.i >= len(p.b) {
		return nil, p.errorf("unexpected end of JSON input")
	}
	switch c := p.b[p.i]; {
	case c == '{' && (n.follow || n.whole && n.omits()):
		return p.cutObject(n, depth+1)
	case c == '{' && !n.whole:
		if err := p.skip(depth); err != nil {
			return nil, err
		}
		return ast.NewTerm(ast.NewObject()), nil
	case c == '[' && !n.whole && !n.follow:
		if err := p.skip(depth); err != nil {
			return nil, err
		}
		return ast.ArrayTerm(), nil
	}
	return p.value(depth)
}

// cutObject reads an object as n keeps it: below a followed node the keys
// it follows, below a kept one every key but the omitted ones.
func (p *parser) cutObject(n *cutNode, depth int) (*ast.Term, error) {
	if depth > MaxDepth {
		return nil, p.errorf("exceeded max depth %d", MaxDepth)
	}
	p.i++ // {
	base := len(p.items)
	defer func() { p.items = p.items[:base] }()
	p.skipSpace()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return ast.NewTerm(ast.NewObject()), nil
	}
	for {
		p.skipSpace()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return nil, p.errorf("object key: want a string")
		}
		k, err := p.key()
		if err != nil {
			return nil, err
		}
		p.skipSpace()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return nil, p.errorf("after object key: want ':'")
		}
		p.i++
		p.skipSpace()
		child := n.children[string(k.Value.(ast.String))]
		switch {
		case n.whole && child == nil:
			v, err := p.value(depth)
			if err != nil {
				return nil, err
			}
			p.items = append(p.items, [2]*ast.Term{k, v})
		case child != nil && (child.keeps() || n.whole && !child.omit):
			if n.whole {
				child = wholeBelow(child)
			}
			v, err := p.cutValue(child, depth)
			if err != nil {
				return nil, err
			}
			p.items = append(p.items, [2]*ast.Term{k, v})
		default:
			if err := p.skip(depth); err != nil {
				return nil, err
			}
			// A key given twice keeps its last value, as encoding/json's
			// maps do: a skipped value undoes a kept one.
			p.items = dropKey(p.items, base, k)
		}
		p.skipSpace()
		if p.i >= len(p.b) {
			return nil, p.errorf("unexpected end of JSON input")
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			return ast.NewTerm(newObject(p.items[base:])), nil
		default:
			return nil, p.errorf("after object value: want ',' or '}'")
		}
	}
}

// wholeBelow is n as the descendant of a kept value: kept whole but for
// the paths omitted below it.
func wholeBelow(n *cutNode) *cutNode {
	if n.whole {
		return n
	}
	return &cutNode{whole: true, children: n.children}
}

// dropKey removes k from the members read since base.
func dropKey(items [][2]*ast.Term, base int, k *ast.Term) [][2]*ast.Term {
	out := items[:base]
	for _, kv := range items[base:] {
		if !kv[0].Equal(k) {
			out = append(out, kv)
		}
	}
	return out
}

// skip reads over the value at p.i, checking it is JSON, building nothing.
func (p *parser) skip(depth int) error {
	if p.i >= len(p.b) {
		return p.errorf("unexpected end of JSON input")
	}
	switch c := p.b[p.i]; {
	case c == '{', c == '[':
		return p.skipComposite(depth + 1)
	case c == '"':
		if end, plain := p.plainString(); plain {
			p.i = end + 1
			return nil
		}
		_, err := p.str()
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		return p.skipNumber()
	case c == 't':
		_, err := p.literal("true", nil)
		return err
	case c == 'f':
		_, err := p.literal("false", nil)
		return err
	case c == 'n':
		_, err := p.literal("null", nil)
		return err
	default:
		return p.errorf("invalid character %q looking for the beginning of a value", c)
	}
}

// skipComposite reads over an object or an array.
func (p *parser) skipComposite(depth int) error {
	if depth > MaxDepth {
		return p.errorf("exceeded max depth %d", MaxDepth)
	}
	closing, object := byte(']'), p.b[p.i] == '{'
	if object {
		closing = '}'
	}
	p.i++
	p.skipSpace()
	if p.i < len(p.b) && p.b[p.i] == closing {
		p.i++
		return nil
	}
	for {
		p.skipSpace()
		if object {
			if p.i >= len(p.b) || p.b[p.i] != '"' {
				return p.errorf("object key: want a string")
			}
			if err := p.skip(depth); err != nil {
				return err
			}
			p.skipSpace()
			if p.i >= len(p.b) || p.b[p.i] != ':' {
				return p.errorf("after object key: want ':'")
			}
			p.i++
			p.skipSpace()
		}
		if err := p.skip(depth); err != nil {
			return err
		}
		p.skipSpace()
		if p.i >= len(p.b) {
			return p.errorf("unexpected end of JSON input")
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case closing:
			p.i++
			return nil
		default:
			return p.errorf("after a member: want ',' or %q", closing)
		}
	}
}

// skipNumber reads over a number as JSON's grammar allows it; on an
// error p.i is where the grammar failed.
func (p *parser) skipNumber() error {
	j := p.i
	if p.b[j] == '-' {
		j++
	}
	digits := func() bool {
		k := j
		for j < len(p.b) && p.b[j] >= '0' && p.b[j] <= '9' {
			j++
		}
		return j > k
	}
	switch {
	case j < len(p.b) && p.b[j] == '0':
		j++
	case !digits():
		p.i = j
		return p.errorf("invalid number")
	}
	if j < len(p.b) && p.b[j] == '.' {
		j++
		if !digits() {
			p.i = j
			return p.errorf("invalid number: want a digit after '.'")
		}
	}
	if j < len(p.b) && (p.b[j] == 'e' || p.b[j] == 'E') {
		j++
		if j < len(p.b) && (p.b[j] == '+' || p.b[j] == '-') {
			j++
		}
		if !digits() {
			p.i = j
			return p.errorf("invalid number: want a digit in the exponent")
		}
	}
	p.i = j
	return nil
}
