package server

import (
	"context"
	"net/http"
	"strings"
	"testing"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/opatest"
)

// TestEnforcementTable runs the enforcement table shared with the plugin
// build (testdata/enforcement.yaml) through /filter and /prioritize, on a
// real engine.
func TestEnforcementTable(t *testing.T) {
	table, err := opatest.ReadEnforcementTable("testdata/enforcement.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	engine, err := table.Engine(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close(ctx)
	s, err := New(Options{Policy: engine, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	nodes := table.NodeNames()
	for _, tc := range table.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			args := extenderv1.ExtenderArgs{Pod: tc.PodObject(), NodeNames: &nodes}
			rec := do(t, h, http.MethodPost, "/filter", mustJSON(t, args))
			if rec.Code != http.StatusOK {
				t.Fatalf("filter: HTTP %d: %s", rec.Code, rec.Body)
			}
			filter := decodeInto[extenderv1.ExtenderFilterResult](t, rec)
			rec = do(t, h, http.MethodPost, "/prioritize", mustJSON(t, args))
			if rec.Code != http.StatusOK {
				t.Fatalf("prioritize: HTTP %d: %s", rec.Code, rec.Body)
			}
			scores := map[string]int64{}
			for _, hp := range decodeInto[extenderv1.HostPriorityList](t, rec) {
				scores[hp.Host] = hp.Score
			}
			if tc.RejectedEverywhere != "" {
				if len(*filter.NodeNames) != 0 {
					t.Errorf("nodes %v passed a pod-only deny", *filter.NodeNames)
				}
				for _, n := range nodes {
					if msg := filter.FailedAndUnresolvableNodes[n]; !strings.Contains(msg, tc.RejectedEverywhere) {
						t.Errorf("node %s: message %q, want one containing %q", n, msg, tc.RejectedEverywhere)
					}
				}
				return
			}
			for n, want := range tc.Want {
				got := filter.FailedAndUnresolvableNodes[n]
				if got != want.Denied {
					t.Errorf("node %s: deny message %q, want %q", n, got, want.Denied)
				}
				if want.Denied == "" && scores[n] != want.Score {
					t.Errorf("node %s: score %d, want %d", n, scores[n], want.Score)
				}
			}
		})
	}
}
