package analysis

import (
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Boolean helpers. The library's PSP templates test each container with
// `not is_exempt(c)`, and is_exempt compares the container's image with
// the constraint's exemptImages. Read as they are, the helper's reads
// (c.image) put every image into the memo key, so a pod with an image the
// memo has not seen (a new Job's) is evaluated by every such template,
// though what decides the verdict is only whether is_exempt holds. A call
// of a template's function used as a truth test, on one value of the
// review (the others constant), whose body reads nothing but that value
// and constants, is read as the function's truth on that value (Helper):
// the engine evaluates the function alone, memoised on what the function
// reads of the value, and keys the verdict on the answer.
//
// The function's own reads of the value (analyzer.helperRaw) are not in
// the key, but a printed value related to one is read: the engine
// evaluates with placeholders in place of printed values, and the
// function must see the real ones.

// argMarker stands in a Helper's arguments for the value at the path;
// helperArgVar passes it to the function's analysis (no Rego variable
// can be named so).
var (
	argMarker    = ast.VarTerm("$arg")
	helperArgVar = ast.Var("$helperarg")
)

// Helper ends a path: whether the template's function fn, called with
// args (argMarker standing for the value at the path before Helper, the
// others constants), holds (is defined and not false). reads are the
// paths below that value the function reads: its answer depends on them
// only.
func Helper(fn ast.Ref, args []*ast.Term, reads [][]*ast.Term) *ast.Term {
	paths := make([]*ast.Term, len(reads))
	for i, p := range reads {
		paths[i] = ast.ArrayTerm(p...)
	}
	return ast.ArrayTerm(ast.VarTerm("$helper"), ast.RefTerm(fn...), ast.ArrayTerm(args...), ast.ArrayTerm(paths...))
}

// HelperOn is a Helper whose function takes the value as its one
// argument (an engine's own kind of function, fn naming it).
func HelperOn(fn ast.Ref, reads [][]*ast.Term) *ast.Term {
	return Helper(fn, []*ast.Term{argMarker}, reads)
}

// HelperCall is a Helper's parts: the function, its arguments (IsArg marks
// the value's place) and the reads below the value.
type HelperCall struct {
	Func  ast.Ref
	Args  []*ast.Term
	Reads [][]*ast.Term
}

// IsArg reports whether t is, in HelperCall.Args, the value's place.
func IsArg(t *ast.Term) bool { return t.Equal(argMarker) }

// HelperOf reads a Helper term; ok is false for any other term.
func HelperOf(t *ast.Term) (h HelperCall, ok bool) {
	arr, isArr := t.Value.(*ast.Array)
	if !isArr || arr.Len() != 4 || !arr.Elem(0).Equal(ast.VarTerm("$helper")) {
		return HelperCall{}, false
	}
	h.Func = arr.Elem(1).Value.(ast.Ref)
	args := arr.Elem(2).Value.(*ast.Array)
	for i := range args.Len() {
		h.Args = append(h.Args, args.Elem(i))
	}
	reads := arr.Elem(3).Value.(*ast.Array)
	for i := range reads.Len() {
		p := reads.Elem(i).Value.(*ast.Array)
		path := make([]*ast.Term, p.Len())
		for j := range path {
			path[j] = p.Elem(j)
		}
		h.Reads = append(h.Reads, path)
	}
	return h, true
}

// IsHelper reports whether t is a Helper.
func IsHelper(t *ast.Term) bool { _, ok := HelperOf(t); return ok }

// helperString renders a Helper for PathString: .(is_exempt(_) on .image).
func helperString(h HelperCall) string {
	name := h.Func[len(h.Func)-1].String()
	if s, ok := h.Func[len(h.Func)-1].Value.(ast.String); ok {
		name = string(s)
	}
	args := make([]string, len(h.Args))
	for i, a := range h.Args {
		if IsArg(a) {
			args[i] = "_"
		} else {
			args[i] = a.String()
		}
	}
	reads := make([]string, len(h.Reads))
	for i, p := range h.Reads {
		reads[i] = PathString(p)
		if reads[i] == "" {
			reads[i] = "(whole)"
		}
	}
	return ".(" + name + "(" + strings.Join(args, ", ") + ") on " + strings.Join(reads, ", ") + ")"
}

// helperTest reads `f(x)` or `not f(x)`, f a function of the template
// and the expression a truth test (no output argument, no `with`), as
// Helper on x's origin, when that is sound: one argument is an exact
// input path (an alias, an element), the others constants, and the
// function's analysis in place reads only below that path, with no
// condition, and nothing of the node, the inventory, the node's name or
// nondeterministic builtins, records no printed values, list maps,
// calls it could not follow or references to rules whose reads are not
// followed there (a rule that reads input, evaluated alone, would see
// none of it). It reports whether it handled e: when the
// function fails a test, the call is analysed again as any call.
func (z *analyzer) helperTest(e *ast.Expr, env map[ast.Var]origin, seen map[ast.Var]bool, depth int) bool {
	if len(e.With) > 0 || z.quiet > 0 || z.helping > 0 || depth >= maxCallDepth {
		return false
	}
	op := e.Operator()
	rules := z.compiler.GetRulesExact(op)
	if len(rules) == 0 || !op.HasPrefix(z.root) {
		return false
	}
	args := e.Operands()
	if len(args) != len(rules[0].Head.Args) {
		return false // the call's value is bound, not tested
	}
	at := -1
	var arg origin
	callArgs := make([]*ast.Term, len(args))
	for i, a := range args {
		if c, ok := z.constantArg(a, env); ok {
			callArgs[i] = c
			continue
		}
		o, ok := exactInputOrigin(a, env)
		if !ok || at >= 0 {
			return false
		}
		at, arg, callArgs[i] = i, o, argMarker
	}
	if at < 0 {
		return false // constant: its reads are constants too
	}
	// The argument is passed as a variable of its own whose origin is
	// marked, so that reads through it are told from the function's reads
	// of input itself (which the helper's evaluation alone cannot see).
	inner := make(map[ast.Var]origin, len(env)+1)
	for k, v := range env {
		inner[k] = v
	}
	marked := arg
	marked.viaArg = true
	inner[helperArgVar] = marked
	passed := append([]*ast.Term(nil), args...)
	passed[at] = ast.NewTerm(helperArgVar)
	m := z.mark()
	bails, distinct, several, opaque := z.bails, len(z.distinct), z.several, z.opaque
	z.helping++ // the function's own truth tests are read as they are
	z.userCall(rules, passed, inner, seen, depth, nil)
	z.helping--
	rel, ok := z.helperReads(m, arg)
	if !ok || z.bails != bails || len(z.distinct) != distinct || z.several != several || z.opaque != opaque {
		// Read as a plain call, with the function's own truth tests read
		// as Helpers where they can be.
		z.reset(m)
		z.userCall(rules, args, env, seen, depth, nil)
		return true
	}
	if len(rel) == 0 {
		return true
	}
	raw := append([]read(nil), z.reads[m.reads:]...)
	z.reset(m)
	for _, r := range raw {
		z.helperRaw = append(z.helperRaw, r.path)
	}
	z.read(arg.extend(Helper(op, callArgs, rel)))
	return true
}

// helperReads are the paths, relative to arg, of what was read since m,
// if that is only reads below arg's path (unconditional, not observing
// the node's name) and nothing else.
func (z *analyzer) helperReads(m analysisMark, arg origin) ([][]*ast.Term, bool) {
	if len(z.exists) != m.exists || len(z.messages) != m.messages || z.inv != m.inv || z.allNodes != m.allNodes || z.nondet != m.nondet {
		return nil, false
	}
	var rel [][]*ast.Term
	for _, r := range z.reads[m.reads:] {
		if r.root != Input || !r.o.viaArg || r.when != nil || len(r.path) < len(arg.path) || observes(r.o, NodeNamePath) {
			return nil, false
		}
		for i, t := range arg.path {
			if !r.path[i].Equal(t) {
				return nil, false
			}
		}
		rel = append(rel, r.path[len(arg.path):])
	}
	return minimizePaths(rel, false), true
}

// constantArg is an argument's value when it is a constant: a literal, or
// a variable bound to a known constant (a parameter).
func (z *analyzer) constantArg(t *ast.Term, env map[ast.Var]origin) (*ast.Term, bool) {
	if ast.IsConstant(t.Value) {
		return t, true
	}
	if v, ok := t.Value.(ast.Var); ok {
		if o, ok := env[v]; ok && o.root == rootConst && o.exact && o.value != nil {
			return ast.NewTerm(o.value), true
		}
	}
	return nil, false
}

// exactInputOrigin is the origin of an argument that is exactly a value of
// the review: a variable bound to one, or a ground reference below input
// or below such a variable.
func exactInputOrigin(t *ast.Term, env map[ast.Var]origin) (origin, bool) {
	var o origin
	var rest []*ast.Term
	switch v := t.Value.(type) {
	case ast.Var:
		var ok bool
		if o, ok = env[v]; !ok {
			return origin{}, false
		}
	case ast.Ref:
		if !ast.Ref(v[1:]).IsGround() {
			return origin{}, false
		}
		rest = v[1:]
		if v[0].Equal(ast.InputRootDocument) {
			o = origin{root: Input, exact: true}
		} else if hv, ok := v[0].Value.(ast.Var); ok {
			if o, ok = env[hv]; !ok {
				return origin{}, false
			}
		} else {
			return origin{}, false
		}
	default:
		return origin{}, false
	}
	if o.root != Input || !o.exact {
		return origin{}, false
	}
	o = o.extend(rest...)
	if len(o.path) < 2 || !o.path[0].Equal(ast.StringTerm("review")) {
		return origin{}, false
	}
	return o, true
}

// dropDeterminedHelpers leaves out of the key paths each Helper whose
// answer the other paths already decide: the function is called on a
// list's element (the Helper follows Each), and every value it reads of
// the element is keyed raw by another path, read whenever the Helper is
// (unconditionally, or under the same condition). allowedrepos reads
// `container.image` in its own condition and through `is_exempt(c)`: its
// key holds each image, so whether is_exempt holds on each adds nothing,
// and a pod with a new image would only pay the helper's evaluation on
// top of the template's. An argument that is not an element (a field
// that may be absent) is kept: whether the function is called at all is
// not in the raw reads.
func dropDeterminedHelpers(paths [][]*ast.Term) [][]*ast.Term {
	var out [][]*ast.Term
	for _, p := range paths {
		if !helperDetermined(p, paths) {
			out = append(out, p)
		}
	}
	return out
}

func helperDetermined(p []*ast.Term, paths [][]*ast.Term) bool {
	n := len(p)
	if n < 2 || !IsEach(p[n-2]) {
		return false
	}
	h, ok := HelperOf(p[n-1])
	if !ok || len(h.Reads) == 0 {
		return false
	}
	for _, r := range h.Reads {
		target := append(append([]*ast.Term(nil), p[:n-1]...), r...)
		if !rawCovers(paths, target) {
			return false
		}
	}
	return true
}

// rawCovers reports whether a key path that ends in no Helper holds the
// value at target whenever target's own path is read.
func rawCovers(paths [][]*ast.Term, target []*ast.Term) bool {
	for _, q := range paths {
		if len(q) == 0 || IsHelper(q[len(q)-1]) {
			continue
		}
		if _, _, conditional := Condition(q); conditional {
			if prefixCovers(q, target) { // the same condition, then the path
				return true
			}
			continue
		}
		if prefixCovers(q, Unconditioned(target)) {
			return true
		}
	}
	return false
}
