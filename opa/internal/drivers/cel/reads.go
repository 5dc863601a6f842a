package cel

import (
	"slices"
	"sort"
	"strconv"
	"strings"

	celgo "github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/overloads"
	"github.com/google/cel-go/common/types"
	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/gatekeeper"
)

// The review paths that the CEL variable request's fields stand for (the
// engine's review is input.review: the AdmissionRequest plus
// namespaceObject). Its other fields (subResource, dryRun, options, uid)
// are the same for every pod review.
var requestFields = map[string]string{
	"kind": "kind", "requestKind": "kind",
	"resource": "resource", "requestResource": "resource",
	"name": "name", "namespace": "namespace",
	"operation": "operation", "userInfo": "userInfo",
}

// Marks inside a path (strings below input.review): shapeMark ends a path
// whose value's kind only is read (analysis.Shape), eachMark stands for
// every element of a list (analysis.Each; followed by guards, for the
// elements a filter kept: eachWhere); requestRoot and variablesRoot are
// the CEL variables request and variables, resolved field by field.
const (
	shapeMark     = "\x01"
	eachMark      = "\x02"
	requestRoot   = "\x03request"
	variablesRoot = "\x03variables"
)

// analyze says what the code reads of the review: the paths of the review
// (input.review...) that the values of its validations, message
// expressions, match conditions and variables can depend on.
//
// Each expression is evaluated abstractly: a value is either computed (what
// it depends on is recorded as read where it was computed) or taken from
// the review, known by its origins: the paths it may be the value of, or
// the paths whose values are the elements of a list it is (list literals,
// concatenations, filter and map results; a filter that tests fields of
// its elements keeps only those that have them: eachWhere). Selections
// and constant keys follow an origin; iterating a list binds the element
// to path[_] (analysis.Each) and reads how many there are, so `containers.filter(c,
// c.securityContext.privileged).map(c, c.name)` reads each container's
// securityContext.privileged and name, not the containers whole. List
// and map literals keep their values' origins by position and key, so a
// name in a pair (`[c.name, caps]`, printed as `pair[0]`) or in a map
// (`{"container": c.name}`) that only a message prints is printed, and so
// is one that a lookup's key is built from (`(prefix + c.name) in
// annotations`, lookupkey.go), on the engine's condition that no key of
// the object holds it, and so is one compared only with values of its own
// path (`pair[0] == container.name`, join.go), on the condition that the
// values are pairwise distinct. Any other
// use (a function's argument, an operand, a key computed at run time)
// reads the origins whole. Every selection also reads the shape of what it
// selects from: its errors name where a path broke. What a comprehension's
// body reads is read only when its range has an element (members.go). The
// Constraint (params) is a constant. So the answer is always sound, and a
// template that does not reach object.spec.nodeName is judged once per pod
// class.
//
// A use `e.image in variables.exemptImages` of a list of the values a
// test kept, e an element of the list's range, is read as the test's
// answer on e.image (membership.go): a pod with a new image that no
// exemption covers is then the same class as the others. A value keyed so
// that a message also prints (allow-privilege-escalation's images) stays
// printed, with the test as a gate: the engine gives it a placeholder only
// when the test answers alike for the placeholder
// (analysis.MessagePath.Helpers). Reads are not
// keyed on the cost of evaluating them: a pod whose values are long enough
// to exhaust CEL's per-call cost budget where the class's representative
// did not (or the reverse) would be judged as the representative was; a
// helper's values are at most 4 KiB, far from the budget for the library's
// tests.
func analyze(env *celgo.Env, src *gatekeeper.CELSource) (*analysis.Result, map[string]*membership) {
	r := &reader{env: env, vars: map[string]string{}, varValues: map[string]value{}, busy: map[string]bool{}, rangeOf: map[string][]string{}, rangeRead: map[string]bool{}, keyedIn: map[string][][]string{}, joined: map[string]bool{}}
	for _, v := range src.Variables {
		r.vars[v.Name] = v.Expression
	}
	r.memberships = r.findMemberships()
	for _, mc := range src.MatchConditions {
		r.expression(mc.Expression)
	}
	for _, v := range src.Validations {
		r.expression(v.Expression)
	}
	for _, v := range src.Validations {
		if v.MessageExpression != "" {
			r.message(v.MessageExpression)
		}
	}
	return r.result(), r.memberships
}

