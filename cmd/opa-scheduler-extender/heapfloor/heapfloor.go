// Package heapfloor sets how far the garbage collector lets the heap
// grow: a GOGC default for a process that holds a large live state, a
// floor that keeps it from collecting a small heap over and over, and a
// bound on the growth of a large one, which sets RSS.
//
// Go's collector starts a cycle when the heap has grown by GOGC percent
// over what the last cycle left live. Most of the service's live heap is
// state it keeps (compiled policies, the inventory, the memo: 34 MiB with
// the whole Gatekeeper library and 5000 kubelet-sized Nodes, 45 to 52 MiB
// once calls have filled the memo), while every scheduler call makes tens of
// KiB of garbage. Go's default of 100 lets the heap reach twice the kept
// state; the service runs at DefaultPercent (75) instead unless the GOGC
// environment variable says otherwise, as Prometheus does for the same
// reason. At 5000 kubelet-sized Nodes under 20 Node heartbeats a second,
// RSS after the scenarios went from 154 to 157 MiB (GOGC 100, a 96 MiB
// floor) to 138 to 142 MiB, with about twice as many collections at 500
// candidates (16 or 17 against 8 or 9 in 10 s) and the latency's
// percentiles within the noise of each other (p99 at 500 2.65 to 3.36
// against 2.71 to 3.12 ms; three alternated runs of bench/cmd/loadgen
// -policy-set realistic -nodes 500,5000 -verbs cycle -node-files 10
// -churn 20 -churn-kind heartbeat -service BIN).
//
// At the scheduler's pace a small heap is collected several times a
// second, and a call that overlaps a mark phase runs about twice as long
// (measured with a runtime trace: bench/cmd/tracetail): those calls make
// the latency's 99th percentile. A floor lets the heap grow to at least
// Floor bytes before a cycle starts; with a live heap past
// Floor/(1+GOGC/100) nothing changes (GOGC's own goal is higher). The
// price is bounded: the heap grows to Floor bytes where GOGC alone would
// have stopped it sooner, no further.
//
// A large live heap is the other end: at 5000 kubelet-sized Nodes with a
// memo filled by one-off pods (before the memo held classes found once
// to an eighth of its budget) the live heap reached 54 to 62 MiB, GOGC 75
// let 40 to 46 MiB of garbage pile up on top of it, and RSS reached 151
// to 160 MiB. MaxGrowth bounds that pile (DefaultMaxGrowth, 24 MiB;
// --gc-heap-max-growth-bytes) where the floor does not already set the
// goal: in four alternated runs of 40 s of half one-off pods at 5000
// candidates under 20 Node heartbeats a second (bench/cmd/loadgen
// -policy-set realistic -nodes 5000 -verbs cycle -node-files 10 -churn 20
// -churn-kind heartbeat -one-off 0.5 -duration 40s -service BIN
// --gc-heap-max-growth-bytes=0 or 33554432) RSS after the run went
// from 150.8 and 160.1 MiB to 145.3 and 142.8 (the highest during the run
// 156.8 and 160.1 to 145.8 and 145.4), with 40 and 37 collections instead
// of 28 and 26, and the same CPU per call within the noise (3.32 and 3.43
// against 2.86 and 3.22 ms). 32 MiB left that run at 144.8 to 151.2 MiB in
// later runs (60 s), on the target's edge; 24 MiB, in two alternated runs
// of 60 s each against 32, gave 141.2 and 138.7 against 146.6 and 144.3,
// with 55 and 58 collections a minute against 40 and 38 and CPU per cycle
// 3.19 and 3.16 against 3.33 and 3.66 ms (p99 8.1 and 8.2 against 7.9 and
// 8.2). Under 46 MiB of live heap nothing changes with these defaults
// (the floor or GOGC sets the goal as before): at 500 candidates the same
// 12 to 15 collections in 10 s either way.
//
// The floor works as the runtime allows, from outside: after each cycle
// (a cleanup on a sentinel object runs once per cycle that finds it dead)
// it reads the live heap (runtime/metrics) and sets the GOGC percent
// (debug.SetGCPercent) that puts the next goal at the floor, never below
// the GOGC the process started with unless MaxGrowth bounds it. GOMEMLIMIT still bounds the heap:
// the runtime collects earlier when the limit is near, whatever the
// percent.
//
// It owns the process's GOGC percent; it knows nothing of HTTP or
// policies.
package heapfloor

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// Default is the service's floor (--gc-heap-floor-bytes). With the whole
// Gatekeeper library and 500 Nodes the live heap is about 20 MiB, so
// GOGC alone would start a cycle once 15 MiB of garbage piled up; the
// floor lets 60 MiB pile up, a quarter as many collections. At 5000
// kubelet-sized Nodes the live heap is 34 to 52 MiB and DefaultPercent's
// own goal (60 to 91 MiB) is about the floor or above it, which is what
// keeps RSS near 150 MiB with the binary's 42 MiB of code and read-only
// data paged in (bench/README.md, "churn"). A floor of 96 MiB (with GOGC
// 100) collected a small heap a little less often still, but put RSS at
// 155 to 167 MiB at 5000 Nodes.
const Default = 80 << 20

