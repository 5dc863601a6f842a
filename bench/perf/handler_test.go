package perf

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/server"
)

// BenchmarkFilterHandler times the service's /filter handler as the
// scheduler calls it on the realistic mix, warm: the body of a new
// ReplicaSet replica (or a one-off pod) with 500 node names in, the
// answer written to a writer that keeps nothing. No socket: what is left
// is what the service itself spends and allocates per call (the
// benchmark's request and body reader add 3 allocations). keys-reused/op
// are the memo key values a call took from the pod before it (of its
// workload, or for a new Job's pod of its namespace). p50-µs and p99-µs
// are the timed calls' own: the handler's tail with no socket, no client
// and no other process beside it (run with -benchtime 20000x or more for
// a p99 of 200 calls). Run with
//
//	cd bench && go test -run '^$' -bench FilterHandler -benchmem ./perf/
func BenchmarkFilterHandler(b *testing.B) {
	for _, tc := range streamKinds {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			engine := streamEngine(b, tc.parallelism)
			srv, err := server.New(server.Options{Policy: engine, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			h := srv.Handler()
			args := NewArgsOf(KubeletNodes, 500, false)
			s := NewStream(7, 3, tc.share)
			var body, pod []byte
			var buf bytes.Buffer
			w := &discardWriter{header: http.Header{}}
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, "/filter", nil)
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			rd := bytes.NewReader(nil)
			took := make([]time.Duration, 0, b.N+warmCalls)
			run := func() {
				body = args.BuildInto(&buf, s.NextInto(&pod))
				rd.Reset(body)
				req.Body, req.ContentLength = io.NopCloser(rd), int64(len(body))
				w.status, w.n = 0, 0
				start := time.Now()
				h.ServeHTTP(w, req)
				took = append(took, time.Since(start))
				if w.status != http.StatusOK || w.n == 0 {
					b.Fatalf("filter answered %d with %d bytes", w.status, w.n)
				}
			}
			timeWarm(b, run)
			b.StopTimer()
			reportTail(b, took[len(took)-b.N:])
			// What a pod takes from the pod before it (opa/workloadkeys.go);
			// each timed call's, since timeWarm's warm-up also counted.
			reused := engine.Stats().KeysReused
			for range 100 {
				run()
			}
			b.ReportMetric(float64(engine.Stats().KeysReused-reused)/100, "keys-reused/op")
		})
	}
}

// discardWriter is a ResponseWriter that counts the answer's bytes and
// keeps its header map across calls.
type discardWriter struct {
	header http.Header
	status int
	n      int
}

func (w *discardWriter) Header() http.Header { return w.header }

func (w *discardWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *discardWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.n += len(p)
	return len(p), nil
}

// reportTail reports the median and the 99th percentile of took.
func reportTail(b *testing.B, took []time.Duration) {
	if len(took) == 0 {
		return
	}
	slices.Sort(took)
	at := func(q float64) float64 { return float64(took[int(q*float64(len(took)-1))]) / 1e3 }
	b.ReportMetric(at(0.5), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}
