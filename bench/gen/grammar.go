package gen

import (
	"math/rand/v2"
	"strconv"
	"strings"
)

// Policy is a generated template of either engine and its Constraint.
type Policy interface {
	TemplateKind() string
	Objects() (template, constraint map[string]any)
	// Forms adds the expression forms the template uses to count.
	Forms(count map[string]int)
	// Size is how many expression nodes it has.
	Size() int
	// SimplerPolicies are the templates one step simpler.
	SimplerPolicies() []Policy
	// IteratesMap: it iterates a map in CEL (Go's map order, random on
	// both sides).
	IteratesMap() bool
	// WithOnInput: it writes `with input.<path> as` in Rego.
	WithOnInput() bool
}

var (
	_ Policy = (*Template)(nil)
	_ Policy = (*RegoTemplate)(nil)
)

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

// exprGen writes random expressions of a grammar: rules by type, the
// template's variables and the comprehension variables in force as
// leaves. Not safe for concurrent use.
type exprGen struct {
	r     *rand.Rand
	rules map[Type][]rule
	// vars are the template variables defined so far, by type, written
	// with varPrefix before their name.
	vars      map[Type][]string
	varPrefix string
	// scope are the comprehension variables in force, by type.
	scope map[Type][]string
	fresh int
}

// rule is one way to build an expression of a type: its form, the types
// of its kids, and how to write it. leaf rules have no kids that grow.
type rule struct {
	form string
	kids []Type
	fmt  string
	// bind, when set, makes the rule a comprehension: the variable it
	// binds has type bind[0] (and a second variable bind[1]) while the
	// kids from kid bindFrom on are generated.
	bind     []Type
	bindFrom int
}

// A rule's fmt writes $1 and $2 for the variables it binds: x<n>, fresh
// in each template.

// Expr is a random expression of type t at most depth levels deep.
func (g *exprGen) Expr(t Type, depth int) *Expr {
	// Variables in scope and the template's own are leaves of their type.
	if vs := g.scope[t]; len(vs) > 0 && g.r.IntN(3) == 0 {
		return &Expr{Form: "comprehension variable", Type: t, Text: vs[g.r.IntN(len(vs))]}
	}
	if vs := g.vars[t]; len(vs) > 0 && g.r.IntN(4) == 0 {
		return &Expr{Form: "template variable", Type: t, Text: g.varPrefix + vs[g.r.IntN(len(vs))]}
	}
	rules := g.rules[t]
	var pick []rule
	for _, r := range rules {
		if depth > 0 || len(r.kids) == 0 || (len(g.scope[r.kids[0]]) > 0 && len(r.kids) == 1 && r.bind == nil) {
			pick = append(pick, r)
		}
	}
	if len(pick) == 0 {
		// A type with no leaf rule (a container) at depth 0: from its
		// variable if one is bound, else its literal.
		if vs := g.scope[t]; len(vs) > 0 {
			return &Expr{Form: "comprehension variable", Type: t, Text: vs[g.r.IntN(len(vs))]}
		}
		return literalOf(t)
	}
	return g.build(pick[g.r.IntN(len(pick))], t, depth)
}

// build writes one rule with new kids.
func (g *exprGen) build(r rule, t Type, depth int) *Expr {
	e := &Expr{Form: r.form, Type: t}
	if len(r.kids) == 0 {
		e.Text = r.fmt
		return e
	}
	f := r.fmt
	var names []string
	for i, bt := range r.bind {
		g.fresh++
		name := "x" + strconv.Itoa(g.fresh)
		names = append(names, name)
		f = strings.ReplaceAll(f, "$"+strconv.Itoa(i+1), name)
		_ = bt
	}
	e.Fmt, e.Binds = f, names
	for i, kt := range r.kids {
		if r.bind != nil && i == r.bindFrom {
			g.push(r.bind, names)
			defer g.pop(r.bind)
		}
		e.Kids = append(e.Kids, g.Expr(kt, depth-1))
	}
	return e
}

func (g *exprGen) push(types []Type, names []string) {
	if g.scope == nil {
		g.scope = map[Type][]string{}
	}
	for i, t := range types {
		g.scope[t] = append(g.scope[t], names[i])
	}
}

func (g *exprGen) pop(types []Type) {
	for _, t := range types {
		g.scope[t] = g.scope[t][:len(g.scope[t])-1]
	}
}

// exprSteps are copies of t, each with one of its expressions (exprs) one
// step simpler.
func exprSteps[T any](t T, clone func(T) T, exprs func(T) []**Expr) []T {
	var out []T
	for i, e := range exprs(t) {
		for _, s := range (*e).Simpler() {
			c := clone(t)
			*exprs(c)[i] = s
			out = append(out, c)
		}
	}
	return out
}

// templateObject is a ConstraintTemplate of kind with one target, its
// schema open (any parameters).
func templateObject(kind string, target map[string]any) map[string]any {
	target["target"] = "admission.k8s.gatekeeper.sh"
	return map[string]any{
		"apiVersion": "templates.gatekeeper.sh/v1",
		"kind":       "ConstraintTemplate",
		"metadata":   map[string]any{"name": strings.ToLower(kind)},
		"spec": map[string]any{
			"crd": map[string]any{"spec": map[string]any{
				"names": map[string]any{"kind": kind},
				"validation": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object", "x-kubernetes-preserve-unknown-fields": true,
				}},
			}},
			"targets": []any{target},
		},
	}
}
