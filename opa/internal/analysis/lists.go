package analysis

import "github.com/open-policy-agent/opa/v1/ast"

// Lists read element by element. `c := input.review.object.spec.containers[_]`
// makes c one element of the list (Each in its path, see each), so that
// c.image is read as containers[_].image and a printed c.name can be left
// out of the key. Most of Gatekeeper's library reaches containers through
// a set over several lists instead:
//
//	input_containers[c] { c := input.review.object.spec.containers[_] }
//	input_containers[c] { c := input.review.object.spec.initContainers[_] }
//
// Such a rule is a list set; a definition may go on with conditions on
// its element (`c := ...containers[_]; not is_exempt(c)`, the library's
// filtered sets). A binding `c := input_containers[_]`, or one that reads
// on below the element (`p := input_containers[_].ports[_]`), at the top
// of a rule body is analysed once per definition, with c an element of
// that definition's list (and the set's key, which for a set is the
// element too), the definition's conditions analysed on it: the reads and
// printed values of the runs together are those of c ranging over the
// union. Any other use of the set (count, membership, inside a
// comprehension or a function) reads every list whole, and its conditions
// with their element read whole. The set's own rules are not analysed
// apart. Rego's set merges equal elements, where the element-wise
// analysis sees each: two equal containers give the same violations, and
// results that placeholders made distinct are merged again when the real
// values are put back (see the engine's substitute).

// maxListChoices bounds the runs of one rule body (the product of its list
// sets' definitions); past it the sets are read whole.
const maxListChoices = 16

// listSet gives, for a rule that is a list set, the element reference of
// each definition (input.review.object.spec.containers[$x]).
func (z *analyzer) listSet(ref ast.Ref) ([]*ast.Term, bool) {
	key := ref.String()
	if alts, ok := z.listSets[key]; ok {
		return alts, alts != nil
	}
	z.listSets[key] = nil
	rules := z.compiler.GetRulesExact(ref)
	if len(rules) == 0 {
		return nil, false
	}
	var alts []*ast.Term
	maps := 0
	for _, r := range rules {
		def, ok := listDefinition(r)
		if !ok {
			return nil, false
		}
		if !z.resolvesElement(def.elem) {
			return nil, false
		}
		if def.keyPath != nil {
			maps++
		}
		alts = append(alts, def.elem)
		z.listDefs[def.elem] = def
	}
	if maps != 0 && maps != len(rules) {
		return nil, false // a set and a map at once: not a list set
	}
	z.listSets[key] = alts
	return alts, true
}

// listDef is one definition of a list set: its rule, its element
// reference, the variables of its head, and, for a list map, the path
// below the element that is its key.
type listDef struct {
	rule     *ast.Rule
	elem     *ast.Term
	key      ast.Var // the head's key: the element itself for a set
	value    ast.Var // a map's value: the element
	keyPath  ast.Ref // a map's key below the element (name), nil for a set
	bodyRest ast.Body
}

// listDefinition reads one definition of a list set,
// `input_containers[c] { c := <input ref>[<var>]; <conditions> }`, or of a
// list map, `input_containers[c.name] = c { c := <input ref>[<var>]; ... }`
// (compiled: the key a local bound to c.name right after the element).
func listDefinition(r *ast.Rule) (listDef, bool) {
	k, isVar := keyVar(r)
	if !isVar || len(r.Head.Args) > 0 || r.Else != nil || r.Default || len(r.Body) == 0 {
		return listDef{}, false
	}
	def := listDef{rule: r, key: k}
	elemVar := k
	if r.Head.Value != nil {
		v, ok := r.Head.Value.Value.(ast.Var)
		if !ok || v == k || len(r.Body) < 2 {
			return listDef{}, false
		}
		def.value, elemVar = v, v
	}
	elem, ok := boundElement(r.Body[0], elemVar)
	if !ok {
		return listDef{}, false
	}
	def.elem, def.bodyRest = elem, r.Body[1:]
	if def.value != "" {
		path, ok := keyBinding(r.Body[1], k, def.value)
		if !ok {
			return listDef{}, false
		}
		def.keyPath, def.bodyRest = path, r.Body[2:]
	}
	return def, true
}

