package perf

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestSpreadOf(t *testing.T) {
	var took []time.Duration
	for i := 1000; i >= 1; i-- { // 1..1000 µs, given in reverse
		took = append(took, time.Duration(i)*time.Microsecond)
	}
	for _, tc := range []struct {
		name      string
		got, want float64
	}{
		{"p50", spreadOf(took).P50Micros, 500},
		{"p99", spreadOf(took).P99Micros, 990},
		{"p99.9", spreadOf(took).P999Micros, 999},
		{"max", spreadOf(took).MaxMicros, 1000},
		{"ratio", spreadOf(took).Ratio(), 990.0 / 500},
		{"runs", float64(spreadOf(took).Runs), 1000},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if took[0] != 1000*time.Microsecond {
		t.Error("spreadOf sorted its caller's slice")
	}
	if r := (Spread{}).Ratio(); r != 0 {
		t.Errorf("the ratio of no runs: %v, want 0", r)
	}
}

func TestChaseFollowsTheLinks(t *testing.T) {
	words := []uint32{2, 0, 3, 1} // 0 -> 2 -> 3 -> 1 -> 0
	for _, tc := range []struct {
		at   uint32
		n    int
		want uint32
	}{{0, 0, 0}, {0, 1, 2}, {0, 3, 1}, {0, 4, 0}, {5, 1, 0}} {
		if got := chase(words, tc.at, tc.n); got != tc.want {
			t.Errorf("chase from %d, %d links: %d, want %d", tc.at, tc.n, got, tc.want)
		}
	}
}

func TestCycleLinksEveryIndexOnce(t *testing.T) {
	for _, n := range []int{2, 3, 17, 1000} {
		words := cycle(n, rand.New(rand.NewPCG(uint64(n), 7)))
		seen := make([]bool, n)
		at := uint32(0)
		for range n {
			if seen[at] {
				t.Fatalf("n=%d: index %d read twice within %d links", n, at, n)
			}
			seen[at] = true
			at = words[at]
		}
		if at != 0 {
			t.Errorf("n=%d: %d links from 0 end at %d, want back at 0", n, n, at)
		}
	}
}

func TestMachineJitterTimesBothPieces(t *testing.T) {
	j := MachineJitter(20 * time.Millisecond)
	for name, s := range map[string]Spread{"cpu": j.CPU, "memory": j.Memory} {
		if s.Runs < 2 || s.P50Micros <= 0 || s.P99Micros < s.P50Micros || s.MaxMicros < s.P999Micros {
			t.Errorf("%s: %+v, want at least two runs in order", name, s)
		}
	}
	if j.CPU.Runs != j.Memory.Runs || j.MemoryMiB != jitterMiB {
		t.Errorf("%+v: want the pieces timed in turn over %d MiB", j, jitterMiB)
	}
}
