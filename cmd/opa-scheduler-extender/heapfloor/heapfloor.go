// Package heapfloor keeps the garbage collector from collecting a small
// heap over and over.
//
// Go's collector starts a cycle when the heap has grown by GOGC percent
// (100 by default) over what the last cycle left live. The service's live
// heap is small (20 MiB with the whole Gatekeeper library and 500 Nodes)
// while every scheduler call allocates tens of KiB, so at the scheduler's
// pace the collector runs several times a second; a call that overlaps a
// mark phase runs about twice as long (measured with a runtime trace:
// bench/cmd/tracetail), and those calls make the latency's 99th
// percentile. A floor lets the heap grow to at least Floor bytes before a
// cycle starts: with 20 MiB live and a 96 MiB floor the collector runs
// a quarter as often, and with a live heap past Floor/2 nothing changes
// (GOGC's own goal is higher). The price is bounded: the heap grows to
// Floor bytes where GOGC alone would have stopped it sooner, no further.
//
// It works as the runtime allows, from outside: after each cycle (a
// cleanup on a sentinel object runs once per cycle that finds it dead) it
// reads the live heap (runtime/metrics) and sets the GOGC percent
// (debug.SetGCPercent) that puts the next goal at the floor, never below
// the GOGC the process started with. GOMEMLIMIT still bounds the heap: the
// runtime collects earlier when the limit is near, whatever the percent.
//
// It owns the process's GOGC percent while it runs; it knows nothing of
// HTTP or policies.
package heapfloor

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// Default is the service's floor (--gc-heap-floor-bytes). With the whole
// Gatekeeper library and 500 Nodes the live heap is about 20 MiB, so GOGC
// alone starts a cycle at 40 MiB; with 5000 kubelet-sized Nodes it is
// about 32 MiB, and under the realistic mix's cycles at 500 candidates
// the collector ran 7 times in 5 s at a 64 MiB floor and 4 times at this
// one, with a cycle p99 0.1 ms lower (alternate runs of bench/cmd/loadgen
// -policy-set realistic -verbs cycle -service BIN -gc-heap-floor N). From
// a live heap of 48 MiB GOGC's own goal is above it and it changes
// nothing. Its price is RSS: the whole library with 5000 Nodes ended 2000
// filter requests at 127 MiB instead of 110 with 64 MiB (the target is 150
// MiB; bench/README.md, "Memory: the growth curve", has the current
// figures, from bench/regenerate-results.sh footprint).
const Default = 96 << 20

// maxPercent bounds the percent set for a tiny live heap (a process that
// has just started): the floor is then reached at this growth.
const maxPercent = 5000

// Floor is a running floor; Stop ends it.
type Floor struct {
	floor   uint64
	base    int
	stopped atomic.Bool
	mu      sync.Mutex // serializes adjust with Stop
	percent atomic.Int64
	sample  []metrics.Sample
}

// Start keeps the heap goal at floor bytes or more until Stop. It does
// nothing (a nil *Floor, whose Stop does nothing) when floor is not
// positive or when the collector is off (GOGC=off).
func Start(floor int64) *Floor {
	if floor <= 0 {
		return nil
	}
	base := gcPercent()
	if base < 0 {
		return nil
	}
	f := &Floor{floor: uint64(floor), base: base, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	f.percent.Store(int64(base))
	f.adjust()
	f.arm()
	return f
}

// Percent is the GOGC percent the floor set last.
func (f *Floor) Percent() int {
	if f == nil {
		return -1
	}
	return int(f.percent.Load())
}

// Stop gives the process back the GOGC it started with.
func (f *Floor) Stop() {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped.Swap(true) {
		return
	}
	debug.SetGCPercent(f.base)
	f.percent.Store(int64(f.base))
}

// arm sets a cleanup on a new sentinel: it runs after the next cycle that
// finds the sentinel unreachable, adjusts the percent and arms again.
func (f *Floor) arm() {
	runtime.AddCleanup(new(sentinel), func(f *Floor) {
		if f.stopped.Load() {
			return
		}
		f.adjust()
		f.arm()
	}, f)
}

// sentinel holds a pointer so that it is an object of its own: the
// runtime packs small pointer-free objects into shared blocks, whose
// cleanups may never run.
type sentinel struct {
	_ *int
	_ [8]byte
}

// adjust sets the percent that puts the next heap goal at the floor.
func (f *Floor) adjust() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped.Load() {
		return
	}
	metrics.Read(f.sample)
	live := uint64(0)
	if f.sample[0].Value.Kind() == metrics.KindUint64 {
		live = f.sample[0].Value.Uint64()
	}
	p := PercentFor(f.floor, live, f.base)
	if p != gcPercent() {
		debug.SetGCPercent(p)
	}
	f.percent.Store(int64(p))
}

// gcPercent is the process's GOGC (-1: off), read without setting it.
func gcPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 100
	}
	p := s[0].Value.Uint64()
	if p > math.MaxInt32 {
		return -1
	}
	return int(p)
}

// PercentFor is the GOGC percent that puts the goal of a heap with live
// bytes at floor: never below base, at most maxPercent.
func PercentFor(floor, live uint64, base int) int {
	if live == 0 || live >= floor {
		return base
	}
	p := (floor - live) * 100 / live
	if p > maxPercent {
		p = maxPercent
	}
	return max(base, int(p))
}
