package cel

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/drivers"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/gatekeeper"
)

// TestEval checks the decisions and messages of CEL code as the API
// server's validator gives them, under both failure policies.
func TestEval(t *testing.T) {
	long := strings.Repeat("x", 5*1024+1)
	tests := []struct {
		name   string
		src    gatekeeper.CELSource
		policy string
		want   []any
	}{{
		name: "messageExpression, message, fallback, in order",
		src: gatekeeper.CELSource{Validations: []gatekeeper.CELValidation{
			{Expression: `false`, MessageExpression: `"  from " + object.metadata.name + "  "`},
			{Expression: `true`, Message: "never"},
			{Expression: `false`, Message: " plain "},
			{Expression: ` object.spec.nodeName == "other" `},
			{Expression: `false`, MessageExpression: `"two\nlines"`, Message: "one line"},
			{Expression: `false`, MessageExpression: `"` + long + `"`},
		}},
		want: []any{
			map[string]any{"msg": "from web", "validation": 1},
			map[string]any{"msg": "plain", "validation": 3},
			map[string]any{"msg": `failed expression: object.spec.nodeName == "other"`, "validation": 4},
			map[string]any{"msg": "one line", "validation": 5},
			map[string]any{"msg": "failed expression: false", "validation": 6},
		},
	}, {
		name: "params through variables, the Constraint whole",
		src: gatekeeper.CELSource{
			Variables:   []gatekeeper.CELNamed{{Name: "limit", Expression: `variables.params.limit`}},
			Validations: []gatekeeper.CELValidation{{Expression: `size(object.spec.containers) < variables.limit`, MessageExpression: `"at most " + string(variables.limit) + " in " + params.metadata.name`}},
		},
		// params is not declared for validations: the message does not compile.
		want: []any{map[string]any{"msg": "failed expression: size(object.spec.containers) < variables.limit", "validation": 1}},
	}, {
		name: "an error denies under Fail",
		src:  gatekeeper.CELSource{Validations: []gatekeeper.CELValidation{{Expression: `object.metadata.labels.team == "a"`}}},
		want: []any{map[string]any{"msg": "expression 'object.metadata.labels.team == \"a\"' resulted in error: no such key: labels", "validation": 1}},
	}, {
		name:   "and admits under Ignore",
		src:    gatekeeper.CELSource{Validations: []gatekeeper.CELValidation{{Expression: `object.metadata.labels.team == "a"`}}},
		policy: gatekeeper.FailurePolicyIgnore,
	}, {
		name: "a match condition that fails skips the validations",
		src: gatekeeper.CELSource{
			MatchConditions: []gatekeeper.CELNamed{{Name: "labelled", Expression: `has(object.metadata.labels)`}},
			Validations:     []gatekeeper.CELValidation{{Expression: `false`}},
		},
	}, {
		name: "a match condition that errors denies under Fail",
		src: gatekeeper.CELSource{
			MatchConditions: []gatekeeper.CELNamed{{Name: "team", Expression: `object.metadata.labels.team == "a"`}},
			Validations:     []gatekeeper.CELValidation{{Expression: `false`}},
		},
		want: []any{map[string]any{"msg": "expression 'object.metadata.labels.team == \"a\"' resulted in error: no such key: labels", "validation": 0}},
	}, {
		name: "an expression that does not compile denies",
		src:  gatekeeper.CELSource{Validations: []gatekeeper.CELValidation{{Expression: `object.spec.(`}}},
		want: []any{map[string]any{"msg": "compilation error: compilation failed: ERROR: <input>:1:13: Syntax error: no viable alternative at input '.('\n | object.spec.(\n | ............^", "validation": 1}},
	}}
	d := New()
	pod := ast.MustParseTerm(`{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"}, "spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}}`)
	review := ast.NewTerm(gatekeeper.WithNodeName(gatekeeper.PodReview(pod.Value.(ast.Object), "web", "default", ast.MustParseTerm(`{"username": "system:kube-scheduler"}`), ast.InternedNullTerm), "n1"))
	constraint := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": "T", "metadata": map[string]any{"name": "c"}, "spec": map[string]any{"parameters": map[string]any{"limit": int64(2)}}}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			policy := tc.policy
			if policy == "" {
				policy = gatekeeper.FailurePolicyFail
			}
			p, err := d.CompileTemplate(&gatekeeper.Template{Name: "t", Kind: "T", Engine: Engine, CEL: &tc.src, FailurePolicy: policy})
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Eval(context.Background(), drivers.Input{Review: review, Constraint: constraint})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
				t.Errorf("violations\n got  %#v\n want %#v", got, tc.want)
			}
		})
	}
}
