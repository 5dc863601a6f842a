package cel

import (
	"slices"
	"strings"

	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
)

// What a comprehension's body reads is read only when its range has an
// element: host-filesystem's
//
//	variables.volumes.filter(volume, ... variables.allContainers.exists(c,
//	  c.volumeMounts.exists(m, m.name == volume.name ...)))
//
// compares the mounts' names (unique to each pod: the token volume's) only
// for a pod with a host-path volume, as variables.volumes holds only those
// (`spec.volumes.filter(volume, has(volume.hostPath))`). So the reads of a
// body are recorded under a condition (analysis.WhenAny): the lists the
// range's elements come from, each with the fields a filter tested, and a
// filter's result reads its elements through eachWhere (only those that
// have the fields). Both are found only where they are certain: a range
// made of object paths, `[]`, concatenations, conditionals, variables and
// filter and map macros over those; any other range leaves the body's
// reads unconditional.

// read is a review path read, and the condition it is read under (nil:
// none).
type read struct {
	path []string
	when []member
}

// member is one list of a condition: the list at path (below
// input.review) has an element that has every guard (paths below the
// element, a has() test ending in shapeMark).
type member struct {
	path   []string
	guards [][]string
}

// Guards are encoded into a filtered eachMark: guard after guard,
// separated by guardSep, a guard's fields by fieldSep. A field holding
// either (only a constant key can) is never made a guard.
const (
	guardSep = "\x05"
	fieldSep = "\x00"
)

// isEach reports whether f is eachMark, filtered or not.
func isEach(f string) bool { return strings.HasPrefix(f, eachMark) }

// eachCount is how many elements of path are eachMarks.
func eachCount(path []string) int {
	n := 0
	for _, f := range path {
		if isEach(f) {
			n++
		}
	}
	return n
}

// eachWhere is the eachMark f further filtered by guards.
func eachWhere(f string, guards [][]string) string {
	all := append(guardsOf(f), guards...)
	parts := make([]string, len(all))
	for i, g := range all {
		parts[i] = strings.Join(g, fieldSep)
	}
	return eachMark + strings.Join(parts, guardSep)
}

// guardsOf are the guards of the eachMark f (none for eachMark).
func guardsOf(f string) [][]string {
	if f == eachMark {
		return nil
	}
	var out [][]string
	for _, g := range strings.Split(f[len(eachMark):], guardSep) {
		out = append(out, strings.Split(g, fieldSep))
	}
	return out
}

// eachTerm is the eachMark f as a path term: analysis.Each, or
// analysis.EachWhere of its guards.
func eachTerm(f string) *ast.Term {
	guards := guardsOf(f)
	if guards == nil {
		return analysis.Each
	}
	paths := make([][]*ast.Term, len(guards))
	for i, g := range guards {
		paths[i] = reviewPath(g)[1:]
	}
	return analysis.EachWhere(paths)
}

// whenTerm is the condition of members as a path's first term.
func whenTerm(members []member) *ast.Term {
	ms := make([]analysis.Member, len(members))
	for i, m := range members {
		var filter [][]*ast.Term
		for _, g := range m.guards {
			filter = append(filter, reviewPath(g)[1:])
		}
		ms[i] = analysis.Member{List: reviewPath(m.path), Filter: filter}
	}
	return analysis.WhenAny(ms)
}

// unconditional are paths as reads under no condition.
func unconditional(paths [][]string) []read {
	out := make([]read, len(paths))
	for i, p := range paths {
		out[i] = read{path: p}
	}
	return out
}

// bodyCondition is the condition the body of a comprehension over rng
// runs under: the one in force, or the range's members when it has none
// or only one without guards (a filtered list says more). Conditions do
// not nest: keeping either is sound, as each holds whenever the body
// runs.
func (r *reader) bodyCondition(rng celast.Expr, sc scope) []member {
	ms, _, ok := r.members(rng, sc, 0)
	if !ok || len(ms) == 0 {
		return r.when
	}
	if r.when == nil || (!guarded(r.when) && guarded(ms)) {
		return ms
	}
	return r.when
}

// guarded reports whether some member has guards.
func guarded(ms []member) bool {
	return slices.ContainsFunc(ms, func(m member) bool { return len(m.guards) > 0 })
}