// sides are a plain equality's two terms in both orders (nil for any
// other expression: negated, with a `with`, not an equality).
func sides(e *ast.Expr) [][2]*ast.Term {
	if e.Negated || len(e.With) > 0 || !e.IsEquality() {
		return nil
	}
	terms := e.Terms.([]*ast.Term)
	return [][2]*ast.Term{{terms[1], terms[2]}, {terms[2], terms[1]}}
}

// boundElement is e's `v = <input ref>[<var>]`, the reference.
func boundElement(e *ast.Expr, v ast.Var) (*ast.Term, bool) {
	for _, pair := range sides(e) {
		if x, ok := pair[0].Value.(ast.Var); ok && x == v {
			if ref, ok := pair[1].Value.(ast.Ref); ok && len(ref) > 1 && ref[0].Equal(ast.InputRootDocument) {
				if _, last := ref[len(ref)-1].Value.(ast.Var); last && ref[:len(ref)-1].IsGround() {
					return pair[1], true
				}
			}
		}
	}
	return nil, false
}

// keyBinding is e's `k = v.<path of strings>`, the path.
func keyBinding(e *ast.Expr, k, v ast.Var) (ast.Ref, bool) {
	for _, pair := range sides(e) {
		x, ok := pair[0].Value.(ast.Var)
		ref, isRef := pair[1].Value.(ast.Ref)
		if !ok || x != k || !isRef || len(ref) < 2 || !ref[0].Equal(ast.VarTerm(string(v))) {
			continue
		}
		for _, t := range ref[1:] {
			if _, isStr := t.Value.(ast.String); !isStr {
				return nil, false
			}
		}
		return ref[1:], true
	}
	return nil, false
}

func keyVar(r *ast.Rule) (ast.Var, bool) {
	if r.Head.Key == nil {
		return "", false
	}
	v, ok := r.Head.Key.Value.(ast.Var)
	return v, ok
}

// resolvesElement checks, recording nothing, that an element reference
// is read element by element (each accepts its list).
func (z *analyzer) resolvesElement(t *ast.Term) bool {
	reads, why := len(z.reads), len(z.why)
	z.quiet++ // what is read here may be forgotten: no call counts as analysed
	defer func() { z.quiet-- }()
	o, ok := z.resolve(t, map[ast.Var]origin{}, 0)
	z.reads, z.why = z.reads[:reads], z.why[:why]
	return ok && o.exact && o.root == Input && EachAt(o.path) == len(o.path)-1
}

// isListSetRule reports whether r is a definition of a list set.
func (z *analyzer) isListSetRule(r *ast.Rule) bool {
	_, ok := z.listSet(r.Path())
	return ok
}

// listFork is a body expression `v = <list set>[x]` (v fresh) and the
// element references v ranges over.
type listFork struct {
	expr *ast.Expr
	alts []*ast.Term
}

// listForks finds the list-set bindings at the top of r's body.
func (z *analyzer) listForks(r *ast.Rule, env map[ast.Var]origin) []listFork {
	seen := map[ast.Var]bool{}
	for v := range env {
		seen[v] = true
	}
	for _, arg := range r.Head.Args {
		ast.WalkVars(arg, func(v ast.Var) bool { seen[v] = true; return false })
	}
	var forks []listFork
	for _, e := range r.Body {
		if alts, ok := z.listBinding(e, seen); ok {
			forks = append(forks, listFork{expr: e, alts: alts})
		} else if alts, _, ok := z.listCompare(e, seen); ok {
			forks = append(forks, listFork{expr: e, alts: alts})
		}
		ast.WalkVars(e, func(v ast.Var) bool { seen[v] = true; return false })
	}
	return forks
}

