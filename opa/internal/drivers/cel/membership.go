package cel

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	celgo "github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/parser"
	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
)

// Membership in a list of values a test kept. The library's pod-security
// templates exempt containers by image:
//
//	exemptImages: (containers + initContainers + ephemeralContainers).filter(container,
//	    container.image in variables.exemptImageExplicit ||
//	    variables.exemptImagePrefixes.exists(e, string(container.image).startsWith(e))
//	  ).map(container, container.image)
//	... allContainers.map(container, !(container.image in variables.exemptImages) && ...)
//
// Read as they are, both read every image whole, so a pod with an image no
// pod had (a new Job's) is a new class. But for an element e of the
// filter's range whose e.image is a string s, `e.image in exemptImages`
// is the test on s: the list holds x.image for the x the test kept, a
// string equals only itself in CEL, and e is one of the x. So such a use
// reads e.image through a helper (analysis.Helper): the test, evaluated
// alone on the value (helper.go), which keys the verdict on its answer.
// A value that is not a string is keyed whole (the helper refuses it: `in`
// equates 1 and 1.0, the test may not), as is one the test fails on.
//
// The list's own evaluation reads, besides each kept element's value
// (through the same helper), its range and the shapes on the way: a
// variable used elsewhere is read as it is, which keys the values whole.
//
// A membership is recognised only where this is certain:
//   - the variable is `R.filter(c, test).map(c, c.f)` or `R.map(c, test,
//     c.f)`, f one or more fields;
//   - the test reads c only as c.f, and nothing of the review: its other
//     names are its own comprehensions' and template variables that read
//     only variables.params (paramsOnly), never params (the Constraint);
//   - the use is `e.f in variables.V`, e a comprehension's variable over a
//     range whose parts (the operands of its concatenations, variables
//     read through to their expressions) are all parts of R, and read
//     nothing bound by a comprehension: so e is an element of R when the
//     use is evaluated.

// membership is a variable recognised as the values a test kept.
type membership struct {
	name string
	// iterVar is the filter's variable and chain the fields of it that the
	// test and the map read.
	iterVar string
	chain   []string
	rng     celast.Expr
	parts   []string
	// test is the test's source text; uses the params-only variables it
	// reads, each with its expression; params the paths below
	// variables.params they read (one empty path: any).
	test   string
	uses   map[string]string
	params [][]string
}

// helperMark begins a path's last field that is a membership's helper:
// the variable's name follows.
const helperMark = "\x06"

// findMemberships are the template's variables that are memberships.
func (r *reader) findMemberships() map[string]*membership {
	out := map[string]*membership{}
	// Macro calls are kept so that a test's text can be written back.
	env, err := r.env.Extend(celgo.EnableMacroCallTracking())
	if err != nil {
		return out
	}
	for name, src := range r.vars {
		parsed, iss := env.Parse(src)
		if iss != nil && iss.Err() != nil {
			continue
		}
		if m, ok := r.membershipOf(name, parsed.NativeRep().Expr(), parsed.NativeRep().SourceInfo()); ok {
			out[name] = m
		}
	}
	return out
}

