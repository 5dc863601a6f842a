package analysis

import (
	"fmt"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

type origin struct {
	root Root
	path []*ast.Term
	// value is the constant's value (rootConst only; nil when unknown);
	// alts the values it may be, elems those a collection's elements may
	// be, when it is not known as one value (see consts.go).
	value       ast.Value
	alts, elems []ast.Value
	// undefined: a constant below a known one that holds nothing there
	// (consts.go, undefinedConst).
	undefined bool
	// exact is true when the variable is the value at path; false when it
	// is somewhere below path (an element, a key), in which case path was
	// recorded as read when the variable was bound.
	exact bool
	// below counts the levels under path that every read through an
	// inexact origin reaches at least (spec[field][_] is 2 below spec).
	below int
	// viaArg: the path is reached through the argument of a call that
	// helperTest reads as a Helper, not from input itself.
	viaArg bool
	// because says, for Why, why an inexact origin is not exact: its key.
	because string
}

func (o origin) extend(ts ...*ast.Term) origin {
	if o.root == rootConst {
		return o.extendConst(ts)
	}
	if !o.exact {
		o.below += len(ts)
		return o
	}
	p := make([]*ast.Term, 0, len(o.path)+len(ts))
	p = append(p, o.path...)
	p = append(p, ts...)
	return origin{root: o.root, path: p, exact: o.exact, viaArg: o.viaArg}
}

func find(v ast.Value, path []*ast.Term) (ast.Value, bool) {
	if len(path) == 0 {
		return v, true
	}
	found, err := v.Find(ast.Ref(path))
	return found, err == nil
}

// observes reports whether a read through o can see the value at target.
// A read that goes deeper than target through a non-ground key cannot:
// target (the node name) is a string, and indexing a string is undefined,
// so input.review.object.spec[field][_] never sees spec.nodeName.
func observes(o origin, target []*ast.Term) bool {
	if !PrefixRelated(o.path, target) {
		return false
	}
	if !o.exact && len(o.path) < len(target) && o.below > len(target)-len(o.path) {
		return false
	}
	return true
}

// read is one recorded read, with where it happened for Why.
type read struct {
	root  Root
	path  []*ast.Term
	o     origin
	where string
	// when, if not nil, is the condition (When) under which the read is
	// made: it follows a binding of a filtered list set's member.
	when *ast.Term
}

// analyzer walks the compiled modules of one template.
type analyzer struct {
	compiler *ast.Compiler
	root     ast.Ref
	// violation is the template's violation rule.
	violation ast.Ref
	reads     []read
	exists    [][]*ast.Term
	messages  []source
	inv       bool
	allNodes  bool
	nondet    bool
	// active guards against recursion through functions.
	active map[*ast.Rule]int
	// params are the constraint's parameters: references into them, and
	// keys computed from them, are constants, so that
	// node.metadata.labels[input.parameters.key] reads one label, not all.
	params ast.Value
	// consts caches the constant value of complete rules (nil: not constant).
	consts map[string]*origin
	// at is the expression being analysed, for Why.
	at *ast.Expr
	// why collects reasons found on the way (printed values refused).
	why []string
	// listSets caches list sets by rule path (nil: not one), and choice
	// is the element reference each forked binding takes in the run
	// being analysed (see lists.go).
	listSets map[string][]*ast.Term
	listDefs map[*ast.Term]listDef
	// distinct are the key paths of the list maps read element-wise, by
	// map (DistinctKeys).
	distinct map[string][][]*ast.Term
	choice   map[*ast.Expr]*ast.Term
	// relays are the rule paths analysed at their references, relaySites
	// those references, site the one being analysed (see relay.go).
	relays     map[string]bool
	relaySites map[*ast.Expr]*relaySite
	site       *relayEntry
	// several: a printed value flows out of a function with several
	// definitions; noSeveral refuses that (the second run, for templates
	// that read the node).
	several, noSeveral bool
	// inlined are the functions some call analysed in place, bailed those
	// a call could not follow (see functionsApart).
	inlined, bailed map[*ast.Rule]bool
	// quiet counts the analyses whose reads are dropped after (checks).
	quiet int
	// bails counts the calls not followed (bailed), helping the helpers
	// being analysed for helperTest, and helperRaw are the reads of the
	// helpers read as Helper (see helper.go).
	bails, helping int
	helperRaw      [][]*ast.Term
	// opaque counts the references to rules whose value resolve does not
	// follow (their reads are recorded where the rule is analysed, not at
	// the reference): a function that makes one is no Helper.
	opaque int
	// current is the rule whose body is being analysed (for comprehensions:
	// which variables are bound outside them), sc its scope.
	current *ast.Rule
	sc      *scope
	// keyed are the printed strings used as lookup keys (lookupkey.go).
	keyed []keyedLookup
	// seeds are the printed strings a call passes to the function about
	// to be analysed, by parameter (userCall); ruleOnce takes them.
	seeds map[ast.Var]*printed
	// requires are, for each function definition last analysed, the
	// parameters (printed strings) whose lookup its body requires.
	requires map[*ast.Rule]map[int]bool
}

const maxCallDepth = 8

// Analyze reads the compiled rules of one template (rules: every rule of
// its modules; root: the template's private namespace; params: a
// constraint's parameters, or nil for the template alone).
func Analyze(c *ast.Compiler, rules []*ast.Rule, root ast.Ref, params ast.Value) *Result {
	return analyzeRules(c, rules, root, params, false)
}

// analyzeRules is Analyze; noSeveral keeps in the key the values printed
// through functions with several definitions.
func analyzeRules(c *ast.Compiler, rules []*ast.Rule, root ast.Ref, params ast.Value, noSeveral bool) *Result {
	z := newAnalyzer(c, root, params)
	z.noSeveral = noSeveral
	z.relaySites = z.findRelays(rules)
	var functions []*ast.Rule
	for _, r := range rules {
		if z.isAlias(r) || z.isListSetRule(r) || z.relays[r.Path().String()] {
			continue // read where it is referenced (see aliasRule, lists.go, relay.go)
		}
		if len(r.Head.Args) > 0 {
			functions = append(functions, r)
			continue
		}
		for x := r; x != nil; x = x.Else {
			z.messages = append(z.messages, z.rule(x, map[ast.Var]origin{}, 0)...)
		}
	}
	z.functionsApart(functions)
	a := z.result()
	if z.several && !a.PerPod() && !noSeveral {
		// The run-time check that makes several definitions sound (see
		// Result.PrintedThroughSeveral) is made for pod-only verdicts.
		return analyzeRules(c, rules, root, params, true)
	}
	a.PrintedThroughSeveral = z.several && len(a.Messages) > 0
	return a
}

// newAnalyzer is an analyzer of the template at root, with no rule read yet.
func newAnalyzer(c *ast.Compiler, root ast.Ref, params ast.Value) *analyzer {
	return &analyzer{
		compiler:  c,
		root:      root,
		violation: root.Append(ast.StringTerm("template")).Append(ast.StringTerm("violation")),
		active:    map[*ast.Rule]int{},
		params:    params,
		consts:    map[string]*origin{},
		listSets:  map[string][]*ast.Term{},
		listDefs:  map[*ast.Term]listDef{},
		relays:    map[string]bool{},
		inlined:   map[*ast.Rule]bool{},
		bailed:    map[*ast.Rule]bool{},
	}
}

// functionsApart analyses on their own, parameters unbound, the functions
// that no call analysed in place: those never called, and those a call
// could not follow (past maxCallDepth), whose reads of input the call did
// not record. A function analysed at each call needs nothing more: its
// reads are those of its calls, under their conditions (When), and its
// printed values are judged at each call. Analysing one apart can find
// more to analyse apart, so it goes on until nothing is left.
func (z *analyzer) functionsApart(functions []*ast.Rule) {
	done := map[*ast.Rule]bool{}
	for more := true; more; {
		more = false
		for _, r := range functions {
			for x := r; x != nil; x = x.Else {
				if done[x] || (z.inlined[x] && !z.bailed[x]) {
					continue
				}
				done[x], more = true, true
				z.messages = append(z.messages, z.rule(x, map[ast.Var]origin{}, 0)...)
			}
		}
	}
}

// where describes the expression being analysed: its text and line.
func (z *analyzer) where() string {
	if z.at == nil {
		return ""
	}
	text := z.at.String()
	if z.at.Location != nil && len(z.at.Location.Text) > 0 {
		text = string(z.at.Location.Text)
	}
	text = strings.Join(strings.Fields(text), " ")
	if len(text) > 100 {
		text = text[:97] + "..."
	}
	if z.at.Location != nil && z.at.Location.Row > 0 {
		return fmt.Sprintf("`%s` (line %d)", text, z.at.Location.Row)
	}
	return "`" + text + "`"
}

func (z *analyzer) read(o origin) {
	if o.root == rootConst {
		return
	}
	z.reads = append(z.reads, read{root: o.root, path: o.path, o: o, where: z.where()})
}

// scope is the state of one rule body: which variables hold strings
// built from printed values (see flow.go).
type scope struct {
	rule        *ast.Rule
	occurrences map[ast.Var]int
	strings     map[ast.Var]*printed
	// violation: the rule is the template's violation rule, whose head is
	// a sink for printed values.
	violation bool
	// headVar is the violation head's element when the compiler bound it
	// in the body (`__local1__ = {"msg": ..., "details": ...}`); headDone
	// once that binding was taken as the head.
	headVar  ast.Var
	headDone bool
	// keyed are the occurrences of printed strings used here as lookup
	// keys into review objects, required the strings whose lookup the
	// body requires (lookupkey.go).
	keyed    map[*ast.Term]bool
	required map[ast.Var]bool
}

// rule analyses one rule with its variables bound as in env (function
// parameters bound to the caller's arguments). For a function whose value
// is a string built only from printed values, it returns their sources.
// A body that binds an element of a list set is analysed once per list
// (lists.go).
func (z *analyzer) rule(r *ast.Rule, env map[ast.Var]origin, depth int) []source {
	seeds := z.seeds
	runs := listChoices(z.listForks(r, env))
	if runs == nil {
		z.seeds = seeds
		return z.ruleOnce(r, env, depth)
	}
	saved := z.choice
	defer func() { z.choice = saved }()
	var out []source
	for _, run := range runs {
		z.seeds = seeds
		z.choice = run
		inner := make(map[ast.Var]origin, len(env))
		for k, v := range env {
			inner[k] = v
		}
		out = append(out, z.ruleOnce(r, inner, depth)...)
	}
	return out
}

func (z *analyzer) ruleOnce(r *ast.Rule, env map[ast.Var]origin, depth int) []source {
	z.active[r]++
	outer, outerScope := z.current, z.sc
	z.current = r
	defer func() { z.active[r]--; z.current, z.sc = outer, outerScope }()
	seen := map[ast.Var]bool{}
	for v := range env {
		seen[v] = true
	}
	for _, arg := range r.Head.Args {
		ast.WalkVars(arg, func(v ast.Var) bool { seen[v] = true; return false })
	}
	sc := newScope(r, r.Path().Equal(z.violation))
	for v, p := range z.seeds {
		sc.strings[v] = &printed{sources: p.sources, allowed: 1} // its place in the head's arguments
	}
	z.seeds = nil
	z.sc = sc
	var relay *relaySite
	if z.site != nil && z.site.rule == r {
		relay = z.site.site
	}
	before := z.mark()
	harmless := true
	cond := -1 // where the reads conditional on a filtered member begin
	var when *ast.Term
	for _, e := range r.Body {
		if harmless && z.iteratesEmptyConstant(e, env) {
			z.reset(before) // the body never succeeds: nothing it reads decides
			return nil
		}
		z.expr(e, env, seen, depth, sc)
		z.noteRequired(e, sc)
		harmless = harmless && isHarmless(e)
		if when == nil {
			if when = z.memberCondition(e); when != nil {
				cond = len(z.reads)
			}
		}
	}
	z.at = nil
	// Head terms use variables whole: what a rule returns escapes it,
	// except where the head is a sink for printed values.
	var ret ast.Var
	hasRet := false
	switch {
	case relay != nil:
		z.relayHead(r.Head.Key, relay, env, depth, sc)
	case sc.violation && r.Head.Key != nil:
		if !sc.headDone {
			z.element(r.Head.Key, env, depth, sc)
		}
	case len(r.Head.Args) > 0 && r.Head.Value != nil:
		if v, ok := r.Head.Value.Value.(ast.Var); ok && sc.strings[v] != nil {
			sc.strings[v].allowed++
			ret, hasRet = v, true
		} else {
			sc.deadInHead(r.Head.Value)
			z.walk(r.Head.Value, env, depth)
		}
	default:
		if r.Head.Key != nil {
			sc.deadInHead(r.Head.Key)
			z.walk(r.Head.Key, env, depth)
		}
		if r.Head.Value != nil {
			sc.deadInHead(r.Head.Value)
			z.walk(r.Head.Value, env, depth)
		}
	}
	z.noteRequiredParams(r, sc)
	for _, t := range r.Head.Reference[1:] {
		z.walk(t, env, depth)
	}
	z.condition(cond, when) // the body's reads after the member's binding and the head's; not settle's
	return z.settle(sc, ret, hasRet)
}

func (z *analyzer) expr(e *ast.Expr, env map[ast.Var]origin, seen map[ast.Var]bool, depth int, sc *scope) {
	z.at = e
	defer ast.WalkVars(e, func(v ast.Var) bool { seen[v] = true; return false })
	if site, ok := z.relaySites[e]; ok {
		ref := e.Terms.(*ast.Term).Value.(ast.Ref)
		z.relayCall(ref[:len(ref)-1], site, depth)
		return
	}
	if alt, forked := z.choice[e]; forked {
		e, _ = z.forkedCompare(e, alt, env, depth) // this run's list (see lists.go)
	}
	for _, w := range e.With {
		if ref, ok := w.Target.Value.(ast.Ref); ok {
			if !ref[0].Equal(ast.InputRootDocument) {
				z.inv, z.allNodes = true, true
			}
			z.read(origin{root: Input, exact: true})
		}
		z.walk(w.Value, env, depth)
	}
	if !e.Negated && len(e.With) == 0 {
		z.bindExprKeys(e, env, depth)
	}
	if !e.Negated && len(e.With) == 0 && e.IsEquality() {
		terms := e.Terms.([]*ast.Term)
		if z.bind(terms[1], terms[2], env, seen, depth, sc) || z.bind(terms[2], terms[1], env, seen, depth, sc) {
			return
		}
	}
	if e.IsCall() {
		if z.helperTest(e, env, seen, depth) {
			return
		}
		if len(e.With) == 0 && !e.Negated {
			z.call(e.Operator(), e.Operands(), env, seen, depth, sc)
		} else {
			z.call(e.Operator(), e.Operands(), env, seen, depth, nil)
		}
		return
	}
	if t, ok := e.Terms.(*ast.Term); ok && len(e.With) == 0 {
		// A lone term is a truth test: for a node path, whether it is
		// defined and not false is all the verdict can depend on.
		if z.keysTest(t, env, depth) {
			return
		}
		if o, ok := z.resolve(t, env, depth); ok && o.root == Node && o.exact {
			z.exists = append(z.exists, o.path)
			return
		}
	}
	z.walk(e, env, depth)
}

// bind handles `v = value` where v is a fresh variable and value has an
// origin (v becomes an alias), is a printed string (v is one too), or is
// the violation head's element. It reports whether it handled the
// expression.
func (z *analyzer) bind(lhs, rhs *ast.Term, env map[ast.Var]origin, seen map[ast.Var]bool, depth int, sc *scope) bool {
	v, ok := lhs.Value.(ast.Var)
	if !ok || seen[v] || v.IsWildcard() {
		return false
	}
	alt, forked := z.choice[z.at]
	if forked {
		rhs = z.forkedBinding(rhs, alt, env, depth) // this run's list (see lists.go)
	}
	if sc != nil {
		if rv, ok := rhs.Value.(ast.Var); ok && sc.strings[rv] != nil {
			sc.alias(v, rv)
			return true
		}
		if sc.violation && v == sc.headVar {
			if _, isObj := rhs.Value.(ast.Object); isObj {
				z.element(rhs, env, depth, sc)
				sc.headDone = true
				return true
			}
		}
	}
	o, ok := z.resolve(rhs, env, depth)
	if !ok {
		if c, isConst, analysed := z.constComprehension(rhs, env, depth); analysed {
			if isConst {
				env[v] = c
			}
			return true
		}
		return false
	}
	if forked {
		o = z.filtered(o, alt)
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
			return origin{root: Input, exact: true}, true
		}
		o, ok := env[v]
		return o, ok
	case ast.Ref:
		var base origin
		rest := v[1:]
		switch {
		case v[0].Equal(ast.InputRootDocument):
			base = origin{root: Input, exact: true}
			if len(rest) > 0 && rest[0].Equal(ast.StringTerm("parameters")) && z.params != nil {
				base = origin{root: rootConst, value: z.params, exact: true}
				rest = rest[1:]
			}
		case v[0].Equal(ast.DefaultRootDocument):
			if v.HasPrefix(z.root) {
				if c, ok := z.constRef(v, env, depth); ok {
					return c, true
				}
				if o, rest, ok := z.aliasRule(v); ok {
					return z.follow(o, rest, env, depth), true
				}
				if z.readListSetWhole(v) {
					for _, k := range v[1:] {
						z.walk(k, env, depth)
					}
				}
				z.opaque++
				return origin{}, false
			}
			if !isInventoryRef(v) {
				z.opaque++
				return origin{}, false
			}
			if len(v) >= 6 && v[2].Equal(ast.StringTerm("cluster")) && v[3].Equal(ast.StringTerm("v1")) && v[4].Equal(ast.StringTerm("Node")) && z.isNodeName(v[5], env) {
				base = origin{root: Node, exact: true}
				rest = v[6:]
			} else {
				z.inv = true
				if readsNodes(v) {
					z.allNodes = true
				}
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
		return z.follow(base, rest, env, depth), true
	}
	return origin{}, false
}

// follow extends base by the keys of rest up to the first non-ground one;
// from there the origin is inexact and the remaining keys are walked as
// ordinary uses.
func (z *analyzer) follow(base origin, rest []*ast.Term, env map[ast.Var]origin, depth int) origin {
	if base.root == rootConst {
		return z.followConst(base, rest, env, depth)
	}
	rest = z.substituteConsts(rest, env)
	for i, k := range rest {
		if !k.IsGround() {
			keyed := z.lookupKey(base.extend(rest[:i]...), k)
			if o, ok := z.fanOut(base, rest, i, env, depth); ok && !keyed {
				return o // a key of known constants: those keys, not every element
			}
			if o, ok := z.each(base, rest, i, env, depth); ok && !keyed {
				return o
			}
			for _, kk := range rest[i:] {
				z.walk(kk, env, depth)
			}
			o := base.extend(rest[:i]...)
			o.exact = false
			o.below += len(rest) - i
			o.because = keyReason(rest[i], env)
			return o
		}
	}
	return base.extend(rest...)
}

// each reads rest[i], a variable key below base, as every element of a
// list (Each), when that is sound and worth it: base is an exact input
// path (below another Each, a list inside each element, such as a
// container's ports or volume mounts, when the key is not bound before:
// a key bound elsewhere is a lookup that fanOut or the element whole
// covers), and the list can neither hold the
// candidate's name (review.object.spec is a prefix of spec.nodeName) nor
// be metadata holding the pod's name or uid (whose reads are per pod
// anyway). The key then holds the list's length (how many elements the
// variable ranges over) and, element by element, what is read below it;
// the variable key itself is an index fixed by the length (or, if the
// value is not an array, the key holds it whole: see Each). Anything
// else keeps the whole list read, as before.
func (z *analyzer) each(base origin, rest []*ast.Term, i int, env map[ast.Var]origin, depth int) (origin, bool) {
	v, isVar := rest[i].Value.(ast.Var)
	if !isVar || base.root != Input || !base.exact {
		return origin{}, false
	}
	if _, bound := env[v]; bound && EachAt(base.path) >= 0 {
		return origin{}, false // a lookup by a key read elsewhere: fanOut, or the element whole
	}
	list := make([]*ast.Term, 0, len(base.path)+i+2)
	list = append(append(list, base.path...), rest[:i]...)
	if len(list) < 2 || PrefixRelated(list, NodeNamePath) || related(uniquePodPaths, list) {
		return origin{}, false
	}
	z.walk(rest[i], env, depth)
	z.read(origin{root: Input, path: append(append([]*ast.Term(nil), list...), Each, Len), exact: true, viaArg: base.viaArg})
	return z.follow(origin{root: Input, path: append(list, Each), exact: true, viaArg: base.viaArg}, rest[i+1:], env, depth), true
}

// comprehension analyses a comprehension's body as a rule body, on a copy
// of env: `c := input.review.object.spec.containers[_]` there makes c an
// element of the list (Each), so that `{sprintf("%v is privileged",
// [c.name]) | c := ...containers[_]; c.securityContext.privileged}` reads
// each container's flag, and the names of the containers whose flag holds
// (guardElements), rather than every container whole. The
// result is a function of the elements' values at the paths read, in
// order and with the list's length, whatever the comprehension collects.
// A variable the body shares with the rule around it is bound there
// first, as Rego scopes it: such a binding is a comparison. Outside a
// rule's own body (a list set's conditions), or past what it can tell,
// the comprehension is walked as before: every binding a use. It reports
// whether it analysed the comprehension.
func (z *analyzer) comprehension(node any, body ast.Body, env map[ast.Var]origin, depth int, heads ...*ast.Term) bool {
	_, ok := z.comprehensionEnv(node, body, env, depth, heads...)
	return ok
}

// comprehensionEnv is comprehension, giving the body's bindings.
func (z *analyzer) comprehensionEnv(node any, body ast.Body, env map[ast.Var]origin, depth int, heads ...*ast.Term) (map[ast.Var]origin, bool) {
	seen, ok := varsOutside(z.current, node)
	if !ok {
		return nil, false
	}
	inner := make(map[ast.Var]origin, len(env))
	for k, v := range env {
		inner[k] = v
	}
	for v := range env {
		seen[v] = true
	}
	at := z.at
	for _, e := range body {
		z.expr(e, inner, seen, depth, nil)
		z.guardElements(e, env, inner)
	}
	z.at = at
	for _, h := range heads {
		z.walk(h, inner, depth)
	}
	return inner, true
}

// varsOutside are the variables of r outside node (a comprehension in r's
// body or head), and whether node is in r.
func varsOutside(r *ast.Rule, node any) (map[ast.Var]bool, bool) {
	if r == nil {
		return nil, false
	}
	vars := map[ast.Var]bool{}
	found := false
	vis := ast.NewGenericVisitor(func(n any) bool {
		if n == node {
			found = true
			return true
		}
		if v, ok := n.(ast.Var); ok {
			vars[v] = true
		}
		return false
	})
	vis.Walk(r)
	return vars, found
}

// keysTest reads a truth test `x[k]` (t, a lone expression), k a
// variable, x an exact input path (through Each or not, written out or
// through a variable bound to one), as the keys of x
// whose values hold (Keys): the test succeeds for k exactly those, so they
// are all the test can tell, whether k is bound before or bound by it. A k
// whose origin the analysis knows (a constant, such as has_field's field,
// or an input value) is left to resolve, which reads that one key.
// The volume types template's `{x | input.review.object.spec.volumes[_][x];
// x != "name"}` reads each volume's types, not its name. It reports
// whether it read t.
func (z *analyzer) keysTest(t *ast.Term, env map[ast.Var]origin, depth int) bool {
	ref, ok := t.Value.(ast.Ref)
	if !ok || len(ref) < 2 {
		return false
	}
	if head, isVar := ref[0].Value.(ast.Var); !isVar || (!ref[0].Equal(ast.InputRootDocument) && !hasOrigin(env, head)) {
		return false
	}
	if k, isVar := ref[len(ref)-1].Value.(ast.Var); !isVar || hasOrigin(env, k) {
		return false // a key with a known origin (a constant: has_field's field) is read as itself
	}
	base := ast.NewTerm(ref[:len(ref)-1])
	reads, why := len(z.reads), len(z.why)
	z.quiet++ // what is read here may be forgotten: no call counts as analysed
	defer func() { z.quiet-- }()
	o, ok := z.resolve(base, env, depth)
	if !ok || o.root != Input || !o.exact {
		z.reads, z.why = z.reads[:reads], z.why[:why]
		return false
	}
	z.lookupKey(o, ref[len(ref)-1]) // a printed key: the keys read here decide the test
	z.walk(ref[len(ref)-1], env, depth)
	z.read(origin{root: Input, path: append(append([]*ast.Term(nil), o.path...), Keys), exact: true, viaArg: o.viaArg})
	return true
}

func hasOrigin(env map[ast.Var]origin, v ast.Var) bool {
	_, ok := env[v]
	return ok
}

// maxFanOut bounds the constant keys fanOut reads one by one.
const maxFanOut = 16

// fanOut reads base[k] where the key k is one of a few constants, each a
// string or a number (`probe := input.parameters.probes[_]`, then
// `ctr[probe]`; consts.go): as each of those values, read whole, instead
// of the whole of base. Everything
// derived from base[k] is then a function of those values, so the origin
// returned is an untracked constant: nothing read through it adds to the
// key.
func (z *analyzer) fanOut(base origin, rest []*ast.Term, i int, env map[ast.Var]origin, depth int) (origin, bool) {
	v, isVar := rest[i].Value.(ast.Var)
	if !isVar || base.root == rootConst {
		return origin{}, false
	}
	k, ok := env[v]
	if !ok || k.root != rootConst {
		return origin{}, false
	}
	values := k.keyValues()
	if len(values) == 0 || len(values) > maxFanOut {
		return origin{}, false
	}
	at := base.extend(rest[:i]...)
	for _, kv := range values {
		o := z.follow(at.extend(ast.NewTerm(kv)), rest[i+1:], env, depth)
		z.read(o)
	}
	return unknownConst(), true
}

// nodesPath is where Gatekeeper's sync puts Nodes, below data.inventory.
var nodesPath = []*ast.Term{ast.StringTerm("cluster"), ast.StringTerm("v1"), ast.StringTerm("Node")}

// readsNodes reports whether an inventory reference other than the
// candidate's Node can reach Nodes: its ground prefix below
// data.inventory is related to cluster.v1.Node.
func readsNodes(r ast.Ref) bool {
	rest := r[2:]
	for i, k := range rest {
		if !k.IsGround() {
			rest = rest[:i]
			break
		}
	}
	return PrefixRelated(rest, nodesPath)
}

func isInventoryRef(r ast.Ref) bool {
	return len(r) >= 2 && r[0].Equal(ast.DefaultRootDocument) && r[1].Equal(ast.StringTerm("inventory"))
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
		if o.keyValues() == nil {
			return path // not a string or a number: read as it is
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
	if v, ok := t.Value.(ast.Var); ok {
		if o, ok := env[v]; ok && o.root == rootConst && o.value != nil {
			return ast.NewTerm(o.value)
		}
		return t
	}
	arr, ok := t.Value.(*ast.Array)
	if !ok {
		return t
	}
	items := make([]*ast.Term, 0, arr.Len())
	arr.Foreach(func(x *ast.Term) { items = append(items, x) })
	items = z.substituteConsts(items, env)
	return ast.ArrayTerm(items...)
}

// isAlias reports whether r is a complete rule that only names a part of
// the input or of the candidate node (object_name := input.review.object.metadata.name):
// one definition, no arguments, a body that is just `true`.
func (z *analyzer) isAlias(r *ast.Rule) bool {
	value := aliasValue(r)
	if value == nil || len(z.compiler.GetRulesExact(r.Path())) != 1 {
		return false
	}
	o, ok := z.resolveQuiet(value)
	return ok && o.exact && o.root != rootConst
}

// aliasValue is the reference an alias rule names: its value, or the one
// of its body's single `value = ref` (the compiler's form of name = ref).
func aliasValue(r *ast.Rule) *ast.Term {
	if len(r.Head.Args) > 0 || r.Head.Key != nil || r.Else != nil || r.Default || r.Head.Value == nil || len(r.Body) != 1 {
		return nil
	}
	if _, isRef := r.Head.Value.Value.(ast.Ref); isRef && r.Body[0].Equal(ast.NewExpr(ast.BooleanTerm(true))) {
		return r.Head.Value
	}
	e := r.Body[0]
	v, isVar := r.Head.Value.Value.(ast.Var)
	if !isVar || !e.IsEquality() || e.Negated || len(e.With) > 0 {
		return nil
	}
	terms := e.Terms.([]*ast.Term)
	if lv, ok := terms[1].Value.(ast.Var); ok && lv == v {
		if _, isRef := terms[2].Value.(ast.Ref); isRef {
			return terms[2]
		}
	}
	return nil
}

// resolveQuiet resolves a ground input or node reference without
// recording anything.
func (z *analyzer) resolveQuiet(t *ast.Term) (origin, bool) {
	ref, ok := t.Value.(ast.Ref)
	if !ok || !ref.IsGround() {
		return origin{}, false
	}
	reads, inv := len(z.reads), z.inv
	z.quiet++ // what is read here is forgotten: no call counts as analysed
	defer func() { z.quiet-- }()
	o, ok := z.resolve(t, map[ast.Var]origin{}, 0)
	z.reads, z.inv = z.reads[:reads], inv
	return o, ok
}

// aliasRule resolves a reference through an alias rule (see isAlias): the
// origin it names and the rest of the reference below the rule.
func (z *analyzer) aliasRule(ref ast.Ref) (origin, []*ast.Term, bool) {
	for i := len(z.root) + 1; i <= len(ref); i++ {
		rules := z.compiler.GetRulesExact(ref[:i])
		if len(rules) == 0 {
			continue
		}
		if len(rules) != 1 || !z.isAlias(rules[0]) {
			return origin{}, nil, false
		}
		o, ok := z.resolveQuiet(aliasValue(rules[0]))
		return o, ref[i:], ok
	}
	return origin{}, nil, false
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
		o = origin{root: Input, path: v[1:], exact: true}
	default:
		return false
	}
	return o.root == Input && o.exact && len(o.path) == len(NodeNamePath) && PrefixRelated(o.path, NodeNamePath)
}

// call handles a call expression: user functions are analysed with their
// parameters bound to the arguments' origins; object.get with a constant
// key reads below its object; sprintf may build a printed string; other
// builtins use their arguments whole.
func (z *analyzer) call(op ast.Ref, args []*ast.Term, env map[ast.Var]origin, seen map[ast.Var]bool, depth int, sc *scope) {
	name := op.String()
	if b, ok := ast.BuiltinMap[name]; ok {
		if b.Nondeterministic {
			z.nondet = true
		}
		if z.constCall(b, args, env, seen) {
			return
		}
		if name == ast.Sprintf.Name && sc != nil && z.sprintf(args, env, seen, depth, sc) {
			return
		}
		if name == ast.Concat.Name && sc != nil && z.concat(args, env, seen, depth, sc) {
			return
		}
		if name == ast.ObjectGet.Name && (len(args) == 3 || len(args) == 4) && z.objectGet(args, env, seen, depth) {
			return
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
	z.userCall(rules, args, env, seen, depth, sc)
}

// objectGet handles object.get(x, key, default, out) with a constant key:
// out is an alias of x.key (or a constant, for a constant x).
func (z *analyzer) objectGet(args []*ast.Term, env map[ast.Var]origin, seen map[ast.Var]bool, depth int) bool {
	o, ok := z.resolve(args[0], env, depth)
	if !ok || !o.exact {
		return false
	}
	key, ok := constantPath(z.substituteTerm(args[1], env))
	if !ok {
		return z.objectGetEach(o, args, env, seen, depth)
	}
	z.walk(args[2], env, depth)
	var out ast.Var
	fresh := false
	if len(args) == 4 {
		var isVar bool
		out, isVar = args[3].Value.(ast.Var)
		fresh = isVar && !seen[out]
	}
	if o.root == rootConst {
		if fresh {
			env[out] = constGet(o, key, args[2])
			return true
		}
	}
	if o.root == Input && len(o.path) == 0 && key[0].Equal(ast.StringTerm("parameters")) && z.params != nil {
		// object.get(input, ["parameters", ...], default): a constant.
		c := constGet(origin{root: rootConst, value: z.params, exact: true}, key[1:], args[2])
		if fresh {
			env[out] = c
			return true
		}
		if len(args) == 4 {
			z.walk(args[3], env, depth)
		}
		return true
	}
	if fresh {
		env[out] = o.extend(key...)
		return true
	}
	z.read(o.extend(key...))
	if len(args) == 4 {
		z.walk(args[3], env, depth)
	}
	return true
}

// userCall analyses a call of one of the template's functions: each
// definition with its parameters bound to the arguments' origins (ground
// arguments as constants). A single-definition function whose value is a
// printed string makes the call's output one too.
func (z *analyzer) userCall(rules []*ast.Rule, args []*ast.Term, env map[ast.Var]origin, seen map[ast.Var]bool, depth int, sc *scope) {
	nparams := len(rules[0].Head.Args)
	for i, a := range args {
		if i >= nparams {
			if v, ok := a.Value.(ast.Var); ok && !seen[v] {
				continue // the output: bound below or a plain local
			}
			z.walk(a, env, depth)
			continue
		}
		switch a.Value.(type) {
		case ast.Var, ast.Ref:
		default:
			z.walk(a, env, depth)
		}
	}
	if depth >= maxCallDepth {
		for _, a := range args {
			z.walk(a, env, depth)
		}
		for _, r := range rules {
			for x := r; x != nil; x = x.Else {
				z.bailed[x] = true // its reads are read apart (functionsApart)
				z.bails++
			}
		}
		return
	}
	printedArgs := z.printedArgs(args[:min(nparams, len(args))])
	var returned [][]source
	for _, r := range rules {
		if z.isAlias(r) {
			clear(printedArgs)
			continue // read where it is referenced (see aliasRule)
		}
		for x := r; x != nil; x = x.Else {
			if z.active[x] > 0 {
				// Recursion (which Rego's compiler refuses): use arguments
				// whole, and read the function apart.
				for _, a := range args[:min(nparams, len(args))] {
					z.walk(a, env, depth)
				}
				clear(printedArgs) // not followed: the caller's use is not allowed
				z.bailed[x] = true
				z.bails++
				continue
			}
			if z.quiet == 0 {
				z.inlined[x] = true
			}
			inner, seeds := z.bindParams(x, args, env, depth, printedArgs)
			at := z.at
			z.seeds = seeds
			if src := z.rule(x, inner, depth+1); src != nil {
				returned = append(returned, src)
			}
			z.seeds = nil
			z.at = at
		}
	}
	for _, q := range printedArgs {
		q.allowed++
	}
	z.callOutput(rules, args, nparams, seen, sc, returned)
}

// printedArgs are the arguments that are printed strings of the caller's
// scope, by position. They stay printed strings in the function (a
// lookup key, a sprintf argument there): the caller's use is allowed when
// every definition takes them by a variable (bindParams deletes the
// others); what the function does with them is settled in it.
func (z *analyzer) printedArgs(args []*ast.Term) map[int]*printed {
	out := map[int]*printed{}
	if z.sc == nil {
		return out
	}
	for i, a := range args {
		if v, ok := a.Value.(ast.Var); ok && z.sc.strings[v] != nil {
			out[i] = z.sc.strings[v]
		}
	}
	return out
}

// bindParams binds definition x's parameters to the call's arguments:
// origins (inner) for references, aliases and constants, printed strings
// (seeds) for printedArgs; an argument a pattern parameter unifies with
// is read whole.
func (z *analyzer) bindParams(x *ast.Rule, args []*ast.Term, env map[ast.Var]origin, depth int, printedArgs map[int]*printed) (map[ast.Var]origin, map[ast.Var]*printed) {
	inner := map[ast.Var]origin{}
	var seeds map[ast.Var]*printed
	for i, p := range x.Head.Args {
		if i >= len(args) {
			break
		}
		pv, isVar := p.Value.(ast.Var)
		if q := printedArgs[i]; q != nil {
			if !isVar {
				delete(printedArgs, i) // a pattern: the caller's use is not allowed
				continue
			}
			if seeds == nil {
				seeds = map[ast.Var]*printed{}
			}
			seeds[pv] = q
			continue
		}
		o, ok := z.argOrigin(args[i], env, depth)
		switch {
		case !ok:
		case !o.exact && o.root != rootConst:
			z.read(o)
		case isVar:
			inner[pv] = o
		default:
			z.read(o) // a pattern parameter unifies with the whole argument
		}
	}
	return inner, seeds
}

// callOutput handles what a call returns: a printed string when its
// definitions returned one (with several definitions, only where the
// template allows it, see Result.PrintedThroughSeveral); otherwise the
// returned sources go back into the key.
func (z *analyzer) callOutput(rules []*ast.Rule, args []*ast.Term, nparams int, seen map[ast.Var]bool, sc *scope, returned [][]source) {
	single := len(rules) == 1 && rules[0].Else == nil
	var out ast.Var
	hasOut := false
	if len(args) == nparams+1 {
		out, hasOut = args[nparams].Value.(ast.Var)
		hasOut = hasOut && !seen[out]
	}
	switch {
	case len(returned) == 0:
	case hasOut && sc != nil && (single || !z.noSeveral):
		var srcs []source
		for _, src := range returned {
			srcs = append(srcs, src...)
		}
		sc.strings[out] = &printed{sources: srcs, allowed: 1}
		if !single {
			z.several = true
		}
	default:
		for _, src := range returned {
			z.refuse(src, "the function that prints it has several definitions")
		}
	}
}

// argOrigin is the origin of an argument: an input or node reference, an
// alias, or a ground value (a constant).
func (z *analyzer) argOrigin(t *ast.Term, env map[ast.Var]origin, depth int) (origin, bool) {
	if o, ok := z.resolve(t, env, depth); ok {
		return o, true
	}
	if ast.IsConstant(t.Value) {
		return origin{root: rootConst, value: t.Value, exact: true}, true
	}
	return origin{}, false
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
		case *ast.ArrayComprehension:
			return z.comprehension(v, v.Body, env, depth, v.Term)
		case *ast.SetComprehension:
			return z.comprehension(v, v.Body, env, depth, v.Term)
		case *ast.ObjectComprehension:
			return z.comprehension(v, v.Body, env, depth, v.Key, v.Value)
		case *ast.Every:
			return z.every(v, env, depth)
		case *ast.Expr:
			if t, ok := v.Terms.(*ast.Term); ok && len(v.With) == 0 && z.keysTest(t, env, depth) {
				return true
			}
			if v.IsCall() && len(v.With) == 0 && !v.Negated {
				// Nested bodies (comprehensions, every): calls keep their
				// function analysis; bindings there are treated as uses.
				z.call(v.Operator(), v.Operands(), env, map[ast.Var]bool{}, depth, nil)
				return true
			}
			for _, w := range v.With {
				if ref, ok := w.Target.Value.(ast.Ref); ok && !ref[0].Equal(ast.InputRootDocument) {
					z.inv, z.allNodes = true, true
				}
				z.read(origin{root: Input, exact: true})
			}
		case ast.Call:
			if op, ok := v[0].Value.(ast.Ref); ok {
				z.call(op, v[1:], env, map[ast.Var]bool{}, depth, nil)
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
				z.read(origin{root: Input, exact: true})
			} else if o, ok := env[v]; ok {
				z.read(o)
			}
		}
		return false
	})
	vis.Walk(x)
}