// members are the lists the elements of the list e evaluates to come
// from: e is empty unless one of them has an element with its guards.
// direct: e's elements are those lists' elements themselves (not values
// computed from them), so a filter over e guards them. ok is false when e
// may hold elements from elsewhere.
func (r *reader) members(e celast.Expr, sc scope, depth int) (ms []member, direct, ok bool) {
	if depth > 16 {
		return nil, false, false
	}
	if path, anyObject, ok := rootChain(e, sc); ok {
		if eachCount(path) > 0 || slices.Contains(path, shapeMark) {
			return nil, false, false
		}
		ms = []member{{path: path}}
		if anyObject {
			ms = append(ms, member{path: append([]string{"oldObject"}, path[1:]...)})
		}
		return ms, true, true
	}
	switch e.Kind() {
	case celast.SelectKind:
		src, known := r.templateVariable(e, sc)
		if !known {
			return nil, false, false
		}
		if v, parsed := r.parse(src); parsed {
			return r.members(v, nil, depth+1)
		}
	case celast.ListKind:
		return nil, true, len(e.AsList().Elements()) == 0
	case celast.CallKind:
		return r.callMembers(e.AsCall(), sc, depth)
	case celast.ComprehensionKind:
		c := e.AsComprehension()
		pred, elem, isMacro := macroStep(c)
		if !isMacro {
			return nil, false, false
		}
		ms, direct, ok = r.members(c.IterRange(), sc, depth+1)
		if !ok {
			return nil, false, false
		}
		if guards := fieldTests(pred, c.IterVar()); direct && guards != nil {
			ms = slices.Clone(ms)
			for i := range ms {
				ms[i].guards = append(slices.Clone(ms[i].guards), guards...)
			}
		}
		isFilter := elem.Kind() == celast.IdentKind && elem.AsIdent() == c.IterVar()
		return ms, direct && isFilter, true
	}
	return nil, false, false
}

// callMembers is members for a call: a conditional's branches, a
// concatenation's operands, dyn()'s argument.
func (r *reader) callMembers(c celast.CallExpr, sc scope, depth int) ([]member, bool, bool) {
	args := c.Args()
	var parts []celast.Expr
	switch fn := c.FunctionName(); {
	case fn == operators.Conditional && len(args) == 3:
		parts = args[1:]
	case fn == operators.Add && len(args) == 2:
		parts = args
	case fn == "dyn" && !c.IsMemberFunction() && len(args) == 1:
		parts = args
	default:
		return nil, false, false
	}
	var all []member
	direct := true
	for _, x := range parts {
		ms, d, ok := r.members(x, sc, depth+1)
		if !ok {
			return nil, false, false
		}
		all = append(all, ms...)
		direct = direct && d
	}
	return all, direct, true
}

// rootChain reads e as a chain of selections and constant keys from
// object, oldObject, namespaceObject or variables.anyObject (the object's
// path, and oldObject's too when anyObject), none of them shadowed by a
// comprehension's variable.
func rootChain(e celast.Expr, sc scope) (path []string, anyObject, ok bool) {
	var fields []string
	for {
		switch e.Kind() {
		case celast.SelectKind:
			s := e.AsSelect()
			if s.IsTestOnly() {
				return nil, false, false
			}
			fields = append(fields, s.FieldName())
			e = s.Operand()
			continue
		case celast.CallKind:
			key, operand, ok := constantKey(e)
			if !ok {
				return nil, false, false
			}
			fields = append(fields, key)
			e = operand
			continue
		case celast.IdentKind:
			name := e.AsIdent()
			if shadowed(sc, name) {
				return nil, false, false
			}
			slices.Reverse(fields)
			switch {
			case name == "object" || name == "oldObject" || name == "namespaceObject":
				return append([]string{name}, fields...), false, true
			case name == "variables" && len(fields) > 0 && fields[0] == "anyObject":
				return append([]string{"object"}, fields[1:]...), true, true
			}
		}
		return nil, false, false
	}
}