// origin is where a value comes from: the value at path, wrapped (wrap,
// outermost first) in list and map literals: a list whose elements, or
// whose element at a known position ("[1]"), are such values; "." and a
// key, a map whose value at that key is. So `[c.name, x]` is a list whose
// first element is a value at containers[_].name, and `{"container":
// c.name}` a map whose container is.
type origin struct {
	path []string
	wrap []string
}

// elemStep is a wrap's step into any element of a list; maxWrap the most
// steps kept (a value wrapped deeper is read whole).
const (
	elemStep = "[]"
	maxWrap  = 4
)

// wrapped: o is a list or a map literal, not the value at its path.
func (o origin) wrapped() bool { return len(o.wrap) > 0 }

// list: o is a list whose elements come from its path.
func (o origin) list() bool { return len(o.wrap) > 0 && strings.HasPrefix(o.wrap[0], "[") }

// anyPosition is o, a list of a concatenation, with its elements at any
// position.
func (o origin) anyPosition() origin {
	if !o.list() || o.wrap[0] == elemStep {
		return o
	}
	return origin{path: o.path, wrap: append([]string{elemStep}, o.wrap[1:]...)}
}

// inner is the origin of what o's first step leads to.
func (o origin) inner() origin { return origin{path: o.path, wrap: o.wrap[1:]} }

// within is o wrapped one step more.
func (o origin) within(step string) origin {
	return origin{path: o.path, wrap: append([]string{step}, o.wrap...)}
}

// value is what an expression's value may be made of: nil for a value
// computed from what was recorded as read.
type value []origin

// scope binds the names of comprehensions' variables.
type scope map[string]value

type reader struct {
	env *celgo.Env
	// vars are the template's own variables' expressions, by name;
	// varValues their values once evaluated; busy guards a cycle.
	vars      map[string]string
	varValues map[string]value
	busy      map[string]bool
	// reads are review paths (below input.review), each with the
	// condition it was read under; when is the condition now.
	reads []read
	when  []member
	// printed are paths of the object that message expressions only
	// concatenate into their message (print).
	printed [][]string
	// memberships are the variables that are memberships (membership.go);
	// rangeOf the range parts of the comprehensions' variables in force,
	// and rangeRead the memberships whose list's reads are recorded.
	memberships map[string]*membership
	rangeOf     map[string][]string
	rangeRead   map[string]bool
	// keyedIn are the objects printed values are looked up in
	// (lookupkey.go), by printed path.
	keyedIn map[string][][]string
	// joined are the printed paths whose values are compared with each
	// other (join.go), by path with any element.
	joined map[string]bool
	// bound are the comprehensions' variables in force, with what they
	// range over (join.go).
	bound map[string]*binding
}

// parse is the expression's AST, or false when it does not parse: it
// reads nothing then, as it denies (or admits, under Ignore) every review
// alike.
func (r *reader) parse(src string) (celast.Expr, bool) {
	parsed, iss := r.env.Parse(src)
	if iss != nil && iss.Err() != nil {
		return nil, false
	}
	return parsed.NativeRep().Expr(), true
}

// expression records the reads of one expression, whose value is used.
func (r *reader) expression(src string) {
	if e, ok := r.parse(src); ok {
		r.use(r.eval(e, nil))
	}
}

// message records the reads of a message expression, and apart from them
// the object's paths it only prints.
func (r *reader) message(src string) {
	if e, ok := r.parse(src); ok {
		r.print(e)
	}
}

