package perf

import (
	"math"
	"runtime"
	"runtime/debug"
)

// Memory is a process's memory: VmRSS and VmHWM from /proc/self/status and
// the Go heap.
type Memory struct {
	// RSSMiB is VmRSS as it was, before anything below forced a GC.
	RSSMiB     float64 `json:"rssMiB"`
	PeakRSSMiB float64 `json:"peakRSSMiB"`
	// HeapLiveMiB is HeapAlloc after a forced GC: the bytes of the objects
	// the process holds. With GOGC=100 the heap grows to about twice that
	// between collections.
	HeapLiveMiB float64 `json:"heapLiveMiB"`
	// HeapInuseMiB is HeapInuse after the same GC: the spans those objects
	// occupy, free slots included (fragmentation).
	HeapInuseMiB float64 `json:"heapInuseMiB"`
	GoSysMiB     float64 `json:"goSysMiB"`
	// ReleasedRSSMiB is VmRSS after runtime/debug.FreeOSMemory (a forced
	// GC that returns all free pages to the OS): the floor.
	ReleasedRSSMiB float64 `json:"releasedRSSMiB"`
}

// ReadMemory reads VmRSS, then forces a GC to read the live heap, then
// returns free memory to the OS and reads VmRSS again.
func ReadMemory() (Memory, error) {
	rss, hwm, err := ProcStatus()
	if err != nil {
		return Memory{}, err
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	debug.FreeOSMemory()
	released, _, err := ProcStatus()
	if err != nil {
		return Memory{}, err
	}
	return Memory{RSSMiB: kibToMiB(rss), PeakRSSMiB: kibToMiB(hwm), ReleasedRSSMiB: kibToMiB(released),
		HeapLiveMiB: round1(float64(ms.HeapAlloc) / (1 << 20)), HeapInuseMiB: round1(float64(ms.HeapInuse) / (1 << 20)),
		GoSysMiB: round1(float64(ms.Sys) / (1 << 20))}, nil
}

func kibToMiB(kib int64) float64 { return round1(float64(kib) / 1024) }

func round1(x float64) float64 { return math.Round(x*10) / 10 }

// Footprint is what bench/cmd/footprint reports: the memory of a process
// that holds the engine, a policy set, the inventory and the HTTP server.
type Footprint struct {
	PolicySet   string  `json:"policySet"`
	Templates   int     `json:"templates"`
	Constraints int     `json:"constraints"`
	Nodes       int     `json:"nodes"`
	NodeSize    string  `json:"nodeSize"`
	Namespaces  int     `json:"namespaces"`
	LoadSeconds float64 `json:"loadSeconds"`
	AfterLoad   Memory  `json:"afterLoad"`
	Requests    int     `json:"requests"`
	// AfterRequests is measured after Requests filter requests naming all
	// Nodes nodes: compiled queries, memo and node classes in use.
	AfterRequests Memory `json:"afterRequests"`
}
