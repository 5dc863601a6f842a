package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/source"
)

// TestPolicyHealth runs the real engine with a template that does not
// compile, a constraint whose template is missing and a good pair:
// readiness stays 200 and names both problems, the gauges count them.
func TestPolicyHealth(t *testing.T) {
	ctx := context.Background()
	engine, err := opa.New(ctx, opa.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close(ctx)
	objs, err := source.ReadObjects(strings.NewReader(`
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8sgood}
spec:
  crd: {spec: {names: {kind: K8sGood}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8sgood
        violation[{"msg": "no"}] { input.review.object.metadata.labels.bad }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sGood
metadata: {name: good}
spec: {enforcementAction: warn}
---
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8sbroken}
spec:
  crd: {spec: {names: {kind: K8sBroken}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8sbroken
        violation[{"msg": msg}] { msg := undefined_function(input) }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sBroken
metadata: {name: broken-one}
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sMissing
metadata: {name: orphan}
`))
	if err != nil {
		t.Fatal(err)
	}
	var changes []opa.Change
	for _, o := range objs {
		changes = append(changes, opa.Change{Object: o})
	}
	if errs := engine.Apply(ctx, changes); len(errs) != 1 {
		t.Fatalf("apply: %v, want the broken template refused", errs)
	}
	srv, err := New(Options{Policy: engine, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()

	rec := do(t, h, http.MethodGet, "/readyz", "")
	body := rec.Body.String()
	if rec.Code != http.StatusOK {
		t.Errorf("/readyz %d, want 200: serving with the policies in force is safer", rec.Code)
	}
	for _, want := range []string{
		"warning: 3 policy problems (serving with the policies in force",
		"template k8sbroken refused (no version in force, its constraints are inactive): ",
		"undefined_function",
		"constraint K8sBroken/broken-one inactive",
		"constraint K8sMissing/orphan inactive: no ConstraintTemplate in force defines kind K8sMissing",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/readyz does not say %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "k8sgood") || strings.Contains(body, "good\n") {
		t.Errorf("/readyz names a healthy policy:\n%s", body)
	}

	metrics := do(t, h, http.MethodGet, "/metrics", "").Body.String()
	for _, want := range []string{
		`opa_scheduler_extender_constraint_templates{status="active"} 1`,
		`opa_scheduler_extender_constraint_templates{status="error"} 1`,
		`opa_scheduler_extender_constraint_templates{status="inactive"} 0`,
		`opa_scheduler_extender_constraints{enforcement_action="warn",status="active"} 1`,
		`opa_scheduler_extender_constraints{enforcement_action="deny",status="inactive"} 2`,
		`opa_scheduler_extender_constraints{enforcement_action="deny",status="active"} 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestPolicyHealthListsAFew(t *testing.T) {
	var st opa.Status
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		st.Constraints = append(st.Constraints, opa.ConstraintStatus{Kind: "K8sX", Name: n, Error: "bad parameters"})
	}
	ok, note := policyHealth(statusOnly{st})()
	if !ok || !strings.HasPrefix(note, "7 policy problems") || !strings.HasSuffix(note, "; and 2 more") || strings.Contains(note, "K8sX/f") {
		t.Errorf("policyHealth = %v, %q", ok, note)
	}
}

// statusOnly is a Policy that only has a status.
type statusOnly struct{ st opa.Status }

func (s statusOnly) Status() opa.Status { return s.st }
