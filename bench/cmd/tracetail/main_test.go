package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/trace"
	"strings"
	"testing"
	"time"

	xtrace "golang.org/x/exp/trace"
)

// TestReadsRegions traces calls made as the server makes them (a region
// per verb call) and checks what read finds: every call, its running and
// blocked time, a collection's mark phase overlapping the call that ran
// one, and nothing of the regions that are not verbs.
func TestReadsRegions(t *testing.T) {
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Skipf("cannot trace: %v", err) // a trace is already running (go test -trace)
	}
	ctx := context.Background()
	busy := func(d time.Duration) {
		for start := time.Now(); time.Since(start) < d; {
		}
	}
	for range 3 {
		trace.WithRegion(ctx, "filter", func() { busy(2 * time.Millisecond) })
	}
	trace.WithRegion(ctx, "prioritize", func() { time.Sleep(5 * time.Millisecond) })
	trace.WithRegion(ctx, "bind", runtime.GC)
	trace.WithRegion(ctx, "not-a-verb", func() { busy(time.Millisecond) })
	trace.Stop()
	path := filepath.Join(t.TempDir(), "t.trace")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	calls, err := read(path, "")
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, c := range calls {
		count[c.verb]++
		switch c.verb {
		case "filter":
			if c.running < time.Millisecond {
				t.Errorf("filter ran %v, want 2ms of running", c.running)
			}
		case "prioritize":
			if c.blocked < 4*time.Millisecond {
				t.Errorf("prioritize blocked %v, want 5ms asleep", c.blocked)
			}
		case "bind":
			if c.markLap <= 0 {
				t.Errorf("bind ran a collection but overlaps no mark phase")
			}
		}
	}
	if count["filter"] != 3 || count["prioritize"] != 1 || count["bind"] != 1 || len(calls) != 5 {
		t.Errorf("calls by verb %v, want 3 filter, 1 prioritize, 1 bind and no other", count)
	}

	only, err := read(path, "filter")
	if err != nil {
		t.Fatal(err)
	}
	if len(only) != 3 {
		t.Errorf("-verb filter read %d calls, want 3", len(only))
	}
	var out strings.Builder
	report(&out, calls)
	for _, want := range []string{"5 calls", "| all | 5 |", "| p99 and above | 1 |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// TestReportSplitsTheSlowest checks the split of the slowest percent by
// the collector: 200 calls, the two slowest (the top percent) one beside
// a mark phase and one not.
func TestReportSplitsTheSlowest(t *testing.T) {
	var calls []*call
	for i := range 200 {
		c := &call{verb: "filter", end: xtrace.Time(100_000 + i)}
		c.running = time.Duration(c.end)
		calls = append(calls, c)
	}
	calls[198].end, calls[198].markLap = 5_000_000, time.Millisecond
	calls[199].end = 4_000_000
	var out strings.Builder
	report(&out, calls)
	for _, want := range []string{
		"| p99 and above | 2 |",
		"| p99 and above, beside a mark phase | 1 | 5.000 |",
		"| p99 and above, no mark phase | 1 | 4.000 |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// TestListSlowest: -slowest lists the n slowest calls, the slowest first,
// each with when it started and where it assisted the collector.
func TestListSlowest(t *testing.T) {
	var calls []*call
	for i := range 10 {
		start := xtrace.Time(i * 100_000_000) // call i at 0.1*i s, i+1 ms long
		calls = append(calls, &call{verb: "filter", start: start, end: start + xtrace.Time((i+1)*1_000_000)})
	}
	calls[9].assist, calls[9].assistedIn = 2*time.Millisecond, map[string]time.Duration{"server.(*answerPool).get": 2 * time.Millisecond}
	var out strings.Builder
	report(&out, calls) // sorts calls by length
	listSlowest(&out, calls, 2)
	text := out.String()
	first := strings.Index(text, "| filter | 0.900 | 10.000 |")
	second := strings.Index(text, "| filter | 0.800 | 9.000 |")
	if first < 0 || second < first {
		t.Fatalf("the slowest calls are not listed slowest first:\n%s", text)
	}
	if strings.Contains(text, "| 8.000 |") {
		t.Errorf("-slowest 2 listed a third call:\n%s", text)
	}
	if !strings.Contains(text[first:second], "server.(*answerPool).get 2.000") {
		t.Errorf("the slowest call's row lacks where it assisted:\n%s", text[first:second])
	}
}
