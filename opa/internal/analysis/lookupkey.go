package analysis

import (
	"slices"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Printed values as lookup keys. Some templates build a key from a value
// they also print and look it up in the review: AppArmor's
//
//	out := pod.metadata.annotations[sprintf("container.apparmor.security.beta.kubernetes.io/%v", [container.name])]
//	not pod.metadata.annotations[sprintf("container.apparmor.security.beta.kubernetes.io/%v", [container.name])]
//
// and seccomp's, through functions (concat prints, flow.go; a printed
// string passed to a function stays one there, userCall):
//
//	container_annotation := get_container_annotation_key(container.name) # concat("", [prefix, name])
//	has_annotation(container_annotation)                                 # input...annotations[annotation]
//
// The lookup's outcome depends on the name, so the name would be read and
// every new container name would be a new class. But a lookup by a string
// that contains the value misses whenever no key of the object contains
// the value: then it misses for the real value and, provided no key
// contains placeholder text either, for the placeholder, and the
// evaluation with the placeholder is the evaluation with the real value.
// So such a use is allowed like a sprintf argument, on two conditions:
//
//   - statically, the object is an exact path below input.review (its
//     value is read: it is in the key), the key is a printed string (every
//     source an input path other than the candidate's name), and it is
//     the first non-ground key of the reference;
//   - at run time, the engine puts a placeholder in the value's place only
//     when no key of the object at each of MessagePath.Absent contains
//     the value (nor placeholder text); otherwise the value is keyed and
//     evaluated as it is.
//
// Each source of the key is checked, whichever gets a placeholder: a key
// built from several printed values misses as soon as one of them appears
// in no key of the object.

// keyedLookup is one such use: the key's sources and the object (a path
// below input).
type keyedLookup struct {
	sources []source
	in      []*ast.Term
}

// lookupKey takes k, the first non-ground key after the ground path of
// object, as a printed string used as a lookup key into object, when that
// is allowed (see above). It reports whether it did.
func (z *analyzer) lookupKey(object origin, k *ast.Term) bool {
	v, ok := k.Value.(ast.Var)
	if !ok || z.sc == nil || object.root != Input || !object.exact || EachAt(object.path) >= 0 ||
		len(object.path) == 0 || !object.path[0].Equal(ast.StringTerm("review")) {
		return false
	}
	p := z.sc.strings[v]
	if p == nil || len(p.sources) == 0 {
		return false
	}
	for _, s := range p.sources {
		if s.o.root != Input || PrefixRelated(s.o.path, NodeNamePath) || PrefixRelated(s.o.path, object.path) {
			return false
		}
	}
	p.allowed++
	z.keyed = append(z.keyed, keyedLookup{sources: p.sources, in: object.path})
	if z.sc.keyed == nil {
		z.sc.keyed = map[*ast.Term]bool{}
	}
	z.sc.keyed[k] = true
	return true
}

// Bodies that require such a lookup. When the engine puts a placeholder
// in the place of any of a key's sources, the lookup misses (its check
// made sure of that), so a body that cannot succeed without it is dead:
// whatever its head does with the printed strings made of those sources
// never happens. Seccomp returns `{"location": sprintf("annotation %v",
// [key])}` from a definition that requires has_annotation(key): that use
// of the key, in the head, is allowed. Only head uses are: an expression
// of the body may run before the lookup, and one that can fail or err
// differently on a placeholder keeps its value in the key as before.

// noteRequired records the printed strings whose lookup e, a top-level
// expression of sc's body, requires: e is not negated, and is the lookup
// itself (a truth test, or one side of a binding), or a call of a
// template function each of whose definitions requires its parameter's
// lookup (noteRequiredParams).
func (z *analyzer) noteRequired(e *ast.Expr, sc *scope) {
	if e.Negated || len(e.With) > 0 {
		return
	}
	switch {
	case e.IsEquality() || e.IsAssignment():
		terms := e.Terms.([]*ast.Term)
		sc.requireKeys(terms[1])
		sc.requireKeys(terms[2])
	case e.IsCall():
		rules := z.compiler.GetRulesExact(e.Operator())
		if len(rules) == 0 || !e.Operator().HasPrefix(z.root) {
			return
		}
		for i, a := range e.Operands() {
			v, ok := a.Value.(ast.Var)
			if !ok || sc.strings[v] == nil {
				continue
			}
			all := true
			for _, r := range rules {
				all = all && !r.Default && r.Else == nil && z.requires[r][i]
			}
			if all {
				sc.require(v)
			}
		}
	default:
		if t, ok := e.Terms.(*ast.Term); ok {
			sc.requireKeys(t)
		}
	}
}

// requireKeys requires the lookups in t, a reference, whose keys
// lookupKey took (by occurrence: the same variable elsewhere may key
// something else).
func (sc *scope) requireKeys(t *ast.Term) {
	ref, ok := t.Value.(ast.Ref)
	if !ok {
		return
	}
	for _, k := range ref[1:] {
		if v, ok := k.Value.(ast.Var); ok && sc.keyed[k] {
			sc.require(v)
		}
	}
}

func (sc *scope) require(v ast.Var) {
	if p := sc.strings[v]; p == nil || len(p.sources) == 0 {
		return
	}
	if sc.required == nil {
		sc.required = map[ast.Var]bool{}
	}
	sc.required[v] = true
}

// noteRequiredParams records, for r, a function definition, which of its
// parameters (printed strings passed by the call) its body requires the
// lookup of.
func (z *analyzer) noteRequiredParams(r *ast.Rule, sc *scope) {
	if len(r.Head.Args) == 0 {
		return
	}
	if z.requires == nil {
		z.requires = map[*ast.Rule]map[int]bool{}
	}
	req := map[int]bool{}
	for i, a := range r.Head.Args {
		if v, ok := a.Value.(ast.Var); ok && sc.required[v] {
			req[i] = true
		}
	}
	z.requires[r] = req
}

// deadInHead allows the uses in t, a head term, of the printed strings
// whose sources a required lookup covers: the head is built only when
// the body succeeds, which it does not with a placeholder among them.
func (sc *scope) deadInHead(t *ast.Term) {
	if len(sc.required) == 0 {
		return
	}
	ast.WalkVars(t, func(v ast.Var) bool {
		if p := sc.strings[v]; p != nil && sc.covered(p) {
			p.allowed++
		}
		return false
	})
}

// covered reports whether every source of p is a source of one required
// lookup's key.
func (sc *scope) covered(p *printed) bool {
	if len(p.sources) == 0 {
		return false
	}
	for v := range sc.required {
		if sourcesWithin(p.sources, sc.strings[v].sources) {
			return true
		}
	}
	return false
}

// sourcesWithin reports whether every source of a is one of b's paths.
func sourcesWithin(a, b []source) bool {
	for _, s := range a {
		if !slices.ContainsFunc(b, func(t source) bool { return sourceKey(t) == sourceKey(s) }) {
			return false
		}
	}
	return true
}

func sourceKey(s source) string { return rootName(s.o.root) + PathString(s.o.path) }

// absentPaths gives, for each printed path (by rootName+PathString), the
// objects in whose keys its value must not appear.
func (z *analyzer) absentPaths() map[string][][]*ast.Term {
	if len(z.keyed) == 0 {
		return nil
	}
	out := map[string][][]*ast.Term{}
	seen := map[string]bool{}
	for _, kl := range z.keyed {
		in := PathString(kl.in)
		for _, s := range kl.sources {
			k := sourceKey(s)
			if seen[k+"\x00"+in] {
				continue
			}
			seen[k+"\x00"+in] = true
			out[k] = append(out[k], kl.in)
		}
	}
	return out
}
