package opa

import (
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/lookup"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/policyset"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/verdict"
)

// The printed values of a pod a request replaces by placeholders, and why
// others stay in the key (package internal/verdict holds the placeholders).

// keptPrinted explains, for explain, which of the pod's values bc prints
// stayed in the key and why: the tests walkMsgs makes, with their reasons.
func (r *messages) keptPrinted(bc *policyset.BoundConstraint) []string {
	var out []string
	for i := range bc.PodMsgs {
		m := &bc.PodMsgs[i]
		if len(m.Path) == 0 || !m.Path[0].Equal(lookup.ReviewKey) {
			continue
		}
		if !r.msgs.distinct(m) {
			out = append(out, "input"+analysis.PathString(m.Path)+": the template compares its values with each other, and they are not pairwise distinct")
			continue
		}
		j := analysis.EachAt(m.Path)
		if j < 0 {
			if why := r.msgs.keptWhy(m, bc.PodMsgGates[i], m.Text, r.podReview.Value, m.Path[1:]); why != "" {
				out = append(out, "input"+analysis.PathString(m.Path)+": "+why)
			}
			continue
		}
		arr, ok := r.e.reg.Lookup.Input(r.podReview, m.Path[:j]).Value.(*ast.Array)
		if !ok || arr.Len() > verdict.MaxEachPlaceholders {
			continue // the list is keyed as lookup reads it (not printed value by value)
		}
		for k := 0; k < arr.Len(); k++ {
			concrete := append(append(append([]*ast.Term(nil), m.Path[:j]...), ast.InternedTerm(k)), m.Path[j+1:]...)
			_, text := r.e.reg.Placeholders.OfElement(m.Index, k, func() []*ast.Term { return concrete })
			if why := r.msgs.keptWhy(m, bc.PodMsgGates[i], text, arr.Elem(k).Value, m.Path[j+1:]); why != "" {
				out = append(out, "input"+analysis.PathString(concrete)+": "+why)
			}
		}
	}
	return out
}

// keptWhy is why the value at path below v gets no placeholder ("" when
// it gets one): walkMsgs' tests, in order.
func (r *messages) keptWhy(m *verdict.MsgSlot, gates []*policyset.KeyHelper, text string, v ast.Value, path []*ast.Term) string {
	if s, ok := verdict.SubstitutableAt(v, path, m.Quote, m.Trim); ok {
		if r.msgs.absentFrom(m, s) {
			if !r.msgs.gatesAgree(gates, s, text) {
				return "a test the template makes of it (keyed on its answer) answers otherwise for a placeholder"
			}
			return ""
		}
		keys := make([]string, len(m.Absent))
		for i, p := range m.Absent {
			keys[i] = "input" + analysis.PathString(p)
		}
		return "it is empty or a key of " + strings.Join(keys, " or ") + " holds it"
	}
	for _, k := range path {
		t := verdict.Child(v, k)
		if t == nil {
			return "" // missing: keyed as such, a class all such pods share
		}
		v = t.Value
	}
	if _, ok := v.(ast.String); !ok {
		return "not a string"
	}
	if m.Trim {
		return "it is empty, has a space at an end or a character a one-line CEL message cannot hold"
	}
	return "printed with %q, which escapes it"
}

// gatesAgree reports whether each of gates (helpers whose answers the
// memo key holds for the value) answers alike on s, the value, and on
// text, the placeholder that would stand for it: the template, which
// tests the value, then sees the same with either. The answers are asked
// now (not deferred: the decision must be the same on every walk), from
// the helper memo or evaluated; a helper that fails keeps the value.
func (r *messages) gatesAgree(gates []*policyset.KeyHelper, s, text string) bool {
	for _, h := range gates {
		a, okA := r.helpers.helperAnswer(h, ast.String(s))
		b, okB := r.helpers.helperAnswer(h, ast.String(text))
		if !okA || !okB || a != b {
			return false
		}
	}
	return true
}

// distinct reports whether m's values may get placeholders as far as the
// template's comparisons of them with each other go
// (analysis.MessagePath.Distinct): the values at m's path in the pod's
// object and in its oldObject are pairwise distinct, and none holds
// placeholder text. Each element's placeholder is its own, so every
// comparison then comes out as with the real values.
func (r *messages) distinct(m *verdict.MsgSlot) bool {
	if !m.Distinct {
		return true
	}
	if len(m.Path) < 2 || !m.Path[0].Equal(lookup.ReviewKey) || !m.Path[1].Equal(objectKey) {
		return false
	}
	var seen []*ast.Term
	add := func(t *ast.Term) bool {
		if s, ok := t.Value.(ast.String); ok && strings.Contains(string(s), r.e.reg.Placeholders.Prefix) {
			return false
		}
		if len(seen) >= 2*verdict.MaxEachPlaceholders || slices.ContainsFunc(seen, t.Equal) {
			return false
		}
		seen = append(seen, t)
		return true
	}
	for _, root := range []*ast.Term{objectKey, oldObjectKey} {
		path := append([]*ast.Term{lookup.ReviewKey, root}, m.Path[2:]...)
		if !r.msgs.eachValue(path, add) {
			return false
		}
	}
	return true
}

var objectKey, oldObjectKey = ast.StringTerm("object"), ast.StringTerm("oldObject")

// eachValue calls f with each value at path (below input) in the pod's
// review, every element's where the path goes through a list's
// (analysis.Each), until f says false; false then, or when the path goes
// through two lists. A missing value is no value.
func (r *messages) eachValue(path []*ast.Term, f func(*ast.Term) bool) bool {
	j := analysis.EachAt(path)
	if j < 0 {
		t := r.e.reg.Lookup.Input(r.podReview, path)
		return t == nil || t == lookup.Undefined || f(t)
	}
	rest := path[j+1:]
	if analysis.EachAt(rest) >= 0 {
		return false
	}
	arr, ok := r.e.reg.Lookup.Input(r.podReview, path[:j]).Value.(*ast.Array)
	if !ok {
		return true
	}
	for i := 0; i < arr.Len(); i++ {
		if t := r.e.reg.Lookup.At(arr.Elem(i).Value, rest); t != nil && t != lookup.Undefined && !f(t) {
			return false
		}
	}
	return true
}

// absentFrom reports whether s, a value about to get a placeholder, is in
// no key of the objects at m.absent in the pod's review (nor in a string
// element, where one is a list: CEL's `in`), and no placeholder is
// either: a lookup there by a key built from it then misses with the real
// value and with the placeholder alike (opa/internal/analysis/lookupkey.go).
// The empty string is in every key.
func (r *messages) absentFrom(m *verdict.MsgSlot, s string) bool {
	if len(m.Absent) == 0 {
		return true
	}
	if s == "" {
		return false
	}
	holds := func(k *ast.Term) bool {
		ks, isStr := k.Value.(ast.String)
		return isStr && (strings.Contains(string(ks), s) || strings.Contains(string(ks), r.e.reg.Placeholders.Prefix))
	}
	for _, p := range m.Absent {
		if len(p) == 0 || !p[0].Equal(lookup.ReviewKey) {
			return false // the analysis gives objects of the review only
		}
		switch v := r.e.reg.Lookup.Input(r.podReview, p).Value.(type) {
		case ast.Object:
			if v.Until(func(k, _ *ast.Term) bool { return holds(k) }) {
				return false
			}
		case *ast.Array:
			// CEL's `k in list` compares k with the elements.
			if v.Until(holds) {
				return false
			}
		}
		// Anything else (or nothing): the lookup misses either way.
	}
	return true
}