// print walks e, whose value becomes (part of) a message: a path of the
// object that only reaches the message through string concatenation,
// string() and the branches of a conditional is printed, not read.
func (r *reader) print(e celast.Expr) {
	if p, anyObject, ok := objectChain(e); ok {
		r.printPath(p)
		if anyObject {
			// variables.anyObject is oldObject on a DELETE without object.
			r.add(append([]string{"oldObject"}, p[1:]...))
			r.add([]string{"operation"})
		}
		return
	}
	if e.Kind() == celast.CallKind {
		c := e.AsCall()
		args := c.Args()
		switch {
		case c.FunctionName() == operators.Add && len(args) == 2:
			r.print(args[0])
			r.print(args[1])
			return
		case c.FunctionName() == operators.Conditional && len(args) == 3:
			r.use(r.eval(args[0], nil))
			r.print(args[1])
			r.print(args[2])
			return
		case c.FunctionName() == "string" && !c.IsMemberFunction() && len(args) == 1:
			r.print(args[0])
			return
		case c.FunctionName() == "join" && c.IsMemberFunction() && len(args) <= 1:
			// A list joined: its elements' origins are what they print
			// (a filter, a map and concatenations keep values whole).
			for _, a := range args {
				r.use(r.eval(a, nil))
			}
			r.printOrigins(r.eval(c.Target(), nil))
			return
		}
	}
	r.use(r.eval(e, nil))
}

// printOrigins records the origins of a printed value: a path of the
// object (through one list's elements at most: the engine gives each
// element its own placeholder) is printed, any other is read.
func (r *reader) printOrigins(v value) {
	for _, o := range v {
		plain := !o.wrapped() || (len(o.wrap) == 1 && o.list()) // a list joined, or its elements
		if plain && printablePath(o.path) {
			r.printPath(o.path)
			continue
		}
		r.use(value{o})
	}
}

// printablePath: path is a value of the object (through one list's
// elements at most) that a message could print with a placeholder.
func printablePath(path []string) bool {
	return path[0] == "object" && len(path) > 1 && eachCount(path) <= 1 && !slices.Contains(path, shapeMark)
}

// printPath records path as printed, and the shapes on the way to it.
func (r *reader) printPath(path []string) {
	r.printed = append(r.printed, path)
	r.shapes(path)
}

// objectChain reads e as object.<fields> or variables.anyObject.<fields>
// (at least one field, each a selection or a constant key): the object's
// path, and whether it came through anyObject.
func objectChain(e celast.Expr) (path []string, anyObject, ok bool) {
	path, anyObject, ok = rootChain(e, nil)
	if !ok || path[0] != "object" || len(path) < 2 {
		return nil, false, false
	}
	return path, anyObject, true
}

// constantKey reads e as operand[key] (or operand.?key, operand[?key])
// with a constant string key.
func constantKey(e celast.Expr) (key string, operand celast.Expr, ok bool) {
	c := e.AsCall()
	fn := c.FunctionName()
	if (fn != operators.Index && fn != operators.OptIndex && fn != operators.OptSelect) || len(c.Args()) != 2 {
		return "", nil, false
	}
	k := c.Args()[1]
	if k.Kind() != celast.LiteralKind {
		return "", nil, false
	}
	s, isString := k.AsLiteral().(types.String)
	return string(s), c.Args()[0], isString
}

// eval is e's value in scope sc, recording what computing it reads.
func (r *reader) eval(e celast.Expr, sc scope) value {
	switch e.Kind() {
	case celast.IdentKind:
		return r.ident(e.AsIdent(), sc)
	case celast.SelectKind:
		s := e.AsSelect()
		return r.selectField(r.eval(s.Operand(), sc), s.FieldName(), s.IsTestOnly())
	case celast.CallKind:
		return r.call(e, sc)
	case celast.ListKind:
		return r.wrapAll(e.AsList().Elements(), nil, sc)
	case celast.MapKind:
		var out value
		for _, en := range e.AsMap().Entries() {
			me := en.AsMapEntry()
			key := me.Key()
			if k, isString := literalString(key); isString && !me.IsOptional() {
				out = append(out, r.wrapAll([]celast.Expr{me.Value()}, &k, sc)...)
				continue
			}
			r.use(r.eval(key, sc))
			r.use(r.eval(me.Value(), sc))
		}
		return out
	case celast.StructKind:
		for _, f := range e.AsStruct().Fields() {
			r.use(r.eval(f.AsStructField().Value(), sc))
		}
	case celast.ComprehensionKind:
		return r.comprehension(e.AsComprehension(), sc)
	}
	return nil
}

