package main

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/perf"
)

// TestMachineJitterReported: the report says how evenly the machine ran
// fixed work when it was timed, and says nothing of it when it was not.
func TestMachineJitterReported(t *testing.T) {
	j := &perf.Jitter{Duration: 3 * time.Second, MemoryMiB: 64,
		CPU:    perf.Spread{Runs: 9000, P50Micros: 65.4, P99Micros: 98.9, P999Micros: 159.5},
		Memory: perf.Spread{Runs: 9000, P50Micros: 115.3, P99Micros: 269.1, P999Micros: 536.6}}
	for _, tc := range []struct {
		name   string
		jitter *perf.Jitter
		want   []string
		absent string
	}{
		{"timed", j, []string{"Fixed work timed for 3s", "on registers alone p50 65.4 µs, p99 98.9 (x1.51), p99.9 159.5", "over 64 MiB p50 115.3 µs, p99 269.1 (x2.33), p99.9 536.6"}, ""},
		{"not timed", nil, []string{"Machine: "}, "Fixed work"},
	} {
		var out bytes.Buffer
		printMarkdown(&out, &Report{Machine: Machine{NumCPU: 2, Jitter: tc.jitter}})
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: the report lacks %q:\n%s", tc.name, w, out.String())
			}
		}
		if tc.absent != "" && strings.Contains(out.String(), tc.absent) {
			t.Errorf("%s: the report says %q:\n%s", tc.name, tc.absent, out.String())
		}
	}
}

// TestSlowestReported: the report lists each scenario's slowest requests
// with when they came and what they were, and has no such list when none
// was kept (-slowest 0).
func TestSlowestReported(t *testing.T) {
	reordered := 531
	slow := []SlowCall{{Ms: 18.5, AtSeconds: 13.89, GC: "yes"}, {Ms: 12.8, AtSeconds: 47.45, OneOff: true, GC: "no"}, {Ms: 9.1, AtSeconds: 2.5, GC: "unknown"}}
	for _, tc := range []struct {
		name      string
		scenarios []Scenario
		want      []string
	}{
		{"kept", []Scenario{{Name: "cycle/names/500", Slowest: slow, ServerMeanMs: 0.7, ServerOver10ms: 2}, {Name: "cycle/names/5000"}},
			[]string{"Slowest requests", "- cycle/names/500: 18.5 ms at 13.89 s (GC); 12.8 ms at 47.45 s (one-off); 9.1 ms at 2.50 s (GC unknown); the service's own calls past 10 ms: 2, past 25 ms: 0\n"}},
		{"long calls not known", []Scenario{{Name: "cycle/names/500", Slowest: slow[:1], ServerMeanMs: 0.7, ServerOver10ms: -1, ServerOver25ms: -1}},
			[]string{"- cycle/names/500: 18.5 ms at 13.89 s (GC)\n"}},
		{"reordered", []Scenario{{Name: "cycle/names/5000", Slowest: []SlowCall{{Ms: 24.6, AtSeconds: 19.47, GC: "no", Reordered: true, ClientGC: true}},
			ServerMeanMs: 2.6, ServerOver10ms: 1, ReorderedCycles: &reordered}},
			[]string{"- cycle/names/5000: 24.6 ms at 19.47 s (reordered, client GC); the service's own calls past 10 ms: 1, past 25 ms: 0; 531 of its requests received part of an answer out of order\n"}},
		{"longer call", []Scenario{{Name: "cycle/names/5000", Slowest: []SlowCall{{Ms: 21.5, CallMs: 17.2, AtSeconds: 3.25, GC: "yes"}, {Ms: 9.5, CallMs: 9.5, AtSeconds: 4, GC: "no"}}}},
			[]string{"- cycle/names/5000: 21.5 ms at 3.25 s (longer call 17.2 ms, GC); 9.5 ms at 4.00 s\n"}},
		{"none kept", []Scenario{{Name: "cycle/names/500"}}, nil},
	} {
		var out bytes.Buffer
		printMarkdown(&out, &Report{Machine: Machine{NumCPU: 2}, Scenarios: tc.scenarios})
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: the report lacks %q:\n%s", tc.name, w, out.String())
			}
		}
		if (tc.name != "reordered" && tc.name != "longer call" && strings.Contains(out.String(), "cycle/names/5000:")) || (tc.want == nil && strings.Contains(out.String(), "Slowest requests")) {
			t.Errorf("%s: the report lists slowest requests it was not given:\n%s", tc.name, out.String())
		}
	}
}

// TestLongestCallTarget: the target "no call over 20 ms in 60 s on a still
// cluster" is judged on the longest single call of each names-only
// scenario that ran 60 s without Node updates, and only on those.
func TestLongestCallTarget(t *testing.T) {
	scenarios := []Scenario{
		{Verb: "cycle", Mode: "names", Nodes: 500, Seconds: 60.0004, MaxMs: 14.2, MaxCallMs: 11.9},
		{Verb: "cycle", Mode: "names", Nodes: 5000, Seconds: 60.001, MaxMs: 24.1, MaxCallMs: 20.3},
		{Verb: "cycle", Mode: "names", Nodes: 5000, Seconds: 10, MaxMs: 9, MaxCallMs: 8},
		{Verb: "cycle", Mode: "names", Nodes: 5000, Seconds: 60.001, MaxMs: 9, MaxCallMs: 8, NodeUpdatesPerSecond: 20},
		{Verb: "filter", Mode: "nodes", Nodes: 500, Seconds: 60.001, MaxMs: 9, MaxCallMs: 9},
	}
	got := longestCallTargets(scenarios)
	want := []TargetResult{
		{Name: "the longest call (filter or prioritize), 500 nodes (names), 60 s on a still cluster", Target: "< 20 ms", Measured: "11.900 ms (the longest cycle 14.200)", Value: 11.9, Met: true},
		{Name: "the longest call (filter or prioritize), 5000 nodes (names), 60 s on a still cluster", Target: "< 20 ms", Measured: "20.300 ms (the longest cycle 24.100)", Value: 20.3, Met: false},
	}
	if !slices.Equal(got, want) {
		t.Errorf("targets %+v,\nwant %+v", got, want)
	}
}

// TestMain lets this test binary stand in for loadgen in the processes
// loadgen starts of itself (-time-jitter), as the binary does.
func TestMain(m *testing.M) {
	if slices.Contains(os.Args[1:], "-time-jitter") {
		if err := run(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestTimeJitterInItsOwnProcess: the timing runs in a child process and
// comes back whole.
func TestTimeJitterInItsOwnProcess(t *testing.T) {
	j, err := timeJitter(30 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if j.Duration != 30*time.Millisecond || j.MemoryMiB != 64 || j.CPU.Runs < 2 || j.CPU.Runs != j.Memory.Runs || j.CPU.P50Micros <= 0 || j.Memory.P50Micros <= 0 {
		t.Errorf("jitter %+v: want both pieces timed for 30ms over 64 MiB", j)
	}
}
