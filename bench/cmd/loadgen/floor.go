package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
//
// With -service the floor runs as the service does, in a process of its
// own (this binary, -serve-floor): two processes, two runtimes and a
// socket between them, which the in-process floor leaves out.
type floorServer struct {
	mu      sync.Mutex
	answers map[string][]byte // by path: /filter, /prioritize
	cpu     time.Duration     // CPU time spent per request (-floor-cpu, -floor-cpu-match)
	base    string
	srv     *http.Server
	// controlled: the server also takes floorAnswerPath and
	// floorCountersPath requests (-serve-floor).
	controlled bool
}

// startFloor starts a floor server spending cpu per request; controlled
// makes it take its answers and give its counters over HTTP too.
func startFloor(cpu time.Duration, controlled bool) (*floorServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &floorServer{answers: map[string][]byte{}, cpu: cpu, base: "http://" + ln.Addr().String(), controlled: controlled}
	f.srv = &http.Server{Handler: http.HandlerFunc(f.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

func (f *floorServer) stop() { _ = f.srv.Close() }

func (f *floorServer) url() string { return f.base }

func (f *floorServer) setAnswers(answers map[string][]byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answers = answers
	return nil
}

func (f *floorServer) setCPU(d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cpu = d
	return nil
}

// floorTarget is a floor server: in this process (floorServer) or in one
// of its own (floorProcess).
type floorTarget interface {
	url() string
	// setAnswers sets the answer to each path's requests (a path it
	// leaves out may keep an earlier answer).
	setAnswers(map[string][]byte) error
	// setCPU sets the CPU time spent on each request.
	setCPU(time.Duration) error
	stop()
}

// Paths of a floor process's own requests, apart from the measured ones:
// PUT floorAnswerPath+"/filter" sets the answer to /filter; PUT
// floorCPUPath sets the CPU time spent per request (a Go duration); GET
// floorCountersPath gives its processCounters as JSON.
const (
	floorAnswerPath   = "/-/answer"
	floorCPUPath      = "/-/cpu"
	floorCountersPath = "/-/counters"
)

func (f *floorServer) serve(w http.ResponseWriter, r *http.Request) {
	if f.control(w, r) {
		return
	}
	_, err := io.Copy(io.Discard, r.Body)
	f.mu.Lock()
	answer, ok := f.answers[r.URL.Path]
	cpu := f.cpu
	f.mu.Unlock()
	if err != nil || !ok {
		http.Error(w, "no answer for "+r.URL.Path, http.StatusNotFound)
		return
	}
	burnCPU(cpu)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(answer)))
	_, _ = w.Write(answer)
}

// control serves a floor process's own requests (only a floor that
// serves -serve-floor takes them); false for any other request.
func (f *floorServer) control(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case !f.controlled:
		return false
	case r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, floorAnswerPath+"/"):
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return true
		}
		f.mu.Lock()
		f.answers[strings.TrimPrefix(r.URL.Path, floorAnswerPath)] = b
		f.mu.Unlock()
	case r.Method == http.MethodPut && r.URL.Path == floorCPUPath:
		b, err := io.ReadAll(r.Body)
		d, perr := time.ParseDuration(string(b))
		if err != nil || perr != nil || d < 0 {
			http.Error(w, fmt.Sprintf("a CPU time per request: %q", b), http.StatusBadRequest)
			return true
		}
		_ = f.setCPU(d)
	case r.Method == http.MethodGet && r.URL.Path == floorCountersPath:
		c, err := ownCounters()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return true
		}
		_ = json.NewEncoder(w).Encode(floorCounters{CPUNs: int64(c.cpu), Mallocs: c.mallocs, AllocBytes: c.allocBytes, GCs: c.gcs})
	default:
		return false
	}
	return true
}

// floorCounters are a floor process's counters, as it sends them.
type floorCounters struct {
	CPUNs      int64  `json:"cpu_ns"`
	Mallocs    uint64 `json:"mallocs"`
	AllocBytes uint64 `json:"alloc_bytes"`
	GCs        uint64 `json:"gcs"`
}

// ownCounters are this process's runtime counters and CPU time, after a
// collection.
func ownCounters() (counters, error) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return counters{}, fmt.Errorf("getrusage: %w", err)
	}
	return counters{mallocs: ms.Mallocs, allocBytes: ms.TotalAlloc, gcs: uint64(ms.NumGC), cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}, nil
}

// serveFloor is -serve-floor: a floor server that takes its answers over
// HTTP, its address written as the first line of standard output. It
// stops when standard input closes (the load generator that started it
// ended).
func serveFloor(cpu time.Duration) error {
	fs, err := startFloor(cpu, true)
	if err != nil {
		return err
	}
	defer fs.stop()
	fmt.Println(fs.base)
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// floorProcess is a floor server in a process of its own: this binary
// with -serve-floor.
type floorProcess struct {
	cmd   *exec.Cmd
	stdin io.Closer
	base  string
}

func startFloorProcess(cpu time.Duration) (*floorProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-serve-floor", "-floor-cpu", cpu.String())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the floor process: %w", err)
	}
	p := &floorProcess{cmd: cmd, stdin: stdin}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "http://") {
		p.stop()
		return nil, fmt.Errorf("the floor process gave no address (%q): %v", line, err)
	}
	p.base = strings.TrimSpace(line)
	return p, nil
}

