package gen

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestTemplatesAreDeterministic: a seed gives the same templates and pods,
// so that a difference a run reports can be replayed.
func TestTemplatesAreDeterministic(t *testing.T) {
	for i := range 20 {
		a, b := NewCEL(7).Template(i), NewCEL(7).Template(i)
		ta, _ := a.Objects()
		tb, _ := b.Objects()
		ja, _ := json.Marshal(ta)
		jb, _ := json.Marshal(tb)
		if string(ja) != string(jb) {
			t.Fatalf("template %d differs between two generators of one seed:\n%s\n%s", i, ja, jb)
		}
	}
	for i := range 20 {
		a, b := NewRego(7).Template(i), NewRego(7).Template(i)
		if a.Source() != b.Source() {
			t.Fatalf("Rego template %d differs between two generators of one seed:\n%s\n%s", i, a.Source(), b.Source())
		}
	}
	pa, _ := json.Marshal(NewObjects(3).Pod(1))
	pb, _ := json.Marshal(NewObjects(3).Pod(1))
	if string(pa) != string(pb) {
		t.Fatalf("pods differ: %s %s", pa, pb)
	}
}

// TestSimplerShrinks: every step of a template is smaller or has fewer
// validations or messages, and binds every comprehension variable it
// uses (no "x3" left without the macro that names it).
func TestSimplerShrinks(t *testing.T) {
	cel, rego := NewCEL(11), NewRego(11)
	for i := range 30 {
		for _, tm := range []Policy{cel.Template(i), rego.Template(i)} {
			for _, s := range tm.SimplerPolicies() {
				if s.Size() > tm.Size() {
					t.Fatalf("a step grew %d to %d nodes", tm.Size(), s.Size())
				}
				var exprs []**Expr
				switch x := s.(type) {
				case *Template:
					exprs = x.exprs()
				case *RegoTemplate:
					exprs = x.exprs()
				}
				for _, e := range exprs {
					if free := unbound(*e, nil); free != "" {
						t.Fatalf("a step of %s leaves %s unbound: %s", tm.TemplateKind(), free, (*e).String())
					}
				}
			}
		}
	}
}

// unbound is a comprehension variable e uses outside the macros that bind
// it ("" when none).
func unbound(e *Expr, bound []string) string {
	bound = append(bound, e.Binds...)
	if e.Fmt == "" && e.Form == "comprehension variable" {
		for _, b := range bound {
			if e.Text == b {
				return ""
			}
		}
		return e.Text
	}
	for _, k := range e.Kids {
		if v := unbound(k, bound); v != "" {
			return v
		}
	}
	return ""
}

// TestPodSimpler: each step removes one field or element and keeps the
// pod's name and namespace.
func TestPodSimpler(t *testing.T) {
	p := NewObjects(5).Pod(0)
	whole, _ := json.Marshal(p)
	steps := Simpler(p)
	if len(steps) == 0 {
		t.Fatal("no simpler pods")
	}
	for _, s := range steps {
		js, _ := json.Marshal(s)
		if len(js) >= len(whole) {
			t.Errorf("step %s not smaller than %s", js, whole)
		}
		if !strings.Contains(string(js), `"name":"`) || !strings.Contains(string(js), `"namespace":"`) {
			t.Errorf("step lost the pod's name or namespace: %s", js)
		}
	}
	again, _ := json.Marshal(p)
	if string(again) != string(whole) {
		t.Error("Simpler changed the pod it was given")
	}
}
