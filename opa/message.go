package opa

import (
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
func (r *request) keptPrinted(bc *policyset.BoundConstraint) []string {
	var out []string
	for i := range bc.PodMsgs {
		m := &bc.PodMsgs[i]
		if len(m.Path) == 0 || !m.Path[0].Equal(lookup.ReviewKey) {
			continue
		}
		j := analysis.EachAt(m.Path)
		if j < 0 {
			if why := r.keptWhy(m, r.podReview.Value, m.Path[1:]); why != "" {
				out = append(out, "input"+analysis.PathString(m.Path)+": "+why)
			}
			continue
		}
		arr, ok := lookup.Input(r.podReview, m.Path[:j]).Value.(*ast.Array)
		if !ok || arr.Len() > verdict.MaxEachPlaceholders {
			continue // the list is keyed as lookup reads it (not printed value by value)
		}
		for k := 0; k < arr.Len(); k++ {
			if why := r.keptWhy(m, arr.Elem(k).Value, m.Path[j+1:]); why != "" {
				concrete := append(append(append([]*ast.Term(nil), m.Path[:j]...), ast.InternedTerm(k)), m.Path[j+1:]...)
				out = append(out, "input"+analysis.PathString(concrete)+": "+why)
			}
		}
	}
	return out
}

// keptWhy is why the value at path below v gets no placeholder ("" when
// it gets one): walkMsgs' tests, in order.
func (r *request) keptWhy(m *verdict.MsgSlot, v ast.Value, path []*ast.Term) string {
	if s, ok := verdict.SubstitutableAt(v, path, m.Quote, m.Trim); ok {
		if r.absentFrom(m, s) {
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

// absentFrom reports whether s, a value about to get a placeholder, is in
// no key of the objects at m.absent in the pod's review, and no
// placeholder is either: a lookup there by a key built from it then
// misses with the real value and with the placeholder alike
// (opa/internal/analysis/lookupkey.go). The empty string is in every key.
func (r *request) absentFrom(m *verdict.MsgSlot, s string) bool {
	if len(m.Absent) == 0 {
		return true
	}
	if s == "" {
		return false
	}
	for _, p := range m.Absent {
		if len(p) == 0 || !p[0].Equal(lookup.ReviewKey) {
			return false // the analysis gives objects of the review only
		}
		obj, ok := lookup.Input(r.podReview, p).Value.(ast.Object)
		if !ok {
			continue // not an object (or missing): the lookup misses either way
		}
		held := obj.Until(func(k, _ *ast.Term) bool {
			ks, isStr := k.Value.(ast.String)
			return isStr && (strings.Contains(string(ks), s) || strings.Contains(string(ks), r.e.reg.Placeholders.Prefix))
		})
		if held {
			return false
		}
	}
	return true
}
