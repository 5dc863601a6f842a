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
		ok       bool
	}{
		{"floor without work", true, 0, true},
		{"floor with work", true, 200 * time.Microsecond, true},
		{"work without the floor", false, 200 * time.Microsecond, false},
		{"negative work", true, -time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &flags{floor: tc.floor, floorCPU: tc.floorCPU, nodes: []int{100}, concurrency: 1, oneOffShare: 0.05, duration: time.Second, peer: false}
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
