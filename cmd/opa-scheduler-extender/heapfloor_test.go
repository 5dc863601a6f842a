package main

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/server"
)

// TestHeapFloorWaitsForTheSources: the floor leaves GOGC alone while a
// source is loading, takes it once every source is ready (after returning
// the load's freed memory, once), and gives it back when serving ends.
func TestHeapFloorWaitsForTheSources(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)
	var released atomic.Int32
	defer func(f func()) { releaseLoad = f }(releaseLoad)
	releaseLoad = func() { released.Add(1) }
	var ready atomic.Bool
	checks := []server.ReadinessCheck{
		{Name: "ready", Ready: func() (bool, string) { return true, "" }},
		{Name: "source", Ready: func() (bool, string) { return ready.Load(), "the test's source" }},
	}
	stop := startHeapFloorWhenReady(context.Background(), 1<<30, 0, checks)
	for range 5 {
		runtime.GC()
		time.Sleep(100 * time.Millisecond)
		if p := gogc(); p != 100 {
			t.Fatalf("GOGC %d while a source loads, want 100", p)
		}
		if n := released.Load(); n != 0 {
			t.Fatalf("memory released %d times while a source loads, want 0", n)
		}
	}
	ready.Store(true)
	deadline := time.Now().Add(10 * time.Second)
	for gogc() == 100 {
		if time.Now().After(deadline) {
			t.Fatal("the floor did not start once the sources were ready")
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if p := gogc(); p != 100 {
		t.Errorf("GOGC %d after stop, want 100", p)
	}
	if n := released.Load(); n != 1 {
		t.Errorf("memory released %d times once the sources were ready, want 1", n)
	}

	// Stopped before the sources are ready: nothing starts.
	stop = startHeapFloorWhenReady(context.Background(), 1<<30, 0, []server.ReadinessCheck{{Name: "never", Ready: func() (bool, string) { return false, "never" }}})
	stop()
	runtime.GC()
	if p := gogc(); p != 100 {
		t.Errorf("GOGC %d after a floor stopped while waiting, want 100", p)
	}
	if n := released.Load(); n != 1 {
		t.Errorf("memory released %d times in all, want the 1 of the first floor", n)
	}
}

func gogc() uint64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