// wrapAll are the origins of a list of es (key nil) or of a map whose
// value at *key is es[0]: each of their origins wrapped one step more, or
// read whole when that is too deep.
func (r *reader) wrapAll(es []celast.Expr, key *string, sc scope) value {
	var out value
	for i, x := range es {
		step := "[" + strconv.Itoa(i) + "]"
		if key != nil {
			step = "." + *key
		}
		for _, o := range r.eval(x, sc) {
			if len(o.wrap) >= maxWrap {
				r.add(o.path)
				continue
			}
			out = append(out, o.within(step))
		}
	}
	return out
}

// literalString reads e as a string literal.
func literalString(e celast.Expr) (string, bool) {
	if e.Kind() != celast.LiteralKind {
		return "", false
	}
	s, ok := e.AsLiteral().(types.String)
	return string(s), ok
}

// ident is a name's value: a comprehension's variable, or one of the CEL
// admission variables.
func (r *reader) ident(name string, sc scope) value {
	if v, ok := sc[name]; ok {
		return v
	}
	switch name {
	case "object", "oldObject", "namespaceObject":
		return value{{path: []string{name}}}
	case "request":
		return value{{path: []string{requestRoot}}}
	case "variables":
		return value{{path: []string{variablesRoot}}}
	}
	// params (the Constraint) and authorizer are constants; any other name
	// does not compile.
	return nil
}

// selectField is v.f (has(v.f) when test): the origins below, and the
// shapes it reads on the way.
func (r *reader) selectField(v value, f string, test bool) value {
	var out value
	for _, o := range v {
		switch {
		case o.wrapped():
			// A list has no fields, a map literal the same keys for all:
			// the value at its key is its own.
			if !test && o.wrap[0] == "."+f {
				out = append(out, o.inner())
			}
		case o.path[0] == variablesRoot:
			if !test {
				out = append(out, r.variable(f)...)
			}
		case o.path[0] == requestRoot:
			if field, ok := requestFields[f]; ok {
				p := []string{field}
				if test {
					r.add(append(p, shapeMark))
				} else {
					out = append(out, origin{path: p})
				}
			}
		default:
			r.add(append(slices.Clone(o.path), shapeMark))
			p := append(slices.Clone(o.path), f)
			// The selection fails where f is missing, whether or not its
			// value is used later (a list of them only counted, a map
			// literal's entry never read): its shape is read either way.
			r.add(append(slices.Clone(p), shapeMark))
			if !test {
				out = append(out, origin{path: p})
			}
		}
	}
	return out
}

