package main

import (
	"runtime"
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