// membershipOf reads e, variable name's expression, as a membership.
func (r *reader) membershipOf(name string, e celast.Expr, info *celast.SourceInfo) (*membership, bool) {
	if e.Kind() != celast.ComprehensionKind {
		return nil, false
	}
	mapc := e.AsComprehension()
	pred, elem, ok := macroStep(mapc)
	if !ok {
		return nil, false
	}
	rng, iterVar := mapc.IterRange(), mapc.IterVar()
	chain, ok := chainOf(elem, iterVar)
	if !ok {
		return nil, false
	}
	if pred == nil {
		// R.filter(c, test).map(c, c.f): the map's range is the filter.
		if rng.Kind() != celast.ComprehensionKind {
			return nil, false
		}
		filter := rng.AsComprehension()
		var kept celast.Expr
		if pred, kept, ok = macroStep(filter); !ok || pred == nil || kept.Kind() != celast.IdentKind || kept.AsIdent() != filter.IterVar() {
			return nil, false
		}
		rng, iterVar = filter.IterRange(), filter.IterVar()
	}
	if !onlyThrough(pred, iterVar, chain) {
		return nil, false
	}
	m := &membership{name: name, iterVar: iterVar, chain: chain, rng: rng, uses: map[string]string{}}
	if m.parts, ok = r.rangeParts(rng, 0); !ok {
		return nil, false
	}
	if !r.paramsOnly(pred, map[string]bool{iterVar: true}, m, 0) {
		return nil, false
	}
	text, err := parser.Unparse(pred, info)
	if err != nil {
		return nil, false
	}
	m.test = text
	return m, true
}

// chainOf reads e as v.f1.f2... (selections, at least one): the fields.
func chainOf(e celast.Expr, v string) ([]string, bool) {
	root, fields, ok := rootIdent(e)
	return fields, ok && root == v
}

// onlyThrough reports whether e uses the variable v only as v.<chain>,
// and no comprehension in it binds v again.
func onlyThrough(e celast.Expr, v string, chain []string) bool {
	if fields, ok := chainOf(e, v); ok {
		return slices.Equal(fields, chain)
	}
	switch e.Kind() {
	case celast.IdentKind:
		return e.AsIdent() != v
	case celast.LiteralKind:
		return true
	case celast.SelectKind:
		return onlyThrough(e.AsSelect().Operand(), v, chain)
	case celast.CallKind:
		c := e.AsCall()
		if c.IsMemberFunction() && !onlyThrough(c.Target(), v, chain) {
			return false
		}
		for _, a := range c.Args() {
			if !onlyThrough(a, v, chain) {
				return false
			}
		}
		return true
	case celast.ListKind:
		for _, x := range e.AsList().Elements() {
			if !onlyThrough(x, v, chain) {
				return false
			}
		}
		return true
	case celast.ComprehensionKind:
		c := e.AsComprehension()
		if c.IterVar() == v || c.AccuVar() == v || (c.HasIterVar2() && c.IterVar2() == v) {
			return false
		}
		for _, x := range []celast.Expr{c.IterRange(), c.AccuInit(), c.LoopCondition(), c.LoopStep(), c.Result()} {
			if !onlyThrough(x, v, chain) {
				return false
			}
		}
		return true
	}
	return false // maps and messages: not in the library's tests
}

// paramsOnly reports whether e reads nothing but the names bound and
// variables.params, through template variables that do the same; it
// records in m the variables it reads and the paths below
// variables.params.
func (r *reader) paramsOnly(e celast.Expr, bound map[string]bool, m *membership, depth int) bool {
	if depth > 16 {
		return false
	}
	switch e.Kind() {
	case celast.IdentKind:
		return bound[e.AsIdent()]
	case celast.LiteralKind:
		return true
	case celast.SelectKind:
		return r.paramsSelect(e, bound, m, depth)
	case celast.CallKind:
		c := e.AsCall()
		if key, operand, ok := constantKey(e); ok && isVariablesParams(operand, bound) {
			m.params = append(m.params, []string{key})
			return true
		}
		if c.IsMemberFunction() && !r.paramsOnly(c.Target(), bound, m, depth) {
			return false
		}
		for _, a := range c.Args() {
			if !r.paramsOnly(a, bound, m, depth) {
				return false
			}
		}
		return true
	case celast.ListKind:
		for _, x := range e.AsList().Elements() {
			if !r.paramsOnly(x, bound, m, depth) {
				return false
			}
		}
		return true
	case celast.ComprehensionKind:
		c := e.AsComprehension()
		if !r.paramsOnly(c.IterRange(), bound, m, depth) || !r.paramsOnly(c.AccuInit(), bound, m, depth) {
			return false
		}
		inner := map[string]bool{c.IterVar(): true, c.AccuVar(): true}
		if c.HasIterVar2() {
			inner[c.IterVar2()] = true
		}
		for k := range bound {
			inner[k] = true
		}
		return r.paramsOnly(c.LoopCondition(), inner, m, depth) && r.paramsOnly(c.LoopStep(), inner, m, depth) && r.paramsOnly(c.Result(), inner, m, depth)
	}
	return false
}