// DefaultMaxGrowth is the service's bound on the heap's growth between
// collections (--gc-heap-max-growth-bytes).
const DefaultMaxGrowth = 24 << 20

// DefaultPercent is the GOGC the service runs at when the GOGC environment
// variable is unset (SetDefaultPercent).
const DefaultPercent = 75

// SetDefaultPercent sets the process's GOGC to DefaultPercent unless the
// GOGC environment variable is set, and returns the percent in effect (-1:
// the collector is off).
func SetDefaultPercent() int {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(DefaultPercent)
	}
	return gcPercent()
}

// maxPercent bounds the percent set for a tiny live heap (a process that
// has just started): the floor is then reached at this growth.
const maxPercent = 5000

// Floor is a running floor; Stop ends it.
type Floor struct {
	floor     uint64
	maxGrowth uint64
	base      int
	stopped   atomic.Bool
	mu        sync.Mutex // serializes adjust with Stop
	percent   atomic.Int64
	sample    []metrics.Sample
}

// Start keeps the heap goal at floor bytes or more until Stop, and, with a
// positive maxGrowth, at most maxGrowth bytes above the live heap where
// the floor does not set it. Either may be 0 (none). It does nothing (a
// nil *Floor, whose Stop does nothing) when neither is positive or when
// the collector is off (GOGC=off).
func Start(floor, maxGrowth int64) *Floor {
	if floor <= 0 && maxGrowth <= 0 {
		return nil
	}
	base := gcPercent()
	if base < 0 {
		return nil
	}
	f := &Floor{floor: uint64(max(floor, 0)), maxGrowth: uint64(max(maxGrowth, 0)), base: base, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
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

// adjust sets the percent that puts the next heap goal at the floor, or
// within maxGrowth of the live heap.
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
	p := PercentFor(f.floor, f.maxGrowth, live, f.base)
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
// bytes at floor, or at base's own goal when that is higher but at most
// maxGrowth bytes above live (0: no bound), never below floor; at most
// maxPercent, at least minPercent.
func PercentFor(floor, maxGrowth, live uint64, base int) int {
	if live == 0 {
		return base
	}
	goal := live + live*uint64(base)/100
	if maxGrowth > 0 && goal-live > maxGrowth {
		goal = live + maxGrowth
	}
	goal = max(goal, floor)
	p := int((goal - live) * 100 / live)
	return min(max(p, min(base, minPercent)), max(base, maxPercent))
}

// minPercent bounds the percent maxGrowth sets for a huge live heap: the
// collector still lets it grow by a tenth between cycles.
const minPercent = 10
