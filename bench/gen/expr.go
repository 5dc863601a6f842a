package gen

import (
	"fmt"
	"strings"
)

// Type is the static type the generator gives an expression. The review's
// values are dyn to CEL (Gatekeeper declares object as dyn): a Type is
// what the expression holds when the pod has the field with its usual
// type, and a pod may not.
type Type int

// The types expressions are generated at.
const (
	Bool Type = iota
	Int
	String
	StringList
	IntList
	StringMap
	Container
	ContainerList
	Port
	PortList
	numTypes
)

var typeNames = [...]string{"bool", "int", "string", "list(string)", "list(int)", "map(string, string)", "container", "list(container)", "port", "list(port)"}

func (t Type) String() string { return typeNames[t] }

// Expr is one generated expression: a leaf's text, or a format whose %s
// verbs take its kids' texts in order. Form names what it is for the
// coverage count (one name per expression form the generator knows).
type Expr struct {
	Form string
	Type Type
	Text string
	Fmt  string
	Kids []*Expr
	// Binds are the comprehension variables this node binds for its kids
	// (a shrink that moves a kid out of it must not leave them unbound).
	Binds []string
}

// String is the expression's CEL text.
func (e *Expr) String() string {
	if e.Fmt == "" {
		return e.Text
	}
	args := make([]any, len(e.Kids))
	for i, k := range e.Kids {
		args[i] = k.String()
	}
	return fmt.Sprintf(e.Fmt, args...)
}

// Forms adds the forms of e and everything below it to count.
func (e *Expr) Forms(count map[string]int) {
	count[e.Form]++
	for _, k := range e.Kids {
		k.Forms(count)
	}
}

// Size is how many nodes e has.
func (e *Expr) Size() int {
	n := 1
	for _, k := range e.Kids {
		n += k.Size()
	}
	return n
}

// freeVars reports whether e uses a comprehension variable that it does
// not bind itself (names in vars).
func (e *Expr) uses(vars []string) bool {
	if e.Fmt == "" {
		for _, v := range vars {
			if e.Text == v || strings.HasPrefix(e.Text, v+".") || strings.HasPrefix(e.Text, v+"[") || strings.HasPrefix(e.Text, v+"?") {
				return true
			}
		}
		return false
	}
	for _, k := range e.Kids {
		if k.uses(vars) {
			return true
		}
	}
	return false
}

// Simpler are the expressions one step simpler than e, each a copy with
// one node replaced: by the literal of its type, or by a kid of its type
// that uses no variable the node binds. The shrinker tries them in order.
func (e *Expr) Simpler() []*Expr {
	var out []*Expr
	if lit := literalOf(e.Type); e.Fmt != "" || e.Text != lit.Text {
		out = append(out, lit)
	}
	for _, k := range e.Kids {
		if k.Type == e.Type && !k.uses(e.Binds) {
			out = append(out, k)
		}
	}
	for i, k := range e.Kids {
		for _, s := range k.Simpler() {
			c := *e
			c.Kids = append([]*Expr(nil), e.Kids...)
			c.Kids[i] = s
			out = append(out, &c)
		}
	}
	return out
}

// literalOf is the simplest expression of type t, one that cannot fail.
func literalOf(t Type) *Expr {
	text := map[Type]string{
		Bool: "true", Int: "0", String: `""`, StringList: "[]", IntList: "[]", StringMap: "{}",
		Container: `{"name": "c"}`, ContainerList: "[]", Port: `{"containerPort": 1}`, PortList: "[]",
	}[t]
	return &Expr{Form: "literal", Type: t, Text: text}
}
