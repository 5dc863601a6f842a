package opa

import (
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// The analysis below decides, once per compiled template, which parts of
// the input and of the candidate node a template can read. Its result is
// the memo key: two reviews that agree on every recorded part get the same
// verdict. It must over-approximate, never under-approximate:
//
//   - every reference rooted at input, or at a variable bound to one
//     (x := input.a.b, possibly through a chain of such aliases), records
//     its longest ground prefix;
//   - a variable that is used whole (passed to a builtin, compared,
//     returned) records its whole origin;
//   - data.inventory.cluster["v1"].Node[<the pod's nodeName>] is the
//     candidate node: reads below it are recorded as node paths, so nodes
//     that agree on those paths share verdicts whatever their names;
//   - any other read of data.inventory makes the key include the inventory
//     generation; a `with` on input or data widens to the whole input and
//     the inventory;
//   - arguments flow into user functions: the function's body is analysed
//     with its parameters bound to the arguments' origins, so a helper such
//     as is_update(input.review) records input.review.operation only;
//   - object.get(x, "k", default) reads x.k;
//   - templates that call nondeterministic builtins are never memoised.

// nodeNamePath is input.review.object.spec.nodeName.
var nodeNamePath = []*ast.Term{ast.StringTerm("review"), ast.StringTerm("object"), ast.StringTerm("spec"), ast.StringTerm("nodeName")}

// root names what an origin path is relative to.
type root uint8

const (
	rootInput root = iota + 1
	rootNode
	// rootConst is a value fixed for the constraint: its parameters, a
	// default given to object.get, or a rule computed from them.
	rootConst
)

type origin struct {
	root root
	path []*ast.Term
	// value is the constant's value (rootConst only; nil when unknown).
	value ast.Value
	// exact is true when the variable is the value at path; false when it
	// is somewhere below path (an element, a key), in which case path was
	// recorded as read when the variable was bound.
	exact bool
	// below counts the levels under path that every read through an
	// inexact origin reaches at least (spec[field][_] is 2 below spec).
	below int
}

func (o origin) extend(ts ...*ast.Term) origin {
	if o.root == rootConst {
		if o.value == nil {
			return o
		}
		t := lookup(o.value, ts)
		if t == undefinedTerm {
			return origin{root: rootConst, exact: o.exact}
		}
		return origin{root: rootConst, value: t.Value, exact: o.exact}
	}
	if !o.exact {
		o.below += len(ts)
		return o
	}
	p := make([]*ast.Term, 0, len(o.path)+len(ts))
	p = append(p, o.path...)
	p = append(p, ts...)
	return origin{root: o.root, path: p, exact: o.exact}
}

// analysis is what a template can read.
type analysis struct {
	inputPaths [][]*ast.Term
	nodePaths  [][]*ast.Term
	// nodeExists are node paths only tested for truth (`node.x` alone as
	// an expression): the key holds whether they are defined and not
	// false, not their value.
	nodeExists       [][]*ast.Term
	inventoryOther   bool
	nondeterministic bool
	// nodeNameObserved: the verdict can depend on the candidate's name
	// itself, not only on the Node object found under it.
	nodeNameObserved bool
}

// perPod reports whether the template cannot see which node is the candidate.
func (a *analysis) perPod() bool {
	return len(a.nodePaths) == 0 && len(a.nodeExists) == 0 && !a.nodeNameObserved
}

// readsNodeName reports whether the verdict can depend on the node's name
// itself (not only on the Node object found under it).
func (a *analysis) readsNodeName() bool { return a.nodeNameObserved }

func (a *analysis) describe() []string {
	var out []string
	for _, p := range a.inputPaths {
		out = append(out, "input"+pathString(p))
	}
	for _, p := range a.nodePaths {
		out = append(out, "node"+pathString(p))
	}
	for _, p := range a.nodeExists {
		out = append(out, "node"+pathString(p)+" (defined)")
	}
	if a.inventoryOther {
		out = append(out, "data.inventory (any change)")
	}
	return out
}

func pathString(p []*ast.Term) string {
	var b strings.Builder
	for _, t := range p {
		if s, ok := t.Value.(ast.String); ok && ast.IsVarCompatibleString(string(s)) {
			b.WriteString("." + string(s))
		} else {
			b.WriteString("[" + t.String() + "]")
		}
	}
	return b.String()
}

// observes reports whether a read through o can see the value at target.
// A read that goes deeper than target through a non-ground key cannot:
// target (the node name) is a string, and indexing a string is undefined,
// so input.review.object.spec[field][_] never sees spec.nodeName.
func observes(o origin, target []*ast.Term) bool {
	if !prefixRelated(o.path, target) {
		return false
	}
	if !o.exact && len(o.path) < len(target) && o.below > len(target)-len(o.path) {
		return false
	}
	return true
}

func prefixRelated(a, b []*ast.Term) bool {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// analyzer walks the compiled modules of one template.
type analyzer struct {
	compiler *ast.Compiler
	root     ast.Ref
	reads    map[root][][]*ast.Term
	// observesNodeName: some read can see input.review.object.spec.nodeName.
	observesNodeName bool
	exists           map[root][][]*ast.Term
	inv              bool
	nondet           bool
	// active guards against recursion through functions.
	active map[*ast.Rule]int
	// params are the constraint's parameters: references into them, and
	// keys computed from them, are constants, so that
	// node.metadata.labels[input.parameters.key] reads one label, not all.
	params ast.Value
	// consts caches the constant value of complete rules (nil: not constant).
	consts map[string]*origin
}

const maxCallDepth = 8

func analyzeTemplate(c *ast.Compiler, rules []*ast.Rule, base ast.Ref, params ast.Value) *analysis {
	z := &analyzer{compiler: c, root: base, reads: map[root][][]*ast.Term{}, exists: map[root][][]*ast.Term{}, active: map[*ast.Rule]int{}, params: params, consts: map[string]*origin{}}
	for _, r := range rules {
		for x := r; x != nil; x = x.Else {
			z.rule(x, map[ast.Var]origin{}, 0)
		}
	}
	a := &analysis{inventoryOther: z.inv, nondeterministic: z.nondet, nodeNameObserved: z.observesNodeName}
	a.inputPaths = minimizePaths(z.reads[rootInput], true)
	a.nodePaths = minimizePaths(z.reads[rootNode], false)
	for _, p := range minimizePaths(z.exists[rootNode], false) {
		covered := false
		for _, q := range a.nodePaths {
			if len(q) <= len(p) && prefixRelated(q, p) {
				covered = true
			}
		}
		if !covered {
			a.nodeExists = append(a.nodeExists, p)
		}
	}
	return a
}

// minimizePaths drops paths that lie below another path of the set, and
// sorts the rest so that keys are built in a stable order. A read of the
// whole input becomes a read of input.review: parameters are constant
// for a constraint, and the memo is per constraint.
func minimizePaths(paths [][]*ast.Term, input bool) [][]*ast.Term {
	var clean [][]*ast.Term
	for _, p := range paths {
		if len(p) == 0 && input {
			p = []*ast.Term{ast.StringTerm("review")}
		}
		clean = append(clean, p)
	}
	sort.Slice(clean, func(i, j int) bool { return len(clean[i]) < len(clean[j]) })
	var out [][]*ast.Term
	for _, p := range clean {
		covered := false
		for _, q := range out {
			if len(q) <= len(p) && prefixRelated(q, p) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return pathString(out[i]) < pathString(out[j]) })
	return out
}

func (z *analyzer) read(o origin) {
	if o.root == rootConst {
		return
	}
	z.reads[o.root] = append(z.reads[o.root], o.path)
	if o.root == rootInput && observes(o, nodeNamePath) {
		z.observesNodeName = true
	}
}

// rule analyses one rule with its variables bound as in env (function
// parameters bound to the caller's arguments).
func (z *analyzer) rule(r *ast.Rule, env map[ast.Var]origin, depth int) {
	z.active[r]++
	defer func() { z.active[r]-- }()
	seen := map[ast.Var]bool{}
	for v := range env {
		seen[v] = true
	}
	for _, arg := range r.Head.Args {
		ast.WalkVars(arg, func(v ast.Var) bool { seen[v] = true; return false })
	}
	for _, e := range r.Body {
		z.expr(e, env, seen, depth)
	}
	// Head terms use variables whole: what a rule returns escapes it.
	if r.Head.Key != nil {
		z.walk(r.Head.Key, env, depth)
	}
	if r.Head.Value != nil {
		z.walk(r.Head.Value, env, depth)
	}
	for _, t := range r.Head.Reference[1:] {
		z.walk(t, env, depth)
	}
}

func (z *analyzer) expr(e *ast.Expr, env map[ast.Var]origin, seen map[ast.Var]bool, depth int) {
	defer ast.WalkVars(e, func(v ast.Var) bool { seen[v] = true; return false })
	for _, w := range e.With {
		if ref, ok := w.Target.Value.(ast.Ref); ok {
			if ref[0].Equal(ast.InputRootDocument) {
				z.read(origin{root: rootInput})
			} else {
				z.inv = true
				z.read(origin{root: rootInput})
			}
		}
		z.walk(w.Value, env, depth)
	}
	if !e.Negated && len(e.With) == 0 && e.IsEquality() {
		terms := e.Terms.([]*ast.Term)
		if z.bind(terms[1], terms[2], env, seen, depth) || z.bind(terms[2], terms[1], env, seen, depth) {
			return
		}
	}
	if e.IsCall() {
		z.call(e.Operator(), e.Operands(), env, seen, depth)
		return
	}
	if t, ok := e.Terms.(*ast.Term); ok && len(e.With) == 0 {
		// A lone term is a truth test: for a node path, whether it is
		// defined and not false is all the verdict can depend on.
		if o, ok := z.resolve(t, env, depth); ok && o.root == rootNode && o.exact {
			z.exists[rootNode] = append(z.exists[rootNode], o.path)
			return
		}
	}
	z.walk(e, env, depth)
}

// bind handles `v = value` where v is a fresh variable and value has an
// origin: v becomes an alias. It reports whether it handled the expression.
func (z *analyzer) bind(lhs, rhs *ast.Term, env map[ast.Var]origin, seen map[ast.Var]bool, depth int) bool {
	v, ok := lhs.Value.(ast.Var)
	if !ok || seen[v] || v.IsWildcard() {
		return false
	}
	o, ok := z.resolve(rhs, env, depth)
	if !ok {
		return false
	}
	if !o.exact {
		z.read(o)
	}
	env[v] = o
	return true
}

// resolve gives the origin of a term that is an input reference, a node
// reference or an aliased variable (possibly with a ground path after it).
// Non-ground parts of a reference end its path (the origin is then
// inexact) and are walked as ordinary uses.
func (z *analyzer) resolve(t *ast.Term, env map[ast.Var]origin, depth int) (origin, bool) {
	switch v := t.Value.(type) {
	case ast.Var:
		if v.Equal(ast.InputRootDocument.Value) {
			return origin{root: rootInput, exact: true}, true
		}
		o, ok := env[v]
		return o, ok
	case ast.Ref:
		var base origin
		rest := v[1:]
		switch {
		case v[0].Equal(ast.InputRootDocument):
			base = origin{root: rootInput, exact: true}
			if len(rest) > 0 && rest[0].Equal(ast.StringTerm("parameters")) && z.params != nil {
				base = origin{root: rootConst, value: z.params, exact: true}
				rest = rest[1:]
			}
		case v[0].Equal(ast.DefaultRootDocument):
			if v.HasPrefix(z.root) {
				if c := z.constRule(v); c != nil {
					return *c, true
				}
				return origin{}, false
			}
			if !isInventoryRef(v) {
				return origin{}, false
			}
			if len(v) >= 6 && v[2].Equal(ast.StringTerm("cluster")) && v[3].Equal(ast.StringTerm("v1")) && v[4].Equal(ast.StringTerm("Node")) && z.isNodeName(v[5], env) {
				base = origin{root: rootNode, exact: true}
				rest = v[6:]
			} else {
				z.inv = true
				for _, k := range v[1:] {
					z.walk(k, env, depth)
				}
				return origin{}, false
			}
		default:
			hv, ok := v[0].Value.(ast.Var)
			if !ok {
				return origin{}, false
			}
			o, ok := env[hv]
			if !ok {
				return origin{}, false
			}
			base = o
		}
		rest = z.substituteConsts(rest, env)
		for i, k := range rest {
			if !k.IsGround() {
				for _, kk := range rest[i:] {
					z.walk(kk, env, depth)
				}
				o := base.extend(rest[:i]...)
				o.exact = false
				o.below += len(rest) - i
				return o, true
			}
		}
		return base.extend(rest...), true
	}
	return origin{}, false
}

// substituteConsts replaces variables holding a known scalar constant by
// their value, so that ground prefixes reach past them.
func (z *analyzer) substituteConsts(path []*ast.Term, env map[ast.Var]origin) []*ast.Term {
	var out []*ast.Term
	for i, k := range path {
		v, ok := k.Value.(ast.Var)
		if !ok {
			continue
		}
		o, ok := env[v]
		if !ok || o.root != rootConst || o.value == nil {
			break
		}
		switch o.value.(type) {
		case ast.String, ast.Number, ast.Boolean:
		default:
			return path
		}
		if out == nil {
			out = append([]*ast.Term(nil), path...)
		}
		out[i] = ast.NewTerm(o.value)
	}
	if out == nil {
		return path
	}
	return out
}

// substituteTerm replaces constant variables inside an array literal
// (object.get's path argument).
func (z *analyzer) substituteTerm(t *ast.Term, env map[ast.Var]origin) *ast.Term {
	arr, ok := t.Value.(*ast.Array)
	if !ok {
		return t
	}
	items := make([]*ast.Term, 0, arr.Len())
	arr.Foreach(func(x *ast.Term) { items = append(items, x) })
	items = z.substituteConsts(items, env)
	return ast.ArrayTerm(items...)
}

// constRule gives the constant value of a complete rule of the template
// (no arguments, no key, one definition) whose value depends only on the
// constraint's parameters, such as
// label_key := object.get(input.parameters, "labelKey", "tenant").
func (z *analyzer) constRule(ref ast.Ref) *origin {
	k := ref.String()
	if c, ok := z.consts[k]; ok {
		return c
	}
	z.consts[k] = nil // recursion guard
	rules := z.compiler.GetRulesExact(ref)
	if len(rules) != 1 || len(rules[0].Head.Args) > 0 || rules[0].Head.Key != nil || rules[0].Else != nil || rules[0].Default || rules[0].Head.Value == nil {
		return nil
	}
	r := rules[0]
	env := map[ast.Var]origin{}
	seen := map[ast.Var]bool{}
	for _, e := range r.Body {
		z.expr(e, env, seen, 0)
	}
	o, ok := z.resolve(r.Head.Value, env, 0)
	if !ok && r.Head.Value.IsGround() {
		o, ok = origin{root: rootConst, value: r.Head.Value.Value, exact: true}, true
	}
	if !ok || o.root != rootConst || o.value == nil {
		return nil
	}
	z.consts[k] = &o
	return &o
}

func (z *analyzer) isNodeName(t *ast.Term, env map[ast.Var]origin) bool {
	var o origin
	switch v := t.Value.(type) {
	case ast.Var:
		var ok bool
		if o, ok = env[v]; !ok {
			return false
		}
	case ast.Ref:
		if !v[0].Equal(ast.InputRootDocument) || !v.IsGround() {
			return false
		}
		o = origin{root: rootInput, path: v[1:], exact: true}
	default:
		return false
	}
	return o.root == rootInput && o.exact && len(o.path) == len(nodeNamePath) && prefixRelated(o.path, nodeNamePath)
}

// call handles a call expression: user functions are analysed with their
// parameters bound to the arguments' origins; object.get with a constant
// key reads below its object; other builtins use their arguments whole.
func (z *analyzer) call(op ast.Ref, args []*ast.Term, env map[ast.Var]origin, seen map[ast.Var]bool, depth int) {
	name := op.String()
	if b, ok := ast.BuiltinMap[name]; ok {
		if b.Nondeterministic {
			z.nondet = true
		}
		if name == ast.ObjectGet.Name && len(args) == 4 {
			if o, ok := z.resolve(args[0], env, depth); ok && o.exact {
				if key, ok := constantPath(z.substituteTerm(args[1], env)); ok {
					z.walk(args[2], env, depth)
					if o.root == rootConst {
						c := o.extend(key...)
						if c.value == nil && args[2].IsGround() {
							c.value = args[2].Value
						}
						if out, ok := args[3].Value.(ast.Var); ok && !seen[out] {
							env[out] = c
							return
						}
					}
					if out, ok := args[3].Value.(ast.Var); ok && !seen[out] {
						env[out] = o.extend(key...)
						return
					}
					z.read(o.extend(key...))
					z.walk(args[3], env, depth)
					return
				}
			}
		}
		for _, a := range args {
			z.walk(a, env, depth)
		}
		return
	}
	rules := z.compiler.GetRulesExact(op)
	if len(rules) == 0 || !op.HasPrefix(z.root) {
		// Not a function of this template: use arguments whole.
		for _, a := range args {
			z.walk(a, env, depth)
		}
		return
	}
	nparams := len(rules[0].Head.Args)
	for i, a := range args {
		if i >= nparams {
			z.walk(a, env, depth) // output variables
			continue
		}
		if _, isVar := a.Value.(ast.Var); !isVar {
			if _, isRef := a.Value.(ast.Ref); !isRef {
				z.walk(a, env, depth)
			}
		}
	}
	if depth >= maxCallDepth {
		for _, a := range args {
			z.walk(a, env, depth)
		}
		return
	}
	for _, r := range rules {
		for x := r; x != nil; x = x.Else {
			if z.active[x] > 0 {
				// Recursion: use arguments whole.
				for _, a := range args[:min(nparams, len(args))] {
					z.walk(a, env, depth)
				}
				continue
			}
			inner := map[ast.Var]origin{}
			for i, p := range x.Head.Args {
				if i >= len(args) {
					break
				}
				o, ok := z.resolve(args[i], env, depth)
				if !ok {
					continue
				}
				if !o.exact {
					z.read(o)
					continue
				}
				if pv, ok := p.Value.(ast.Var); ok && !pv.IsWildcard() {
					inner[pv] = o
				} else {
					// A pattern parameter unifies with the whole argument.
					z.read(o)
				}
			}
			z.rule(x, inner, depth+1)
		}
	}
}

// constantPath reads object.get's key: a string, or an array of strings
// (a path).
func constantPath(t *ast.Term) ([]*ast.Term, bool) {
	switch v := t.Value.(type) {
	case ast.String:
		return []*ast.Term{t}, true
	case *ast.Array:
		out := make([]*ast.Term, 0, v.Len())
		ok := true
		v.Foreach(func(e *ast.Term) {
			if _, isStr := e.Value.(ast.String); !isStr {
				ok = false
			}
			out = append(out, e)
		})
		return out, ok && len(out) > 0
	}
	return nil, false
}

// walk records every read in x: references by their ground prefix, aliased
// variables used whole by their whole origin.
func (z *analyzer) walk(x any, env map[ast.Var]origin, depth int) {
	vis := ast.NewGenericVisitor(func(n any) bool {
		switch v := n.(type) {
		case *ast.Expr:
			if v.IsCall() && len(v.With) == 0 && !v.Negated {
				// Nested bodies (comprehensions, every): calls keep their
				// function analysis; bindings there are treated as uses.
				z.call(v.Operator(), v.Operands(), env, map[ast.Var]bool{}, depth)
				return true
			}
			for _, w := range v.With {
				if ref, ok := w.Target.Value.(ast.Ref); ok && !ref[0].Equal(ast.InputRootDocument) {
					z.inv = true
				}
				z.read(origin{root: rootInput})
			}
		case ast.Call:
			if op, ok := v[0].Value.(ast.Ref); ok {
				z.call(op, v[1:], env, map[ast.Var]bool{}, depth)
				return true
			}
		case ast.Ref:
			if o, ok := z.resolve(ast.NewTerm(v), env, depth); ok {
				z.read(o)
			} else if !v[0].Equal(ast.DefaultRootDocument) {
				// A head we cannot resolve (a local, a call result): its
				// keys may still use aliases.
				for _, k := range v[1:] {
					z.walk(k, env, depth)
				}
			}
			return true
		case ast.Var:
			if v.Equal(ast.InputRootDocument.Value) {
				z.read(origin{root: rootInput})
			} else if o, ok := env[v]; ok {
				z.read(o)
			}
		}
		return false
	})
	vis.Walk(x)
}
