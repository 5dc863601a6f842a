// Package jsonvalue reads a JSON document straight into OPA's AST values.
//
// It owns one conversion: JSON bytes to the ast.Value that
// ast.InterfaceToValue would make of the same document decoded by
// encoding/json with UseNumber, byte for byte: strings with escapes or
// non-ASCII bytes are unquoted by encoding/json itself, numbers keep their
// text (those OPA refuses are refused), a repeated key keeps its last
// value. It exists because the extender's pods arrive as JSON and every
// request used to pay for three conversions (JSON to a typed Pod, the Pod
// to unstructured maps, the maps to AST values) where one suffices. It
// does not know Kubernetes beyond a table of common field names whose key
// terms are shared, and it does not validate what the values mean.
package jsonvalue

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
)

// MaxDepth bounds nesting, as encoding/json does, so that a hostile body
// cannot exhaust the stack.
const MaxDepth = 10000

// Parse reads one JSON value, with only whitespace around it.
func Parse(b []byte) (ast.Value, error) {
	return parse(parser{b: b}, &keepAll)
}

// parse reads p's document: one JSON value, with only whitespace around,
// as root keeps it (keepAll: whole).
func parse(p parser, root *cutNode) (ast.Value, error) {
	sc := scratchPool.Get().(*scratch)
	p.items, p.elems = sc.items[:0], sc.elems[:0]
	defer func() {
		if cap(p.items) <= maxScratch && cap(p.elems) <= maxScratch {
			// No term of this document stays reachable from the pool.
			clear(p.items[:cap(p.items)])
			clear(p.elems[:cap(p.elems)])
			sc.items, sc.elems = p.items[:0], p.elems[:0]
			scratchPool.Put(sc)
		}
	}()
	p.skipSpace()
	t, err := p.cutValue(root, 0)
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.i != len(p.b) {
		return nil, p.errorf("unexpected data after the JSON value")
	}
	return t.Value, nil
}

// scratch is a parser's members buffers, kept between documents.
type scratch struct {
	items [][2]*ast.Term
	elems []*ast.Term
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// maxScratch bounds the buffers kept: a document with a huge object or
// array does not pin its buffer for every document after it.
const maxScratch = 1 << 12

type parser struct {
	b []byte
	i int
	// shared and ends: see Shared.Parse.
	shared *Shared
	ends   []int32
	// items and elems hold the members of the objects and arrays being
	// read, innermost last: one buffer for the whole document instead of
	// a slice grown for each object.
	items [][2]*ast.Term
	elems []*ast.Term
}

// SyntaxError is malformed JSON, with the byte offset where it was found.
type SyntaxError struct {
	Offset int
	msg    string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("%s at byte %d", e.msg, e.Offset) }

func (p *parser) errorf(format string, args ...any) error {
	return &SyntaxError{Offset: p.i, msg: fmt.Sprintf(format, args...)}
}

func (p *parser) skipSpace() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) (*ast.Term, error) {
	if p.i >= len(p.b) {
		return nil, p.errorf("unexpected end of JSON input")
	}
	switch c := p.b[p.i]; {
	case c == '{', c == '[':
		return p.composite(depth)
	case c == '"':
		if t := p.sharedString(); t != nil {
			return t, nil
		}
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return ast.StringTerm(s), nil
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == 't':
		return p.literal("true", ast.InternedTerm(true))
	case c == 'f':
		return p.literal("false", ast.InternedTerm(false))
	case c == 'n':
		return p.literal("null", ast.NullTerm())
	default:
		return nil, p.errorf("invalid character %q looking for the beginning of a value", c)
	}
}

func (p *parser) literal(word string, t *ast.Term) (*ast.Term, error) {
	if len(p.b)-p.i < len(word) || string(p.b[p.i:p.i+len(word)]) != word {
		return nil, p.errorf("invalid literal, want %s", word)
	}
	p.i += len(word)
	return t, nil
}

func (p *parser) object(depth int) (*ast.Term, error) { return p.cutObject(&keepAll, depth) }

// keepAll is the cut that keeps a value whole: Parse reads objects as
// ParseCut reads the ones it keeps.
var keepAll = cutNode{whole: true}

// newObject makes the object of items; a repeated key keeps its last
// value, as encoding/json's maps do.
func newObject(items [][2]*ast.Term) ast.Object {
	obj := ast.NewObjectWithCapacity(len(items))
	for _, kv := range items {
		obj.Insert(kv[0], kv[1])
	}
	return obj
}

func (p *parser) array(depth int) (*ast.Term, error) {
	if depth > MaxDepth {
		return nil, p.errorf("exceeded max depth %d", MaxDepth)
	}
	p.i++ // [
	p.skipSpace()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return ast.ArrayTerm(), nil
	}
	base := len(p.elems)
	defer func() { p.elems = p.elems[:base] }()
	for {
		p.skipSpace()
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		p.elems = append(p.elems, v)
		p.skipSpace()
		if p.i >= len(p.b) {
			return nil, p.errorf("unexpected end of JSON input")
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			// The array keeps its slice: one of its own, of its length.
			return ast.NewTerm(ast.NewArray(slices.Clone(p.elems[base:])...)), nil
		default:
			return nil, p.errorf("after array element: want ',' or ']'")
		}
	}
}

// key reads an object key, sharing the term of a common field name.
func (p *parser) key() (*ast.Term, error) {
	start := p.i
	if end, plain := p.plainString(); plain {
		if t, ok := commonKeys[string(p.b[start+1:end])]; ok {
			p.i = end + 1
			return t, nil
		}
	}
	s, err := p.str()
	if err != nil {
		return nil, err
	}
	return ast.StringTerm(s), nil
}

// plainString finds the closing quote of the string at p.i when nothing
// in it needs unquoting: no escape, no control or non-ASCII byte.
func (p *parser) plainString() (end int, plain bool) {
	for j := p.i + 1; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			return j, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return 0, false
		}
	}
	return 0, false
}

// str reads the string at p.i. Strings that need unquoting go to
// encoding/json, so that escapes, surrogates and invalid UTF-8 come out
// exactly as it makes them.
func (p *parser) str() (string, error) {
	start := p.i
	if end, plain := p.plainString(); plain {
		p.i = end + 1
		return string(p.b[start+1 : end]), nil
	}
	end := start + 1
	for ; end < len(p.b); end++ {
		if c := p.b[end]; c == '\\' {
			end++ // the escaped byte; encoding/json checks the escape
		} else if c == '"' {
			break
		}
	}
	if end >= len(p.b) {
		return "", p.errorf("unexpected end of JSON input in a string")
	}
	var s string
	if err := json.Unmarshal(p.b[start:end+1], &s); err != nil {
		return "", p.errorf("invalid string: %v", err)
	}
	p.i = end + 1
	return s, nil
}

// number reads a number as JSON's grammar allows it and keeps its text.
func (p *parser) number() (*ast.Term, error) {
	start := p.i
	if err := p.skipNumber(); err != nil {
		return nil, err
	}
	text := string(p.b[start:p.i])
	if t := ast.InternedIntNumberTermFromString(text); t != nil {
		return t, nil
	}
	n, err := ast.NumberChecked(text) // refuses exponents OPA cannot hold, as InterfaceToValue does
	if err != nil {
		p.i = start
		return nil, p.errorf("%v", err)
	}
	return ast.NewTerm(n), nil
}
