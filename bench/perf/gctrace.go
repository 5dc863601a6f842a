package perf

import (
	"bufio"
	"io"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"time"
)

// A service's collections, timed from outside its process. The Go
// runtime writes one line per collection to stderr under
// GODEBUG=gctrace=1, when the collection's mark phase has ended, with
// the wall-clock length of its three phases (stop the world, concurrent
// mark, stop the world). Read as they arrive, the lines give each
// collection's window on this process's clock, to within the pipe's
// latency: enough to tell which calls a collection overlapped, where a
// mark phase lasts tens of milliseconds.

// GCWindow is one collection's mark phase, start to end.
type GCWindow struct {
	Start, End time.Time
	// MarkCPUMs is the CPU its mark phase took (assists, the background
	// and the idle workers), LiveMB the heap it marked live: what the
	// collector's work is made of (0 when the line does not give them).
	MarkCPUMs float64
	LiveMB    int
}

// gcTraceLine matches a gctrace line and captures its phases' clock times
// in milliseconds: "gc 7 @1.234s 2%: 0.012+31+0.045 ms clock, ...".
var gcTraceLine = regexp.MustCompile(`^gc \d+ @[0-9.]+s \d+%: ([0-9.]+)\+([0-9.]+)\+([0-9.]+) ms clock`)

// gcTraceWork matches the rest of a gctrace line: the mark phase's CPU
// (assist/background/idle) and the heap marked live, in MB.
var gcTraceWork = regexp.MustCompile(`ms clock, [0-9.]+\+([0-9.]+)/([0-9.]+)/([0-9.]+)\+[0-9.]+ ms cpu, \d+->\d+->(\d+) MB`)

// gcTrace collects the windows of the gctrace lines read from a stream
// and passes every other line on.
type gcTrace struct {
	mu      sync.Mutex
	windows []GCWindow
	done    chan struct{}
}

// readGCTrace reads r to its end in a goroutine of its own, keeping the
// gctrace lines' windows and copying the other lines to out (a line
// longer than the buffer goes on in pieces); now is the clock (time.Now
// outside tests).
func readGCTrace(r io.Reader, out io.Writer, now func() time.Time) *gcTrace {
	t := &gcTrace{done: make(chan struct{})}
	go func() {
		defer close(t.done)
		br := bufio.NewReaderSize(r, 64<<10)
		inLine := false // the last piece did not end its line
		for {
			line, err := br.ReadSlice('\n')
			if len(line) > 0 {
				if w, ok := parseGCTrace(line, now()); ok && !inLine && err == nil {
					t.mu.Lock()
					t.windows = append(t.windows, w)
					t.mu.Unlock()
				} else {
					_, _ = out.Write(line)
				}
				inLine = err == bufio.ErrBufferFull
			}
			if err != nil && err != bufio.ErrBufferFull {
				return
			}
		}
	}()
	return t
}

// parseGCTrace is the window of a gctrace line read at end.
func parseGCTrace(line []byte, end time.Time) (GCWindow, bool) {
	m := gcTraceLine.FindSubmatch(line)
	if m == nil {
		return GCWindow{}, false
	}
	var total float64
	for _, part := range m[1:] {
		ms, err := strconv.ParseFloat(string(part), 64)
		if err != nil {
			return GCWindow{}, false
		}
		total += ms
	}
	w := GCWindow{Start: end.Add(-time.Duration(total * float64(time.Millisecond))), End: end}
	if m := gcTraceWork.FindSubmatch(line); m != nil {
		for _, part := range m[1:4] {
			ms, _ := strconv.ParseFloat(string(part), 64) // the pattern admits numbers only
			w.MarkCPUMs += ms
		}
		w.LiveMB, _ = strconv.Atoi(string(m[4]))
	}
	return w, true
}

// MarkMedians are the medians of the mark phases' wall time and CPU and
// of the heap marked live, over the windows that ended between from and
// to; n is their count.
func MarkMedians(windows []GCWindow, from, to time.Time) (n int, wallMs, cpuMs, liveMB float64) {
	var wall, cpu, live []float64
	for _, w := range windows {
		if w.End.Before(from) || w.End.After(to) {
			continue
		}
		wall = append(wall, float64(w.End.Sub(w.Start))/float64(time.Millisecond))
		cpu = append(cpu, w.MarkCPUMs)
		live = append(live, float64(w.LiveMB))
	}
	return len(wall), median(wall), median(cpu), median(live)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

// Windows are the collections seen so far, in the order they ended.
func (t *gcTrace) Windows() []GCWindow {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]GCWindow(nil), t.windows...)
}

// GCOverlaps reports, for windows in the order they ended, whether any
// overlaps the span from start to end.
func GCOverlaps(windows []GCWindow, start, end time.Time) bool {
	// Windows end in order and do not overlap one another (one collection
	// at a time): the first that ends after start is the only candidate.
	i := sort.Search(len(windows), func(i int) bool { return windows[i].End.After(start) })
	return i < len(windows) && windows[i].Start.Before(end)
}
