package inventory

import (
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		ref           string
		kind          string
		reads, anyKnd bool
	}{
		{ref: `data.inventory.cluster["v1"].Namespace[x]`, kind: "v1/Namespace", reads: true},
		{ref: `data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName].metadata`, kind: "v1/Node", reads: true},
		{ref: `data.inventory.namespace[ns]["apps/v1"].Deployment`, kind: "apps/v1/Deployment", reads: true},
		{ref: `data.inventory.namespace[ns][gv].Pod`, reads: true, anyKnd: true},
		{ref: `data.inventory.cluster[gv]`, reads: true, anyKnd: true},
		{ref: `data.inventory`, reads: true, anyKnd: true},
		{ref: `data[x]`, reads: true, anyKnd: true},
		{ref: `data`, reads: true, anyKnd: true},
		{ref: `data.lib.helpers.f`},
		{ref: `input.review.object`},
	} {
		t.Run(tc.ref, func(t *testing.T) {
			r := ast.MustParseRef(tc.ref)
			kind, reads, anyKind := kindOf(r)
			if kind != tc.kind || reads != tc.reads || anyKind != tc.anyKnd {
				t.Errorf("got (%q, %v, %v), want (%q, %v, %v)", kind, reads, anyKind, tc.kind, tc.reads, tc.anyKnd)
			}
		})
	}
}

func TestReadsOf(t *testing.T) {
	m := ast.MustParseModuleWithOpts(`package p
violation[{"msg": msg}] {
  ns := data.inventory.cluster["v1"].Namespace[input.review.object.metadata.namespace]
  node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
  q := [x | x := data.inventory.namespace[_]["v1"].ConfigMap[_]]
  msg := sprintf("%v %v %v", [ns, node, q])
}`, ast.ParserOptions{RegoVersion: ast.RegoV0})
	got := ReadsOf(m.Rules)
	want := []string{"v1/ConfigMap", "v1/Namespace", "v1/Node"}
	if got.Any || len(got.Kinds) != len(want) {
		t.Fatalf("got %+v, want kinds %v", got, want)
	}
	for i := range want {
		if got.Kinds[i] != want[i] {
			t.Fatalf("got %+v, want kinds %v", got, want)
		}
	}
	if ks := KeyKinds(got, false); len(ks) != 2 {
		t.Errorf("without other Nodes the Nodes leave the key: %v", ks)
	}
	if ks := KeyKinds(got, true); len(ks) != 3 {
		t.Errorf("with other Nodes the Nodes stay in the key: %v", ks)
	}
}
