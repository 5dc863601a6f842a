package main

import (
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestBurnCPUSpendsCPUTime checks that the floor's burn uses at least
// the CPU time asked of it, on the calling thread.
func TestBurnCPUSpendsCPUTime(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, ok := threadCPU()
	if !ok {
		t.Skip("no per-thread CPU clock here")
	}
	const d = 3 * time.Millisecond
	burnCPU(d)
	after, _ := threadCPU()
	if used := after - before; used < d {
		t.Fatalf("burnCPU(%v) used %v of the thread's CPU time", d, used)
	}
}

func TestFloorCPUFlagChecks(t *testing.T) {
	for _, tc := range []struct {
		name     string
		floor    bool
		floorCPU time.Duration
		match    bool
		ok       bool
	}{
		{"floor without work", true, 0, false, true},
		{"floor with work", true, 200 * time.Microsecond, false, true},
		{"work without the floor", false, 200 * time.Microsecond, false, false},
		{"negative work", true, -time.Millisecond, false, false},
		{"floor with the service's work", true, 0, true, true},
		{"the service's work without the floor", false, 0, true, false},
		{"the service's work and a fixed one", true, 200 * time.Microsecond, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &flags{floor: tc.floor, floorCPU: tc.floorCPU, floorCPUMatch: tc.match, nodes: []int{100}, concurrency: 1, oneOffShare: 0.05, duration: time.Second, peer: false}
			if err := f.check(); (err == nil) != tc.ok {
				t.Fatalf("check() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// TestControlledFloor: a floor process's server takes its answers and
// gives its counters over HTTP, and answers the measured paths with what
// it was given; a floor of this process takes no such requests.
func TestControlledFloor(t *testing.T) {
	fs, err := startFloor(0, true)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.stop()
	post := func(base, path string) (int, string) {
		t.Helper()
		resp, err := http.Post(base+path, "application/json", strings.NewReader(`{"Pod":{}}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := post(fs.url(), "/filter"); code != http.StatusNotFound {
		t.Fatalf("/filter before its answer was set: HTTP %d", code)
	}
	p := &floorProcess{base: fs.url()}
	if err := p.setAnswers(map[string][]byte{"/filter": []byte(`{"NodeNames":["a"]}`), "/prioritize": []byte(`[]`)}); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"/filter": `{"NodeNames":["a"]}`, "/prioritize": `[]`} {
		if code, got := post(fs.url(), path); code != http.StatusOK || got != want {
			t.Fatalf("%s: HTTP %d %q, want %q", path, code, got, want)
		}
	}
	if err := p.setCPU(300 * time.Microsecond); err != nil {
		t.Fatal(err)
	}
	fs.mu.Lock()
	cpu := fs.cpu
	fs.mu.Unlock()
	if cpu != 300*time.Microsecond {
		t.Fatalf("the floor's CPU per request after setCPU: %v", cpu)
	}
	got, err := p.counters()
	if err != nil {
		t.Fatal(err)
	}
	if got.cpu <= 0 || got.mallocs == 0 || got.gcs == 0 {
		t.Fatalf("counters %+v: want CPU time, allocations and the collection they were read after", got)
	}

	inProcess, err := startFloor(0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer inProcess.stop()
	if err := (&floorProcess{base: inProcess.url()}).setAnswers(map[string][]byte{"/filter": []byte(`{}`)}); err == nil {
		t.Fatal("a floor of this process took an answer over HTTP")
	}
}

// TestFloorTargets: a cycle's p99 at 500 nodes is judged against the
// floor row that spent the service's CPU per call, and only that one.
func TestFloorTargets(t *testing.T) {
	service := Scenario{Verb: "cycle", Mode: "names", Nodes: 500, P99Ms: 1.8, CPUMsPerRequest: 0.8}
	if d := matchedCPU(service, 0.2); d != 300*time.Microsecond {
		t.Fatalf("a cycle's CPU per call past the floor's own 0.2 ms: %v, want half of 0.6 ms", d)
	}
	if d := matchedCPU(service, 1); d != 0 {
		t.Fatalf("a floor whose own work is more than the service's burns %v", d)
	}
	for _, tc := range []struct {
		name  string
		floor Scenario
		want  []bool // met, per target
	}{
		{"within", Scenario{Verb: "floor cycle", Mode: "names", Nodes: 500, P99Ms: 1.5, FloorCPUMatched: true}, []bool{true}},
		{"past", Scenario{Verb: "floor cycle", Mode: "names", Nodes: 500, P99Ms: 1.0, FloorCPUMatched: true}, []bool{false}},
		{"a floor without the service's work", Scenario{Verb: "floor cycle", Mode: "names", Nodes: 500, P99Ms: 0.5}, nil},
		{"another size", Scenario{Verb: "floor cycle", Mode: "names", Nodes: 5000, P99Ms: 1.0, FloorCPUMatched: true}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := floorTargets([]Scenario{service, tc.floor})
			if len(got) != len(tc.want) {
				t.Fatalf("%d targets, want %d: %+v", len(got), len(tc.want), got)
			}
			for i, met := range tc.want {
				if got[i].Met != met || got[i].Value != service.P99Ms/tc.floor.P99Ms {
					t.Errorf("target %+v, want met=%v at %.2f", got[i], met, service.P99Ms/tc.floor.P99Ms)
				}
			}
		})
	}
}