// call is a function call's value: index, conditional and concatenation
// keep origins, dyn() passes them on; any other function uses its
// arguments whole and computes its value.
func (r *reader) call(e celast.Expr, sc scope) value {
	c := e.AsCall()
	args := c.Args()
	if key, operand, ok := constantKey(e); ok {
		return r.selectField(r.eval(operand, sc), key, false)
	}
	switch fn := c.FunctionName(); {
	case (fn == operators.Index || fn == operators.OptIndex) && len(args) == 2:
		list := r.eval(args[0], sc)
		if args[1].Kind() == celast.LiteralKind {
			if k, isInt := args[1].AsLiteral().(types.Int); isInt {
				return r.elementsAt(list, "["+strconv.Itoa(int(k))+"]")
			}
		}
		r.lookup(r.eval(args[1], sc), list)
		return nil
	case fn == operators.Conditional && len(args) == 3:
		r.use(r.eval(args[0], sc))
		return append(r.eval(args[1], sc), r.eval(args[2], sc)...)
	case fn == operators.Add && len(args) == 2:
		// Lists concatenate (their elements' positions change); strings
		// and numbers are used whole anyway.
		var out value
		for _, o := range append(r.eval(args[0], sc), r.eval(args[1], sc)...) {
			out = append(out, o.anyPosition())
		}
		return out
	case (fn == operators.Equals || fn == operators.NotEquals) && len(args) == 2:
		r.compare(args[0], args[1], sc)
		return nil
	case fn == "dyn" && !c.IsMemberFunction() && len(args) == 1:
		return r.eval(args[0], sc)
	case fn == operators.In && len(args) == 2:
		if !r.memberTest(args[0], args[1], sc) {
			r.lookup(r.eval(args[0], sc), r.eval(args[1], sc))
		}
		return nil
	case fn == overloads.Size && (len(args) == 1) != c.IsMemberFunction():
		x := c.Target()
		if !c.IsMemberFunction() {
			x = args[0]
		}
		r.size(r.eval(x, sc))
		return nil
	}
	if c.IsMemberFunction() {
		r.use(r.eval(c.Target(), sc))
	}
	for _, a := range args {
		r.use(r.eval(a, sc))
	}
	return nil
}

// size records what the size of a value with origins v reads: how many
// elements each origin list has (the shape of each), not their values. A
// filter's result is as long as the elements its test kept, and the test's
// reads are recorded where it ran. (A string or a map at an origin is read
// whole: analysis.Each keys a value that is not a list whole.)
func (r *reader) size(v value) {
	for _, o := range v {
		switch {
		case o.path[0] == requestRoot || o.path[0] == variablesRoot:
			r.use(value{o})
		case o.wrapped():
			// A literal's size is its own; a list built by a comprehension
			// is as long as its range (recorded where it is iterated) and
			// the elements its test kept (recorded where the test ran).
		default:
			r.add(append(slices.Clone(o.path), eachMark, shapeMark))
		}
	}
}

// elements are the origins of the elements of a list with origins v.
func (r *reader) elements(v value) value { return r.elementsAt(v, "") }

// elementsAt are the origins of the element at position pos ("[1]"; ""
// for any) of a list with origins v.
func (r *reader) elementsAt(v value, pos string) value {
	var out value
	for _, o := range v {
		if o.wrapped() {
			// A map literal's elements are its keys, constants.
			if o.list() && (pos == "" || o.wrap[0] == elemStep || o.wrap[0] == pos) {
				out = append(out, o.inner())
			}
			continue
		}
		if o.path[0] == requestRoot || o.path[0] == variablesRoot {
			continue
		}
		// How many elements there are: a comprehension's value may depend
		// on nothing else (exists(c, true)).
		r.add(append(slices.Clone(o.path), shapeMark))
		r.add(append(slices.Clone(o.path), eachMark, shapeMark))
		out = append(out, origin{path: append(slices.Clone(o.path), eachMark)})
	}
	return out
}

// comprehension is a macro's value (all, exists, map, filter, ...): its
// variable bound to the range's elements, its accumulator to what its
// steps add, up to a fixed point.
func (r *reader) comprehension(c celast.ComprehensionExpr, sc scope) value {
	rng := r.eval(c.IterRange(), sc)
	elems := r.elements(rng)
	inner := scope{}
	for k, v := range sc {
		inner[k] = v
	}
	// With two variables the first is an index or a key: bound to the
	// elements too, which reads more than it needs, never less. The second
	// is a list's element or a map's value: a map literal's values too.
	inner[c.IterVar()] = elems
	if c.HasIterVar2() {
		inner[c.IterVar2()] = union(elems, entryValues(rng))
	}
	defer r.bindRange(c, sc)()
	defer r.bindExact(c)()
	accu := r.eval(c.AccuInit(), sc)
	inner[c.AccuVar()] = accu
	outer := r.when
	r.when = r.bodyCondition(c.IterRange(), sc)
	for range 3 {
		next := union(accu, r.eval(c.LoopStep(), inner))
		if len(next) == len(accu) {
			break
		}
		accu = next
		inner[c.AccuVar()] = accu
	}
	r.use(r.eval(c.LoopCondition(), inner))
	r.when = outer
	out := r.eval(c.Result(), inner)
	if guards := filterGuards(c); guards != nil {
		out = keptElements(out, elems, guards)
	}
	return out
}

