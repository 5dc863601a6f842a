package opa_test

import (
	"context"
	"strings"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

const examples = "../deploy/examples"

func TestPlacementExamples(t *testing.T) {
	e := newEngine(t, opa.Options{}, examples)
	ctx := context.Background()
	cands := []opa.Candidate{{Name: "alpha-1"}, {Name: "alpha-2"}, {Name: "beta-1"}, {Name: "general-a-1"}, {Name: "general-b-1"}, {Name: "spot-b-1"}, {Name: "system-a-1"}, {Name: "ghost"}}
	tests := []struct {
		name    string
		pod     map[string]any
		allowed []string
		// scores for nodes that are allowed, when a warn constraint matches
		scores map[string]int64
	}{
		{name: "alpha tenant pod goes to alpha nodes", pod: pod("alpha", "web-1"), allowed: []string{"alpha-1", "alpha-2"}},
		{name: "untenanted pod avoids tenant and spot nodes", pod: pod("default", "web-2"), allowed: []string{"general-a-1", "general-b-1", "system-a-1"}},
		{name: "spot-tolerating pod may use spot nodes", pod: pod("default", "batch-1", func(p map[string]any) {
			spec(p)["tolerations"] = []any{map[string]any{"key": "spot", "operator": "Exists"}}
		}), allowed: []string{"general-a-1", "general-b-1", "spot-b-1", "system-a-1"}},
		{name: "privileged pod only on the system pool", pod: pod("default", "agent-1", func(p map[string]any) {
			spec(p)["hostNetwork"] = true
		}), allowed: []string{"system-a-1"}},
		{name: "warn constraint scores zone-a nodes higher", pod: pod("default", "api-1", func(p map[string]any) {
			p["metadata"].(map[string]any)["labels"] = map[string]any{"prefer-zone": "a"}
		}), allowed: []string{"general-a-1", "general-b-1", "system-a-1"}, scores: map[string]int64{"general-a-1": 10, "general-b-1": 0, "system-a-1": 10}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: tc.pod, Candidates: cands})
			if err != nil {
				t.Fatal(err)
			}
			var allowed []string
			for i, v := range p.Nodes {
				if v.Name == "ghost" {
					if !v.Unknown {
						t.Errorf("ghost node should be unknown")
					}
					continue
				}
				if !p.Denied(i) {
					allowed = append(allowed, v.Name)
					if want, ok := tc.scores[v.Name]; ok && p.Score(i) != want {
						t.Errorf("score of %s = %d, want %d", v.Name, p.Score(i), want)
					}
				} else {
					for _, x := range p.Violations(i) {
						if x.Message == "" || x.Constraint.Name == "" {
							t.Errorf("violation without message or constraint: %+v", x)
						}
					}
				}
			}
			if strings.Join(allowed, ",") != strings.Join(tc.allowed, ",") {
				t.Errorf("allowed = %v, want %v", allowed, tc.allowed)
			}
		})
	}
}
