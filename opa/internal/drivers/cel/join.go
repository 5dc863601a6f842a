package cel

import (
	"slices"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
)

// A comparison of the values of one path of the object with each other,
// as the library's AppArmor template joins its pairs to the containers by
// name:
//
//	variables.containers.all(container,
//	  variables.appArmorByContainer.exists(pair, pair[0] == container.name && ...))
//
// where pair[0] is a container's name too. Such a comparison depends on
// which of the values are equal, not on the values: every element's
// placeholder is its own (containers[0].name, containers[1].name, ...),
// so the comparisons come out as with the real values whenever those are
// pairwise distinct, which the API server makes container names. The
// path is printed with that condition (analysis.MessagePath.Distinct);
// the engine checks it on each pod, in the object and oldObject alike.
// A comparison with anything else (a constant, a computed value, another
// path) reads both sides whole.

// compare records what a == b (or a != b) reads.
func (r *reader) compare(a, b value) {
	if p, ok := selfJoin(a, b); ok {
		r.printPath(p)
		r.joined[analysis.PathString(anyElement(reviewPath(p)))] = true
		for _, o := range append(slices.Clone(a), b...) {
			if o.path[0] == "oldObject" {
				// Keyed whole: a review with an oldObject (never a
				// pod's, at the scheduler) is its own class.
				r.use(value{o})
			}
		}
		return
	}
	r.use(a)
	r.use(b)
}

// selfJoin is the path of the object whose values both a and b are (and
// no other value, save the same path's in oldObject, as
// variables.anyObject gives), when it is one a placeholder can stand for.
func selfJoin(a, b value) ([]string, bool) {
	var p []string
	same := func(q []string) bool {
		return analysis.PathString(anyElement(reviewPath(q))) == analysis.PathString(anyElement(reviewPath(p)))
	}
	for _, side := range []value{a, b} {
		found := false
		for _, o := range side {
			if o.wrapped() || o.path[0] != "object" {
				continue
			}
			if !printablePath(o.path) || analysis.PrefixRelated(reviewPath(o.path), analysis.NodeNamePath) || (p != nil && !same(o.path)) {
				return nil, false
			}
			if p == nil {
				p = o.path
			}
			found = true
		}
		if !found {
			return nil, false
		}
	}
	for _, o := range append(slices.Clone(a), b...) {
		if o.wrapped() || (o.path[0] != "object" && o.path[0] != "oldObject") {
			return nil, false
		}
		if o.path[0] == "oldObject" && !same(append([]string{"object"}, o.path[1:]...)) {
			return nil, false
		}
	}
	return p, true
}
