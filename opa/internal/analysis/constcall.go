package analysis

import (
	"fmt"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Builtins of constants. A key is often built from parameters rather than
// taken as it is (`concat("/", [input.parameters.prefix, "zone"])`,
// `lower(input.parameters.label)`): the analysis computes the few string
// builtins below, for each value their arguments may take, as Rego does;
// any other builtin of constants gives an unknown constant (its output is
// then read as it is where it is a key).

// stringBuiltins compute a builtin on string arguments (ok false when
// the arguments are not what it takes: the analysis then leaves it).
var stringBuiltins = map[string]func(args []ast.Value) (ast.Value, bool){
	ast.Lower.Name:      unary(strings.ToLower),
	ast.Upper.Name:      unary(strings.ToUpper),
	ast.TrimSpace.Name:  unary(strings.TrimSpace),
	ast.TrimPrefix.Name: binary(strings.TrimPrefix),
	ast.TrimSuffix.Name: binary(strings.TrimSuffix),
	ast.Concat.Name:     constConcat,
	ast.Sprintf.Name:    constSprintf,
}

func unary(f func(string) string) func([]ast.Value) (ast.Value, bool) {
	return func(args []ast.Value) (ast.Value, bool) {
		s, ok := args[0].(ast.String)
		if !ok {
			return nil, false
		}
		return ast.String(f(string(s))), true
	}
}

func binary(f func(string, string) string) func([]ast.Value) (ast.Value, bool) {
	return func(args []ast.Value) (ast.Value, bool) {
		a, ok1 := args[0].(ast.String)
		b, ok2 := args[1].(ast.String)
		if !ok1 || !ok2 {
			return nil, false
		}
		return ast.String(f(string(a), string(b))), true
	}
}

// stringsOf are the elements of an array of strings.
func stringsOf(v ast.Value) ([]any, bool) {
	arr, ok := v.(*ast.Array)
	if !ok {
		return nil, false
	}
	out := make([]any, 0, arr.Len())
	for i := 0; i < arr.Len(); i++ {
		s, isStr := arr.Elem(i).Value.(ast.String)
		if !isStr {
			return nil, false
		}
		out = append(out, string(s))
	}
	return out, true
}

// constConcat is concat(separator, array of strings).
func constConcat(args []ast.Value) (ast.Value, bool) {
	sep, ok := args[0].(ast.String)
	parts, ok2 := stringsOf(args[1])
	if !ok || !ok2 {
		return nil, false
	}
	ss := make([]string, len(parts))
	for i, p := range parts {
		ss[i] = p.(string)
	}
	return ast.String(strings.Join(ss, string(sep))), true
}

// constSprintf is sprintf(format, array of strings) with as many plain
// verbs (%v, %s) as strings: Rego hands strings to Go's fmt as they are.
func constSprintf(args []ast.Value) (ast.Value, bool) {
	format, ok := args[0].(ast.String)
	parts, ok2 := stringsOf(args[1])
	if !ok || !ok2 {
		return nil, false
	}
	verbs, err := parseVerbs(string(format))
	if err != nil || len(verbs) != len(parts) {
		return nil, false
	}
	for _, v := range verbs {
		if !v.plain {
			return nil, false
		}
	}
	return ast.String(fmt.Sprintf(string(format), parts...)), true
}

// constCall computes a builtin call whose output is a fresh variable and
// whose arguments are all constants (for each combination of the values
// they may take): the output is then one of the results, or, for a
// builtin stringBuiltins does not hold (or arguments it does not take),
// an unknown constant. It reports whether it bound the output.
func (z *analyzer) constCall(b *ast.Builtin, args []*ast.Term, env map[ast.Var]origin, seen map[ast.Var]bool) bool {
	n := len(b.Decl.FuncArgs().Args)
	if len(args) != n+1 || b.Nondeterministic || b.Name == ast.ObjectGet.Name {
		return false // object.get of constants: objectGet knows its value
	}
	out, ok := args[n].Value.(ast.Var)
	if !ok || seen[out] || out.IsWildcard() {
		return false
	}
	sets := make([][]ast.Value, n)
	known := true
	for i, a := range args[:n] {
		vals, isConst, ok := z.argValues(a, env)
		if !isConst {
			return false
		}
		known = known && ok
		sets[i] = vals
	}
	f := stringBuiltins[b.Name]
	if !known || f == nil {
		env[out] = unknownConst()
		return true
	}
	var results []ast.Value
	for _, tuple := range product(sets) {
		r, ok := f(tuple)
		if !ok {
			env[out] = unknownConst()
			return true
		}
		results = append(results, r)
	}
	env[out] = constOf(results)
	return true
}

// argValues are the values a builtin's argument may take: a literal, a
// variable bound to a constant, an array of those. isConst is false for
// anything that may depend on the review; known false for a constant
// whose values are not known.
func (z *analyzer) argValues(t *ast.Term, env map[ast.Var]origin) (vals []ast.Value, isConst, known bool) {
	if t.IsGround() {
		return []ast.Value{t.Value}, true, true
	}
	switch x := t.Value.(type) {
	case ast.Var:
		o, ok := env[x]
		if !ok || o.root != rootConst {
			return nil, false, false
		}
		return o.values(), true, o.values() != nil
	case *ast.Array:
		sets := make([][]ast.Value, x.Len())
		known := true
		for i := range sets {
			vs, isConst, ok := z.argValues(x.Elem(i), env)
			if !isConst {
				return nil, false, false
			}
			known = known && ok
			sets[i] = vs
		}
		if !known {
			return nil, true, false
		}
		for _, tuple := range product(sets) {
			terms := make([]*ast.Term, len(tuple))
			for i, v := range tuple {
				terms[i] = ast.NewTerm(v)
			}
			vals = append(vals, ast.NewArray(terms...))
		}
		return vals, true, vals != nil
	}
	return nil, false, false
}

// product is every combination of one value from each set, nil when
// there would be more than maxAlts.
func product(sets [][]ast.Value) [][]ast.Value {
	out := [][]ast.Value{{}}
	for _, s := range sets {
		if len(out)*len(s) > maxAlts {
			return nil
		}
		next := make([][]ast.Value, 0, len(out)*len(s))
		for _, prefix := range out {
			for _, v := range s {
				next = append(next, append(append([]ast.Value(nil), prefix...), v))
			}
		}
		out = next
	}
	return out
}
