package cel

import (
	"maps"
	"slices"

	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
)

// A comparison of the values of one path of the object with each other,
// as the library's AppArmor template joins its pairs to the containers by
// name:
//
//	variables.containers.all(container,
//	  variables.appArmorByContainer.exists(pair, pair[0] == container.name && ...))
//
// where pair[0] is a container's name too. Such a comparison depends on
// which of the values are equal, not on the values: every element's
// placeholder is its own (containers[0].name, containers[1].name, ...),
// so the comparisons come out as with the real values whenever those are
// pairwise distinct, which the API server makes container names. The
// path is printed with that condition (analysis.MessagePath.Distinct);
// the engine checks it on each pod, in the object and oldObject alike.
// A comparison with anything else (a constant, a computed value, another
// path) reads both sides whole.
//
// The origins of a value say where it may come from, not that it comes
// from nowhere else: `cond ? c.name : "main"`, `"x" + c.name` and the
// elements of `["main", c.name]` all have c.name as their only origin.
// So each side must also be exact (exact): by its expression, always the
// value at one of its origins, never a computed value or a constant.

// compare records what a == b (or a != b) reads.
func (r *reader) compare(x, y celast.Expr, sc scope) {
	a, b := r.eval(x, sc), r.eval(y, sc)
	if p, ok := selfJoin(a, b); ok && r.exact(x, r.bound, 0) && r.exact(y, r.bound, 0) {
		r.printPath(p)
		r.joined[analysis.PathString(anyElement(reviewPath(p)))] = true
		for _, o := range append(slices.Clone(a), b...) {
			if o.path[0] == "oldObject" {
				// Keyed whole: a review with an oldObject (never a
				// pod's, at the scheduler) is its own class.
				r.use(value{o})
			}
		}
		return
	}
	r.use(a)
	r.use(b)
}

// selfJoin is the path of the object whose values both a and b are (and
// no other value, save the same path's in oldObject, as
// variables.anyObject gives), when it is one a placeholder can stand for.
func selfJoin(a, b value) ([]string, bool) {
	var p []string
	same := func(q []string) bool {
		return analysis.PathString(anyElement(reviewPath(q))) == analysis.PathString(anyElement(reviewPath(p)))
	}
	for _, side := range []value{a, b} {
		found := false
		for _, o := range side {
			if o.wrapped() || o.path[0] != "object" {
				continue
			}
			if !printablePath(o.path) || analysis.PrefixRelated(reviewPath(o.path), analysis.NodeNamePath) || (p != nil && !same(o.path)) {
				return nil, false
			}
			if p == nil {
				p = o.path
			}
			found = true
		}
		if !found {
			return nil, false
		}
	}
	for _, o := range append(slices.Clone(a), b...) {
		if o.wrapped() || (o.path[0] != "object" && o.path[0] != "oldObject") {
			return nil, false
		}
		if o.path[0] == "oldObject" && !same(append([]string{"object"}, o.path[1:]...)) {
			return nil, false
		}
	}
	return p, true
}

// binding is what a comprehension's variable ranges over: the range's
// expression and the bindings in force where it was evaluated. A nil
// binding is a name bound to anything else (an accumulator, a
// two-variable comprehension's index or key).
type binding struct {
	rng celast.Expr
	env map[string]*binding
}

// bindExact records the names comprehension c binds while its body is
// read (r.bound), and gives what restores the outer ones.
func (r *reader) bindExact(c celast.ComprehensionExpr) (restore func()) {
	outer := r.bound
	r.bound = maps.Clone(outer)
	if r.bound == nil {
		r.bound = map[string]*binding{}
	}
	r.bound[c.AccuVar()] = nil
	r.bound[c.IterVar()] = nil
	if c.HasIterVar2() {
		r.bound[c.IterVar2()] = nil
	} else {
		r.bound[c.IterVar()] = &binding{rng: c.IterRange(), env: outer}
	}
	return func() { r.bound = outer }
}

// maxExactDepth bounds exact's walk through variables and ranges.
const maxExactDepth = 16

// exact: e's value is always exactly a value of the object (or of
// oldObject, through variables.anyObject), names resolved in env.
func (r *reader) exact(e celast.Expr, env map[string]*binding, depth int) bool {
	if depth > maxExactDepth {
		return false
	}
	switch e.Kind() {
	case celast.IdentKind:
		// A comprehension's variable: an element of its range.
		b := env[e.AsIdent()]
		return b != nil && r.exactElements(b.rng, b.env, depth+1)
	case celast.SelectKind:
		s := e.AsSelect()
		if s.IsTestOnly() {
			return false
		}
		if _, _, ok := objectChain(e); ok {
			return true
		}
		if src, ok := r.variableExpr(e); ok {
			return r.exact(src, nil, depth+1)
		}
		return r.exact(s.Operand(), env, depth+1)
	case celast.CallKind:
		c := e.AsCall()
		args := c.Args()
		switch {
		case c.FunctionName() == "dyn" && !c.IsMemberFunction() && len(args) == 1:
			return r.exact(args[0], env, depth+1)
		case c.FunctionName() == operators.Index && len(args) == 2 && args[1].Kind() == celast.LiteralKind:
			switch k := args[1].AsLiteral().(type) {
			case types.String:
				return r.exact(args[0], env, depth+1)
			case types.Int:
				return r.exactAt(args[0], int(k), env, depth+1)
			}
		}
	}
	return false
}