func (z *analyzer) listBinding(e *ast.Expr, seen map[ast.Var]bool) ([]*ast.Term, bool) {
	for _, pair := range sides(e) {
		v, isVar := pair[0].Value.(ast.Var)
		ref, isRef := pair[1].Value.(ast.Ref)
		if !isVar || seen[v] || v.IsWildcard() || !isRef || len(ref) < 2 || !ref.HasPrefix(z.root) {
			continue
		}
		if alts, _, ok := z.listSetRef(ref, seen); ok {
			return alts, true
		}
	}
	return nil, false
}

// listCompare is e's `<value> == set[k].rest` (either order, k not bound
// before; the compiler makes it a unification), the value ground or a
// reference (whose head is bound: Rego cannot bind through one): whether
// some element's value at rest is the value, which is what a binding of
// set[k].rest followed by the comparison asks (the automount template's
// `"/var/run/..." == input_containers[_].volumeMounts[_].mountPath`). The
// value is read where the expression is walked. It returns the set's
// element references and the operand that reads the set.
func (z *analyzer) listCompare(e *ast.Expr, seen map[ast.Var]bool) ([]*ast.Term, int, bool) {
	if e.Negated || len(e.With) > 0 || !e.IsCall() || !(e.IsEquality() || e.Operator().Equal(ast.Equal.Ref())) {
		return nil, 0, false
	}
	ops := e.Operands()
	if len(ops) != 2 {
		return nil, 0, false
	}
	for i, t := range ops {
		ref, isRef := t.Value.(ast.Ref)
		if !ops[1-i].IsGround() || !isRef || !ref.HasPrefix(z.root) {
			continue
		}
		if alts, _, ok := z.listSetRef(ref, seen); ok {
			return alts, i, true
		}
	}
	return nil, 0, false
}

// forkedCompare is a forked comparison (listCompare) as this run reads it:
// the set's operand replaced by the run's list, as forkedBinding does.
func (z *analyzer) forkedCompare(e *ast.Expr, alt *ast.Term, env map[ast.Var]origin, depth int) (*ast.Expr, bool) {
	_, i, ok := z.listCompare(e, nil)
	if !ok {
		return e, false
	}
	out := e.Copy()
	terms := out.Terms.([]*ast.Term)
	terms[1+i] = z.forkedBinding(terms[1+i], alt, env, depth)
	return out, true
}

// listSetRef reads ref as set[k] or set[k].rest...: a list set's path, a
// key variable not bound before (a set's key is its element, so a bound
// one would be a membership test), then anything. It returns the set's
// element references and the key's place in ref.
func (z *analyzer) listSetRef(ref ast.Ref, seen map[ast.Var]bool) ([]*ast.Term, int, bool) {
	for k := len(z.root) + 1; k < len(ref); k++ {
		if !ref[:k].IsGround() {
			return nil, 0, false
		}
		alts, ok := z.listSet(ref[:k])
		if !ok {
			continue
		}
		kv, isVar := ref[k].Value.(ast.Var)
		if !isVar || seen[kv] {
			return nil, 0, false
		}
		return alts, k, true
	}
	return nil, 0, false
}

// forkedBinding is the reference a forked binding's run reads instead of
// rhs (set[k].rest becomes list[x].rest for this run's list). The set's
// key variable is the element too: it is bound in env. It analyses the
// definition's conditions on the element.
func (z *analyzer) forkedBinding(rhs, alt *ast.Term, env map[ast.Var]origin, depth int) *ast.Term {
	ref, ok := rhs.Value.(ast.Ref)
	if !ok {
		return rhs
	}
	_, k, ok := z.listSetRef(ref, nil)
	if !ok {
		return rhs
	}
	def := z.listDefs[alt]
	if o, ok := z.resolve(alt, env, depth); ok {
		o = z.filtered(o, alt)
		if kv := ref[k].Value.(ast.Var); !kv.IsWildcard() {
			if def.keyPath != nil {
				env[kv] = o.extend(def.keyPath...)
			} else {
				env[kv] = o
			}
		}
		if def.keyPath != nil {
			// Placeholders in the keys, or keys left out of the key, are
			// sound only when the pod's keys are distinct (equal keys
			// merge or conflict): the engine checks (DistinctKeys).
			z.distinctKey(ref[:k], o.extend(def.keyPath...).path)
		}
	}
	elem := alt.Value.(ast.Ref)
	out := make(ast.Ref, 0, len(elem)+len(ref)-k-1)
	out = append(append(out, elem...), ref[k+1:]...)
	z.listConditions(alt, depth, true)
	return ast.NewTerm(out)
}

