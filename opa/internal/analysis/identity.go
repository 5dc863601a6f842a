package analysis

import (
	"sort"
	"strconv"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// What a Helper's answer depends on. Gatekeeper compiles each template's
// libs under the template's own namespace, so the library's is_exempt is
// one function per template that ships it, and a pod with an image no
// template has seen would cost one evaluation of each, though they run the
// same code on the same exemptImages. Besides what it reads of the value it
// is called on (HelperCall.Reads), a Helper's answer depends on the code it
// runs and on what that code reads of the constraint's parameters
// (Helper's contract: nothing else of input, no inventory, no
// nondeterministic builtin). HelperDependencies tells both, so that the
// engine keeps one answer for every constraint where they agree.

// HelperDeps is what a Helper's answer depends on besides its value.
type HelperDeps struct {
	// Code is the text of every rule the function may run: its
	// definitions and the template's rules they refer to, directly or
	// not, with the template's namespace replaced by one name and the
	// compiler's generated variables numbered in the order they appear.
	// Two templates that ship the same function have the same Code.
	Code string
	// Params are the paths below input.parameters the function reads;
	// one empty path when it may read any of them.
	Params [][]*ast.Term
	// Presence: the answer also depends on whether the Constraint has
	// spec.parameters at all (CEL's variables.params is null without).
	Presence bool
}

// HelperDependencies reads what h's answer depends on, h being a Helper of
// the template at root compiled by c.
func HelperDependencies(c *ast.Compiler, root ast.Ref, h HelperCall) HelperDeps {
	return HelperDeps{Code: helperCode(c, root, h.Func), Params: helperParams(c, root, h)}
}

// sharedRoot replaces a template's namespace in HelperDeps.Code.
var sharedRoot = ast.MustParseRef("data.__template__")

// helperCode is HelperDeps.Code of fn.
func helperCode(c *ast.Compiler, root, fn ast.Ref) string {
	seen := map[*ast.Rule]bool{}
	var texts []string
	queue := []ast.Ref{fn}
	for len(queue) > 0 {
		ref := queue[0]
		queue = queue[1:]
		for _, r := range c.GetRules(ref.GroundPrefix()) {
			if seen[r] {
				continue
			}
			seen[r] = true
			texts = append(texts, canonicalRule(r, root))
			ast.WalkRefs(r, func(x ast.Ref) bool {
				if x.HasPrefix(root) {
					queue = append(queue, x)
				}
				return false
			})
		}
	}
	sort.Strings(texts)
	return strings.Join(texts, "\n")
}

// canonicalRule is r's path and text, root replaced by sharedRoot and the
// generated variables renamed: a rule's locals are its own, so renaming
// them consistently keeps its meaning, and the numbers the compiler gives
// them depend on what else the module holds.
func canonicalRule(r *ast.Rule, root ast.Ref) string {
	renamed := map[ast.Var]ast.Var{}
	out, err := ast.Transform(ast.NewGenericTransformer(func(x any) (any, error) {
		switch v := x.(type) {
		case ast.Ref:
			if v.HasPrefix(root) {
				return sharedRoot.Concat(v[len(root):]), nil
			}
		case ast.Var:
			if !generatedVar(v) {
				return v, nil
			}
			if n, ok := renamed[v]; ok {
				return n, nil
			}
			n := ast.Var("__h" + strconv.Itoa(len(renamed)) + "__")
			renamed[v] = n
			return n, nil
		}
		return x, nil
	}), r.Copy())
	if err != nil {
		// The transformer returns no error; keep the rule's own text.
		return r.Path().String() + " " + r.String()
	}
	cr := out.(*ast.Rule)
	path := r.Path()
	if path.HasPrefix(root) {
		path = sharedRoot.Concat(path[len(root):])
	}
	return path.String() + " " + cr.String()
}

// generatedVar reports whether v is a name the compiler made (a local
// renamed, a wildcard), which no two modules number alike.
func generatedVar(v ast.Var) bool {
	return strings.HasPrefix(string(v), "__local") || strings.HasPrefix(string(v), "$")
}

// helperArgRoot heads the paths read through a Helper's argument in
// helperParams, apart from anything input holds.
var helperArgRoot = ast.StringTerm("$helper_argument")

var parametersTerm = ast.StringTerm("parameters")

// helperParams is HelperDeps.Params of h: the function analysed on its own,
// the parameters unknown (read as input), so that every read of them is
// recorded. Anything it cannot account for reads them all.
func helperParams(c *ast.Compiler, root ast.Ref, h HelperCall) [][]*ast.Term {
	all := [][]*ast.Term{{}}
	rules := c.GetRulesExact(h.Func)
	if len(rules) == 0 {
		return all
	}
	z := newAnalyzer(c, root, nil)
	args := make([]*ast.Term, len(h.Args))
	for i, a := range h.Args {
		args[i] = a
		if IsArg(a) {
			args[i] = ast.NewTerm(helperArgVar)
		}
	}
	env := map[ast.Var]origin{helperArgVar: {root: Input, path: []*ast.Term{helperArgRoot}, exact: true, viaArg: true}}
	z.helping++ // as helperTest analysed it: inner truth tests as they are
	z.userCall(rules, args, env, map[ast.Var]bool{}, 0, nil)
	if z.bails > 0 || z.opaque > 0 || z.inv || z.allNodes || z.nondet || len(z.exists) > 0 {
		return all
	}
	var params [][]*ast.Term
	for _, r := range z.reads {
		p := r.path
		switch {
		case r.root != Input || len(p) == 0:
			return all
		case p[0].Equal(helperArgRoot):
			continue
		case !p[0].Equal(parametersTerm):
			return all
		}
		params = append(params, plainPrefix(p[1:]))
	}
	return minimizePaths(params, false)
}

// plainPrefix is p up to its first term that is not a key (an Each, a
// Helper, a number): the part of a read that names one value.
func plainPrefix(p []*ast.Term) []*ast.Term {
	for i, t := range p {
		if _, ok := t.Value.(ast.String); !ok {
			return p[:i]
		}
	}
	return p
}
