package verdict

import (
	"encoding/json"
	"strconv"
	"testing"
)

func TestQuotesAsIs(t *testing.T) {
	for _, s := range []string{
		"", "pod-1", "web-7d4f9c-x2kq", "a b", "~", "naïve", "日本", "emoji 🙂",
		`a"b`, `a\b`, "tab\t", "nl\n", "\x7f", "\x00", "\u00a0", "\u200b", "\u2028",
		"\xff", "ok\xc3", "\xed\xa0\x80", "\U0010ffff", "\ufffd",
	} {
		want := strconv.Quote(s) == `"`+s+`"`
		if got := quotesAsIs(s); got != want {
			t.Errorf("quotesAsIs(%q) = %v, strconv.Quote says %v", s, got, want)
		}
	}
}

func FuzzQuotesAsIs(f *testing.F) {
	for _, s := range []string{"pod-1", `a"b`, "naïve", "\xff", "\u00a0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := quotesAsIs(s), strconv.Quote(s) == `"`+s+`"`; got != want {
			t.Fatalf("quotesAsIs(%q) = %v, strconv.Quote says %v", s, got, want)
		}
	})
}

// A binding holds its value as encoding/json writes it between the quotes
// and whether it is plain, whatever the value holds.
func TestNewBindingEscapes(t *testing.T) {
	for _, value := range []string{
		"", "node-a", "ip-10-0-1-2.ec2.internal", "a<b", "x&y", "1>0", `say "hi"`, `back\slash`,
		"tab\there", "nul\x00", "del\x7f", "zoné", "bad\xffutf8", "<\"&>", "\u2028",
	} {
		b := NewBinding(3, value)
		enc, err := json.Marshal(value)
		if err != nil {
			t.Fatal(err)
		}
		if want := string(enc[1 : len(enc)-1]); b.json != want || JSONInner(value) != want {
			t.Errorf("%q: json %q, JSONInner %q, want %q", value, b.json, JSONInner(value), want)
		}
		if b.plain != isPlain(value) || b.value != value || b.index != 3 {
			t.Errorf("%q: %+v", value, b)
		}
	}
}
