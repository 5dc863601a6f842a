package cel

import (
	"slices"
	"sort"

	celgo "github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/gatekeeper"
)

// The review paths that the CEL variables stand for (the engine's review
// is input.review: the AdmissionRequest plus namespaceObject).
var requestFields = map[string]string{
	"kind": "kind", "requestKind": "kind",
	"resource": "resource", "requestResource": "resource",
	"name": "name", "namespace": "namespace",
	"operation": "operation", "userInfo": "userInfo",
}

// analyze says what the code reads of the review: the paths of the review
// (input.review...) that the values of its validations, message
// expressions, match conditions and variables can depend on. A path is
// followed through field selections and constant keys; anything else
// (a list's elements, a key computed at run time, a whole object handed to
// a function) reads the value where the path stops, so the answer is
// always sound and, for the usual `object.spec.containers.all(c, ...)`,
// exact enough: a template that does not reach object.spec.nodeName is
// judged once per pod class. The Constraint (params) is a constant.
func analyze(env *celgo.Env, src *gatekeeper.CELSource) *analysis.Result {
	r := &reader{env: env, vars: map[string]string{}, varReads: map[string][][]string{}, busy: map[string]bool{}}
	for _, v := range src.Variables {
		r.vars[v.Name] = v.Expression
	}
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
	return result(r.reads, r.printed)
}

type reader struct {
	env *celgo.Env
	// vars are the template's own variables' expressions, by name.
	vars map[string]string
	// varReads are their reads, once computed; busy guards a cycle.
	varReads map[string][][]string
	busy     map[string]bool
	// reads are review paths (below input.review).
	reads [][]string
	// printed are paths of the object that message expressions only
	// concatenate into their message (print).
	printed [][]string
}

// expression records the reads of one expression. One that does not parse
// reads nothing: it denies (or admits, under Ignore) every review alike.
func (r *reader) expression(src string) {
	parsed, iss := r.env.Parse(src)
	if iss != nil && iss.Err() != nil {
		return
	}
	r.walk(parsed.NativeRep().Expr(), nil)
}

// message records the reads of a message expression, and apart from them
// the object's paths it only prints.
func (r *reader) message(src string) {
	parsed, iss := r.env.Parse(src)
	if iss != nil && iss.Err() != nil {
		return
	}
	r.print(parsed.NativeRep().Expr())
}

// print walks e, whose value becomes (part of) a message: a path of the
// object that only reaches the message through string concatenation,
// string() and the branches of a conditional is printed, not read.
func (r *reader) print(e celast.Expr) {
	if e.Kind() == celast.SelectKind && e.AsSelect().IsTestOnly() {
		r.walk(e, nil)
		return
	}
	if root, fields, rest, ok := chain(e, nil); ok && len(rest) == 0 && len(fields) > 0 && fields[len(fields)-1] != stopMark {
		if p, ok := objectPath(root, fields); ok {
			r.printed = append(r.printed, p)
			for i := 1; i < len(p); i++ {
				r.reads = append(r.reads, append(slices.Clone(p[:i]), shapeMark))
			}
			return
		}
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
			r.walk(args[0], nil)
			r.print(args[1])
			r.print(args[2])
			return
		case c.FunctionName() == "string" && !c.IsMemberFunction() && len(args) == 1:
			r.print(args[0])
			return
		}
	}
	r.walk(e, nil)
}

// objectPath is the object's path (below the review) a chain stands for,
// when it names one: object.x or variables.anyObject.x.
func objectPath(root string, fields []string) ([]string, bool) {
	switch {
	case root == "object":
		return append([]string{"object"}, fields...), true
	case root == "variables" && len(fields) > 1 && fields[0] == "anyObject":
		return append([]string{"object"}, fields[1:]...), true
	}
	return nil, false
}

