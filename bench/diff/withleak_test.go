package diff

import (
	"context"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
)

// TestRegoWithLeak pins the behaviour diffRegoWithLeak names, with OPA
// alone: a template run as the constraint framework's hook module runs it
// (under `with input as inp`, inp's parameters read from data) sees a
// `with input.parameters.prefix as "gpu-"` on one expression in the
// expression after it too; run with the same input given directly, it
// does not. When OPA changes this, the test fails, and the intended
// difference goes.
func TestRegoWithLeak(t *testing.T) {
	const template = `package t

violation[{"msg": msg}] {
	p with input.parameters.prefix as "gpu-"
	msg := sprintf("%v", [input.parameters.prefix])
}

p {
	startswith(input.review.object.spec.nodeName, input.parameters.prefix)
}
`
	const hook = `package hooks

violation[r] {
	key := input.constraints[_]
	inp := {"review": input.review, "parameters": data.constraints[key.kind][key.name]}
	data.t.violation[r] with input as inp
}
`
	ctx := context.Background()
	review := map[string]any{"object": map[string]any{"spec": map[string]any{"nodeName": "gpu-1"}}}
	params := map[string]any{"prefix": "cpu-"}
	eval := func(query string, input map[string]any, modules ...string) string {
		opts := []func(*rego.Rego){rego.Query(query), rego.Input(input), rego.SetRegoVersion(ast.RegoV0),
			rego.Store(inmem.NewFromObject(map[string]any{"constraints": map[string]any{"K": map[string]any{"c": params}}}))}
		for i, m := range modules {
			opts = append(opts, rego.Module(string(rune('a'+i))+".rego", m))
		}
		rs, err := rego.New(opts...).Eval(ctx)
		if err != nil || len(rs) != 1 {
			t.Fatalf("%s: %v %v", query, rs, err)
		}
		set, _ := rs[0].Expressions[0].Value.([]any)
		if len(set) != 1 {
			t.Fatalf("%s: %v", query, rs)
		}
		return set[0].(map[string]any)["msg"].(string)
	}
	direct := eval("data.t.violation", map[string]any{"review": review, "parameters": params}, template)
	hooked := eval("data.hooks.violation", map[string]any{"review": review, "constraints": []any{map[string]any{"kind": "K", "name": "c"}}}, template, hook)
	if direct != "cpu-" || hooked != "gpu-" {
		t.Errorf("message given the input directly %q (want cpu-), through the hook %q (want gpu-, the leak)", direct, hooked)
	}
}