// entryValues are the origins of the values of a map literal with
// origins v (its keys are constants).
func entryValues(v value) value {
	var out value
	for _, o := range v {
		if o.wrapped() && !o.list() {
			out = append(out, o.inner())
		}
	}
	return out
}

// union is a and b's origins, each once.
func union(a, b value) value {
	out := slices.Clone(a)
	for _, o := range b {
		if !slices.ContainsFunc(out, func(x origin) bool { return slices.Equal(x.wrap, o.wrap) && slices.Equal(x.path, o.path) }) {
			out = append(out, o)
		}
	}
	return out
}

// use records that v's origins are read whole.
func (r *reader) use(v value) {
	for _, o := range v {
		switch o.path[0] {
		case requestRoot:
			for _, f := range requestFields {
				r.add([]string{f})
			}
		case variablesRoot:
			r.add([]string{"object"})
			r.add([]string{"oldObject"})
			r.add([]string{"operation"})
			for name := range r.vars {
				r.use(r.variable(name))
			}
		default:
			r.add(o.path)
		}
	}
}

// add records a review path read, under the condition in force. A path
// through the elements of a member's list needs none: with no element
// it reads nothing.
func (r *reader) add(path []string) {
	when := r.when
	for _, m := range when {
		if len(path) > len(m.path) && isEach(path[len(m.path)]) && slices.Equal(path[:len(m.path)], m.path) {
			when = nil
			break
		}
	}
	r.reads = append(r.reads, read{path: path, when: when})
}

// shapes records the shapes of the values on the way to path, as the
// selections that reach it read them.
func (r *reader) shapes(path []string) {
	for i := 1; i < len(path); i++ {
		r.add(append(slices.Clone(path[:i]), shapeMark))
	}
}

// variable is variables.<name>'s value: Gatekeeper's anyObject (the
// object, or oldObject on a DELETE without object) and params (a
// constant), or the template's own, evaluated once.
func (r *reader) variable(name string) value {
	switch name {
	case "anyObject":
		r.add([]string{"operation"})
		r.add([]string{"object", shapeMark})
		return value{{path: []string{"object"}}, {path: []string{"oldObject"}}}
	case "params":
		return nil
	}
	if v, ok := r.varValues[name]; ok {
		return v
	}
	src, ok := r.vars[name]
	if !ok || r.busy[name] {
		return nil
	}
	r.busy[name] = true
	// A variable is evaluated once, where it is first used: what it reads
	// is read under no condition, as a later use may be under none.
	outer, bound := r.when, r.bound
	r.when, r.bound = nil, nil
	var v value
	if e, ok := r.parse(src); ok {
		v = r.eval(e, nil)
	}
	r.when, r.bound = outer, bound
	r.busy[name] = false
	r.varValues[name] = v
	return v
}

