package server

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// referenceArgs is what encoding/json reads of body, as decodeFrom does:
// one value, only whitespace after it.
func referenceArgs(body []byte) (extenderArgsWire, bool) {
	var wire extenderArgsWire
	dec := json.NewDecoder(bytes.NewReader(body))
	if dec.Decode(&wire) != nil {
		return wire, false
	}
	if _, err := dec.Token(); err == nil || err.Error() != "EOF" {
		return wire, false
	}
	return wire, true
}

// checkScan fails t if scanExtenderArgs accepts what encoding/json refuses
// or reads it differently.
func checkScan(t *testing.T, body []byte) (fast bool) {
	t.Helper()
	got, ok := scanExtenderArgs(body)
	if !ok {
		return false
	}
	want, wantOK := referenceArgs(body)
	if !wantOK {
		t.Fatalf("scanExtenderArgs accepts %q, encoding/json refuses it", body)
	}
	if !bytes.Equal(got.Pod, want.Pod) || !reflect.DeepEqual(got.NodeNames, want.NodeNames) || !reflect.DeepEqual(got.Nodes, want.Nodes) {
		t.Fatalf("scanExtenderArgs(%q) = %+v, encoding/json reads %+v", body, got, want)
	}
	return true
}

func TestScanExtenderArgs(t *testing.T) {
	for _, tc := range []struct {
		body string
		fast bool // read by the fast path; else left to encoding/json
	}{
		{`{}`, true},
		{` {"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["a", "b"]} `, true},
		{`{"pod":{"a":[1,-2.5e3,true,false,null,"x\"y\\u00e9"]},"nodenames":[]}`, true},
		{`{"Pod": null, "NodeNames": null, "Nodes": null}`, true},
		{`{"Nodes": {"items": [{"metadata": {"name": "n1"}}]}}`, true},
		{`{"Extra": {"deep": [[[]]]}, "NodeNames": ["a"]}`, true},
		// left to encoding/json: its answer (a value or an error) is the reference
		{`{"NodeNames": ["a\u0062"]}`, false},
		{`{"NodeNames": ["ü"]}`, false},
		{`{"Node\u004eames": ["a"]}`, false},
		{`{"NodeNames": ["a"], "nodenames": ["b"]}`, false},
		{`{"NodeNames": "a"}`, false},
		{`{"NodeNames": [1]}`, false},
		{`{"Nodes": {"items": 5}}`, false},
		{`{"Pod": {"a": 01}}`, false},
		{`{"Pod": {"a": "ctl ` + "\x01" + `"}}`, false},
		{`{"Pod": {"a": "\x"}}`, false},
		{`{"Pod": {}} x`, false},
		{`{"Pod": {},}`, false},
		{`[]`, false},
		{`null`, false},
		{``, false},
		{`{"Pod": ` + strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1) + `}`, false},
	} {
		if fast := checkScan(t, []byte(tc.body)); fast != tc.fast {
			t.Errorf("%.60q: read by the fast path %v, want %v", tc.body, fast, tc.fast)
		}
	}
}

func FuzzScanExtenderArgs(f *testing.F) {
	for _, s := range []string{
		`{"Pod": {"metadata": {"name": "p", "namespace": "ns"}}, "NodeNames": ["a", "b"]}`,
		`{"pod": null, "nodes": {"items": [{"metadata": {"name": "n"}}]}}`,
		`{"NodeNames": ["a\"b"], "x": [1.5e-3, {"y": "\ud83d\ude00"}]}`,
		`{"Pod": "p"}`, `{} `, `{"a":-0}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkScan(t, body) })
}