// paramsSelect is paramsOnly of a selection: below variables.params it
// records the field; variables.<name> is read through the template
// variable's expression.
func (r *reader) paramsSelect(e celast.Expr, bound map[string]bool, m *membership, depth int) bool {
	s := e.AsSelect()
	if isVariablesParams(s.Operand(), bound) {
		m.params = append(m.params, []string{s.FieldName()})
		return true
	}
	if isVariables(s.Operand(), bound) {
		name := s.FieldName()
		if name == "params" {
			m.params = append(m.params, []string{}) // the whole parameters
			return true
		}
		src, known := r.vars[name]
		if !known || s.IsTestOnly() {
			return false // anyObject, or not a template variable
		}
		if _, seen := m.uses[name]; seen {
			return true
		}
		m.uses[name] = src
		parsed, ok := r.parse(src)
		return ok && r.paramsOnly(parsed, map[string]bool{}, m, depth+1)
	}
	return r.paramsOnly(s.Operand(), bound, m, depth)
}

// isVariables: e is the name variables, not bound by a comprehension.
func isVariables(e celast.Expr, bound map[string]bool) bool {
	return e.Kind() == celast.IdentKind && e.AsIdent() == "variables" && !bound["variables"]
}

// isVariablesParams: e is variables.params.
func isVariablesParams(e celast.Expr, bound map[string]bool) bool {
	return e.Kind() == celast.SelectKind && !e.AsSelect().IsTestOnly() && e.AsSelect().FieldName() == "params" && isVariables(e.AsSelect().Operand(), bound)
}

// rangeParts are the parts of a list expression: the operands of its
// concatenations, template variables read through to their expressions,
// each as exprKey gives it.
func (r *reader) rangeParts(e celast.Expr, depth int) ([]string, bool) {
	if depth > 16 {
		return nil, false
	}
	if src, ok := r.templateVariable(e, nil); ok {
		parsed, ok := r.parse(src)
		if !ok {
			return nil, false
		}
		return r.rangeParts(parsed, depth+1)
	}
	if e.Kind() == celast.CallKind {
		if c := e.AsCall(); c.FunctionName() == operators.Add && len(c.Args()) == 2 {
			a, okA := r.rangeParts(c.Args()[0], depth+1)
			b, okB := r.rangeParts(c.Args()[1], depth+1)
			return append(a, b...), okA && okB
		}
	}
	var b strings.Builder
	if !r.exprKey(&b, e, map[string]bool{}, depth) {
		return nil, false
	}
	return []string{b.String()}, true
}

// templateVariable reads e as variables.<name> of a template variable
// (the name variables not shadowed in sc): its expression.
func (r *reader) templateVariable(e celast.Expr, sc scope) (string, bool) {
	if e.Kind() != celast.SelectKind || e.AsSelect().IsTestOnly() {
		return "", false
	}
	s := e.AsSelect()
	if s.Operand().Kind() != celast.IdentKind || s.Operand().AsIdent() != "variables" || shadowed(sc, "variables") {
		return "", false
	}
	src, ok := r.vars[s.FieldName()]
	return src, ok
}

