package jsonvalue

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// reference is what the engine did before: encoding/json with UseNumber,
// then ast.InterfaceToValue; json.Valid refuses what Unmarshal would (data
// after the value).
func reference(b []byte) (ast.Value, error) {
	if !json.Valid(b) {
		return nil, &SyntaxError{msg: "invalid JSON"}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return nil, err
	}
	return ast.InterfaceToValue(x)
}

// checkSame fails t unless Parse and the reference agree: the same value,
// or both an error.
func checkSame(t *testing.T, doc []byte) {
	t.Helper()
	want, werr := reference(doc)
	got, gerr := Parse(doc)
	switch {
	case werr != nil && gerr == nil:
		t.Errorf("Parse(%q) = %v, encoding/json refuses it: %v", doc, got, werr)
	case werr == nil && gerr != nil:
		t.Errorf("Parse(%q) fails (%v), encoding/json reads %v", doc, gerr, want)
	case werr == nil && want.Compare(got) != 0:
		t.Errorf("Parse(%q) = %v, want %v", doc, got, want)
	}
}

func TestParseAgreesWithEncodingJSON(t *testing.T) {
	for _, doc := range []string{
		`{}`, `[]`, `null`, `true`, `false`, `0`, `-0`, `1`, `-12`, `1.5`, `1e3`, `1E+3`, `-2.5e-3`,
		`12345678901234567890123`, `""`, `"plain"`, ` {"a" : [1, 2 ,{"b":null}] } `,
		`{"a":1,"a":2}`, `{"a":{"x":1},"a":"y"}`,
		`"quote \" backslash \\ slash \/ \b\f\n\r\t"`, `"\u00e9\u65e5\ud83d\ude00"`, `"\ud800"`,
		`"ünïcødé"`, "\"bad \xff utf8\"", `{"k\u0041":"v"}`, `{"metadata":{"name":"p","labels":{"app":"x"}}}`,
		// refused by both
		``, ` `, `{`, `[`, `[1,]`, `{"a":1,}`, `{"a"}`, `{a:1}`, `01`, `1.`, `.5`, `-`, `1e`, `+1`,
		`tru`, `nul`, `"open`, `"bad \x escape"`, "\"ctl \x01 char\"", `{} {}`, `[1] x`, `"\u12"`,
		`{"a":1 "b":2}`, `[1 2]`, `NaN`, `Infinity`,
	} {
		checkSame(t, []byte(doc))
	}
}

func TestParsePodFixture(t *testing.T) {
	doc, err := os.ReadFile("testdata/pod.json")
	if err != nil {
		t.Fatal(err)
	}
	checkSame(t, doc)
	v, err := Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	name, err := v.Find(ast.Ref{ast.StringTerm("metadata"), ast.StringTerm("name")})
	if err != nil || name.Compare(ast.String("web-6f9c7d-x7k2q")) != 0 {
		t.Errorf("metadata.name = %v (%v)", name, err)
	}
}

func TestParseRefusesDeepNesting(t *testing.T) {
	deep := strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)
	if _, err := Parse([]byte(deep)); err == nil || !strings.Contains(err.Error(), "max depth") {
		t.Errorf("nesting past %d: %v, want a depth error", MaxDepth, err)
	}
	ok := strings.Repeat(`{"a":`, 100) + "1" + strings.Repeat("}", 100)
	checkSame(t, []byte(ok))
}

func TestSyntaxErrorSaysWhere(t *testing.T) {
	_, err := Parse([]byte(`{"a": [1, 2,, 3]}`))
	se, ok := err.(*SyntaxError)
	if !ok || se.Offset != 12 {
		t.Errorf("error %v, want a SyntaxError at byte 12", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"a":[1,"x",null,true]}`, `"\u00e9"`, `-1.5e3`, `{"a":1,"a":2}`, "\"\xff\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		if bytes.Count(doc, []byte("["))+bytes.Count(doc, []byte("{")) > 1000 {
			return // deep documents are the depth test's
		}
		checkSame(t, doc)
	})
}

func BenchmarkParsePod(b *testing.B) {
	doc, err := os.ReadFile("testdata/pod.json")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("jsonvalue", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Parse(doc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json+InterfaceToValue", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := reference(doc); err != nil {
				b.Fatal(err)
			}
		}
	})
}