func (p *floorProcess) url() string { return p.base }

func (p *floorProcess) stop() {
	_ = p.stdin.Close()
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

func (p *floorProcess) setAnswers(answers map[string][]byte) error {
	for path, b := range answers {
		if err := p.put(floorAnswerPath+path, b); err != nil {
			return fmt.Errorf("set the floor's answer to %s: %w", path, err)
		}
	}
	return nil
}

func (p *floorProcess) setCPU(d time.Duration) error {
	if err := p.put(floorCPUPath, []byte(d.String())); err != nil {
		return fmt.Errorf("set the floor's CPU per request: %w", err)
	}
	return nil
}

// put sends body to one of the floor process's control paths.
func (p *floorProcess) put(path string, body []byte) error {
	req, err := http.NewRequest(http.MethodPut, p.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}

// counters reads the floor process's counters.
func (p *floorProcess) counters() (counters, error) {
	resp, err := http.Get(p.base + floorCountersPath)
	if err != nil {
		return counters{}, err
	}
	defer resp.Body.Close()
	var fc floorCounters
	if err := json.NewDecoder(resp.Body).Decode(&fc); err != nil {
		return counters{}, fmt.Errorf("the floor process's counters: %w", err)
	}
	return counters{cpu: time.Duration(fc.CPUNs), mallocs: fc.Mallocs, allocBytes: fc.AllocBytes, gcs: fc.GCs}, nil
}

// floorScenarios times every scenario of rep again against a floor server,
// its answers taken from the service at c for the probe's pod, and adds
// the results to rep as "floor <verb>" rows. With -service the floor runs
// in a process of its own, and the rows' counters are that process's.
func floorScenarios(ctx context.Context, f *flags, c *client, rep *Report) error {
	var fs floorTarget
	readCounters := c.counters
	if f.service != "" {
		p, err := startFloorProcess(f.floorCPU)
		if err != nil {
			return err
		}
		fs, readCounters = p, p.counters
	} else {
		s, err := startFloor(f.floorCPU, false)
		if err != nil {
			return err
		}
		fs = s
	}
	defer fs.stop()
	fc := newClient(fs.url(), f.concurrency)
	fc.counters, fc.memory, fc.nodeSize, fc.noMetrics, fc.inProcess = readCounters, c.memory, c.nodeSize, true, f.service == ""
	measured := len(rep.Scenarios)
	for _, res := range rep.Scenarios[:measured] {
		s := scenario{verb: res.Verb, full: res.Mode == "nodes", nodes: res.Nodes}
		b := perf.NewArgsOf(c.nodeSize, s.nodes, s.full)
		pod := probePod(f)
		answers, err := c.probeAnswers(ctx, s, pod, b.Build(pod))
		if err != nil {
			return err
		}
		if err := fs.setAnswers(answers); err != nil {
			return err
		}
		var perCall time.Duration
		if f.floorCPUMatch {
			if perCall, err = calibrate(ctx, fs, fc, s, f, res); err != nil {
				return errors.Join(errors.New("floor "+s.name()+": calibration"), err)
			}
		}
		out, err := fc.run(ctx, s, f)
		if err != nil {
			return errors.Join(errors.New("floor "+s.name()), err)
		}
		out.Name, out.Verb = "floor/"+out.Name, "floor "+out.Verb
		out.FloorCPUMsPerCall = float64(perCall.Microseconds()) / 1000
		out.FloorCPUMatched = f.floorCPUMatch
		logf("%-28s %7d requests  %8.1f req/s  p50 %7.3f ms  p99 %7.3f ms  max %7.3f ms", out.Name, out.Requests, out.RPS, out.P50Ms, out.P99Ms, out.MaxMs)
		rep.Scenarios = append(rep.Scenarios, out)
	}
	return nil
}

// calibrate sets the floor's CPU per call so that its CPU per request
// (its own HTTP work and the burn) is the service's in res: a short run
// without a burn measures the floor's own, the burn is the rest
// (matchedCPU), and a second short run with it corrects the burn by what
// the floor then spent past (or short of) the service's.
func calibrate(ctx context.Context, fs floorTarget, fc *client, s scenario, f *flags, res Scenario) (time.Duration, error) {
	short := *f
	short.duration, short.warmup = min(f.duration, 2*time.Second), min(f.warmup, 200*time.Millisecond)
	perCall := time.Duration(0)
	for range 2 {
		if err := fs.setCPU(perCall); err != nil {
			return 0, err
		}
		spent, err := fc.run(ctx, s, &short)
		if err != nil {
			return 0, err
		}
		// What the floor spent past its burn is its own work.
		own := spent.CPUMsPerRequest - float64(perCall*time.Duration(callsOf(res)))/float64(time.Millisecond)
		perCall = matchedCPU(res, own)
	}
	return perCall, fs.setCPU(perCall)
}

// callsOf is the calls of one request of res: a cycle's two, else one.
func callsOf(res Scenario) int {
	if res.Verb == "cycle" {
		return 2
	}
	return 1
}

// matchedCPU is the CPU time a floor whose own work is ownMs per request
// must burn on each call to spend what the service spent per request in
// res (a cycle is two calls); none when its own work is as much.
func matchedCPU(res Scenario, ownMs float64) time.Duration {
	return time.Duration(max(0, res.CPUMsPerRequest-ownMs) / float64(callsOf(res)) * float64(time.Millisecond))
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