// filtered is o, an origin at or below alt's element (its Each), with the
// Each made an EachWhere when alt's definition only tests fields of the
// element (listFilter): what the run reads of its element is then read
// for the elements that are members only.
func (z *analyzer) filtered(o origin, alt *ast.Term) origin {
	at := len(alt.Value.(ast.Ref)) - 2 // the element's place in o.path (input is not in it)
	if o.root != Input || at >= len(o.path) || !IsEach(o.path[at]) || EachFilter(o.path[at]) != nil {
		return o
	}
	guards := z.listFilter(alt)
	if guards == nil {
		return o
	}
	path := append([]*ast.Term(nil), o.path...)
	path[at] = EachWhere(guards)
	o.path = path
	return o
}

// memberCondition is the condition (When) that e, a forked binding or
// comparison in the run being analysed, puts on the rest of its body:
// that alt's list has a member, when alt's definition filters its list by
// field tests. Nil for any other expression.
func (z *analyzer) memberCondition(e *ast.Expr) *ast.Term {
	alt, forked := z.choice[e]
	if !forked {
		return nil
	}
	filter := z.listFilter(alt)
	if filter == nil {
		return nil
	}
	elem := alt.Value.(ast.Ref)
	return When(elem[1:len(elem)-1], filter)
}

// condition makes the input reads recorded from the index from on
// conditional on when: the rest of a body after a filtered member's
// binding, which a pod without members never reaches. Reads already
// conditional (on a binding further in) and reads of the parameters
// (constant) stay as they are.
func (z *analyzer) condition(from int, when *ast.Term) {
	if when == nil {
		return
	}
	for i := from; i < len(z.reads); i++ {
		r := &z.reads[i]
		if r.root != Input || r.when != nil || (len(r.path) > 0 && r.path[0].Equal(ast.StringTerm("parameters"))) {
			continue
		}
		r.when = when
	}
}

// listFilter is the filter of alt's definition when its conditions only
// test fields of the element for truth (defined and not false): a lone
// `v.hostPath`, or a call `f(v, "flexVolume")` of a function with one
// definition whose body is only the test `object[field]` of its two
// parameters (the library's has_field). It gives the tested paths below
// the element, nil for a definition without conditions or with any other.
func (z *analyzer) listFilter(alt *ast.Term) [][]*ast.Term {
	def, ok := z.listDefs[alt]
	if !ok || len(def.bodyRest) == 0 || def.keyPath != nil {
		return nil
	}
	var guards [][]*ast.Term
	for _, e := range def.bodyRest {
		g, ok := z.fieldTest(e, def.key)
		if !ok {
			return nil
		}
		guards = append(guards, g)
	}
	return guards
}

