package cel

import (
	"slices"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
)

// Printed values as lookup keys. The library's seccomp template looks a
// container's annotation up by a key built from its name, which it also
// prints:
//
//	("container.seccomp.security.alpha.kubernetes.io/" + container.name) in variables.anyObject.metadata.annotations
//	variables.anyObject.metadata.annotations["container.seccomp.security.alpha.kubernetes.io/" + container.name]
//
// Read as it is, the name is read whole, and a pod with new container
// names (a Job's) is a new class. But a lookup (`k in m`, `m[k]`) by a
// key that contains the value misses whenever no key of m contains the
// value, for the real value and for a placeholder alike (provided no key
// holds placeholder text either): the engine's rule for Rego's lookups by
// printed strings (analysis.MessagePath.Absent). So the key's sources are
// printed, with m as an object the engine checks at run time (opa's
// absentFrom), and m is read whole. `k in m` on a list compares k with its
// elements: the engine checks those too. A missed `m[k]` errors with k in
// its text, where the placeholder is then filled in as in any message.
//
// Only where this is certain: every origin of m is a path of the review
// without elements ([_]) and not a literal (else m and k are read). A
// source of k is printed when it is a value of the object (one list's
// elements at most) that a message could print, not the candidate's name
// and not related to m; any other is read: a real value in the key keeps
// the lookup what it is, and one placeholder absent from m's keys makes
// it miss either way.

// lookup records the reads of a lookup in a value with origins object by
// a key with origins key (`key in object`, `object[key]`): the object
// whole, and the key's sources printed when that is certain (see above),
// else read.
func (r *reader) lookup(key, object value) {
	r.use(object)
	if !r.keyedLookup(key, object) {
		r.use(key)
	}
}

// keyedLookup records key's sources as printed, looked up in object, when
// they may be (see above), and reads the others; false when object is not
// one the engine can check.
func (r *reader) keyedLookup(key, object value) bool {
	var in [][]string
	for _, o := range object {
		if o.wrapped() || (o.path[0] != "object" && o.path[0] != "oldObject" && o.path[0] != "namespaceObject") ||
			eachCount(o.path) > 0 || slices.Contains(o.path, shapeMark) {
			return false
		}
		in = append(in, o.path)
	}
	if len(in) == 0 {
		return false
	}
	for _, s := range key {
		if s.wrapped() || !printablePath(s.path) || analysis.PrefixRelated(reviewPath(s.path), analysis.NodeNamePath) ||
			slices.ContainsFunc(in, func(m []string) bool { return isPrefixString(m, s.path) || isPrefixString(s.path, m) }) {
			// A real value in the key: the lookup is the same with it.
			r.use(value{s})
			continue
		}
		r.printPath(s.path)
		id := analysis.PathString(anyElement(reviewPath(s.path)))
		r.keyedIn[id] = append(r.keyedIn[id], in...)
	}
	return true
}

// isPrefixString: q is p or lies above it (each element of a list as any).
func isPrefixString(q, p []string) bool {
	if len(q) > len(p) {
		return false
	}
	for i := range q {
		if q[i] != p[i] && !(isEach(q[i]) && isEach(p[i])) {
			return false
		}
	}
	return true
}

// absentIn are the objects a printed path is looked up in (keyedLookup),
// whatever filters its elements went through.
func (r *reader) absentIn(p []*ast.Term) [][]*ast.Term {
	var out [][]*ast.Term
	for _, m := range r.keyedIn[analysis.PathString(anyElement(p))] {
		t := reviewPath(m)
		if !slices.ContainsFunc(out, func(q []*ast.Term) bool { return slices.EqualFunc(q, t, (*ast.Term).Equal) }) {
			out = append(out, t)
		}
	}
	return out
}
