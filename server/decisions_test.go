package server

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// records is a DecisionSink that keeps what it gets.
type records struct {
	mu sync.Mutex
	ds []Decision
}

func (r *records) sink(_ context.Context, d Decision) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ds = append(r.ds, d)
}

// summary is "verb pod rejected=N kind/name:action:nodes@sample" per constraint.
func (d Decision) summary() string {
	var b strings.Builder
	b.WriteString(d.Verb + " " + d.Pod + " " + d.UID)
	for _, c := range d.Constraints {
		b.WriteString(" " + c.Constraint.String() + ":" + string(c.Action) + ":" + itoa(c.Nodes) + "@" + c.SampleNode + "=" + c.SampleMessage)
	}
	return b.String() + " rejected=" + itoa(d.Rejected)
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestDecisionRecords(t *testing.T) {
	nodes := []string{"good-1", "dry-1", "meh-1", "bad-1", "ghost-1", "bad-2"}
	body := mustJSON(t, extenderv1.ExtenderArgs{Pod: testPod("ns", "p"), NodeNames: &nodes})
	bind := mustJSON(t, extenderv1.ExtenderBindingArgs{PodName: "p", PodNamespace: "ns", PodUID: "uid-p", Node: "bad-1"})
	for _, tc := range []struct {
		level DecisionLevel
		want  []string
	}{
		{DecisionsOff, nil},
		{DecisionsDeny, []string{
			"filter ns/p uid-p K8sNoBadNodes/no-bad-nodes:deny:2@bad-1=node bad-1 is bad rejected=3",
			// prioritize: denied nodes only reach it without filter; recorded as such
			"prioritize ns/p uid-p K8sNoBadNodes/no-bad-nodes:deny:2@bad-1=node bad-1 is bad rejected=0",
			"bind ns/p uid-p K8sNoBadNodes/no-bad-nodes:deny:1@bad-1=node bad-1 is bad rejected=1",
		}},
		{DecisionsWarn, []string{
			"filter ns/p uid-p K8sPrefer/prefer-a:warn:1@meh-1=meh K8sNoBadNodes/no-bad-nodes:deny:2@bad-1=node bad-1 is bad rejected=3",
			"prioritize ns/p uid-p K8sPrefer/prefer-a:warn:1@meh-1=meh K8sNoBadNodes/no-bad-nodes:deny:2@bad-1=node bad-1 is bad rejected=0",
			"bind ns/p uid-p K8sNoBadNodes/no-bad-nodes:deny:1@bad-1=node bad-1 is bad rejected=1",
		}},
	} {
		rec := &records{}
		// A second output at level all sees every call: each gets its own level.
		all := &records{}
		s, _ := newTestServer(t, Options{Decisions: []DecisionOutput{{tc.level, rec.sink}, {DecisionsAll, all.sink}},
			Binder: &fakeBinder{pods: map[string]*v1.Pod{"ns/p": testPod("ns", "p")}}})
		h := s.Handler()
		for _, call := range []struct{ path, body string }{{"/filter", body}, {"/prioritize", body}, {"/bind", bind}} {
			if r := do(t, h, http.MethodPost, call.path, call.body); r.Code != http.StatusOK {
				t.Fatalf("%s: %d %s", call.path, r.Code, r.Body)
			}
		}
		var got []string
		for _, d := range rec.ds {
			if d.PolicyGeneration != 7 || d.Duration <= 0 {
				t.Errorf("record %+v lacks the generation or the duration", d)
			}
			got = append(got, d.summary())
		}
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("level %d:\n got %s\nwant %s", tc.level, strings.Join(got, "\n     "), strings.Join(tc.want, "\n     "))
		}
		if len(all.ds) != 3 || !strings.Contains(all.ds[0].summary(), "K8sAudit/audit-only:dryrun") {
			t.Errorf("the level-all output got %d records: %+v", len(all.ds), all.ds)
		}
	}
}

func TestDecisionsAllRecordsEveryCall(t *testing.T) {
	rec := &records{}
	s, _ := newTestServer(t, Options{Decisions: []DecisionOutput{{DecisionsAll, rec.sink}}})
	nodes := []string{"good-1", "dry-1"}
	if r := do(t, s.Handler(), http.MethodPost, "/filter", mustJSON(t, extenderv1.ExtenderArgs{Pod: testPod("ns", "p"), NodeNames: &nodes})); r.Code != 200 {
		t.Fatal(r.Body)
	}
	if len(rec.ds) != 1 || rec.ds[0].summary() != "filter ns/p uid-p K8sAudit/audit-only:dryrun:1@dry-1=noted rejected=0" {
		t.Errorf("records %+v", rec.ds)
	}
}

func TestParseDecisionLevel(t *testing.T) {
	for in, want := range map[string]DecisionLevel{"": DecisionsOff, "off": DecisionsOff, "deny": DecisionsDeny, "warn": DecisionsWarn, "all": DecisionsAll} {
		if got, err := ParseDecisionLevel(in); err != nil || got != want {
			t.Errorf("ParseDecisionLevel(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseDecisionLevel("verbose"); err == nil || !strings.Contains(err.Error(), "want off, deny, warn or all") {
		t.Errorf("a bad level: %v", err)
	}
}

// TestLogDecisionsWritesJSON: the default sink writes one JSON line per
// decision that a log pipeline can parse.
func TestLogDecisionsWritesJSON(t *testing.T) {
	var buf bytes.Buffer
	LogDecisions(slog.New(slog.NewJSONHandler(&buf, nil)))(context.Background(), Decision{Verb: "filter", Pod: "ns/p", UID: "u", PolicyGeneration: 3, Nodes: 2, Rejected: 1,
		Constraints: []ConstraintDecision{{Constraint: opa.ConstraintKey{Kind: "K8sX", Name: "x"}, Action: opa.Deny, Nodes: 1, SampleNode: "n1", SampleMessage: "no"}}})
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	cs, _ := line["constraints"].([]any)
	if line["msg"] != "decision" || line["pod"] != "ns/p" || len(cs) != 1 || !strings.Contains(buf.String(), `"sampleMessage":"no"`) {
		t.Errorf("record %s", buf.String())
	}
}
