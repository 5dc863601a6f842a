package perf

import (
	"math/rand/v2"
	"slices"
	"time"
)

// Jitter is how evenly this machine ran a fixed piece of work, timed over
// and over at the time of a run: the same arithmetic on registers alone
// (CPU), and the same chain of dependent reads at random places of an
// array far larger than the caches (Memory: every read waits for DRAM).
// Neither allocates or makes a system call, so their spread is the
// machine's own: on a shared virtual machine, other guests' work. A row's
// p99 over its p50 is read against theirs; the service's own calls add
// what neither piece has (a working set that other work on the
// same CPU evicts from the caches between calls, the collector).
type Jitter struct {
	Duration time.Duration `json:"duration"`
	CPU      Spread        `json:"cpu"`
	Memory   Spread        `json:"memory"`
	// MemoryMiB is the size of the array Memory reads.
	MemoryMiB int `json:"memoryMiB"`
}

// Spread is the distribution of one piece of work's times.
type Spread struct {
	Runs       int     `json:"runs"`
	P50Micros  float64 `json:"p50Micros"`
	P99Micros  float64 `json:"p99Micros"`
	P999Micros float64 `json:"p999Micros"`
	MaxMicros  float64 `json:"maxMicros"`
}

// Ratio is the p99 over the p50: 1 for work that always takes as long.
func (s Spread) Ratio() float64 {
	if s.P50Micros == 0 {
		return 0
	}
	return s.P99Micros / s.P50Micros
}

// jitterMiB is the array Memory reads: larger than the last-level cache
// a guest of this kind gets, about the service's live heap.
const jitterMiB = 64

// MachineJitter times the two pieces of work in turn for about d on the
// calling goroutine (the arithmetic about 65 µs on this machine, the reads
// 240 to 360 µs), so that both sample the same stretch of the machine's
// time.
func MachineJitter(d time.Duration) Jitter {
	words := cycle(jitterMiB<<20/4, rand.New(rand.NewPCG(1, 2)))
	var cpu, mem []time.Duration
	var at uint32
	end := time.Now().Add(d)
	for r := uint64(0); time.Now().Before(end) || len(cpu) < 2; r++ {
		start := time.Now()
		spun = spin(r, 60000)
		mid := time.Now()
		at = chase(words, at, 1500) // on from where the last run stopped: places not read lately
		cpu, mem = append(cpu, mid.Sub(start)), append(mem, time.Since(mid))
	}
	return Jitter{Duration: d, CPU: spreadOf(cpu), Memory: spreadOf(mem), MemoryMiB: jitterMiB}
}

// spun keeps spin's result, so that its work is never optimised away.
var spun uint64

// spin is n steps of a linear congruential generator: registers only.
func spin(x uint64, n int) uint64 {
	for range n {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

// cycle is n words that link every index into one cycle in a random
// order (Sattolo's shuffle): a chase from anywhere reads n places before
// it reads one again, where random links would soon run into a short
// cycle that the caches hold.
func cycle(n int, rng *rand.Rand) []uint32 {
	words := make([]uint32, n)
	for i := range words {
		words[i] = uint32(i)
	}
	for i := n - 1; i > 0; i-- {
		j := rng.IntN(i)
		words[i], words[j] = words[j], words[i]
	}
	return words
}

// chase follows n links of words from at: each read's address is the
// previous read's value, so no two overlap.
func chase(words []uint32, at uint32, n int) uint32 {
	at %= uint32(len(words))
	for range n {
		at = words[at]
	}
	return at
}

func spreadOf(took []time.Duration) Spread {
	s := slices.Clone(took)
	slices.Sort(s)
	at := func(q float64) float64 { return float64(s[int(q*float64(len(s)-1))]) / 1e3 }
	return Spread{Runs: len(s), P50Micros: at(0.5), P99Micros: at(0.99), P999Micros: at(0.999), MaxMicros: at(1)}
}