// exactElements: every element of the list e is exact.
func (r *reader) exactElements(e celast.Expr, env map[string]*binding, depth int) bool {
	if depth > maxExactDepth {
		return false
	}
	if r.exact(e, env, depth+1) {
		return true // a list of the object: its elements are too
	}
	switch e.Kind() {
	case celast.ListKind:
		for _, x := range e.AsList().Elements() {
			if !r.exact(x, env, depth+1) {
				return false
			}
		}
		return true
	case celast.SelectKind:
		if src, ok := r.variableExpr(e); ok {
			return r.exactElements(src, nil, depth+1)
		}
	case celast.CallKind:
		c := e.AsCall()
		args := c.Args()
		switch {
		case c.FunctionName() == operators.Conditional && len(args) == 3:
			return r.exactElements(args[1], env, depth+1) && r.exactElements(args[2], env, depth+1)
		case c.FunctionName() == "dyn" && !c.IsMemberFunction() && len(args) == 1:
			return r.exactElements(args[0], env, depth+1)
		}
	case celast.ComprehensionKind:
		if elem, inner, ok := appended(e.AsComprehension(), env); ok {
			return r.exact(elem, inner, depth+1)
		}
	}
	return false
}

// exactAt: element k of the list e is exact (every element of e, or the
// k-th of a list literal, as map(c, [c.name, ...]) makes them).
func (r *reader) exactAt(e celast.Expr, k int, env map[string]*binding, depth int) bool {
	if depth > maxExactDepth {
		return false
	}
	if r.exactElements(e, env, depth+1) {
		return true
	}
	switch e.Kind() {
	case celast.ListKind:
		elems := e.AsList().Elements()
		return k >= 0 && k < len(elems) && r.exact(elems[k], env, depth+1)
	case celast.IdentKind:
		// An element of a comprehension's range whose elements all hold
		// an exact value at k.
		b := env[e.AsIdent()]
		return b != nil && r.exactAtEach(b.rng, k, b.env, depth+1)
	}
	return false
}

// exactAtEach: every element of the list e is a list whose element k is
// exact.
func (r *reader) exactAtEach(e celast.Expr, k int, env map[string]*binding, depth int) bool {
	if depth > maxExactDepth {
		return false
	}
	switch e.Kind() {
	case celast.ListKind:
		for _, x := range e.AsList().Elements() {
			if !r.exactAt(x, k, env, depth+1) {
				return false
			}
		}
		return true
	case celast.SelectKind:
		if src, ok := r.variableExpr(e); ok {
			return r.exactAtEach(src, k, nil, depth+1)
		}
	case celast.CallKind:
		c := e.AsCall()
		args := c.Args()
		switch {
		case c.FunctionName() == operators.Conditional && len(args) == 3:
			return r.exactAtEach(args[1], k, env, depth+1) && r.exactAtEach(args[2], k, env, depth+1)
		case c.FunctionName() == "dyn" && !c.IsMemberFunction() && len(args) == 1:
			return r.exactAtEach(args[0], k, env, depth+1)
		}
	case celast.ComprehensionKind:
		if elem, inner, ok := appended(e.AsComprehension(), env); ok {
			return r.exactAt(elem, k, inner, depth+1)
		}
	}
	return false
}

// variableExpr is the expression of the template's variable e names
// (variables.<name>), parsed.
func (r *reader) variableExpr(e celast.Expr) (celast.Expr, bool) {
	s := e.AsSelect()
	if s.IsTestOnly() || s.Operand().Kind() != celast.IdentKind || s.Operand().AsIdent() != "variables" {
		return nil, false
	}
	src, ok := r.vars[s.FieldName()]
	if !ok {
		return nil, false
	}
	return r.parse(src)
}

// appended reads c as a list built by appending one element per step (the
// map and filter macros, a map with a filter): the element appended, and
// the bindings it is evaluated under. The list starts empty and is the
// comprehension's result.
func appended(c celast.ComprehensionExpr, env map[string]*binding) (celast.Expr, map[string]*binding, bool) {
	accu := c.AccuVar()
	isAccu := func(x celast.Expr) bool { return x.Kind() == celast.IdentKind && x.AsIdent() == accu }
	if c.HasIterVar2() || !isAccu(c.Result()) || c.AccuInit().Kind() != celast.ListKind || len(c.AccuInit().AsList().Elements()) != 0 {
		return nil, nil, false
	}
	step := c.LoopStep()
	if step.Kind() == celast.CallKind && step.AsCall().FunctionName() == operators.Conditional && len(step.AsCall().Args()) == 3 {
		if args := step.AsCall().Args(); isAccu(args[2]) {
			step = args[1]
		}
	}
	if step.Kind() != celast.CallKind || step.AsCall().FunctionName() != operators.Add || len(step.AsCall().Args()) != 2 {
		return nil, nil, false
	}
	args := step.AsCall().Args()
	if !isAccu(args[0]) || args[1].Kind() != celast.ListKind || len(args[1].AsList().Elements()) != 1 {
		return nil, nil, false
	}
	inner := maps.Clone(env)
	if inner == nil {
		inner = map[string]*binding{}
	}
	inner[accu] = nil
	inner[c.IterVar()] = &binding{rng: c.IterRange(), env: env}
	return args[1].AsList().Elements()[0], inner, true
}
