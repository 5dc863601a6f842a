package analysis

import (
	"github.com/open-policy-agent/opa/v1/ast"
)

// Guard is a condition a violation rule tests before anything else: the
// input value at Path (below input; review...) equals Value, a scalar.
// Templates that serve one kind often begin so
// (`input.review.kind.kind == "Service"`), and constraints that match
// every kind then send them every pod.
type Guard struct {
	Path  []*ast.Term
	Value ast.Value
}

// Holds reports whether the guard is true for the value found at its
// path (nil: the path is undefined, and so is the guard).
func (g Guard) Holds(v ast.Value) bool {
	return v != nil && v.Compare(g.Value) == 0
}

// String renders the guard as Rego: input.review.kind.kind == "Service".
func (g Guard) String() string {
	return "input" + PathString(g.Path) + " == " + g.Value.String()
}

// Guards gives, for each rule of the template's violation set (rules:
// every rule of the template's modules; root: its private namespace), the
// guards its body begins with. It is nil when some violation rule begins
// with none, or is not a plain partial set rule: then no review can be
// judged without evaluation.
//
// The contract: when a review fails some guard of every rule, the
// violation set is empty. Only the leading run of a body counts, so that
// nothing the body does later (a conflict error, a call) could have
// happened before the guard failed; a guard is an equality of a ground
// reference below input.review with a scalar, not negated, with no
// `with`, and never on the candidate's name (input.review.object.spec.nodeName
// differs per node).
func Guards(rules []*ast.Rule, root ast.Ref) [][]Guard {
	violation := root.Append(ast.StringTerm("template")).Append(ast.StringTerm("violation"))
	var out [][]Guard
	for _, r := range rules {
		if !r.Path().Equal(violation) {
			continue
		}
		if r.Default || r.Else != nil || r.Head.Key == nil || r.Head.Value != nil || len(r.Head.Args) > 0 {
			return nil
		}
		var gs []Guard
		for _, e := range r.Body {
			g, ok := guardOf(e)
			if !ok {
				break
			}
			gs = append(gs, g)
		}
		if len(gs) == 0 {
			return nil
		}
		out = append(out, gs)
	}
	return out
}

// guardOf reads `input.<ground path> == <scalar>` (or `=`, either way
// round) from e.
func guardOf(e *ast.Expr) (Guard, bool) {
	if e.Negated || len(e.With) > 0 || !e.IsCall() {
		return Guard{}, false
	}
	op := e.Operator()
	if !op.Equal(ast.Equal.Ref()) && !op.Equal(ast.Equality.Ref()) {
		return Guard{}, false
	}
	args := e.Operands()
	if len(args) != 2 {
		return Guard{}, false
	}
	for k := range 2 {
		ref, ok := args[k].Value.(ast.Ref)
		other := args[1-k].Value
		if !ok || !ref[0].Equal(ast.InputRootDocument) || len(ref) < 2 || !ref.IsGround() || !ast.IsScalar(other) {
			continue
		}
		path := ref[1:].Copy()
		// A guard is tested on the review alone: input.parameters (the
		// Constraint's) is not there, and differs per constraint.
		if !path[0].Equal(ast.StringTerm("review")) || PrefixRelated(path, NodeNamePath) {
			return Guard{}, false
		}
		return Guard{Path: path, Value: other}, true
	}
	return Guard{}, false
}
