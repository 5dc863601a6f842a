package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/perf"
)

// The floor (-floor): what a request costs on this machine without the
// engine. A server in this process reads each filter or prioritize request
// whole and answers with the bytes the service gave the probe's pod in the
// same scenario (a cycle's prioritize: on the nodes the probe's filter
// passed): the same client, connection, request and answer sizes,
// the same process and heap, no decoding, no policy. Its p99 is the part
// of a scenario's p99 that the host, the HTTP stack and the load
// generator take, whatever the engine does.
//
// With -floor-cpu the server also spends that much CPU time on each
// request before it answers, on the request's thread and without
// allocating: the p99 this machine gives a server that does the work of
// a call and has no collector, no garbage and no variance of its own.
// Set to the service's CPU per request, it says how much of the
// service's tail is the machine's.
type floorServer struct {
	mu      sync.Mutex
	answers map[string][]byte // by path: /filter, /prioritize
	cpu     time.Duration     // CPU time spent per request (-floor-cpu)
	base    string
	srv     *http.Server
}

func startFloor(cpu time.Duration) (*floorServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &floorServer{answers: map[string][]byte{}, cpu: cpu, base: "http://" + ln.Addr().String()}
	f.srv = &http.Server{Handler: http.HandlerFunc(f.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

func (f *floorServer) stop() { _ = f.srv.Close() }

func (f *floorServer) serve(w http.ResponseWriter, r *http.Request) {
	_, err := io.Copy(io.Discard, r.Body)
	f.mu.Lock()
	answer, ok := f.answers[r.URL.Path]
	f.mu.Unlock()
	if err != nil || !ok {
		http.Error(w, "no answer for "+r.URL.Path, http.StatusNotFound)
		return
	}
	burnCPU(f.cpu)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(answer)))
	_, _ = w.Write(answer)
}

// floorScenarios times every scenario of rep again against a floor server,
// its answers taken from the service at c for the probe's pod, and adds
// the results to rep as "floor <verb>" rows.
func floorScenarios(ctx context.Context, f *flags, c *client, rep *Report) error {
	fs, err := startFloor(f.floorCPU)
	if err != nil {
		return err
	}
	defer fs.stop()
	fc := newClient(fs.base, f.concurrency)
	fc.counters, fc.memory, fc.nodeSize, fc.noMetrics, fc.inProcess = c.counters, c.memory, c.nodeSize, true, true
	measured := len(rep.Scenarios)
	for _, res := range rep.Scenarios[:measured] {
		s := scenario{verb: res.Verb, full: res.Mode == "nodes", nodes: res.Nodes}
		b := perf.NewArgsOf(c.nodeSize, s.nodes, s.full)
		pod := probePod(f)
		answers, err := c.probeAnswers(ctx, s, pod, b.Build(pod))
		if err != nil {
			return err
		}
		fs.mu.Lock()
		fs.answers = answers
		fs.mu.Unlock()
		out, err := fc.run(ctx, s, f)
		if err != nil {
			return errors.Join(errors.New("floor "+s.name()), err)
		}
		out.Name, out.Verb = "floor/"+out.Name, "floor "+out.Verb
		logf("%-28s %7d requests  %8.1f req/s  p50 %7.3f ms  p99 %7.3f ms  max %7.3f ms", out.Name, out.Requests, out.RPS, out.P50Ms, out.P99Ms, out.MaxMs)
		rep.Scenarios = append(rep.Scenarios, out)
	}
	return nil
}

// burnCPU keeps the calling goroutine's thread busy until the thread has
// used d of CPU time: CPU time, not wall time, so that a burn the kernel
// preempts takes longer, as a call's work does. It touches a few KiB of
// memory as it goes and allocates nothing. Without a per-thread CPU clock
// it spends nothing: flags.check refuses -floor-cpu there.
func burnCPU(d time.Duration) {
	if d <= 0 {
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start, ok := threadCPU()
	if !ok {
		return
	}
	var mem [512]uint64
	x := uint64(1)
	for {
		for range 256 {
			x = x*6364136223846793005 + 1442695040888963407
			mem[x%uint64(len(mem))] += x
		}
		now, _ := threadCPU()
		if now-start >= d {
			break
		}
	}
	burnSink.Add(mem[x%uint64(len(mem))])
}

// burnSink keeps the burn's result, so that the compiler keeps the burn.
var burnSink atomic.Uint64

// threadCPU is the CPU time the calling thread has used.
func threadCPU() (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
