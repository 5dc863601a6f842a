package opa

import (
	"encoding/json"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/verdict"
)

// TestJSONInnerIsEncodingJSON: what verdict.JSONInner gives is what encoding/json
// writes between the quotes, on the shortcut for plain text and off it.
func TestJSONInnerIsEncodingJSON(t *testing.T) {
	for _, s := range []string{
		"", "node-0001", "pool a/b: ~!", "a<b", "x&y", "p>q", `q"uote`, `back\slash`,
		"tab\there", "ünï 日本", "line\u2028sep", "bad \xff utf8", "\x7f",
	} {
		enc, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := verdict.JSONInner(s), string(enc[1:len(enc)-1]); got != want {
			t.Errorf("jsonInner(%q) = %q, encoding/json writes %q", s, got, want)
		}
	}
}
