package opatest_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/opatest"
)

// TestPodQueryAgreesWithEvaluate: a pod prepared once and judged on
// blocks of nodes gets, node by node, Evaluate's violations, denial and
// score; pods that differ only in printed values share a signature.
func TestPodQueryAgreesWithEvaluate(t *testing.T) {
	table, err := opatest.ReadEnforcementTable("../../server/testdata/enforcement.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e, err := table.Engine(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	names := table.NodeNames()
	var all []opa.Candidate
	for _, n := range append(names, "not-a-node") {
		all = append(all, opa.Candidate{Name: n})
	}
	signatures := map[string]string{}
	for _, tc := range table.Cases {
		pod, err := runtime.DefaultUnstructuredConverter.ToUnstructured(tc.PodObject())
		if err != nil {
			t.Fatal(err)
		}
		want, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: pod, Candidates: all})
		if err != nil {
			t.Fatal(err)
		}
		q, err := e.Prepare(ctx, pod)
		if err != nil {
			t.Fatal(err)
		}
		if d, msg := q.PodDenied(); (tc.RejectedEverywhere != "") != d || msg != tc.RejectedEverywhere {
			t.Errorf("%s: PodDenied %v %q, want %q", tc.Name, d, msg, tc.RejectedEverywhere)
		}
		if q.MatchedWarnConstraints() != want.MatchedWarnConstraints {
			t.Errorf("%s: %d warn constraints matched, Evaluate says %d", tc.Name, q.MatchedWarnConstraints(), want.MatchedWarnConstraints)
		}
		for start := 0; start < len(all); start += 4 {
			block := all[start:min(start+4, len(all))]
			got, err := q.Evaluate(ctx, block)
			if err != nil {
				t.Fatal(err)
			}
			for j := range block {
				i := start + j
				if msg := denyMessageOf(want.Violations(i)); got.DenyMessage(j) != msg || want.DenyMessage(i) != msg {
					t.Errorf("%s, node %s: DenyMessage %q (Evaluate: %q), the deny violations say %q", tc.Name, block[j].Name, got.DenyMessage(j), want.DenyMessage(i), msg)
				}
				if !reflect.DeepEqual(got.Violations(j), want.Violations(i)) || got.Denied(j) != want.Denied(i) ||
					got.Score(j) != want.Score(i) || got.Nodes[j].Unknown != want.Nodes[i].Unknown {
					t.Errorf("%s, node %s: PodQuery gives %v (denied %v, score %d), Evaluate %v (denied %v, score %d)", tc.Name, block[j].Name,
						got.Violations(j), got.Denied(j), got.Score(j), want.Violations(i), want.Denied(i), want.Score(i))
				}
			}
		}
		sig, ok := q.Signature()
		if !ok {
			t.Errorf("%s: the table's policies are memoised, the pod must be signable", tc.Name)
		}
		// The same pod under another name: names are only printed.
		renamed := tc.PodObject()
		renamed.Name += "-other"
		content, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(renamed)
		q2, err := e.Prepare(ctx, content)
		if err != nil {
			t.Fatal(err)
		}
		if sig2, _ := q2.Signature(); sig2 != sig {
			t.Errorf("%s: renaming the pod changed its signature:\n%s\n%s", tc.Name, sig, sig2)
		}
		// The first pod's answer, rebound to the renamed pod, is the
		// renamed pod's own answer, messages included.
		first, err := q.Evaluate(ctx, all)
		if err != nil {
			t.Fatal(err)
		}
		own, err := q2.Evaluate(ctx, all)
		if err != nil {
			t.Fatal(err)
		}
		rebound, ok := q2.Rebind(first)
		if !ok {
			t.Fatalf("%s: Rebind refused an answer of the same signature", tc.Name)
		}
		for i := range all {
			if !reflect.DeepEqual(rebound.Violations(i), own.Violations(i)) || rebound.Score(i) != own.Score(i) || rebound.Denied(i) != own.Denied(i) {
				t.Errorf("%s, node %s: rebound %v, own %v", tc.Name, all[i].Name, rebound.Violations(i), own.Violations(i))
			}
		}
		if _, ok := q2.Rebind(want); ok {
			t.Errorf("%s: Rebind took an answer of Engine.Evaluate, which has no signature", tc.Name)
		}
		if other, dup := signatures[sig]; dup {
			t.Errorf("%s and %s share a signature but are judged differently", tc.Name, other)
		}
		signatures[sig] = tc.Name
	}
}

// denyMessageOf joins the deny violations as "[name] msg; ...".
func denyMessageOf(vs []opa.Violation) string {
	var parts []string
	for _, v := range vs {
		if v.Action == opa.Deny {
			parts = append(parts, "["+v.Constraint.Name+"] "+v.Message)
		}
	}
	return strings.Join(parts, "; ")
}
