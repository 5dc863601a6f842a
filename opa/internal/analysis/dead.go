package analysis

import "github.com/open-policy-agent/opa/v1/ast"

// Bodies that cannot succeed. Most of the library's templates exempt
// images through a helper that iterates a constraint parameter:
//
//	is_exempt(container) {
//	    exempt_images := object.get(object.get(input, "parameters", {}), "exemptImages", [])
//	    img := container.image
//	    exemption := exempt_images[_]
//	    _matches_exemption(img, exemption)
//	}
//
// With the constraint's parameters known (Analyze is run per constraint)
// and no exemptImages given, exempt_images is the constant [] and the body
// never succeeds: the container's image it reads decides nothing, and
// keeping it in the key would make every new image a new class. A body is
// dead when it binds or tests an element of a constant empty collection
// and every expression before that one is harmless (isHarmless): then no
// evaluation of it can end in anything but "undefined", not even an error.

// iteratesEmptyConstant reports whether e looks up a key of a constant
// empty array, set or object (`x := empty[_]`, `empty[k]`): it is always
// undefined.
func (z *analyzer) iteratesEmptyConstant(e *ast.Expr, env map[ast.Var]origin) bool {
	if e.Negated || len(e.With) > 0 {
		return false
	}
	var terms []*ast.Term
	switch {
	case e.IsEquality():
		terms = e.Terms.([]*ast.Term)[1:]
	default:
		t, ok := e.Terms.(*ast.Term)
		if !ok {
			return false
		}
		terms = []*ast.Term{t}
	}
	for _, t := range terms {
		ref, ok := t.Value.(ast.Ref)
		if !ok || len(ref) < 2 {
			continue
		}
		head, ok := ref[0].Value.(ast.Var)
		if !ok {
			continue
		}
		if o, ok := env[head]; ok && o.root == rootConst && o.exact && isEmptyCollection(o.value) {
			return true
		}
		if z.emptyConstantPrefix(ref, env) {
			return true
		}
	}
	return false
}

// emptyConstantPrefix reports whether the ground part of ref before its
// first variable key is a constant that is an empty collection, whatever
// value it may be (`input.parameters.pairs[_]` with pairs []).
func (z *analyzer) emptyConstantPrefix(ref ast.Ref, env map[ast.Var]origin) bool {
	for i := 1; i < len(ref); i++ {
		if ref[i].IsGround() {
			continue
		}
		o, ok := z.constPrefix(ref[:i], env, 0)
		if !ok || o.values() == nil {
			return false
		}
		for _, v := range o.values() {
			if !isEmptyCollection(v) {
				return false
			}
		}
		return true
	}
	return false
}

func isEmptyCollection(v ast.Value) bool {
	switch x := v.(type) {
	case *ast.Array:
		return x.Len() == 0
	case ast.Set:
		return x.Len() == 0
	case ast.Object:
		return x.Len() == 0
	}
	return false
}

// isHarmless reports whether evaluating e can only succeed or be
// undefined, never raise an error: a binding or test of references into
// the input, the inventory or local variables, or object.get; no call of a function
// (a conflict between definitions is an error), no reference to the
// template's rules, no comprehension, no `with`.
func isHarmless(e *ast.Expr) bool {
	if len(e.With) > 0 {
		return false
	}
	if e.IsCall() && !e.IsEquality() && e.Operator().String() != ast.ObjectGet.Name {
		return false
	}
	ok := true
	vis := ast.NewGenericVisitor(func(n any) bool {
		switch v := n.(type) {
		case ast.Call:
			if op, isRef := v[0].Value.(ast.Ref); !isRef || op.String() != ast.ObjectGet.Name {
				ok = false
			}
		case *ast.ArrayComprehension, *ast.SetComprehension, *ast.ObjectComprehension:
			ok = false
		case ast.Ref:
			if v[0].Equal(ast.DefaultRootDocument) && !isInventoryRef(v) {
				ok = false // a rule may raise a conflict; the inventory is data
			}
		}
		return !ok
	})
	vis.Walk(e)
	return ok
}

// analysisMark is where the recorded reads stood, for reset.
type analysisMark struct {
	reads, exists, messages, why, helperRaw int
	inv, allNodes, nondet                   bool
}

func (z *analyzer) mark() analysisMark {
	return analysisMark{len(z.reads), len(z.exists), len(z.messages), len(z.why), len(z.helperRaw), z.inv, z.allNodes, z.nondet}
}

// reset forgets what was recorded since m.
func (z *analyzer) reset(m analysisMark) {
	z.reads, z.exists, z.messages, z.why = z.reads[:m.reads], z.exists[:m.exists], z.messages[:m.messages], z.why[:m.why]
	z.helperRaw = z.helperRaw[:m.helperRaw]
	z.inv, z.allNodes, z.nondet = m.inv, m.allNodes, m.nondet
}
