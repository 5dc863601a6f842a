package cel

import (
	"errors"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/drivers"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/gatekeeper"
)

// TestMembershipHelper checks a membership's helper: its answers on
// strings with the Constraint as params, its refusals (values that are not
// strings, or too long: keyed whole), and what its answers depend on (the
// same for two templates that ship the same test).
func TestMembershipHelper(t *testing.T) {
	src := func(extra string) *gatekeeper.CELSource {
		return &gatekeeper.CELSource{
			Variables: []gatekeeper.CELNamed{
				{Name: "prefixes", Expression: `!has(variables.params.exemptImages) ? [] : variables.params.exemptImages.filter(i, i.endsWith("*")).map(i, i.replace("*", ""))`},
				{Name: "exempt", Expression: `object.spec.containers.filter(c, variables.prefixes.exists(p, c.image.startsWith(p))).map(c, c.image)`},
			},
			Validations: []gatekeeper.CELValidation{{Expression: `object.spec.containers.all(c, c.image in variables.exempt` + extra + `)`}},
		}
	}
	d := New()
	helperOf := func(s *gatekeeper.CELSource) (drivers.Helper, analysis.HelperDeps) {
		t.Helper()
		p, err := d.CompileTemplate(&gatekeeper.Template{Name: "t", Kind: "T", Engine: Engine, CEL: s, FailurePolicy: gatekeeper.FailurePolicyFail})
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range p.Analyze(nil).InputPaths {
			if call, ok := analysis.HelperOf(path[len(path)-1]); ok {
				h, deps, err := p.Helper(call)
				if err != nil {
					t.Fatal(err)
				}
				return h, deps
			}
		}
		t.Fatalf("no helper in %v", p.Analyze(nil).InputPaths)
		return nil, analysis.HelperDeps{}
	}
	h, deps := helperOf(src(""))
	_, other := helperOf(src(` || c.name == "x"`))
	if deps.Code != other.Code || !deps.Presence || len(deps.Params) != 1 || analysis.PathString(deps.Params[0]) != ".exemptImages" {
		t.Errorf("deps %+v and %+v: want one code, presence, and .exemptImages", deps, other)
	}
	constraint := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"parameters": map[string]any{"exemptImages": []any{"registry.example/*"}}}}}
	tests := []struct {
		arg     ast.Value
		holds   bool
		refused bool
	}{
		{arg: ast.String("registry.example/app:1"), holds: true},
		{arg: ast.String("app:1")},
		{arg: ast.Number("1"), refused: true},
		{arg: ast.String("registry.example/" + strings.Repeat("x", maxHelperString)), refused: true},
	}
	for _, tc := range tests {
		holds, err := h.Holds(t.Context(), drivers.HelperInput{Constraint: constraint, Argument: tc.arg})
		if tc.refused != errors.Is(err, errNotString) || (err != nil && !tc.refused) || holds != tc.holds {
			t.Errorf("%.40v: holds %v, error %v; want %v, refused %v", tc.arg, holds, err, tc.holds, tc.refused)
		}
	}
}
