package verdict

import (
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
