package footprint

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/cluster"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/policyset"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// service is one opa-scheduler-extender process in cluster mode.
type service struct {
	URL  string
	proc *cluster.Process
	hc   *http.Client
}

// startService starts the service against the cluster and waits until it
// is ready with the whole policy set in force and every node in its
// inventory; it returns the service and how long that took.
func startService(t *testing.T, e *env) (*service, time.Duration) {
	t.Helper()
	addr := freeAddr(t)
	start := time.Now()
	proc, err := e.c.StartProcess(t, "opa-scheduler-extender", e.bin,
		"serve", "--kubeconfig", e.c.Kubeconfig, "--listen", addr, "--enable-pprof", "--requeue-nudge=false")
	if err != nil {
		t.Fatal(err)
	}
	s := &service{URL: "http://" + addr, proc: proc, hc: &http.Client{Timeout: 60 * time.Second}}
	t.Cleanup(s.hc.CloseIdleConnections)
	s.waitSynced(t, e, 10*time.Minute)
	took := time.Since(start)
	t.Logf("service (pid %d) ready with %d templates, %d constraints and %d nodes in %v",
		proc.Pid(), len(e.ps), policyset.CountConstraints(e.ps), *numNodes, took.Round(time.Millisecond))
	return s, took
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitSynced polls /readyz and /debug/policies until the service is ready,
// every template and constraint is in force and the inventory holds all
// nodes; it fails the test if the process exits or timeout passes.
func (s *service) waitSynced(t *testing.T, e *env, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var st opa.Status
	var last string
	for time.Now().Before(deadline) {
		if done, how := s.proc.Exited(); done {
			t.Fatalf("service exited while syncing (%v); last log lines:\n%s", how, s.proc.LogTail(40))
		}
		code, body, err := s.get("/readyz?verbose")
		switch {
		case err != nil:
			last = err.Error()
		case code != http.StatusOK:
			last = fmt.Sprintf("/readyz %d: %s", code, body)
		default:
			st, err = s.policies()
			if err != nil {
				last = err.Error()
			} else if policyset.Loaded(st, len(e.ps), policyset.CountConstraints(e.ps)) && st.Inventory["v1/Node"] == *numNodes {
				return
			} else {
				last = fmt.Sprintf("%d templates, %d constraints, inventory %v", len(st.Templates), len(st.Constraints), st.Inventory)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("service not synced after %v: %s; not in force:\n%s", timeout, last, strings.Join(policyset.NotInForce(st), "\n"))
}

// policies reads GET /debug/policies (the engine's Status, plus sources).
func (s *service) policies() (opa.Status, error) {
	var st opa.Status
	code, body, err := s.get("/debug/policies")
	if err != nil {
		return st, err
	}
	if code != http.StatusOK {
		return st, fmt.Errorf("/debug/policies: %d %s", code, body)
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fmt.Errorf("/debug/policies: %w", err)
	}
	return st, nil
}

func (s *service) get(path string) (int, []byte, error) {
	resp, err := s.hc.Get(s.URL + path)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// post sends a JSON body and returns the status and the answer.
func (s *service) post(path string, body any) (int, []byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	resp, err := s.hc.Post(s.URL+path, "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// memory is one sample of the service's memory, in bytes.
type memory struct {
	// VmRSS and VmHWM (peak RSS so far) from /proc/<pid>/status, read
	// before the forced collections.
	RSS     int64 `json:"vmRSS"`
	PeakRSS int64 `json:"vmHWM"`
	// The Go runtime's figures from /metrics after two forced collections:
	// HeapAlloc is the live heap.
	HeapAlloc   int64 `json:"heapAlloc"`
	HeapInuse   int64 `json:"heapInuse"`
	HeapObjects int64 `json:"heapObjects"`
	GoSys       int64 `json:"goSys"`
	Goroutines  int64 `json:"goroutines"`
	// The engine's memo.
	MemoResults int64 `json:"memoResults"`
	MemoBytes   int64 `json:"memoBytes"`
}

func (m memory) String() string {
	return fmt.Sprintf("VmRSS %s, VmHWM %s, live heap %s (in use %s, %d objects), Go sys %s, %d goroutines, memo %d results / %s",
		mib(m.RSS), mib(m.PeakRSS), mib(m.HeapAlloc), mib(m.HeapInuse), m.HeapObjects, mib(m.GoSys), m.Goroutines, m.MemoResults, mib(m.MemoBytes))
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// measure samples the service's memory: /proc first, then two forced
// collections (GET /debug/pprof/heap?gc=1; the second also empties what
// sync.Pools kept across the first), then /metrics.
func (s *service) measure(t *testing.T) memory {
	t.Helper()
	var m memory
	var err error
	if m.RSS, m.PeakRSS, err = procMemory(s.proc.Pid()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		code, _, err := s.get("/debug/pprof/heap?gc=1")
		if err != nil || code != http.StatusOK {
			t.Fatalf("GET /debug/pprof/heap?gc=1: %d %v", code, err)
		}
	}
	code, body, err := s.get("/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", code, err)
	}
	vals := parseMetrics(body)
	for name, dst := range map[string]*int64{
		"go_memstats_heap_alloc_bytes":        &m.HeapAlloc,
		"go_memstats_heap_inuse_bytes":        &m.HeapInuse,
		"go_memstats_heap_objects":            &m.HeapObjects,
		"go_memstats_sys_bytes":               &m.GoSys,
		"go_goroutines":                       &m.Goroutines,
		"opa_scheduler_extender_memo_results": &m.MemoResults,
		"opa_scheduler_extender_memo_bytes":   &m.MemoBytes,
	} {
		v, ok := vals[name]
		if !ok {
			t.Fatalf("/metrics has no %s", name)
		}
		*dst = int64(v)
	}
	return m
}

// procMemory reads VmRSS and VmHWM of a process, in bytes.
func procMemory(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[2] != "kB" {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			hwm = kb << 10
		}
	}
	if rss == 0 || hwm == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status has no VmRSS/VmHWM", pid)
	}
	return rss, hwm, nil
}

// parseMetrics reads the unlabelled samples of a Prometheus text page.
func parseMetrics(page []byte) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(page))
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || strings.ContainsRune(line, '{') {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			out[f[0]] = v
		}
	}
	return out
}