// result is the analysis of reads: the minimal set of review paths, and
// whether one of them holds spec.nodeName. A printed path that no read
// reaches (above, at or below it) is a message path: the engine leaves it
// out of the memo key and evaluates with a placeholder in its place.
// Printed values are trimmed (analysis.MessagePath.Trim): only non-empty
// values with no control character, quote or backslash and no space at
// either end are substituted, so that none can make a message multi-line or change
// what trimming it removes. One gap remains: a message within a few hundred
// bytes of the 5 KiB bound is measured with the placeholder's length, not
// the value's, so a value that would carry it across the bound (and turn it
// into the validation's message or the fallback text) is not seen to.
func (r *reader) result() *analysis.Result {
	paths := minimal(r.reads)
	a := &analysis.Result{}
	for _, p := range broadest(minimal(unconditional(r.printed))) {
		// The printed value's own shape is the placeholder's business: it
		// stands only for a string, and any other value stays in the key.
		// The selections that reach it read it (reads.go, selectField),
		// under any condition and through any element filter.
		own := anyElement(append(slices.Clone(p), analysis.Shape))
		isOwn := func(q []*ast.Term) bool {
			return slices.EqualFunc(anyElement(analysis.Unconditioned(q)), own, (*ast.Term).Equal)
		}
		others := slices.DeleteFunc(slices.Clone(paths), isOwn)
		// A test of the value keyed on its answer (a membership's helper)
		// is the placeholder's business too: the engine gives one only
		// when the test answers alike for it.
		helpers := helpersOn(others, p)
		others = slices.DeleteFunc(others, func(q []*ast.Term) bool { return helperOn(q, p) != nil })
		if related(others, p) || analysis.PrefixRelated(p, analysis.NodeNamePath) {
			paths = append(paths, p)
			continue
		}
		paths = slices.DeleteFunc(paths, isOwn)
		a.Messages = append(a.Messages, analysis.MessagePath{Root: analysis.Input, Path: p, Trim: true, Absent: r.absentIn(p), Helpers: helpers,
			Distinct: r.joined[analysis.PathString(anyElement(p))]})
	}
	a.InputPaths = minimal2(withoutHelperShapes(paths))
	for _, p := range a.InputPaths {
		if analysis.PrefixRelated(analysis.Unconditioned(p), analysis.NodeNamePath) {
			a.NodeNameObserved = true
			a.Why = append(a.Why, "input"+analysis.PathString(p)+" holds the candidate's name and is read by the CEL code: evaluated per (pod, node)")
		}
	}
	return a
}

// withoutHelperShapes is paths without the shape of a value whose test's
// answer is read (a membership's helper, under no condition): that key
// holds the value whole wherever it is not a string the test answers
// for, so its kind too.
func withoutHelperShapes(paths [][]*ast.Term) [][]*ast.Term {
	helped := map[string]bool{}
	for _, q := range paths {
		if n := len(q); n > 0 && analysis.IsHelper(q[n-1]) {
			if _, _, cond := analysis.Condition(q); !cond {
				helped[analysis.PathString(q[:n-1])] = true
			}
		}
	}
	if len(helped) == 0 {
		return paths
	}
	return slices.DeleteFunc(paths, func(q []*ast.Term) bool {
		n := len(q)
		if _, _, cond := analysis.Condition(q); cond || n == 0 || !analysis.IsShape(q[n-1]) {
			return false
		}
		return helped[analysis.PathString(q[:n-1])]
	})
}

// helperOn is q's Helper when q is p (whatever filters their elements
// went through) followed by one, under any condition; nil otherwise.
func helperOn(q, p []*ast.Term) *ast.Term {
	q = analysis.Unconditioned(q)
	if len(q) != len(p)+1 || !analysis.IsHelper(q[len(p)]) ||
		!slices.EqualFunc(anyElement(q[:len(p)]), anyElement(p), (*ast.Term).Equal) {
		return nil
	}
	return q[len(p)]
}

// helpersOn are the Helpers of paths on p (helperOn), each once.
func helpersOn(paths [][]*ast.Term, p []*ast.Term) []*ast.Term {
	var out []*ast.Term
	for _, q := range paths {
		if h := helperOn(q, p); h != nil && !slices.ContainsFunc(out, h.Equal) {
			out = append(out, h)
		}
	}
	return out
}

