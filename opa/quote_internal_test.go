package opa

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/verdict"
)

// regoSprintf is Rego's sprintf(format, [s]) of the string s.
func regoSprintf(t *testing.T, q rego.PreparedEvalQuery, s string) string {
	t.Helper()
	in := ast.NewObject(ast.Item(ast.StringTerm("s"), ast.StringTerm(s)))
	rs, err := q.Eval(context.Background(), rego.EvalParsedInput(in))
	if err != nil || len(rs) != 1 {
		t.Fatalf("sprintf of %q: %v %v", s, rs, err)
	}
	return rs[0].Bindings["x"].(string)
}

// trickyStrings are strings %q may print otherwise than as "value":
// quotes, backslashes, control characters, unicode (printable or not),
// invalid UTF-8, and every single byte and every rune below U+0800 and
// around the planes' edges.
func trickyStrings() []string {
	out := []string{"", "node-1", `n"q`, `n\b`, "tab\there", "nl\n", "ünï 日本", "🚀", "line\u2028sep", "\u00a0nbsp",
		"bad \xff utf8", "\xc3", "\xed\xa0\x80", "\x7f", "%q", "%v", "`back`", "'single'", "\u200b", "\ufeff", "\ufffd",
		"opaph0_1_", strings.Repeat("x", 300)}
	for b := 0; b < 256; b++ {
		out = append(out, string([]byte{byte(b)}), "a"+string([]byte{byte(b)})+"z")
	}
	for r := rune(0x80); r < 0x800; r++ {
		out = append(out, string(r))
	}
	for _, r := range []rune{0xd7ff, 0xe000, 0xfdd0, 0xfffe, 0xffff, 0x10000, 0x1f600, 0xe0001, 0x10fffd, 0x10ffff, utf8.RuneError} {
		out = append(out, string(r), "x"+string(r))
	}
	return out
}

// TestQuotedPlaceholderIsRegoSprintf: a value printed with %q gets a
// placeholder exactly when substituting it is byte-identical to Rego's
// sprintf("%q") of the real value, in the message and in its JSON (as a
// details value): substitutable's test (strconv.Quote(s) is "s") is the
// whole of the condition, not merely a sufficient one. With %v and %s,
// any string is substituted and identical.
func TestQuotedPlaceholderIsRegoSprintf(t *testing.T) {
	ph := verdict.NewPlaceholders()
	placeholder := ph.Text(7)
	for _, format := range []string{"node %q is full", "%v/%s"} {
		quote := strings.Contains(format, "%q")
		args := "[input.s]"
		if !quote {
			args = "[input.s, input.s]"
		}
		q, err := rego.New(rego.Query(`x := sprintf("` + format + `", ` + args + `)`)).PrepareForEval(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		withPlaceholder := ph.Cut(regoSprintf(t, q, placeholder))
		enc, _ := json.Marshal(regoSprintf(t, q, placeholder))
		withPlaceholderJSON := ph.Cut(string(enc))
		substituted, kept := 0, 0
		for _, s := range trickyStrings() {
			want := regoSprintf(t, q, s)
			b := verdict.Bindings{verdict.NewBinding(7, s)}
			got := ph.Fill(withPlaceholder, b, nil, false)
			_, ok := verdict.Substitutable(ast.StringTerm(s), quote, false)
			if ok != (got == want) {
				t.Errorf("%s of %q: substitutable %v, but filled %q and Rego printed %q", format, s, ok, got, want)
			}
			if !ok {
				kept++
				continue
			}
			substituted++
			wantJSON, _ := json.Marshal(want)
			if gotJSON := ph.Fill(withPlaceholderJSON, b, nil, true); gotJSON != string(wantJSON) {
				t.Errorf("%s of %q in JSON: filled %s, encoding/json writes %s", format, s, gotJSON, wantJSON)
			}
		}
		if substituted == 0 || (quote && kept == 0) {
			t.Errorf("%s: %d substituted, %d kept: the strings cover too little", format, substituted, kept)
		}
	}
}
