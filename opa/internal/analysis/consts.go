package analysis

import (
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Constants. A bound constraint's parameters never change, so whatever
// the template computes from them alone is a constant of the constraint:
// a lookup by such a key reads one key (node.metadata.labels["zone"]), not
// the whole object. An origin rooted at rootConst is one of:
//
//   - a known value (value): `input.parameters.label`, a literal, a rule
//     such as `label := object.get(input.parameters, "label", "zone")`;
//   - one of a few known values (alts): an element of a constant
//     collection (`l := input.parameters.labels[_]`, then `l.key`), a key
//     of one (`some k; input.parameters.labels[k]`, bound there), a rule
//     with several definitions or a default, a builtin of constants with
//     several possible arguments;
//   - a collection whose elements are among known values (elems): a
//     comprehension or a partial set rule over constants;
//   - an unknown constant (none of those): a missing parameter, a value
//     computed by a builtin the analysis does not evaluate.
//
// Every form over-approximates: the real value is one of those given
// (when it is defined at all). A lookup by a constant key reads, for each
// value the key may take that is a string or a number, that one key
// (fanOut); by any other key (an object, a missing parameter, an unknown
// constant) the whole object, as before. Nothing read through a constant
// adds to the key: it depends on the constraint alone.

// maxAlts bounds the values a constant is known to be one of; past it,
// the constant is unknown.
const maxAlts = 64

// unknownConst is a constant of the constraint whose value is not known.
func unknownConst() origin { return origin{root: rootConst, exact: true} }

// undefinedConst is a reference below a known constant that holds
// nothing there (a parameter the constraint does not give): unknown to
// every use but constRule, where it makes a definition that never
// succeeds.
func undefinedConst() origin { return origin{root: rootConst, exact: true, undefined: true} }

// constOf is the constant that is one of vals (deduplicated).
func constOf(vals []ast.Value) origin {
	var uniq []ast.Value
	for _, v := range vals {
		dup := false
		for _, u := range uniq {
			if u.Compare(v) == 0 {
				dup = true
				break
			}
		}
		if !dup {
			uniq = append(uniq, v)
		}
	}
	switch {
	case len(uniq) == 0 || len(uniq) > maxAlts:
		return unknownConst()
	case len(uniq) == 1:
		return origin{root: rootConst, value: uniq[0], exact: true}
	}
	return origin{root: rootConst, alts: uniq, exact: true}
}

// values are the values a constant may be (nil: unknown, or a collection
// known by its elements only).
func (o origin) values() []ast.Value {
	if o.root != rootConst {
		return nil
	}
	if o.value != nil {
		return []ast.Value{o.value}
	}
	return o.alts
}

// keyValues are the values a constant may be when each is a string or a
// number, a key a lookup can use as it is; nil otherwise.
func (o origin) keyValues() []ast.Value {
	vals := o.values()
	for _, v := range vals {
		switch v.(type) {
		case ast.String, ast.Number:
		default:
			return nil
		}
	}
	return vals
}

// extendConst is the constant below o at the ground keys ts: unknown when
// some value o may be has nothing there (object.get's default aside, a
// missing value is undefined, but unknown is the safe answer).
func (o origin) extendConst(ts []*ast.Term) origin {
	if len(ts) == 0 {
		return o
	}
	if o.elems != nil {
		return constOf(o.elems).extendConst(ts[1:])
	}
	vals := o.values()
	if vals == nil {
		return unknownConst()
	}
	out := make([]ast.Value, 0, len(vals))
	for _, v := range vals {
		f, ok := find(v, ts)
		if !ok && len(vals) == 1 {
			return undefinedConst()
		}
		if !ok {
			return unknownConst()
		}
		out = append(out, f)
	}
	return constOf(out)
}

// lookupEach is o[k] for every value k may take: the values found (a
// lookup by a key that is not there binds nothing).
func (o origin) lookupEach(keys []ast.Value) origin {
	if o.elems != nil {
		return constOf(o.elems)
	}
	vals := o.values()
	if vals == nil {
		return unknownConst()
	}
	var out []ast.Value
	for _, v := range vals {
		for _, k := range keys {
			if f, ok := find(v, []*ast.Term{ast.NewTerm(k)}); ok {
				out = append(out, f)
			}
		}
	}
	return constOf(out)
}

// anyChild is o[x] for an x the analysis does not know: any element of
// any value o may be.
func (o origin) anyChild() origin {
	if o.elems != nil {
		return constOf(o.elems)
	}
	vals := o.values()
	if vals == nil {
		return unknownConst()
	}
	var out []ast.Value
	for _, v := range vals {
		out = append(out, children(v)...)
	}
	return constOf(out)
}

// anyKey is the key x of o[x] when x is bound by the lookup: any key of
// any value o may be.
func (o origin) anyKey() origin {
	if o.elems != nil {
		return unknownConst()
	}
	vals := o.values()
	if vals == nil {
		return unknownConst()
	}
	var out []ast.Value
	for _, v := range vals {
		out = append(out, keysOf(v)...)
	}
	return constOf(out)
}

// children are the values a lookup into v can give: an object's values,
// an array's elements, a set's members.
func children(v ast.Value) []ast.Value {
	var out []ast.Value
	switch x := v.(type) {
	case ast.Object:
		x.Foreach(func(_, t *ast.Term) { out = append(out, t.Value) })
	case *ast.Array:
		x.Foreach(func(t *ast.Term) { out = append(out, t.Value) })
	case ast.Set:
		x.Foreach(func(t *ast.Term) { out = append(out, t.Value) })
	}
	return out
}

// keysOf are the keys a lookup into v can succeed with.
func keysOf(v ast.Value) []ast.Value {
	var out []ast.Value
	switch x := v.(type) {
	case ast.Object:
		x.Foreach(func(k, _ *ast.Term) { out = append(out, k.Value) })
	case *ast.Array:
		for i := 0; i < x.Len(); i++ {
			out = append(out, ast.IntNumberTerm(i).Value)
		}
	case ast.Set:
		x.Foreach(func(t *ast.Term) { out = append(out, t.Value) })
	}
	return out
}

// followConst extends a constant base by rest: a ground key or a key
// bound to known constants looks those up; any other key (a variable the
// lookup binds, one from the review) may take any key of the value, so
// the result is any of its elements. Keys are walked: one from the review
// is read whole.
func (z *analyzer) followConst(base origin, rest []*ast.Term, env map[ast.Var]origin, depth int) origin {
	o := base
	for _, k := range rest {
		if k.IsGround() {
			o = o.extendConst([]*ast.Term{k})
			continue
		}
		z.walk(k, env, depth)
		if v, ok := k.Value.(ast.Var); ok {
			if ko, bound := env[v]; bound && ko.root == rootConst && ko.values() != nil {
				o = o.lookupEach(ko.values())
				continue
			}
		}
		o = o.anyChild()
	}
	return o
}

// bindConstKeys binds the variables that a lookup into a constant binds
// (`some k; v := input.parameters.labels[k]`, the compiled `some k, v in
// ...`) to the keys they may take, before t, a term of a positive
// expression, is resolved: once the expression holds, each is a key of
// the value it indexes. A variable the analysis already knows is left as
// it is.
func (z *analyzer) bindConstKeys(t *ast.Term, env map[ast.Var]origin, depth int) {
	ref, ok := t.Value.(ast.Ref)
	if !ok || ref.IsGround() {
		return
	}
	for i := 1; i < len(ref); i++ {
		v, isVar := ref[i].Value.(ast.Var)
		if !isVar || v.IsWildcard() {
			continue
		}
		if _, bound := env[v]; bound {
			continue
		}
		base, ok := z.constPrefix(ref[:i], env, depth)
		if !ok {
			return
		}
		env[v] = base.anyKey()
	}
}

// constPrefix resolves ref, a prefix of a reference, when it is a
// constant: below input.parameters (parameters known), a variable bound
// to a constant, or a constant rule of the template; nothing is recorded.
func (z *analyzer) constPrefix(ref ast.Ref, env map[ast.Var]origin, depth int) (origin, bool) {
	if !z.headBound(ref, env) {
		return origin{}, false
	}
	switch h := ref[0].Value.(type) {
	case ast.Var:
		if h.Equal(ast.InputRootDocument.Value) {
			if z.params == nil || len(ref) < 2 || !ref[1].Equal(ast.StringTerm("parameters")) {
				return origin{}, false
			}
		} else if h.Equal(ast.DefaultRootDocument.Value) {
			if !ref.HasPrefix(z.root) {
				return origin{}, false
			}
		} else if env[h].root != rootConst {
			return origin{}, false
		}
	default:
		return origin{}, false
	}
	reads, inv, opaque, why := len(z.reads), z.inv, z.opaque, len(z.why)
	z.quiet++
	base, ok := z.resolve(ast.NewTerm(ref), env, depth)
	z.quiet--
	z.reads, z.inv, z.opaque, z.why = z.reads[:reads], inv, opaque, z.why[:why]
	return base, ok && base.root == rootConst
}

// headBound reports whether every variable of ref is its head, bound in
// env, or a key bindConstKeys bound.
func (z *analyzer) headBound(ref ast.Ref, env map[ast.Var]origin) bool {
	for i, t := range ref {
		v, isVar := t.Value.(ast.Var)
		if !isVar {
			if !t.IsGround() {
				return false
			}
			continue
		}
		if i == 0 && (v.Equal(ast.InputRootDocument.Value) || v.Equal(ast.DefaultRootDocument.Value)) {
			continue
		}
		if _, bound := env[v]; !bound {
			return false
		}
	}
	return true
}

// bindExprKeys is bindConstKeys for the terms of e, a positive
// expression: both sides of an equality, a call's operands, a lone term.
func (z *analyzer) bindExprKeys(e *ast.Expr, env map[ast.Var]origin, depth int) {
	switch ts := e.Terms.(type) {
	case *ast.Term:
		z.bindConstKeys(ts, env, depth)
	case []*ast.Term:
		for _, t := range ts[1:] {
			z.bindConstKeys(t, env, depth)
		}
	}
}

// constGet is object.get(o, key, def) for a constant o: for each value o
// may be, the value at key, or def where there is none (unknown when def
// is not ground).
func constGet(o origin, key []*ast.Term, def *ast.Term) origin {
	vals := o.values()
	if vals == nil {
		return unknownConst()
	}
	out := make([]ast.Value, 0, len(vals))
	for _, v := range vals {
		if f, ok := find(v, key); ok {
			out = append(out, f)
			continue
		}
		if !def.IsGround() {
			return unknownConst()
		}
		out = append(out, def.Value)
	}
	return constOf(out)
}

// objectGetEach handles object.get(x, k, default, out) where k is a
// variable bound to a few constant keys, each a string (x exact): x.k is
// read for each (fanOut), and out is a function of those values; for a
// constant x, out is each value found or the default.
func (z *analyzer) objectGetEach(o origin, args []*ast.Term, env map[ast.Var]origin, seen map[ast.Var]bool, depth int) bool {
	v, isVar := args[1].Value.(ast.Var)
	if !isVar {
		return false
	}
	k, bound := env[v]
	keys := k.keyValues()
	if !bound || k.root != rootConst || len(keys) == 0 || len(keys) > maxFanOut {
		return false
	}
	for _, kv := range keys {
		if _, isStr := kv.(ast.String); !isStr {
			return false
		}
	}
	z.walk(args[2], env, depth)
	var results []ast.Value
	for _, kv := range keys {
		key := []*ast.Term{ast.NewTerm(kv)}
		if o.root == rootConst {
			c := constGet(o, key, args[2])
			if c.values() == nil {
				results = nil
				break
			}
			results = append(results, c.values()...)
			continue
		}
		z.read(o.extend(key...))
	}
	out := unknownConst()
	if results != nil {
		out = constOf(results)
	}
	if len(args) == 4 {
		if ov, ok := args[3].Value.(ast.Var); ok && !seen[ov] {
			env[ov] = out
		} else {
			z.walk(args[3], env, depth)
		}
	}
	return true
}

// every analyses `every k, v in domain { body }` over a constant domain
// (`every l in input.parameters.labels { node.metadata.labels[l] }`): the
// body, as a comprehension's, on a copy of env where k and v are any key
// and any element of the domain, so that a lookup by v reads each of the
// domain's values. It reports whether it analysed it; other domains are
// walked as before (their variables unknown).
func (z *analyzer) every(e *ast.Every, env map[ast.Var]origin, depth int) bool {
	seen, ok := varsOutside(z.current, e)
	if !ok {
		return false
	}
	domain, ok := z.resolve(e.Domain, env, depth)
	if !ok || domain.root != rootConst {
		return false
	}
	inner := make(map[ast.Var]origin, len(env)+2)
	for k, v := range env {
		inner[k] = v
		seen[k] = true
	}
	if e.Key != nil {
		if kv, isVar := e.Key.Value.(ast.Var); isVar && !kv.IsWildcard() {
			inner[kv], seen[kv] = domain.anyKey(), true
		}
	}
	if vv, isVar := e.Value.Value.(ast.Var); isVar && !vv.IsWildcard() {
		inner[vv], seen[vv] = domain.anyChild(), true
	} else {
		z.walk(e.Value, inner, depth)
	}
	at := z.at
	for _, x := range e.Body {
		z.expr(x, inner, seen, depth, nil)
	}
	z.at = at
	return true
}

// constRef resolves a reference to a constant rule of the template (see
// constRule), and the keys after the rule's path below it.
func (z *analyzer) constRef(ref ast.Ref, env map[ast.Var]origin, depth int) (origin, bool) {
	for i := len(z.root) + 1; i <= len(ref); i++ {
		if !ast.NewTerm(ref[:i]).IsGround() {
			return origin{}, false
		}
		if len(z.compiler.GetRulesExact(ref[:i])) == 0 {
			continue
		}
		c := z.constRule(ref[:i])
		if c == nil {
			return origin{}, false
		}
		return z.followConst(*c, ref[i:], env, depth), true
	}
	return origin{}, false
}

// constRule gives the constant a rule of the template (no arguments)
// computes from the constraint's parameters and literals alone, such as
// label_key := object.get(input.parameters, "labelKey", "tenant"): with
// several definitions, else branches or a default, one of their values;
// for a partial set rule (`labels contains l if { l :=
// input.parameters.labels[_] }`), a collection whose members are among
// its definitions' values. A definition that reads the review or the
// inventory (even as a condition only) makes no constant: the reference
// is then read as any rule's, so that what depends on it (a Helper) sees
// that it reads input.
func (z *analyzer) constRule(ref ast.Ref) *origin {
	k := ref.String()
	if c, ok := z.consts[k]; ok {
		return c
	}
	z.consts[k] = nil // recursion guard
	rules := z.compiler.GetRulesExact(ref)
	if len(rules) == 0 {
		return nil
	}
	multi := rules[0].Head.RuleKind() == ast.MultiValue
	var defs []origin
	for _, r := range rules {
		if len(r.Head.Args) > 0 || (r.Head.RuleKind() == ast.MultiValue) != multi || (!multi && r.Head.Key != nil) {
			return nil
		}
		for x := r; x != nil; x = x.Else {
			o, ok := z.constDefinition(x, multi)
			if !ok {
				return nil
			}
			defs = append(defs, o)
		}
	}
	c, ok := combineDefinitions(defs, multi)
	if !ok {
		return nil
	}
	z.consts[k] = &c
	return &c
}

// combineDefinitions is the constant of a rule whose definitions give
// defs: one of their values, or, for a partial set rule, a collection of
// them. A single definition may also give a collection known by its
// elements (a comprehension).
func combineDefinitions(defs []origin, multi bool) (origin, bool) {
	if len(defs) == 1 && !multi && defs[0].elems != nil {
		return defs[0], true
	}
	var vals []ast.Value
	for _, d := range defs {
		if d.undefined {
			continue // never succeeds: it defines nothing
		}
		v := d.values()
		if v == nil {
			if multi || d.elems != nil {
				return origin{}, false
			}
			return unknownConst(), true // a constant, but not known
		}
		vals = append(vals, v...)
	}
	if !multi {
		return constOf(vals), true
	}
	members := constOf(vals).values()
	if members == nil {
		return origin{}, false
	}
	return origin{root: rootConst, exact: true, elems: members}, true
}

// constDefinition analyses one definition of a rule for constRule: the
// constant its head's value (or, multi, its key) is, and whether it is
// one.
func (z *analyzer) constDefinition(x *ast.Rule, multi bool) (origin, bool) {
	env := map[ast.Var]origin{}
	seen := map[ast.Var]bool{}
	at, current, sc := z.at, z.current, z.sc
	reads, exists, inv, opaque, bails := len(z.reads), len(z.exists), z.inv, z.opaque, z.bails
	z.current, z.sc = x, nil
	defer func() { z.at, z.current, z.sc = at, current, sc }()
	for _, e := range x.Body {
		z.expr(e, env, seen, 0, nil)
	}
	if len(z.reads) != reads || len(z.exists) != exists || z.inv != inv || z.opaque != opaque || z.bails != bails {
		// Not the constraint's alone: the rule's own analysis reads what
		// it reads, and the reference is opaque (resolve).
		z.reads, z.exists = z.reads[:reads], z.exists[:exists]
		return origin{}, false
	}
	head := x.Head.Value
	if multi {
		head = x.Head.Key
	}
	if head == nil {
		return origin{}, false
	}
	o, ok := z.resolve(head, env, 0)
	if !ok && head.IsGround() {
		o, ok = origin{root: rootConst, value: head.Value, exact: true}, true
	}
	if !ok {
		o, ok, _ = z.constComprehension(head, env, 0)
	}
	return o, ok && o.root == rootConst
}

// constComprehension analyses a set or array comprehension (as
// comprehension does) and, when its head is a constant, gives the
// collection it builds as one whose elements are among the head's values
// (`{l | l := input.parameters.labels[_]}`). analysed is false when it
// did not analyse t (not such a comprehension, or not in the rule).
func (z *analyzer) constComprehension(t *ast.Term, env map[ast.Var]origin, depth int) (c origin, isConst, analysed bool) {
	var body ast.Body
	var head *ast.Term
	switch x := t.Value.(type) {
	case *ast.SetComprehension:
		body, head = x.Body, x.Term
	case *ast.ArrayComprehension:
		body, head = x.Body, x.Term
	default:
		return origin{}, false, false
	}
	inner, ok := z.comprehensionEnv(t.Value, body, env, depth, head)
	if !ok {
		return origin{}, false, false
	}
	o, ok := z.resolve(head, inner, depth)
	if !ok && head.IsGround() {
		o, ok = origin{root: rootConst, value: head.Value, exact: true}, true
	}
	if !ok || o.root != rootConst || o.values() == nil {
		return origin{}, false, true
	}
	return origin{root: rootConst, exact: true, elems: o.values()}, true, true
}

// keyReason says, for Why, why a lookup by the key k reads the whole
// object: what the analysis knows of k ("" for a key it has nothing to
// say about).
func keyReason(k *ast.Term, env map[ast.Var]origin) string {
	v, ok := k.Value.(ast.Var)
	if !ok {
		return ": its key " + k.String() + " is not a constant"
	}
	o, bound := env[v]
	switch {
	case !bound:
		return ": its key is any key, or a value the analysis does not follow"
	case o.root == Input && len(o.path) > 0 && o.path[0].Equal(ast.StringTerm("parameters")):
		return ": its key is input" + PathString(o.path) + ", a constant only once a constraint gives the parameters"
	case o.root != rootConst:
		return ": its key comes from " + rootName(o.root) + PathString(o.path)
	case o.values() == nil:
		return ": its key is a constant the analysis does not know (a missing parameter, or one computed by a builtin it does not evaluate)"
	case o.keyValues() == nil:
		return ": its key is a constant that is not a string or a number (" + abbreviate(notKey(o.values()).String()) + ")"
	case len(o.keyValues()) > maxFanOut:
		return fmt.Sprintf(": its key takes %d values, more than the %d read one by one", len(o.keyValues()), maxFanOut)
	}
	return ""
}

// notKey is the first of vals that is not a string or a number.
func notKey(vals []ast.Value) ast.Value {
	for _, v := range vals {
		if (origin{root: rootConst, value: v}).keyValues() == nil {
			return v
		}
	}
	return vals[0]
}

func abbreviate(s string) string {
	if len(s) > 40 {
		return s[:37] + "..."
	}
	return s
}
