package opa_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// An answer whose messages print nothing of the pod (deploy/examples') is
// rebound as it is, with no copy; one that prints the pod's name is copied
// with the other pod's name (TestPodQueryAgreesWithEvaluate).
func TestRebindSharesAnswersThatPrintNothingOfThePod(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, opa.Options{}, examples)
	apply(t, e, node("a", map[string]string{"tenant": "alpha"}), node("b", map[string]string{"node.kubernetes.io/lifecycle": "spot"}), node("c", nil))
	cands := []opa.Candidate{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	q1, err := e.Prepare(ctx, pod("default", "web-1"))
	if err != nil {
		t.Fatal(err)
	}
	q2, err := e.Prepare(ctx, pod("default", "web-2"))
	if err != nil {
		t.Fatal(err)
	}
	first, err := q1.Evaluate(ctx, cands)
	if err != nil {
		t.Fatal(err)
	}
	own, err := q2.Evaluate(ctx, cands)
	if err != nil {
		t.Fatal(err)
	}
	rebound, ok := q2.Rebind(first)
	if !ok || rebound != first {
		t.Fatalf("Rebind gave %p (%v), want the answer itself %p", rebound, ok, first)
	}
	denied := 0
	for i := range cands {
		if !reflect.DeepEqual(rebound.Violations(i), own.Violations(i)) || rebound.DenyMessage(i) != own.DenyMessage(i) {
			t.Errorf("node %s: rebound %v, own %v", cands[i].Name, rebound.Violations(i), own.Violations(i))
		}
		if own.Denied(i) {
			denied++
		}
	}
	if denied == 0 {
		t.Error("no node denied: the test shows nothing")
	}
}