// exprKey writes a text of e that two expressions share only if they
// have the same value wherever both are evaluated in one review: its
// structure, template variables read through. False when e reads a name
// that a comprehension around it binds (or authorizer: a call out).
func (r *reader) exprKey(b *strings.Builder, e celast.Expr, bound map[string]bool, depth int) bool {
	if depth > 16 {
		return false
	}
	if src, ok := r.templateVariable(e, nil); ok && !bound["variables"] {
		parsed, ok := r.parse(src)
		b.WriteString("(")
		defer b.WriteString(")")
		return ok && r.exprKey(b, parsed, map[string]bool{}, depth+1)
	}
	switch e.Kind() {
	case celast.IdentKind:
		name := e.AsIdent()
		b.WriteString(name)
		return isRoot(name) || bound[name]
	case celast.LiteralKind:
		fmt.Fprintf(b, "%T(%s)", e.AsLiteral(), strconv.Quote(fmt.Sprint(e.AsLiteral().Value())))
		return true
	case celast.SelectKind:
		s := e.AsSelect()
		if s.IsTestOnly() {
			b.WriteString("has:")
		}
		ok := r.exprKey(b, s.Operand(), bound, depth)
		b.WriteString("." + strconv.Quote(s.FieldName()))
		return ok
	case celast.CallKind:
		return r.callKey(b, e.AsCall(), bound, depth)
	case celast.ListKind:
		l := e.AsList()
		fmt.Fprintf(b, "[%v", l.OptionalIndices())
		defer b.WriteString("]")
		return r.keys(b, l.Elements(), bound, depth)
	case celast.ComprehensionKind:
		c := e.AsComprehension()
		inner := map[string]bool{c.IterVar(): true, c.AccuVar(): true}
		if c.HasIterVar2() {
			inner[c.IterVar2()] = true
		}
		for k := range bound {
			inner[k] = true
		}
		fmt.Fprintf(b, "comprehension(%q,%q,%q;", c.IterVar(), c.IterVar2(), c.AccuVar())
		defer b.WriteString(")")
		return r.keys(b, []celast.Expr{c.IterRange(), c.AccuInit()}, bound, depth) &&
			r.keys(b, []celast.Expr{c.LoopCondition(), c.LoopStep(), c.Result()}, inner, depth)
	}
	return false // maps and messages
}

// callKey is exprKey of a call.
func (r *reader) callKey(b *strings.Builder, c celast.CallExpr, bound map[string]bool, depth int) bool {
	fmt.Fprintf(b, "%s(", strconv.Quote(c.FunctionName()))
	defer b.WriteString(")")
	if c.IsMemberFunction() {
		b.WriteString("target:")
		if !r.exprKey(b, c.Target(), bound, depth) {
			return false
		}
		b.WriteString(";")
	}
	return r.keys(b, c.Args(), bound, depth)
}

// keys writes exprKey of each of es, separated.
func (r *reader) keys(b *strings.Builder, es []celast.Expr, bound map[string]bool, depth int) bool {
	for i, x := range es {
		if i > 0 {
			b.WriteString(",")
		}
		if !r.exprKey(b, x, bound, depth+1) {
			return false
		}
	}
	return true
}

// memberTest records the reads of `x in list` when it is a membership's
// use (x is e.<chain> of an element e of its range): x through the
// membership's helper; ok is false for any other `in`.
func (r *reader) memberTest(x, list celast.Expr, sc scope) bool {
	if _, ok := r.templateVariable(list, sc); !ok {
		return false
	}
	m := r.memberships[list.AsSelect().FieldName()]
	if m == nil {
		return false
	}
	e, fields, ok := rootIdent(x)
	if !ok || !slices.Equal(fields, m.chain) {
		return false
	}
	parts, ranged := r.rangeOf[e]
	if _, inScope := sc[e]; !inScope || !ranged || !subset(parts, m.parts) {
		return false
	}
	r.memberRange(m)
	for _, o := range r.eval(x, sc) {
		if o.wrapped() || o.path[0] == requestRoot || o.path[0] == variablesRoot {
			r.use(value{o})
			continue
		}
		r.add(append(slices.Clone(o.path), helperMark+m.name))
	}
	return true
}

