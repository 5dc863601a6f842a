package inventory

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

func decodeJSON(t testing.TB, s string) map[string]any {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// at is the term at path in v (object keys), nil when absent.
func at(v ast.Value, path ...string) *ast.Term {
	t := ast.NewTerm(v)
	for _, k := range path {
		o, ok := t.Value.(ast.Object)
		if !ok {
			return nil
		}
		if t = o.Get(ast.StringTerm(k)); t == nil {
			return nil
		}
	}
	return t
}

// A shared conversion is InterfaceToValue's, to the text.
func TestSharedValuesConvertAsInterfaceToValue(t *testing.T) {
	docs := []map[string]any{
		decodeJSON(t, `{"metadata":{"name":"a","labels":{"zone":"z1","n":"1"},"annotations":{}},"spec":{"taints":[{"key":"k","effect":"NoSchedule"}]}}`),
		decodeJSON(t, `{"status":{"capacity":{"cpu":"4","pods":110,"ratio":1.0,"big":12345678901234567890},"ready":true,"gone":null,"list":[[],[1,"1",1.0,true,null]]}}`),
		{"unstructured": map[string]any{"int": int64(3), "float": 2.5, "bool": false, "nil": nil, "list": []any{"x", int64(-1)}}},
		{},
	}
	s := newSharedValues(defaultSharedLimits)
	for round := range 3 { // the later rounds convert through kept terms
		for i, doc := range docs {
			name := fmt.Sprintf("node-%d-%d", round, i)
			got, err := s.Value(name, doc)
			if err != nil {
				t.Fatal(err)
			}
			want, err := ast.InterfaceToValue(doc)
			if err != nil {
				t.Fatal(err)
			}
			if got.Compare(want) != 0 || got.String() != want.String() {
				t.Errorf("%s: got %v, want %v", name, got, want)
			}
		}
	}
}

func TestSharedValuesShareWhatTwoNodesHold(t *testing.T) {
	const doc = `{"metadata":{"name":"%s","labels":{"topology.kubernetes.io/zone":"zone-a"},"annotations":{}}}`
	node := func(s *sharedValues, name string) ast.Value {
		t.Helper()
		v, err := s.Value(name, decodeJSON(t, fmt.Sprintf(doc, name)))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	t.Run("two Nodes", func(t *testing.T) {
		s := newSharedValues(defaultSharedLimits)
		a, b, c := node(s, "a"), node(s, "b"), node(s, "c")
		if at(b, "metadata", "labels") != at(c, "metadata", "labels") {
			t.Error("the labels b and c hold alike are two terms")
		}
		if at(b, "metadata", "annotations") != at(c, "metadata", "annotations") {
			t.Error("the empty annotations b and c hold are two terms")
		}
		if at(a, "metadata", "labels") == at(b, "metadata", "labels") {
			t.Error("the first Node's labels were kept before a second Node held them")
		}
		if at(b, "metadata") == at(c, "metadata") || at(b, "metadata", "name") == at(c, "metadata", "name") {
			t.Error("Nodes share what differs between them")
		}
	})
	t.Run("one Node written again", func(t *testing.T) {
		s := newSharedValues(defaultSharedLimits)
		node(s, "a")
		node(s, "a")
		a := node(s, "a")
		if len(s.terms) != 0 {
			t.Errorf("a Node's own values kept: %d terms", len(s.terms))
		}
		if b := node(s, "b"); at(a, "metadata", "labels") == at(b, "metadata", "labels") {
			t.Error("labels shared before a second Node held them")
		}
	})
	t.Run("top level", func(t *testing.T) {
		s := newSharedValues(defaultSharedLimits)
		same := decodeJSON(t, `{"metadata":{"labels":{"pool":"a"}}}`)
		var vs []ast.Value
		for _, name := range []string{"a", "b", "c"} {
			v, err := s.Value(name, same)
			if err != nil {
				t.Fatal(err)
			}
			vs = append(vs, v)
		}
		if vs[1] == vs[2] {
			t.Error("two Nodes hold one top-level value")
		}
		if at(vs[1], "metadata") != at(vs[2], "metadata") {
			t.Error("identical metadata below the top not shared")
		}
	})
}

// Values equal to Rego but written differently are never shared: a
// template that prints one must print what its Node holds.
func TestSharedValuesShareOnlyIdentical(t *testing.T) {
	s := newSharedValues(defaultSharedLimits)
	for _, name := range []string{"a", "b"} {
		if _, err := s.Value(name, decodeJSON(t, `{"x":{"n":1,"m":[1]}}`)); err != nil {
			t.Fatal(err)
		}
	}
	v, err := s.Value("c", decodeJSON(t, `{"x":{"n":1.0,"m":[1.0]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := v.String(); got != `{"x": {"m": [1.0], "n": 1.0}}` {
		t.Errorf("got %s", got)
	}
}

func TestIdentical(t *testing.T) {
	v := func(s string) ast.Value { return ast.MustParseTerm(s).Value }
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{`"a"`, `"a"`, true},
		{`"a"`, `"b"`, false},
		{`1`, `1`, true},
		{`1`, `1.0`, false},
		{`1`, `"1"`, false},
		{`true`, `true`, true},
		{`null`, `null`, true},
		{`null`, `false`, false},
		{`{"a": [1, {"b": null}]}`, `{"a": [1, {"b": null}]}`, true},
		{`{"a": 1, "b": 2}`, `{"b": 2, "a": 1}`, true},
		{`{"a": 1}`, `{"a": 1, "b": 2}`, false},
		{`{"a": 1}`, `{"b": 1}`, false},
		{`[1, 2]`, `[2, 1]`, false},
		{`[1]`, `[1, 1]`, false},
		{`[]`, `{}`, false},
		{`{1, 2}`, `{1, 2}`, false}, // sets never come from JSON
	} {
		if got := identical(v(tc.a), v(tc.b)); got != tc.want {
			t.Errorf("identical(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestSharedValuesBounds(t *testing.T) {
	labels := func(i int) map[string]any {
		return map[string]any{"labels": map[string]any{"pool": fmt.Sprintf("pool-%d", i)}}
	}
	t.Run("entries", func(t *testing.T) {
		s := newSharedValues(sharedLimits{entries: 4, weight: 1 << 10, valueWeight: 16})
		for i := range 20 {
			for _, name := range []string{"a", "b"} {
				if _, err := s.Value(name, labels(i)); err != nil {
					t.Fatal(err)
				}
			}
			if len(s.terms) > 4 {
				t.Fatalf("%d terms kept, bound 4", len(s.terms))
			}
		}
	})
	t.Run("weight", func(t *testing.T) {
		s := newSharedValues(sharedLimits{entries: 1 << 10, weight: 10, valueWeight: 16})
		for i := range 20 {
			for _, name := range []string{"a", "b"} {
				if _, err := s.Value(name, labels(i)); err != nil {
					t.Fatal(err)
				}
			}
			if s.weight > 10 {
				t.Fatalf("weight %d kept, bound 10", s.weight)
			}
		}
	})
	t.Run("value weight", func(t *testing.T) {
		s := newSharedValues(sharedLimits{entries: 1 << 10, weight: 1 << 10, valueWeight: 2})
		doc := map[string]any{"x": map[string]any{"a": "1", "b": "2"}}
		var xs []*ast.Term
		for _, name := range []string{"a", "b", "c"} {
			v, err := s.Value(name, doc)
			if err != nil {
				t.Fatal(err)
			}
			xs = append(xs, at(v, "x"))
		}
		if xs[1] == xs[2] {
			t.Error("a value past valueWeight was shared")
		}
	})
}

func FuzzSharedValues(f *testing.F) {
	f.Add(`{"metadata":{"labels":{"a":"1"},"annotations":{}},"x":[1,1.0,"1",true,null]}`)
	f.Add(`{"a":{"b":{"c":[{}]}},"b":{"b":{"c":[{}]}}}`)
	f.Fuzz(func(t *testing.T, doc string) {
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader([]byte(doc)))
		dec.UseNumber()
		if dec.Decode(&m) != nil {
			return
		}
		want, err := ast.InterfaceToValue(m)
		if err != nil {
			return
		}
		s := newSharedValues(sharedLimits{entries: 8, weight: 64, valueWeight: 16})
		for _, name := range []string{"a", "b", "a", "c"} {
			got, err := s.Value(name, m)
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != want.String() {
				t.Fatalf("%s: got %v, want %v", name, got, want)
			}
		}
	})
}