// walk records the reads of e; bound are the comprehension variables in
// scope (they shadow the roots).
func (r *reader) walk(e celast.Expr, bound []string) {
	if root, fields, rest, ok := chain(e, bound); ok {
		r.read(root, fields)
		for _, x := range rest {
			r.walk(x, bound)
		}
		return
	}
	switch e.Kind() {
	case celast.SelectKind:
		r.walk(e.AsSelect().Operand(), bound)
	case celast.CallKind:
		c := e.AsCall()
		if c.IsMemberFunction() {
			r.walk(c.Target(), bound)
		}
		for _, a := range c.Args() {
			r.walk(a, bound)
		}
	case celast.ListKind:
		for _, x := range e.AsList().Elements() {
			r.walk(x, bound)
		}
	case celast.MapKind:
		for _, en := range e.AsMap().Entries() {
			me := en.AsMapEntry()
			r.walk(me.Key(), bound)
			r.walk(me.Value(), bound)
		}
	case celast.StructKind:
		for _, f := range e.AsStruct().Fields() {
			r.walk(f.AsStructField().Value(), bound)
		}
	case celast.ComprehensionKind:
		c := e.AsComprehension()
		r.walk(c.IterRange(), bound)
		r.walk(c.AccuInit(), bound)
		inner := append(slices.Clone(bound), c.IterVar(), c.AccuVar())
		if c.HasIterVar2() {
			inner = append(inner, c.IterVar2())
		}
		r.walk(c.LoopCondition(), inner)
		r.walk(c.LoopStep(), inner)
		r.walk(c.Result(), inner)
	}
}

// chain reads e as a root variable followed by field selections and
// constant keys: root, the fields, and the sub-expressions left to walk
// (keys computed at run time). It stops at the first step that is not a
// constant key: the value there is read whole.
func chain(e celast.Expr, bound []string) (root string, fields []string, rest []celast.Expr, ok bool) {
	switch e.Kind() {
	case celast.IdentKind:
		name := e.AsIdent()
		if slices.Contains(bound, name) {
			return "", nil, nil, false
		}
		return name, nil, nil, true
	case celast.SelectKind:
		s := e.AsSelect()
		root, fields, rest, ok = chain(s.Operand(), bound)
		fields = appendField(fields, s.FieldName())
		if s.IsTestOnly() && fields[len(fields)-1] != stopMark {
			// has(x.f) reads whether x.f is there, not its value.
			fields = append(fields, shapeMark)
		}
		return root, fields, rest, ok
	case celast.CallKind:
		c := e.AsCall()
		fn := c.FunctionName()
		if (fn != operators.Index && fn != operators.OptIndex && fn != operators.OptSelect) || len(c.Args()) != 2 {
			return "", nil, nil, false
		}
		root, fields, rest, ok = chain(c.Args()[0], bound)
		key := c.Args()[1]
		if key.Kind() == celast.LiteralKind {
			if s, isString := key.AsLiteral().(types.String); isString {
				return root, appendField(fields, string(s)), rest, ok
			}
		}
		return root, stop(fields), append(rest, key), ok
	}
	return "", nil, nil, false
}

// A path that met a step that is not a constant key ends there: stopMark
// closes it, and no field is appended after it. shapeMark ends the path
// of a has() test (analysis.Shape).
const (
	stopMark  = "\x00"
	shapeMark = "\x01"
)

func appendField(fields []string, f string) []string {
	if len(fields) > 0 && fields[len(fields)-1] == stopMark {
		return fields
	}
	return append(fields, f)
}

func stop(fields []string) []string {
	if len(fields) > 0 && fields[len(fields)-1] == stopMark {
		return fields
	}
	return append(fields, stopMark)
}

// read records what root.fields stands for in the review.
func (r *reader) read(root string, fields []string) {
	if n := len(fields); n > 0 && fields[n-1] == stopMark {
		fields = fields[:n-1]
	}
	switch root {
	case "object", "oldObject", "namespaceObject":
		r.add(append([]string{root}, fields...))
	case "request":
		if len(fields) == 0 {
			for _, f := range requestFields {
				r.add([]string{f})
			}
			return
		}
		if f, ok := requestFields[fields[0]]; ok {
			r.add(append([]string{f}, fields[1:]...))
		}
		// The request's other fields (subResource, dryRun, options, uid)
		// are the same for every pod review.
	case "variables":
		r.variable(fields)
	}
	// params (the Constraint) and authorizer are constants; any other name
	// does not compile.
}

// add records a review path, and the shape of every value on the way to
// it: a select through a missing or mistyped value fails with an error
// that names where the path broke, and errors are verdicts (messages).
func (r *reader) add(path []string) {
	r.reads = append(r.reads, path)
	end := len(path)
	if end > 0 && path[end-1] == shapeMark {
		end--
	}
	for i := 1; i < end; i++ {
		r.reads = append(r.reads, append(slices.Clone(path[:i]), shapeMark))
	}
}

