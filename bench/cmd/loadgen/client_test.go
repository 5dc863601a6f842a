package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/perf"
)

// TestTailWithCollections: calls that a service's collection overlapped
// are counted, left out of the quiet replica p99, and named in what the
// slowest calls are made of.
func TestTailWithCollections(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	var samples []sample
	// 200 calls 1 ms apart, 0.5 ms each; calls 50 and 51 fall in a
	// collection and take 5 ms; call 120 is a one-off pod that takes 4 ms.
	for i := range 200 {
		d := 500 * time.Microsecond
		switch i {
		case 50, 51:
			d = 5 * time.Millisecond
		case 120:
			d = 4 * time.Millisecond
		}
		start := t0.Add(time.Duration(i) * time.Millisecond)
		// The cycle's longer call: 3 ms of the 5-ms cycles, all of the others.
		call := d
		if d == 5*time.Millisecond {
			call = 3 * time.Millisecond
		}
		samples = append(samples, sample{d: d, call: call, oneOff: i == 120, start: start.UnixNano(), end: start.Add(d).UnixNano()})
	}
	gc := []perf.GCWindow{{Start: t0.Add(50200 * time.Microsecond), End: t0.Add(51300 * time.Microsecond)}}
	for _, tc := range []struct {
		name                       string
		windows                    []perf.GCWindow
		known                      bool
		withGC, slowGC, slowOneOff float64
		quietP99                   float64
	}{
		{"collections known", gc, true, 1.0, 66.7, 33.3, 0.5},
		{"collections not known", nil, false, -1, -1, 33.3, 0},
	} {
		results := []workerResult{{samples: append([]sample(nil), samples...)}}
		if tc.known {
			withCollections(results, tc.windows)
		}
		res, err := summarize(scenario{verb: "cycle", nodes: 500}, &flags{concurrency: 1, duration: time.Second, slowest: 3}, results, time.Second, tc.known)
		if err != nil {
			t.Fatal(err)
		}
		gcOf := func(overlapped bool) string {
			if !tc.known {
				return "unknown"
			}
			return map[bool]string{true: "yes", false: "no"}[overlapped]
		}
		// 50 and 51 took 5 ms, each started 50 and 51 ms into the run and
		// overlapped the collection; 120 took 4 ms and is the one-off pod.
		wantSlowest := []SlowCall{{Ms: 5, CallMs: 3, AtSeconds: 0.05, GC: gcOf(true)}, {Ms: 5, CallMs: 3, AtSeconds: 0.051, GC: gcOf(true)}, {Ms: 4, CallMs: 4, AtSeconds: 0.12, OneOff: true, GC: gcOf(false)}}
		if !slices.Equal(res.Slowest, wantSlowest) {
			t.Errorf("%s: slowest %+v, want %+v", tc.name, res.Slowest, wantSlowest)
		}
		if res.MaxMs != 5 || res.MaxCallMs != 4 || res.StartedAt != "2026-12-06T04:00:00Z" {
			t.Errorf("%s: longest cycle %.3f ms, longest call %.3f, started %q; want 5, 4 (the one-off pod's: the 5-ms cycles' calls took 3), 2026-12-06T04:00:00Z",
				tc.name, res.MaxMs, res.MaxCallMs, res.StartedAt)
		}
		if res.GCEndedPercent != tc.withGC || res.SlowGCPercent != tc.slowGC || res.SlowOneOffPercent != tc.slowOneOff || res.QuietReplicaP99Ms != tc.quietP99 {
			t.Errorf("%s: calls with a GC %.1f%%, p99 calls with a GC %.1f%%, one-off %.1f%%, quiet replica p99 %.3f ms; want %.1f, %.1f, %.1f, %.3f",
				tc.name, res.GCEndedPercent, res.SlowGCPercent, res.SlowOneOffPercent, res.QuietReplicaP99Ms, tc.withGC, tc.slowGC, tc.slowOneOff, tc.quietP99)
		}
	}
}

// TestParseServerTotals: the service's own sum, count and long calls are
// read from its histogram, for the verb asked and the ok result only; a
// histogram without the 10 and 25 ms buckets gives no long calls rather
// than zeros, one without its sum or count an error.
func TestParseServerTotals(t *testing.T) {
	const name = "opa_scheduler_extender_request_duration_seconds"
	exposition := strings.Join([]string{
		"# TYPE " + name + " histogram",
		name + `_bucket{result="ok",verb="filter",le="0.005"} 90`,
		name + `_bucket{result="ok",verb="filter",le="0.01"} 97`,
		name + `_bucket{result="ok",verb="filter",le="0.025"} 99`,
		name + `_bucket{result="ok",verb="filter",le="+Inf"} 100`,
		name + `_sum{result="ok",verb="filter"} 0.45`,
		name + `_count{result="ok",verb="filter"} 100`,
		name + `_bucket{result="error",verb="filter",le="0.01"} 0`,
		name + `_bucket{result="ok",verb="prioritize",le="0.01"} 100`,
		name + `_bucket{result="ok",verb="prioritize",le="0.025"} 100`,
		name + `_sum{result="ok",verb="prioritize"} 0.1`,
		name + `_count{result="ok",verb="prioritize"} 100`,
	}, "\n")
	cycle := serveMetrics(t, exposition)
	if got, err := cycle.serverTotalsOf(t.Context(), "cycle"); err != nil || got != (serverTotals{sum: 0.55, count: 100, over10ms: 3, over25ms: 1, long: true}) {
		t.Errorf("cycle: %+v, %v; want filter's and prioritize's time and long calls, 100 cycles", got, err)
	}
	got, err := parseServerTotals(exposition, "filter")
	if err != nil {
		t.Fatal(err)
	}
	if want := (serverTotals{sum: 0.45, count: 100, over10ms: 3, over25ms: 1, long: true}); got != want {
		t.Errorf("filter: %+v, want %+v", got, want)
	}
	if got, err := parseServerTotals(exposition, "prioritize"); err != nil || got.over10ms != 0 || got.count != 100 {
		t.Errorf("prioritize: %+v, %v; want 100 calls, none past 10 ms", got, err)
	}
	if got, err := parseServerTotals(strings.ReplaceAll(exposition, `le="0.025"`, `le="0.03"`), "filter"); err != nil || got.long || got.over10ms != 0 || got.count != 100 {
		t.Errorf("without a 25 ms bucket: %+v, %v; want 100 calls and no long-call counts", got, err)
	}
	if _, err := parseServerTotals(strings.ReplaceAll(exposition, `_count{result="ok",verb="filter"}`, `_count{result="ok",verb="bind"}`), "filter"); err == nil {
		t.Error("a histogram without filter's count was read")
	}
}

// serveMetrics is a client of a server whose /metrics is exposition.
func serveMetrics(t *testing.T, exposition string) *client {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, exposition)
	}))
	t.Cleanup(srv.Close)
	return newClient(srv.URL, 1)
}
