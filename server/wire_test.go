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
	if !bytes.Equal(got.Pod, want.Pod) || !reflect.DeepEqual(got.NodeNames, want.NodeNames) || !sameNodeList(got.Nodes, want.Nodes) {
		t.Fatalf("scanExtenderArgs(%q) = %+v, encoding/json reads %+v", body, got, want)
	}
	if got.Nodes != nil {
		// The names the scanner read on its way are the items' own.
		for i, name := range got.Nodes.names {
			if want, _ := nodeItemName(got.Nodes.Items[i]); name != "" && name != want {
				t.Fatalf("scanExtenderArgs(%q) names item %d %q, nodeItemName reads %q", body, i, name, want)
			}
		}
	}
	return true
}

// sameNodeList compares what encoding/json reads of a list.
func sameNodeList(a, b *nodeListWire) bool {
	if a == nil || b == nil {
		return a == b
	}
	return reflect.DeepEqual(a.TypeMeta, b.TypeMeta) && reflect.DeepEqual(a.ListMeta, b.ListMeta) && reflect.DeepEqual(a.Items, b.Items)
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
		{`{"Nodes": {"metadata": {}, "items": []}}`, true},
		{`{"Nodes": {"metadata": { }, "other": [1], "ITEMS": null}}`, true},
		{`{"Nodes": {"items": [1, "x", null, {"a": [{}]}] }}`, true},
		{`{"Nodes": {"items": [{"metadata": {"name": "a"}, "metadata": {"uid": "u"}}, {"metadata": {"name": "\u0062"}}, {"metadata": 1}]}}`, true},
		{`{"Nodes": {}}`, true},
		// left to encoding/json: its answer (a value or an error) is the reference
		{`{"NodeNames": ["a\u0062"]}`, false},
		{`{"NodeNames": ["ü"]}`, false},
		{`{"Node\u004eames": ["a"]}`, false},
		{`{"NodeNames": ["a"], "nodenames": ["b"]}`, false},
		{`{"NodeNames": "a"}`, false},
		{`{"NodeNames": [1]}`, false},
		{`{"Nodes": {"items": 5}}`, false},
		{`{"Nodes": {"kind": "NodeList", "items": []}}`, false},
		{`{"Nodes": {"metadata": {"resourceVersion": "1"}}}`, false},
		{`{"Nodes": {"items": [], "items": [{}]}}`, false},
		{`{"Nodes": {"metadata": 5}}`, false},
		{`{"Nodes": [1]}`, false},
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

func TestNodeItemName(t *testing.T) {
	for _, tc := range []struct{ item, name, problem string }{
		{`{"metadata": {"name": "n1", "labels": {"name": "x"}}, "name": "no"}`, "n1", ""},
		{` {"spec": {"metadata": {"name": "no"}}, "metadata" : { "uid": "u", "name" : "n2" } } `, "n2", ""},
		{`{"metadata": {"name": "first"}, "metadata": {"name": "last"}}`, "last", ""},
		{`{"metadata": {"name": "first", "name": "last"}}`, "last", ""},
		{`{"m\u0065tadata": {"n\u0061me": "esc\u00e9"}}`, "escé", ""},
		{`{"Metadata": {"name": "x"}}`, "", "has no metadata.name"},
		{`{"metadata": {"name": ""}}`, "", "has no metadata.name"},
		{`{"metadata": {}}`, "", "has no metadata.name"},
		{`{}`, "", "has no metadata.name"},
		{`{"metadata": {"name": 5}}`, "", "has a metadata.name that is not a string"},
		{`{"metadata": {"name": null}}`, "", "has no metadata.name"},
		{`{"metadata": null}`, "", "has a metadata that is not a JSON object"},
		{`[{"metadata": {"name": "x"}}]`, "", "is not a JSON object"},
		{`null`, "", "is not a JSON object"},
	} {
		name, problem := nodeItemName([]byte(tc.item))
		if name != tc.name || problem != tc.problem {
			t.Errorf("nodeItemName(%s) = %q, %q; want %q, %q", tc.item, name, problem, tc.name, tc.problem)
		}
	}
}

func FuzzEscapeOrControl(f *testing.F) {
	for _, s := range []string{"", "plain ascii text", "a\\b", "tab\there", "\x1f", "\x7f\x80\xff\x20\x5b\x5d", strings.Repeat("é", 9) + "\\"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := -1
		for i, c := range b {
			if c < 0x20 || c == '\\' {
				want = i
				break
			}
		}
		if got := escapeOrControl(b); got != want {
			t.Fatalf("escapeOrControl(%q) = %d, want %d", b, got, want)
		}
	})
}