// variable records the reads of variables.<name>.<fields>.
func (r *reader) variable(fields []string) {
	if len(fields) == 0 {
		r.add([]string{"object"})
		r.add([]string{"oldObject"})
		r.add([]string{"operation"})
		for name := range r.vars {
			r.reads = append(r.reads, r.readsOf(name)...)
		}
		return
	}
	switch name := fields[0]; name {
	case "anyObject":
		r.add(append([]string{"object"}, fields[1:]...))
		r.add(append([]string{"oldObject"}, fields[1:]...))
		r.add([]string{"operation"})
	case "params":
	default:
		r.reads = append(r.reads, r.readsOf(name)...)
	}
}

// readsOf are the reads of a template variable's expression, whatever
// part of its value is used.
func (r *reader) readsOf(name string) [][]string {
	if reads, ok := r.varReads[name]; ok {
		return reads
	}
	src, ok := r.vars[name]
	if !ok || r.busy[name] {
		return nil
	}
	r.busy[name] = true
	sub := &reader{env: r.env, vars: r.vars, varReads: r.varReads, busy: r.busy}
	sub.expression(src)
	r.busy[name] = false
	r.varReads[name] = sub.reads
	return sub.reads
}

// result is the analysis of reads: the minimal set of review paths, and
// whether one of them holds spec.nodeName. A printed path that no read
// reaches (above, at or below it) is a message path: the engine leaves it
// out of the memo key and evaluates with a placeholder in its place.
// Printed values are quoted (analysis.MessagePath.Quote): only values
// with no control character, quote or backslash and no space at either end
// are substituted, so that none can make a message multi-line or change
// what trimming it removes. One gap remains: a message within a few hundred
// bytes of the 5 KiB bound is measured with the placeholder's length, not
// the value's, so a value that would carry it across the bound (and turn it
// into the validation's message or the fallback text) is not seen to.
func result(reads, printed [][]string) *analysis.Result {
	paths := minimal(reads)
	a := &analysis.Result{}
	for _, p := range minimal(printed) {
		if related(paths, p) || analysis.PrefixRelated(p, analysis.NodeNamePath) {
			paths = append(paths, p)
			continue
		}
		a.Messages = append(a.Messages, analysis.MessagePath{Root: analysis.Input, Path: p, Quote: true})
	}
	a.InputPaths = minimal2(paths)
	for _, p := range a.InputPaths {
		if analysis.PrefixRelated(p, analysis.NodeNamePath) {
			a.NodeNameObserved = true
			a.Why = append(a.Why, "input"+analysis.PathString(p)+" holds the candidate's name and is read by the CEL code: evaluated per (pod, node)")
		}
	}
	return a
}

// minimal are the review paths of reads (below input.review), none below
// another, sorted.
func minimal(reads [][]string) [][]*ast.Term {
	paths := make([][]*ast.Term, 0, len(reads))
	for _, rd := range reads {
		p := make([]*ast.Term, 0, len(rd)+1)
		p = append(p, ast.StringTerm("review"))
		for _, f := range rd {
			if f == shapeMark {
				p = append(p, analysis.Shape)
			} else {
				p = append(p, ast.StringTerm(f))
			}
		}
		paths = append(paths, p)
	}
	return minimal2(paths)
}

// minimal2 is paths without those below another, sorted.
func minimal2(paths [][]*ast.Term) [][]*ast.Term {
	sort.SliceStable(paths, func(i, j int) bool { return len(paths[i]) < len(paths[j]) })
	var out [][]*ast.Term
	for _, p := range paths {
		if !covered(out, p) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return analysis.PathString(out[i]) < analysis.PathString(out[j]) })
	return out
}

// related: some path of paths lies above, at or below p.
func related(paths [][]*ast.Term, p []*ast.Term) bool {
	for _, q := range paths {
		if analysis.PrefixRelated(q, p) {
			return true
		}
	}
	return false
}

// covered: some path of paths is p or lies above it.
func covered(paths [][]*ast.Term, p []*ast.Term) bool {
	for _, q := range paths {
		if len(q) <= len(p) && analysis.PrefixRelated(q, p) {
			return true
		}
	}
	return false
}
