package server

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

func TestHealth(t *testing.T) {
	var templates, inventory atomic.Bool
	s, _ := newTestServer(t, Options{ReadinessChecks: []ReadinessCheck{
		{Name: "templates", Ready: func() (bool, string) {
			if templates.Load() {
				return true, ""
			}
			return false, "templates to sync"
		}},
		{Name: "inventory", Ready: func() (bool, string) {
			if inventory.Load() {
				return true, "answering from a stale inventory"
			}
			return false, "node inventory to sync"
		}},
	}})
	h := s.Handler()

	for _, path := range []string{"/livez", "/healthz"} {
		if rec := do(t, h, http.MethodGet, path, ""); rec.Code != 200 || rec.Body.String() != "ok\n" {
			t.Errorf("%s: %d %q", path, rec.Code, rec.Body)
		}
	}
	check := func(path string, wantCode int, wantBody string) {
		t.Helper()
		rec := do(t, h, http.MethodGet, path, "")
		if rec.Code != wantCode || rec.Body.String() != wantBody {
			t.Errorf("%s: %d %q, want %d %q", path, rec.Code, rec.Body, wantCode, wantBody)
		}
	}
	check("/readyz", 503, "not ready: waiting for templates to sync, node inventory to sync\n")
	templates.Store(true)
	check("/readyz", 503, "not ready: waiting for node inventory to sync\n")
	check("/readyz?verbose", 503, "[+]templates ok\n[-]inventory waiting for: node inventory to sync\n[+]policies ok\nreadyz check failed\n")
	inventory.Store(true)
	check("/readyz", 200, "ok\nwarning: answering from a stale inventory\n")
	check("/readyz?verbose", 200, "[+]templates ok\n[+]inventory ok: answering from a stale inventory\n[+]policies ok\nreadyz check passed\n")

	var late atomic.Bool
	if err := s.AddReadinessCheck(ReadinessCheck{Name: "late", Ready: func() (bool, string) { return late.Load(), "" }}); err != nil {
		t.Fatal(err)
	}
	check("/readyz", 503, "not ready: waiting for late\n")
	check("/readyz?verbose", 503, "[+]templates ok\n[+]inventory ok: answering from a stale inventory\n[-]late waiting for: late\n[+]policies ok\nreadyz check failed\n")
	late.Store(true)
	check("/readyz", 200, "ok\nwarning: answering from a stale inventory\n")

	// Liveness does not depend on readiness.
	s2, _ := newTestServer(t, Options{ReadinessChecks: []ReadinessCheck{{Name: "never", Ready: func() (bool, string) { return false, "never" }}}})
	if rec := do(t, s2.Handler(), http.MethodGet, "/livez", ""); rec.Code != 200 {
		t.Errorf("livez %d", rec.Code)
	}
	// A check without a name or a function is refused.
	for _, c := range []ReadinessCheck{{Ready: func() (bool, string) { return true, "" }}, {Name: "two words", Ready: func() (bool, string) { return true, "" }}, {Name: "nil"}} {
		if _, err := New(Options{Policy: &fakePolicy{}, ReadinessChecks: []ReadinessCheck{c}}); err == nil {
			t.Errorf("check %q accepted", c.Name)
		}
		if err := s.AddReadinessCheck(c); err == nil {
			t.Errorf("check %q added", c.Name)
		}
	}
	// No checks: ready.
	s3, _ := newTestServer(t, Options{})
	if rec := do(t, s3.Handler(), http.MethodGet, "/readyz", ""); rec.Code != 200 {
		t.Errorf("readyz without checks %d", rec.Code)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, fp := newTestServer(t, Options{Registry: reg, Binder: &fakeBinder{pods: map[string]*v1.Pod{"team-a/web-1": testPod("team-a", "web-1")}}})
	h := s.Handler()
	pod := testPod("team-a", "web-1")
	filterBody := mustJSON(t, extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("good-1", "bad-1", "meh-1", "ghost-1", "worse-1")})
	if rec := do(t, h, http.MethodPost, "/filter", filterBody); rec.Code != 200 {
		t.Fatal(rec.Body)
	}
	if rec := do(t, h, http.MethodPost, "/prioritize", filterBody); rec.Code != 200 {
		t.Fatal(rec.Body)
	}
	do(t, h, http.MethodPost, "/filter", "nonsense")
	do(t, h, http.MethodPost, "/bind", mustJSON(t, extenderv1.ExtenderBindingArgs{PodName: "web-1", PodNamespace: "team-a", PodUID: "uid-web-1", Node: "bad-2"}))
	fp.set(func(f *fakePolicy) { f.err = errBoom })
	do(t, h, http.MethodPost, "/preempt", validBody(t, "/preempt"))

	rec := do(t, h, http.MethodGet, "/metrics", "")
	if rec.Code != 200 {
		t.Fatalf("metrics: %d", rec.Code)
	}
	out := rec.Body.String()
	for _, want := range []string{
		`opa_scheduler_extender_request_duration_seconds_count{result="ok",verb="filter"} 1`,
		`opa_scheduler_extender_request_duration_seconds_count{result="bad_request",verb="filter"} 1`,
		`opa_scheduler_extender_request_duration_seconds_count{result="ok",verb="prioritize"} 1`,
		`opa_scheduler_extender_request_duration_seconds_count{result="error",verb="bind"} 1`,
		`opa_scheduler_extender_request_duration_seconds_count{result="error",verb="preempt"} 1`,
		`opa_scheduler_extender_request_duration_seconds_bucket{result="ok",verb="filter",le="0.0001"}`,
		`opa_scheduler_extender_request_duration_seconds_bucket{result="ok",verb="filter",le="5"} 1`,
		// bad-1 and worse-1 violate no-bad-nodes (bad-1 twice: counted once per pair).
		`opa_scheduler_extender_decisions_total{action="deny",constraint="no-bad-nodes",constraint_kind="K8sNoBadNodes",verb="filter"} 2`,
		`opa_scheduler_extender_decisions_total{action="deny",constraint="zones",constraint_kind="K8sZones",verb="filter"} 1`,
		`opa_scheduler_extender_decisions_total{action="warn",constraint="prefer-a",constraint_kind="K8sPrefer",verb="filter"} 2`,
		`opa_scheduler_extender_decisions_total{action="warn",constraint="prefer-a",constraint_kind="K8sPrefer",verb="prioritize"} 2`,
		`opa_scheduler_extender_decisions_total{action="deny",constraint="no-bad-nodes",constraint_kind="K8sNoBadNodes",verb="bind"} 1`,
		`opa_scheduler_extender_nodes_rejected_total{reason="denied",verb="filter"} 2`,
		`opa_scheduler_extender_nodes_rejected_total{reason="unknown",verb="filter"} 1`,
		`opa_scheduler_extender_nodes_rejected_total{reason="denied",verb="bind"} 1`,
		`opa_scheduler_extender_nodes_rejected_total{reason="denied",verb="preempt"} 0`,
		`opa_scheduler_extender_nodes_evaluated_total{verb="filter"} 5`,
		`opa_scheduler_extender_nodes_evaluated_total{verb="prioritize"} 5`,
		`opa_scheduler_extender_nodes_evaluated_total{verb="bind"} 1`,
		`opa_scheduler_extender_evaluations_total 42`,
		`opa_scheduler_extender_helper_evaluations_total 9`,
		`opa_scheduler_extender_memo_hits_total 30`,
		`opa_scheduler_extender_memo_misses_total 12`,
		`opa_scheduler_extender_key_values_reused_total 468`,
		`opa_scheduler_extender_evaluation_errors_total 1`,
		`opa_scheduler_extender_template_compile_errors_total 2`,
		`opa_scheduler_extender_constraint_errors_total 3`,
		`opa_scheduler_extender_policy_generation 7`,
		`opa_scheduler_extender_last_policy_apply_timestamp_seconds 1.7e+09`,
		`opa_scheduler_extender_inventory_objects{group_version="v1",kind="Node"} 3`,
		`opa_scheduler_extender_inventory_objects{group_version="apps/v1",kind="Deployment"} 1`,
		`opa_scheduler_extender_handler_panics_total 0`,
		`opa_scheduler_extender_info{enforcement_point="opa-scheduler-extender"} 1`,
		`opa_scheduler_extender_build_info{goversion="unknown",revision="unknown",version="unknown"} 1`,
		`# TYPE opa_scheduler_extender_evaluations_total counter`,
		`# TYPE opa_scheduler_extender_policy_generation gauge`,
		"go_goroutines ",
		"process_",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// No pod or node names in any label.
	for _, leak := range []string{"web-1", "team-a", "good-1", "bad-1", "ghost-1", "bad-2"} {
		if strings.Contains(out, leak) {
			t.Errorf("metrics mention %q", leak)
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "opa_scheduler_extender_") {
			t.Errorf("metric lint: %s: %s", p.Metric, p.Text)
		}
	}
}

func TestMetricsSharedRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(prometheus.NewGoCollector()); err != nil { //nolint:staticcheck // registering the old one on purpose
		t.Fatal(err)
	}
	if _, err := New(Options{Policy: &fakePolicy{}, Registry: reg}); err != nil {
		t.Fatalf("a registry that already has the Go collector: %v", err)
	}
	// A second server on the same registry collides on its own metrics.
	if _, err := New(Options{Policy: &fakePolicy{}, Registry: reg}); err == nil {
		t.Fatal("two servers on one registry: want an error")
	}
}