// broadest are printed paths without those that another names with fewer
// element filters (the names of the containers a filter kept, and of all
// the containers): each value gets one placeholder.
func broadest(paths [][]*ast.Term) [][]*ast.Term {
	var out [][]*ast.Term
	for _, p := range paths {
		any := anyElement(p)
		wider := slices.ContainsFunc(paths, func(q []*ast.Term) bool {
			return !slices.EqualFunc(q, p, (*ast.Term).Equal) && slices.EqualFunc(q, any, (*ast.Term).Equal)
		})
		if !wider {
			out = append(out, p)
		}
	}
	return out
}

// minimal are the review paths of reads (below input.review), a read
// under a condition beginning with its analysis.WhenAny, none below
// another, sorted.
func minimal(reads []read) [][]*ast.Term {
	paths := make([][]*ast.Term, 0, len(reads))
	for _, rd := range reads {
		p := reviewPath(rd.path)
		if rd.when != nil {
			p = append([]*ast.Term{whenTerm(rd.when)}, p...)
		}
		paths = append(paths, p)
	}
	return minimal2(paths)
}

// reviewPath is path (below input.review) as terms from input.
func reviewPath(path []string) []*ast.Term {
	p := make([]*ast.Term, 0, len(path)+1)
	p = append(p, ast.StringTerm("review"))
	for _, f := range path {
		switch {
		case f == shapeMark:
			p = append(p, analysis.Shape)
		case isEach(f):
			p = append(p, eachTerm(f))
		case strings.HasPrefix(f, helperMark):
			p = append(p, helperTerm(f[len(helperMark):]))
		default:
			p = append(p, ast.StringTerm(f))
		}
	}
	return p
}

// minimal2 is paths without those below another (a path under a
// condition is below the same path under none), sorted.
func minimal2(paths [][]*ast.Term) [][]*ast.Term {
	sort.SliceStable(paths, func(i, j int) bool { return len(paths[i]) < len(paths[j]) })
	var out [][]*ast.Term
	for _, p := range paths {
		if !covered(out, p) && !covered(out, analysis.Unconditioned(p)) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return analysis.PathString(out[i]) < analysis.PathString(out[j]) })
	return out
}

// related: some path of paths (under a condition or none) lies above, at
// or below p, whatever the elements a filter kept on either side; an
// element of any position or key (Each) is related to each one:
// `labels.all(k, v, ...)` reads labels[_], which holds labels.team.
func related(paths [][]*ast.Term, p []*ast.Term) bool {
	p = anyElement(p)
	for _, q := range paths {
		q = anyElement(analysis.Unconditioned(q))
		if overlaps(q, p) || overlaps(p, q) {
			return true
		}
	}
	return false
}

// overlaps: q is p or lies above it, as isPrefix says, with Each matching
// any one step.
func overlaps(q, p []*ast.Term) bool {
	if len(q) > len(p) {
		return false
	}
	for i := range q {
		if !q[i].Equal(p[i]) && !analysis.IsEach(q[i]) && !analysis.IsEach(p[i]) {
			return false
		}
	}
	return len(q) == 0 || !analysis.IsShape(q[len(q)-1]) || len(q) == len(p)
}

// anyElement is p with every filtered Each as Each.
func anyElement(p []*ast.Term) []*ast.Term {
	out := p
	for i, t := range p {
		if analysis.IsEach(t) && !t.Equal(analysis.Each) {
			if &out[0] == &p[0] {
				out = slices.Clone(p)
			}
			out[i] = analysis.Each
		}
	}
	return out
}

// covered: some path of paths is p or lies above it.
func covered(paths [][]*ast.Term, p []*ast.Term) bool {
	for _, q := range paths {
		if isPrefix(q, p) {
			return true
		}
	}
	return false
}

// isPrefix: q is p or lies above it, step for step (a Shape or an Each
// step matches only itself: q.(shape) says nothing of q[_].x).
func isPrefix(q, p []*ast.Term) bool {
	if len(q) > len(p) {
		return false
	}
	for i := range q {
		if !q[i].Equal(p[i]) {
			return false
		}
	}
	return len(q) == 0 || !analysis.IsShape(q[len(q)-1]) || len(q) == len(p)
}