// guardElements narrows, in inner (a comprehension's own bindings), each
// element its body bound (an origin through Each, not bound before the
// comprehension) to the elements that pass the truth tests e, the
// expression just analysed, puts on it (elementGuards): an EachWhere in
// place of the Each. Rego evaluates a comprehension's body in order for
// each binding, and its head (which the compiler makes the body's last
// expressions) only where the whole body held, so what the rest reads of
// the element it reads of the elements that pass those tests only:
// `{sprintf("container %v is privileged", [c.name]) | c :=
// containers[_]; privileged(c)}` reads the names of the privileged
// containers, and a pod without one is keyed alike whatever its
// containers are named. What was read before (the tests' own reads)
// stays read for every element. A test the analysis cannot express is
// left out of the filter, which then lets more elements through, never
// fewer.
func (z *analyzer) guardElements(e *ast.Expr, env, inner map[ast.Var]origin) {
	for v, o := range inner {
		n := len(o.path)
		if _, before := env[v]; before || o.root != Input || !o.exact || n == 0 || !IsEach(o.path[n-1]) {
			continue
		}
		guards := z.elementGuards(e, v, 0)
		if len(guards) == 0 {
			continue
		}
		path := append([]*ast.Term(nil), o.path...)
		path[n-1] = EachWhere(append(append([][]*ast.Term(nil), EachFilter(o.path[n-1])...), guards...))
		o.path = path
		inner[v] = o
	}
}

// maxGuardDepth bounds the functions elementGuards follows into.
const maxGuardDepth = 3

// elementGuards are the paths below v that e, an expression of a body
// that binds v, tests for truth when it holds: a lone `v.a.b`, a field
// test `has_field(v, "a")` (fieldTest), `v.a.b == true` (or `=`), and
// those of the body of a function called on v alone (`privileged(v)`)
// when it has one definition, no default and no else, so that the call
// holds only where that body does. Any other expression gives none.
func (z *analyzer) elementGuards(e *ast.Expr, v ast.Var, depth int) [][]*ast.Term {
	if e.Negated || len(e.With) > 0 {
		return nil
	}
	if g, ok := z.fieldTest(e, v); ok {
		return [][]*ast.Term{g}
	}
	if !e.IsCall() {
		return nil
	}
	ops := e.Operands()
	switch op := e.Operator(); {
	case (e.IsEquality() || op.Equal(ast.Equal.Ref())) && len(ops) == 2:
		for i := range 2 {
			if b, ok := ops[1-i].Value.(ast.Boolean); ok && bool(b) {
				if g, ok := stringsBelow(ops[i], v); ok {
					return [][]*ast.Term{g}
				}
			}
		}
	case len(ops) == 1 && depth < maxGuardDepth:
		if arg, isVar := ops[0].Value.(ast.Var); !isVar || arg != v {
			return nil
		}
		rules := z.compiler.GetRulesExact(op)
		if len(rules) != 1 || rules[0].Default || rules[0].Else != nil || len(rules[0].Head.Args) != 1 {
			return nil
		}
		p, isVar := rules[0].Head.Args[0].Value.(ast.Var)
		if !isVar {
			return nil
		}
		var out [][]*ast.Term
		for _, be := range rules[0].Body {
			out = append(out, z.elementGuards(be, p, depth+1)...)
		}
		return out
	}
	return nil
}

// fieldTest is e's path below v when e tests it for truth (listFilter).
func (z *analyzer) fieldTest(e *ast.Expr, v ast.Var) ([]*ast.Term, bool) {
	if e.Negated || len(e.With) > 0 {
		return nil, false
	}
	if t, ok := e.Terms.(*ast.Term); ok {
		return stringsBelow(t, v)
	}
	if !e.IsCall() || len(e.Operands()) != 2 {
		return nil, false
	}
	ops := e.Operands()
	field, isStr := ops[1].Value.(ast.String)
	if arg, isVar := ops[0].Value.(ast.Var); !isVar || arg != v || !isStr {
		return nil, false
	}
	rules := z.compiler.GetRulesExact(e.Operator())
	if len(rules) != 1 || !isFieldTest(rules[0]) {
		return nil, false
	}
	return []*ast.Term{ast.StringTerm(string(field))}, true
}

