package diff

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/peer"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// sides is a peer and an engine loaded with the same objects.
type sides struct {
	peer *peer.Peer
	eng  *opa.Engine
}

func parseYAML(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	objs, err := peer.ParseObjects([]byte(y))
	if err != nil || len(objs) != 1 {
		t.Fatalf("parse %q: %v (%d objects)", y, err, len(objs))
	}
	return objs[0]
}

func templateYAML(kind, rego string) string {
	return `apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata:
  name: ` + strings.ToLower(kind) + `
spec:
  crd:
    spec:
      names:
        kind: ` + kind + `
      validation:
        openAPIV3Schema:
          type: object
          properties:
            x:
              type: integer
  targets:
  - target: admission.k8s.gatekeeper.sh
    rego: |
` + indent(rego, "      ")
}

func constraintYAML(kind, name, extra string) string {
	return `apiVersion: constraints.gatekeeper.sh/v1beta1
kind: ` + kind + `
metadata:
  name: ` + name + `
` + extra
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n") + "\n"
}

func newSides(t *testing.T, objs ...string) *sides {
	t.Helper()
	ctx := context.Background()
	p, err := peer.New()
	if err != nil {
		t.Fatal(err)
	}
	e, err := opa.New(ctx, opa.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(ctx) })
	var changes []opa.Change
	for _, y := range objs {
		u := parseYAML(t, y)
		var err error
		switch {
		case u.GetKind() == "ConstraintTemplate":
			err = p.AddTemplate(u)
		case u.GroupVersionKind().Group == opa.ConstraintGroup:
			err = p.AddConstraint(u)
		default:
			err = p.AddData(u)
		}
		if err != nil {
			t.Fatalf("peer: %s: %v", u.GetName(), err)
		}
		changes = append(changes, opa.Change{Object: u})
	}
	if errs := e.Apply(ctx, changes); len(errs) > 0 {
		t.Fatalf("engine: %v", errs)
	}
	return &sides{peer: p, eng: e}
}

var intendedPod = map[string]any{
	"apiVersion": "v1",
	"kind":       "Pod",
	"metadata":   map[string]any{"name": "p", "namespace": "default"},
	"spec":       map[string]any{"containers": []any{map[string]any{"name": "c", "image": "nginx"}}},
}

