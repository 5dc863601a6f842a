package perf

import (
	"bytes"
	"io"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseGCTrace(t *testing.T) {
	end := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		line    string
		ok      bool
		took    time.Duration
		markCPU float64
		live    int
	}{
		{"gc 111 @22.422s 1%: 0.084+31+0.058 ms clock, 0.16+1.1/14/36+0.11 ms cpu, 78->78->42 MB, 80 MB goal, 0 MB stacks, 0 MB globals, 2 P", true, 31142 * time.Microsecond, 51.1, 42},
		{"gc 3 @0.101s 4%: 0.011+2.5+0.003 ms clock, 0.023+0.45/1.1/0.91+0.006 ms cpu, 4->4->1 MB, 5 MB goal, 0 MB stacks, 0 MB globals, 2 P (forced)", true, 2514 * time.Microsecond, 2.46, 1},
		{"gc 5 @2.0s 1%: 0.5+4+0.25 ms clock", true, 4750 * time.Microsecond, 0, 0},
		{"level=WARN msg=\"gc 3 @0.1s\"", false, 0, 0, 0},
		{"scvg: 0 MB released", false, 0, 0, 0},
		{"gc 4 @1.0s 1%: x+1+1 ms clock", false, 0, 0, 0},
	} {
		w, ok := parseGCTrace([]byte(tc.line), end)
		if ok != tc.ok {
			t.Errorf("%q: ok %v, want %v", tc.line, ok, tc.ok)
			continue
		}
		if ok && (!w.End.Equal(end) || w.End.Sub(w.Start) != tc.took) {
			t.Errorf("%q: window %v to %v, want %v long ending at %v", tc.line, w.Start, w.End, tc.took, end)
		}
		if ok && (math.Abs(w.MarkCPUMs-tc.markCPU) > 1e-9 || w.LiveMB != tc.live) {
			t.Errorf("%q: mark CPU %v ms, %d MB live, want %v and %d", tc.line, w.MarkCPUMs, w.LiveMB, tc.markCPU, tc.live)
		}
	}
}

// TestReadGCTrace: collections are kept, as they arrive; every other line
// goes on unchanged.
func TestReadGCTrace(t *testing.T) {
	in := "level=WARN msg=started\n" +
		"gc 1 @0.010s 2%: 0.010+5.0+0.010 ms clock, 0.02+0/1/2+0.02 ms cpu, 4->4->2 MB, 5 MB goal, 0 MB stacks, 0 MB globals, 2 P\n" +
		"level=WARN msg=\"folder read\" files=3\n" +
		"gc 2 @1.500s 1%: 0.020+10+0.020 ms clock, 0.04+0/2/4+0.04 ms cpu, 8->8->3 MB, 9 MB goal, 0 MB stacks, 0 MB globals, 2 P\n"
	var clock sync.Mutex
	at := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	now := func() time.Time {
		clock.Lock()
		defer clock.Unlock()
		at = at.Add(time.Second)
		return at
	}
	var out bytes.Buffer
	tr := readGCTrace(strings.NewReader(in), &out, now)
	<-tr.done
	if want := "level=WARN msg=started\nlevel=WARN msg=\"folder read\" files=3\n"; out.String() != want {
		t.Errorf("passed on %q, want %q", out.String(), want)
	}
	w := tr.Windows()
	if len(w) != 2 || w[0].End.Sub(w[0].Start) != 5020*time.Microsecond || w[1].End.Sub(w[1].Start) != 10040*time.Microsecond || !w[0].End.Before(w[1].End) {
		t.Errorf("windows %v", w)
	}
}

// TestReadGCTraceLongLine: a line longer than the buffer goes on in
// pieces, and the lines after it are read as before.
func TestReadGCTraceLongLine(t *testing.T) {
	long := strings.Repeat("x", 2<<20)
	gc := "gc 2 @1.500s 1%: 0.020+10+0.020 ms clock, 0.04+0/2/4+0.04 ms cpu, 8->8->3 MB, 9 MB goal, 0 MB stacks, 0 MB globals, 2 P\n"
	in := "before\n" + long + "\n" + gc + "after\n"
	var out bytes.Buffer
	tr := readGCTrace(io.MultiReader(strings.NewReader(in)), &out, time.Now)
	<-tr.done
	if want := "before\n" + long + "\nafter\n"; out.String() != want || len(tr.Windows()) != 1 {
		t.Errorf("passed on %d bytes (want %d), starting %q, ending %q; %d collections", out.Len(), len(want), out.String()[:min(out.Len(), 10)], out.String()[max(0, out.Len()-10):], len(tr.Windows()))
	}
}

func TestGCOverlaps(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	windows := []GCWindow{{Start: ms(100), End: ms(130)}, {Start: ms(1000), End: ms(1040)}}
	for _, tc := range []struct {
		start, end int
		want       bool
	}{
		{0, 99, false},
		{95, 101, true},   // the call ends inside a mark phase
		{110, 120, true},  // inside
		{125, 140, true},  // starts inside
		{130, 140, false}, // starts as the phase ends
		{500, 600, false}, // between collections
		{90, 1100, true},  // spans both
		{1041, 1050, false},
	} {
		if got := GCOverlaps(windows, ms(tc.start), ms(tc.end)); got != tc.want {
			t.Errorf("call %d..%d ms: %v, want %v", tc.start, tc.end, got, tc.want)
		}
	}
	if GCOverlaps(nil, ms(0), ms(10)) {
		t.Error("no collection overlapped a call")
	}
}

func TestMarkMedians(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	windows := []GCWindow{
		{Start: at(0), End: at(30), MarkCPUMs: 50, LiveMB: 40},      // before from
		{Start: at(100), End: at(120), MarkCPUMs: 30, LiveMB: 20},   // in
		{Start: at(200), End: at(240), MarkCPUMs: 60, LiveMB: 30},   // in
		{Start: at(300), End: at(330), MarkCPUMs: 45, LiveMB: 26},   // in
		{Start: at(1000), End: at(1100), MarkCPUMs: 99, LiveMB: 99}, // after to
	}
	n, wall, cpu, live := MarkMedians(windows, at(50), at(500))
	if n != 3 || wall != 30 || cpu != 45 || live != 26 {
		t.Errorf("got %d collections, medians %v ms, %v ms CPU, %v MB; want 3, 30, 45, 26", n, wall, cpu, live)
	}
	if n, _, _, _ := MarkMedians(windows, at(2000), at(3000)); n != 0 {
		t.Errorf("%d collections in an empty span", n)
	}
	n, wall, _, _ = MarkMedians(windows[1:3], at(0), at(500))
	if n != 2 || wall != 30 {
		t.Errorf("even count: %d collections, median %v ms, want 2 and 30", n, wall)
	}
}