// isFieldTest reports whether r is `f(object, field) [= true] {
// object[field] }`.
func isFieldTest(r *ast.Rule) bool {
	h := r.Head
	if r.Default || r.Else != nil || len(h.Args) != 2 || len(r.Body) != 1 {
		return false
	}
	if h.Value != nil && !h.Value.Equal(ast.InternedTerm(true)) {
		return false
	}
	obj, ok1 := h.Args[0].Value.(ast.Var)
	field, ok2 := h.Args[1].Value.(ast.Var)
	e := r.Body[0]
	t, ok3 := e.Terms.(*ast.Term)
	if !ok1 || !ok2 || !ok3 || obj == field || e.Negated || len(e.With) > 0 {
		return false
	}
	ref, ok := t.Value.(ast.Ref)
	return ok && len(ref) == 2 && ref[0].Equal(ast.VarTerm(string(obj))) && ref[1].Equal(ast.VarTerm(string(field)))
}

// stringsBelow is t's path below v when t is v.<strings>.
func stringsBelow(t *ast.Term, v ast.Var) ([]*ast.Term, bool) {
	ref, ok := t.Value.(ast.Ref)
	if !ok || len(ref) < 2 || !ref[0].Equal(ast.VarTerm(string(v))) {
		return nil, false
	}
	for _, k := range ref[1:] {
		if _, isStr := k.Value.(ast.String); !isStr {
			return nil, false
		}
	}
	return ref[1:], true
}

// listConditions analyses the conditions of alt's definition on its
// element: element by element (each) when forked, else on the list whole.
func (z *analyzer) listConditions(alt *ast.Term, depth int, forked bool) {
	def, ok := z.listDefs[alt]
	if !ok || len(def.bodyRest) == 0 {
		return
	}
	elem := alt.Value.(ast.Ref)
	var o origin
	if forked {
		var ok bool
		if o, ok = z.resolve(alt, map[ast.Var]origin{}, depth); !ok {
			return
		}
	} else {
		o = origin{root: Input, path: elem[1 : len(elem)-1], exact: false}
	}
	inner := map[ast.Var]origin{def.key: o}
	seen := map[ast.Var]bool{def.key: true}
	if def.keyPath != nil {
		inner[def.value], seen[def.value] = o, true
		inner[def.key] = o.extend(def.keyPath...)
	}
	at := z.at
	for _, e := range def.bodyRest {
		z.expr(e, inner, seen, depth, nil)
	}
	z.at = at
}

// distinctKey records that the list map at set has its key at path (an
// element path) in one of its lists.
func (z *analyzer) distinctKey(set ast.Ref, path []*ast.Term) {
	name := set.String()
	for _, p := range z.distinct[name] {
		if ast.Ref(p).Equal(ast.Ref(path)) {
			return
		}
	}
	if z.distinct == nil {
		z.distinct = map[string][][]*ast.Term{}
	}
	z.distinct[name] = append(z.distinct[name], path)
}

// listChoices are the runs of a body over its forks: each run maps each
// fork's expression to one element reference. Nil when there is nothing
// to fork, or too much.
func listChoices(forks []listFork) []map[*ast.Expr]*ast.Term {
	if len(forks) == 0 {
		return nil
	}
	runs := []map[*ast.Expr]*ast.Term{{}}
	for _, f := range forks {
		if len(runs)*len(f.alts) > maxListChoices {
			return nil
		}
		var next []map[*ast.Expr]*ast.Term
		for _, run := range runs {
			for _, alt := range f.alts {
				m := make(map[*ast.Expr]*ast.Term, len(run)+1)
				for k, v := range run {
					m[k] = v
				}
				m[f.expr] = alt
				next = append(next, m)
			}
		}
		runs = next
	}
	return runs
}

// readListSetWhole records a use of a list set other than a forked
// binding: every list it ranges over, whole.
func (z *analyzer) readListSetWhole(ref ast.Ref) bool {
	for i := len(z.root) + 1; i <= len(ref); i++ {
		alts, ok := z.listSet(ref[:i])
		if !ok {
			continue
		}
		for _, alt := range alts {
			list := alt.Value.(ast.Ref)
			z.read(origin{root: Input, path: list[1 : len(list)-1], exact: true})
			z.listConditions(alt, 0, false)
		}
		return true
	}
	return false
}