func (s *sides) review(t *testing.T) ([]peer.Result, error, []opa.Violation) {
	t.Helper()
	ctx := context.Background()
	res, perr := s.peer.ReviewPodOnNode(ctx, intendedPod, "n1", nil, userInfo)
	pl, err := s.eng.Evaluate(ctx, opa.PlacementRequest{Pod: intendedPod, Candidates: []opa.Candidate{{Name: "n1", Object: map[string]any{"metadata": map[string]any{"name": "n1"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return res, perr, pl.Violations(0)
}

const okTemplate = `package ok
violation[{"msg": "ok"}] { true }
`

// TestIntendedDifferences pins, on minimal templates, each difference the
// differential test accepts, so that a change on either side shows.
func TestIntendedDifferences(t *testing.T) {
	t.Run(diffPeerReviewError, func(t *testing.T) {
		s := newSides(t,
			templateYAML("K8sNumMsg", "package nummsg\nviolation[{\"msg\": 42}] { true }\n"),
			constraintYAML("K8sNumMsg", "num", ""),
			templateYAML("K8sOk", okTemplate),
			constraintYAML("K8sOk", "ok", ""))
		res, perr, viol := s.review(t)
		if perr == nil {
			t.Fatalf("peer: want the whole review to fail, got %+v", res)
		}
		t.Logf("peer error: %v", perr)
		var errs, ok int
		for _, v := range viol {
			switch {
			case v.Error && v.Constraint.Name == "num":
				errs++
			case !v.Error && v.Constraint.Name == "ok" && v.Message == "ok":
				ok++
			}
		}
		if errs != 1 || ok != 1 || len(viol) != 2 {
			t.Errorf("engine: want one Error violation for num and the ok violation, got %+v", viol)
		}
	})

	t.Run(diffEvalErrorText, func(t *testing.T) {
		// A conflict in the template's own module and one in a lib.
		s := newSides(t,
			templateYAML("K8sConflict", `package conflict
violation[{"msg": msg}] { msg := sprintf("%v", [g(1)]) }
g(x) = 1 { true }
g(x) = 2 { true }
`),
			constraintYAML("K8sConflict", "c", ""),
			templateYAML("K8sLibConflict", `package libconflict
import data.lib.helpers.f
violation[{"msg": msg}] { msg := sprintf("%v", [f(1)]) }
`)+"    libs:\n    - |\n      package lib.helpers\n      f(x) = 1 { true }\n      f(x) = 2 { true }\n",
			constraintYAML("K8sLibConflict", "l", ""))
		res, perr, viol := s.review(t)
		if perr != nil || len(res) != 2 || len(viol) != 2 {
			t.Fatalf("want two error results on each side, got peer %+v (%v), engine %+v", res, perr, viol)
		}
		for i := range res {
			v := viol[i]
			if !v.Error || v.Constraint.Kind != res[i].ConstraintKind {
				t.Fatalf("engine %+v does not pair with peer %+v", v, res[i])
			}
			t.Logf("peer:   %q", res[i].Msg)
			t.Logf("engine: %q", v.Message)
			if res[i].Msg == v.Message {
				t.Logf("the texts are now identical: drop %s from the differential test", diffEvalErrorText)
			}
			if got := errorText(v.Message, v.Constraint.Kind, strings.ToLower(v.Constraint.Kind)); got != res[i].Msg {
				t.Errorf("errorText(engine) = %q, want the peer's %q", got, res[i].Msg)
			}
			if b, _ := json.Marshal(res[i].Details); string(b) != "null" || v.Details != nil {
				t.Errorf("details: peer %s, engine %s; want null on both", b, v.Details)
			}
		}
	})

	t.Run(diffActionAnnotation, func(t *testing.T) {
		s := newSides(t,
			templateYAML("K8sOk", okTemplate),
			constraintYAML("K8sOk", "ok", "  annotations:\n    "+opa.ActionAnnotation+": warn\nspec:\n  enforcementAction: dryrun\n"))
		res, perr, viol := s.review(t)
		if perr != nil || len(res) != 1 || len(viol) != 1 {
			t.Fatalf("got peer %+v (%v), engine %+v", res, perr, viol)
		}
		if res[0].EnforcementAction != "dryrun" || viol[0].Action != opa.Warn || res[0].Msg != viol[0].Message {
			t.Errorf("peer %+v, engine %+v; want the same message, dryrun in the peer and warn in the engine", res[0], viol[0])
		}
	})
}

// TestEvalErrorScope pins a difference the engine keeps on purpose.
func TestEvalErrorScope(t *testing.T) {
	t.Run("eval-error-scope", func(t *testing.T) {
		// The framework evaluates all constraints of one kind in a single
		// query: when it fails (here a conflict that only constraint a's
		// parameters provoke), every constraint of that kind gets the
		// error as its only violation, b included. The engine evaluates
		// each constraint alone, so b keeps its own verdict ("2") and
		// carries no error. With b deny and a warn/dryrun, Gatekeeper
		// denies where the engine does not (and the other way round when
		// b has no violation of its own).
		s := newSides(t,
			templateYAML("K8sParamConflict", `package paramconflict
import data.lib.helpers.f
violation[{"msg": msg}] { msg := sprintf("%v", [f(input.parameters.x)]) }
`)+"    libs:\n    - |\n      package lib.helpers\n      f(x) = 1 { x == 1 }\n      f(x) = 2 { true }\n",
			constraintYAML("K8sParamConflict", "a", "spec:\n  parameters:\n    x: 1\n"),
			constraintYAML("K8sParamConflict", "b", "spec:\n  parameters:\n    x: 2\n"))
		res, perr, viol := s.review(t)
		if perr != nil {
			t.Fatal(perr)
		}
		peerBy := map[string]string{}
		for _, r := range res {
			peerBy[r.ConstraintName] += r.Msg
		}
		engBy := map[string]string{}
		for _, v := range viol {
			engBy[v.Constraint.Name] += errorText(v.Message, v.Constraint.Kind, strings.ToLower(v.Constraint.Kind))
		}
		if !strings.Contains(peerBy["a"], "eval_conflict_error") || peerBy["b"] != peerBy["a"] {
			t.Fatalf("the framework no longer fails the whole kind: peer %q", peerBy)
		}
		// Intended: the engine evaluates each constraint alone, so an error
		// that only a's parameters provoke fails a (closed) and leaves b's
		// own verdict standing. Failing b for a's parameters would deny
		// nodes for a reason b's author did not write; no library
		// template provokes such an error.
		if engBy["a"] != peerBy["a"] {
			t.Errorf("constraint a: engine %q, peer %q: both should carry the error", engBy["a"], peerBy["a"])
		}
		if engBy["b"] != "2" {
			t.Errorf("constraint b: engine %q, want its own verdict \"2\"", engBy["b"])
		}
	})
}