// macroStep reads c as the expansion of a filter or map macro: the
// accumulator starts as [], each step appends elem (pred nil) or appends
// elem when pred holds, and the result is the accumulator.
func macroStep(c celast.ComprehensionExpr) (pred, elem celast.Expr, ok bool) {
	if c.HasIterVar2() || c.AccuInit().Kind() != celast.ListKind || len(c.AccuInit().AsList().Elements()) != 0 ||
		c.Result().Kind() != celast.IdentKind || c.Result().AsIdent() != c.AccuVar() {
		return nil, nil, false
	}
	step := c.LoopStep()
	if step.Kind() == celast.CallKind {
		if call := step.AsCall(); call.FunctionName() == operators.Conditional && len(call.Args()) == 3 {
			if els := call.Args()[2]; els.Kind() != celast.IdentKind || els.AsIdent() != c.AccuVar() {
				return nil, nil, false
			}
			pred, step = call.Args()[0], call.Args()[1]
		}
	}
	if step.Kind() != celast.CallKind {
		return nil, nil, false
	}
	add := step.AsCall()
	if add.FunctionName() != operators.Add || len(add.Args()) != 2 {
		return nil, nil, false
	}
	accu, list := add.Args()[0], add.Args()[1]
	if accu.Kind() != celast.IdentKind || accu.AsIdent() != c.AccuVar() || list.Kind() != celast.ListKind || len(list.AsList().Elements()) != 1 {
		return nil, nil, false
	}
	return pred, list.AsList().Elements()[0], true
}

// filterGuards are the guards of a filter macro (`list.filter(x, pred)`)
// whose pred is a conjunction of field tests of x: nil for any other
// comprehension.
func filterGuards(c celast.ComprehensionExpr) [][]string {
	pred, elem, ok := macroStep(c)
	if !ok || elem.Kind() != celast.IdentKind || elem.AsIdent() != c.IterVar() {
		return nil
	}
	return fieldTests(pred, c.IterVar())
}

// fieldTests reads pred as a conjunction of field tests of the variable v
// (`has(v.a.b)`: b is there; `v.a.b`: it is true): the guards every
// element the test keeps has, where analysis.EachWhere's are "defined and
// not false" (a has() guard ends in shapeMark: the shape is defined
// exactly when the field is there). Nil when pred is anything else.
func fieldTests(pred celast.Expr, v string) [][]string {
	if pred == nil {
		return nil
	}
	if pred.Kind() == celast.CallKind {
		if c := pred.AsCall(); c.FunctionName() == operators.LogicalAnd && len(c.Args()) == 2 {
			a, b := fieldTests(c.Args()[0], v), fieldTests(c.Args()[1], v)
			if a == nil || b == nil {
				return nil
			}
			return append(a, b...)
		}
	}
	test := false
	if pred.Kind() == celast.SelectKind && pred.AsSelect().IsTestOnly() {
		test = true
	}
	var fields []string
	for e := pred; ; {
		switch e.Kind() {
		case celast.SelectKind:
			fields = append(fields, e.AsSelect().FieldName())
			e = e.AsSelect().Operand()
			continue
		case celast.CallKind:
			key, operand, ok := constantKey(e)
			if !ok {
				return nil
			}
			fields = append(fields, key)
			e = operand
			continue
		case celast.IdentKind:
			if e.AsIdent() != v || len(fields) == 0 {
				return nil
			}
		default:
			return nil
		}
		break
	}
	slices.Reverse(fields)
	for _, f := range fields {
		if strings.Contains(f, guardSep) || strings.Contains(f, fieldSep) || strings.HasPrefix(f, eachMark) || f == shapeMark {
			return nil
		}
	}
	if test {
		fields = append(fields, shapeMark)
	}
	return [][]string{fields}
}

// keptElements is a filter's result out with guards: each origin that is
// one of the range's elements (elems) as a list, through an eachMark,
// holds only the elements that have the guards.
func keptElements(out, elems value, guards [][]string) value {
	res := slices.Clone(out)
	for i, o := range res {
		n := len(o.path)
		if len(o.wrap) != 1 || !o.list() || n == 0 || !isEach(o.path[n-1]) {
			continue
		}
		fromRange := slices.ContainsFunc(elems, func(e origin) bool { return !e.wrapped() && slices.Equal(e.path, o.path) })
		if !fromRange {
			continue
		}
		p := slices.Clone(o.path)
		p[n-1] = eachWhere(p[n-1], guards)
		res[i] = origin{path: p, wrap: o.wrap}
	}
	return res
}

// shadowed reports whether a comprehension's variable named name hides
// the CEL variable of that name.
func shadowed(sc scope, name string) bool {
	_, ok := sc[name]
	return ok
}