func TestNewErrors(t *testing.T) {
	for name, opts := range map[string]Options{
		"no policy":        {},
		"negative timeout": {Policy: &fakePolicy{}, RequestTimeout: -1},
		"negative body":    {Policy: &fakePolicy{}, MaxBodyBytes: -1},
	} {
		if _, err := New(opts); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
	s, err := New(Options{Policy: &fakePolicy{}})
	if err != nil {
		t.Fatal(err)
	}
	if s.requestTimeout != DefaultRequestTimeout || s.maxBodyBytes != DefaultMaxBodyBytes || !s.debug || s.pprof ||
		s.enforcementPoint != "opa-scheduler-extender" || s.log == nil || s.registry == nil {
		t.Errorf("defaults: %+v", s)
	}
}

func TestPanicRecovered(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, fp := newTestServer(t, Options{Registry: reg})
	fp.set(func(f *fakePolicy) { f.panicWith = "kaboom" })
	rec := do(t, s.Handler(), http.MethodPost, "/filter", validBody(t, "/filter"))
	if rec.Code != http.StatusInternalServerError || errorField(t, rec) != "internal error: panic: kaboom" {
		t.Fatalf("status %d body %s", rec.Code, rec.Body)
	}
	// The server keeps serving.
	fp.set(func(f *fakePolicy) { f.panicWith = nil })
	if rec := do(t, s.Handler(), http.MethodPost, "/filter", validBody(t, "/filter")); rec.Code != 200 {
		t.Fatalf("after a panic: %d %s", rec.Code, rec.Body)
	}
	if got := testutil.ToFloat64(s.metrics.panics); got != 1 {
		t.Errorf("panics metric %v", got)
	}
	out := do(t, s.Handler(), http.MethodGet, "/metrics", "").Body.String()
	if !strings.Contains(out, `opa_scheduler_extender_request_duration_seconds_count{result="error",verb="filter"} 1`) {
		t.Error("the panicked request is not counted as an error")
	}
}

func TestDebugEndpoints(t *testing.T) {
	t.Run("policies", func(t *testing.T) {
		s, _ := newTestServer(t, Options{})
		rec := do(t, s.Handler(), http.MethodGet, "/debug/policies", "")
		if rec.Code != 200 {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
		st := decodeInto[map[string]any](t, rec)
		if st["generation"] != float64(7) || len(st["templates"].([]any)) != 1 || st["inventory"].(map[string]any)["v1/Node"] != float64(3) {
			t.Errorf("status %s", rec.Body)
		}
	})
	t.Run("explain", func(t *testing.T) {
		s, fp := newTestServer(t, Options{EnforcementPoint: "my-point"})
		body := mustJSON(t, ExplainRequest{
			Pod:       testPod("team-a", "web-1"),
			NodeNames: []string{"good-1", "bad-1", "ghost-1", "meh-1", "good-1"},
			Nodes:     []v1.Node{testNode("n-1", map[string]string{"policy": "deny"}), testNode("good-1", nil)},
		})
		rec := do(t, s.Handler(), http.MethodPost, "/debug/explain", body)
		if rec.Code != 200 {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
		res := decodeInto[ExplainResponse](t, rec)
		type row struct {
			name, verdict string
			score         int64
			traced        bool
		}
		want := []row{
			{"good-1", "allowed", 10, true}, {"bad-1", "denied", 0, true}, {"ghost-1", "unknown", 0, false},
			{"meh-1", "allowed", 5, true}, {"n-1", "denied", 0, true},
		}
		if len(res.Nodes) != len(want) {
			t.Fatalf("nodes %s", rec.Body)
		}
		for i, w := range want {
			n := res.Nodes[i]
			if n.Name != w.name || n.Verdict != w.verdict || n.Score != w.score || (len(n.Trace) > 0) != w.traced || n.Trace == nil {
				t.Errorf("node %d: %+v, want %+v", i, n, w)
			}
		}
		if res.Pod != "team-a/web-1" || res.EnforcementPoint != "my-point" || res.Generation != 7 || res.MatchedWarnConstraints != 2 {
			t.Errorf("response %s", rec.Body)
		}
		if res.Nodes[1].Trace[0].Duration != 1500 || len(res.Nodes[1].Violations) != 2 {
			t.Errorf("trace %s", rec.Body)
		}
		if !strings.Contains(rec.Body.String(), `"durationNanos":1500`) {
			t.Errorf("trace timing not in the answer: %s", rec.Body)
		}
		if _, last, _ := fp.snapshot(); !last.Explain {
			t.Error("Explain not requested from the engine")
		}
	})
	t.Run("explain bad input", func(t *testing.T) {
		s, _ := newTestServer(t, Options{})
		for body, want := range map[string]string{
			"":              "empty request body",
			`{"pod": null}`: "request has no Pod",
			`{"pod": {"metadata": {"name": "p", "namespace": "n"}}}`:                    "give the nodes",
			`{"pod": {"metadata": {"name": "p", "namespace": "n"}}, "nodeNames": [""]}`: "nodeNames[0] is empty",
		} {
			rec := do(t, s.Handler(), http.MethodPost, "/debug/explain", body)
			if rec.Code != 400 || !strings.Contains(errorField(t, rec), want) {
				t.Errorf("%q: %d %s", body, rec.Code, rec.Body)
			}
		}
		if rec := do(t, s.Handler(), http.MethodGet, "/debug/explain", ""); rec.Code != 405 {
			t.Errorf("GET explain: %d", rec.Code)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		s, _ := newTestServer(t, Options{DisableDebug: true})
		for _, c := range []struct{ method, path string }{{"GET", "/debug/policies"}, {"POST", "/debug/explain"}} {
			if rec := do(t, s.Handler(), c.method, c.path, validBody(t, "/debug/explain")); rec.Code != 404 {
				t.Errorf("%s %s: %d", c.method, c.path, rec.Code)
			}
		}
	})
	t.Run("pprof off by default", func(t *testing.T) {
		s, _ := newTestServer(t, Options{})
		for _, p := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/heap"} {
			if rec := do(t, s.Handler(), http.MethodGet, p, ""); rec.Code != 404 {
				t.Errorf("%s: %d", p, rec.Code)
			}
		}
	})
	t.Run("pprof on", func(t *testing.T) {
		s, _ := newTestServer(t, Options{EnablePprof: true, DisableDebug: true})
		for _, p := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/heap?debug=1", "/debug/pprof/goroutine?debug=1"} {
			if rec := do(t, s.Handler(), http.MethodGet, p, ""); rec.Code != 200 {
				t.Errorf("%s: %d", p, rec.Code)
			}
		}
	})
}
