package inventory

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/gatekeeper"
)

// cutReference is what CutJSON must equal: the Node decoded by
// encoding/json (UseNumber), given its TypeMeta, without managedFields,
// cut by the view over maps, converted to a value.
func cutReference(v View, doc []byte) (ast.Value, error) {
	if !json.Valid(doc) {
		return nil, &json.SyntaxError{}
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return nil, err
	}
	m, ok := x.(map[string]any)
	if !ok {
		return nil, errNotObject
	}
	return ast.InterfaceToValue(v.Cut(WithoutManagedFields(gatekeeper.WithTypeMeta(m, schema.GroupVersionKind{Version: "v1", Kind: "Node"}))))
}

var errNotObject = jsonError("not an object")

type jsonError string

func (e jsonError) Error() string { return string(e) }

// testViews are views of the shapes the policy sets make: labels and
// taints kept, a label's existence, paths through arrays, numbers in
// paths, the type meta, the whole Node.
func testViews() map[string]View {
	path := func(keys ...any) []*ast.Term {
		var p []*ast.Term
		for _, k := range keys {
			switch k := k.(type) {
			case string:
				p = append(p, ast.StringTerm(k))
			case int:
				p = append(p, ast.IntNumberTerm(k))
			}
		}
		return p
	}
	paths := func(ps ...[]*ast.Term) [][]*ast.Term { return ps }
	return map[string]View{
		"whole":  Whole,
		"labels": NewView(paths(path("metadata", "labels"), path("spec", "taints")), nil),
		"one label and existence": NewView(paths(path("metadata", "labels", "zone"), path("metadata", "name")),
			paths(path("metadata", "labels"), path("spec", "unschedulable"), path("status", "conditions"))),
		"through arrays": NewView(paths(path("status", "conditions", 0, "type"), path("spec", "taints", "key")),
			paths(path("status", "addresses", "x"))),
		"type meta":        NewView(paths(path("kind"), path("metadata", "managedFields")), paths(path("apiVersion"))),
		"metadata whole":   NewView(paths(path("metadata")), nil),
		"number first":     NewView(paths(path(0, "x"), path("spec")), nil),
		"existence of all": NewView(nil, paths(path("metadata"), path("status"))),
	}
}

var testNodes = []string{
	`{"metadata":{"name":"n1","labels":{"zone":"a","x":"y"},"managedFields":[{"manager":"kubelet"}],"resourceVersion":"12"},
	  "spec":{"taints":[{"key":"k","effect":"NoSchedule"}],"unschedulable":true,"podCIDR":"10.0.0.0/24"},
	  "status":{"conditions":[{"type":"Ready","status":"True","lastHeartbeatTime":"2025-01-01T00:00:00Z"}],
	            "addresses":[{"type":"InternalIP","address":"10.0.0.1"}],"capacity":{"cpu":"4","pods":110}}}`,
	`{"apiVersion":"v1","kind":"Node","metadata":{"name":"n2"}}`,
	`{"kind":null,"metadata":[1,2],"spec":5,"status":"x"}`,
	`{"metadata":{"labels":{"zone":"a"},"labels":{"zone":"b"}},"metadata":{"name":"dup"}}`,
	`{"metadata":{"labels":{"zone":"a"}},"spec":{"taints":null},"spec":{"taints":[1]}}`,
	`{"metadata":{"name":"esc\u00e9\"","labels":{"z\u006fne":"q"}},"status":{"capacity":{"n":1.5e3,"big":123456789012345678901234}}}`,
	`{"metadata":{"managedFields":[]},"status":{"images":[{"names":["a","b"],"sizeBytes":12345}]}}`,
	`{}`, ` {"metadata" : { } } `,
	// refused
	`[]`, `"node"`, `null`, `{"metadata":}`, `{"status":{"x":[1,]}}`, `{"a":1} x`, `{"skipped":01}`, `{"skipped":"\x"}`,
}

func TestCutJSONIsCutOfDecodedNode(t *testing.T) {
	for name, v := range testViews() {
		for _, doc := range testNodes {
			checkCutJSON(t, name, v, []byte(doc))
		}
	}
}

func checkCutJSON(t *testing.T, name string, v View, doc []byte) {
	t.Helper()
	want, werr := cutReference(v, doc)
	got, gerr := v.CutJSON(doc)
	switch {
	case werr != nil && gerr == nil:
		t.Errorf("%s: CutJSON(%q) = %v, the reference refuses it: %v", name, doc, got, werr)
	case werr == nil && gerr != nil:
		t.Errorf("%s: CutJSON(%q) fails (%v), the reference reads %v", name, doc, gerr, want)
	case werr == nil && want.Compare(got) != 0:
		t.Errorf("%s: CutJSON(%q) = %v, want %v", name, doc, got, want)
	}
}

func FuzzCutJSON(f *testing.F) {
	for _, doc := range testNodes {
		f.Add([]byte(doc))
	}
	views := testViews()
	f.Fuzz(func(t *testing.T, doc []byte) {
		for name, v := range views {
			checkCutJSON(t, name, v, doc)
		}
	})
}
