package source

import (
	"fmt"
	"strings"
	"testing"
)

// TestReadObjectsLists: lists are read item by item, in the forms kubectl
// and other tools write them; documents that only look like lists are
// objects.
func TestReadObjectsLists(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     string // "Kind/name" of each object, in order
	}{
		{
			name: "kubectl get -o yaml (List, items not indented)",
			in: "apiVersion: v1\nitems:\n- apiVersion: v1\n  kind: Node\n  metadata:\n    name: a\n" +
				"- apiVersion: v1\n  kind: Node\n  metadata:\n    name: b\nkind: List\nmetadata:\n  resourceVersion: \"\"\n",
			want: "Node/a,Node/b",
		},
		{
			name: "items indented, kind first, comments and blank lines",
			in: "kind: List\napiVersion: v1\nitems:\n  # the nodes\n\n  - apiVersion: v1\n    kind: Node\n    metadata: {name: a}\n\n" +
				"# between\n  -   apiVersion: v1\n      kind: Namespace\n      metadata: {name: ns}\n",
			want: "Node/a,Namespace/ns",
		},
		{
			name: "typed list: items without apiVersion and kind",
			in:   "apiVersion: v1\nitems:\n- metadata:\n    name: a\n- metadata:\n    name: b\n  kind: Node\nkind: NodeList\n",
			want: "Node/a,Node/b",
		},
		{
			name: "block scalars that look like items and separators",
			in: "apiVersion: v1\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n  data:\n    x: |\n      items:\n      - not an item\n      kind: List\n" +
				"- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: b}\nkind: List\n",
			want: "ConfigMap/a,ConfigMap/b",
		},
		{
			name: "lists among documents",
			in:   nodeYAML("x", "1") + "---\napiVersion: v1\nitems:\n- apiVersion: v1\n  kind: Node\n  metadata: {name: a}\nkind: List\n---\n" + nodeYAML("z", "1"),
			want: "Node/x,Node/a,Node/z",
		},
		{
			name: "items in flow style",
			in:   "apiVersion: v1\nkind: List\nitems: [{apiVersion: v1, kind: Node, metadata: {name: a}}]\n---\napiVersion: v1\nkind: List\nitems: []\n",
			want: "Node/a",
		},
		{
			name: "an object whose items are not objects, a kind ending in List without items",
			in: "apiVersion: example.com/v1\nkind: Shelf\nmetadata: {name: s}\nitems:\n- a\n- b: 1\n---\n" +
				"apiVersion: constraints.gatekeeper.sh/v1beta1\nkind: K8sDenyList\nmetadata: {name: d}\nspec: {}\n",
			want: "Shelf/s,K8sDenyList/d",
		},
		{
			name: "kubectl get -o json",
			in: `{
    "apiVersion": "v1",
    "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a", "labels": {"v": "1"}}},
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "b"}}
    ],
    "kind": "List",
    "metadata": {"resourceVersion": ""}
}`,
			want: "Node/a,Node/b",
		},
		{
			name: "JSON typed list, and a JSON object with items that are not objects",
			in:   `{"kind": "NodeList", "apiVersion": "v1", "items": [{"metadata": {"name": "a"}}]} {"apiVersion": "x/v1", "kind": "Shelf", "metadata": {"name": "s"}, "items": ["a", {"b": [1]}]}`,
			want: "Node/a,Shelf/s",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := ReadObjects(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range objs {
				got = append(got, o.GetKind()+"/"+o.GetName())
				if o.GetAPIVersion() == "" {
					t.Errorf("%s has no apiVersion", o.GetName())
				}
			}
			if strings.Join(got, ",") != tc.want {
				t.Errorf("objects %v, want %s", got, tc.want)
			}
		})
	}
}

// TestReadObjectsKeepsContent: an item read on its own is the object the
// whole document held.
func TestReadObjectsKeepsContent(t *testing.T) {
	list := "apiVersion: v1\nitems:\n- apiVersion: v1\n  kind: Node\n  metadata:\n    name: a\n    labels: {v: \"1\"}\n    annotations:\n      note: |\n        line 1\n\n          indented\n  spec:\n    taints:\n    - key: k\n      effect: NoSchedule\nkind: List\n"
	objs, err := ReadObjects(strings.NewReader(list))
	if err != nil || len(objs) != 1 {
		t.Fatalf("%d objects, error %v", len(objs), err)
	}
	o := objs[0]
	if got := o.GetAnnotations()["note"]; got != "line 1\n\n  indented\n" {
		t.Errorf("block scalar %q", got)
	}
	taints, _ := o.Object["spec"].(map[string]any)["taints"].([]any)
	if len(taints) != 1 || o.GetLabels()["v"] != "1" {
		t.Errorf("content %v", o.Object)
	}
}

func TestReadObjectsListErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"apiVersion: v1\nitems:\n- apiVersion: v1\n  kind: Node\n  metadata: {name: a}\n- metadata: {name: b}\nkind: List\n", "document 1, item 2: apiVersion and kind are required"},
		{"apiVersion: v1\nitems:\n- apiVersion: v1\n  kind: [\nkind: List\n", "document 1, item 1"},
		{nodeYAML("a", "1") + "---\napiVersion: v1\nitems:\n- 3\nkind: List\n", "document 2, item 1: not an object"},
		{`{"apiVersion": "v1", "kind": "List", "items": [{"kind": "Node"}, ]}`, "document 1, item 2"},
	} {
		if _, err := ReadObjects(strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.want)
		}
	}
}

// nodeList is a kubectl List of nodes n0..n(count-1), label v.
func nodeList(count int, v string) string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nitems:\n")
	for i := range count {
		fmt.Fprintf(&b, "- apiVersion: v1\n  kind: Node\n  metadata:\n    name: n%d\n    labels: {v: %q}\n", i, v)
	}
	b.WriteString("kind: List\nmetadata:\n  resourceVersion: \"\"\n")
	return b.String()
}