// memberRange records, once, what evaluating the membership's list reads
// besides its tests' answers: its range, and each element's value through
// the helper.
func (r *reader) memberRange(m *membership) {
	if r.rangeRead[m.name] {
		return
	}
	r.rangeRead[m.name] = true
	outer := r.when
	r.when = nil
	for _, o := range r.elements(r.eval(m.rng, nil)) {
		v := value{o}
		for _, f := range m.chain {
			v = r.selectField(v, f, false)
		}
		for _, x := range v {
			r.add(append(slices.Clone(x.path), helperMark+m.name))
		}
	}
	r.when = outer
}

// bindRange records the range parts of c's variable (none with two
// variables: the first is an index or a key) while c's body is read, and
// returns what restores the binding around it.
func (r *reader) bindRange(c celast.ComprehensionExpr, sc scope) (restore func()) {
	// Every name c binds hides an outer binding's range while its body is
	// read: the accumulator's too, and a second variable's.
	names := []string{c.IterVar(), c.AccuVar()}
	if c.HasIterVar2() {
		names = append(names, c.IterVar2())
	}
	saved := map[string][]string{}
	for _, n := range names {
		if old, had := r.rangeOf[n]; had {
			saved[n] = old
		}
		delete(r.rangeOf, n)
	}
	if !c.HasIterVar2() {
		if parts, ok := r.rangeParts(c.IterRange(), 0); ok && rangeFree(sc) {
			r.rangeOf[c.IterVar()] = parts
		}
	}
	return func() {
		for _, n := range names {
			delete(r.rangeOf, n)
		}
		for n, old := range saved {
			r.rangeOf[n] = old
		}
	}
}

// rangeFree: e has one value wherever it is evaluated in a review.
// exprKey refuses a name that a comprehension binds, unless it hides a
// root (a comprehension's variable named object): refused here.
func rangeFree(sc scope) bool {
	for name := range sc {
		if isRoot(name) {
			return false
		}
	}
	return true
}

// isRoot: name is one of the CEL admission variables.
func isRoot(name string) bool {
	switch name {
	case "object", "oldObject", "request", "namespaceObject", "params", "variables":
		return true
	}
	return false
}

// helperFunc names a membership's helper in a key path (analysis.Helper):
// variables.<name>.
func helperFunc(name string) ast.Ref {
	return ast.Ref{ast.VarTerm("variables"), ast.StringTerm(name)}
}

// helperTerm is the Helper that keys an element's value on the answer of
// membership name's test: the value itself is the argument (its whole is
// what the test reads).
func helperTerm(name string) *ast.Term {
	return analysis.HelperOn(helperFunc(name), [][]*ast.Term{{}})
}

// rootIdent reads e as v.f1.f2... (at least one field): v and the fields.
func rootIdent(e celast.Expr) (string, []string, bool) {
	var fields []string
	for e.Kind() == celast.SelectKind && !e.AsSelect().IsTestOnly() {
		fields = append(fields, e.AsSelect().FieldName())
		e = e.AsSelect().Operand()
	}
	if e.Kind() != celast.IdentKind || len(fields) == 0 {
		return "", nil, false
	}
	slices.Reverse(fields)
	return e.AsIdent(), fields, true
}

// subset: every part of a is one of b.
func subset(a, b []string) bool {
	for _, p := range a {
		if !slices.Contains(b, p) {
			return false
		}
	}
	return true
}

// helperCode is the text a membership's helper runs: the test and the
// params-only variables it reads (sorted), which two templates that ship
// the same test share.
func (m *membership) helperCode() string {
	names := make([]string, 0, len(m.uses))
	for n := range m.uses {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "cel %s %q %s\n", m.iterVar, m.chain, m.test)
	for _, n := range names {
		fmt.Fprintf(&b, "%s = %s\n", n, m.uses[n])
	}
	return b.String()
}
