package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/perf"
)

// Report is the JSON output (-json) and the source of the markdown table.
type Report struct {
	Machine   Machine    `json:"machine"`
	Config    Config     `json:"config"`
	Load      Load       `json:"load"`
	Scenarios []Scenario `json:"scenarios"`
	// Checkpoints are the process's memory after the NodeNames
	// scenarios and after all scenarios (before the framework comparison,
	// which loads a second policy engine).
	Checkpoints []Checkpoint `json:"checkpoints,omitempty"`
	Peer        []PeerResult `json:"peer,omitempty"`
	// Footprints are separate processes that link only the engine and
	// the server (bench/cmd/footprint).
	Footprints []perf.Footprint `json:"footprints,omitempty"`
	Targets    []TargetResult   `json:"targets"`
}

// Machine describes where the run happened.
type Machine struct {
	NumCPU      int    `json:"numCPU"`
	GOMAXPROCS  int    `json:"gomaxprocs"`
	CPUModel    string `json:"cpuModel"`
	GoVersion   string `json:"goVersion"`
	GOOS        string `json:"goos"`
	GOARCH      string `json:"goarch"`
	LoadAverage string `json:"loadAverageAtStart"`
	Started     string `json:"started"`
	// Jitter is fixed work timed before the scenarios (-machine-jitter).
	Jitter *perf.Jitter `json:"jitter,omitempty"`
}

// Checkpoint is the process's memory at one point of the run.
type Checkpoint struct {
	After string `json:"after"`
	// Requests measured so far (warm-ups not counted).
	Requests int    `json:"requests"`
	Memory   Memory `json:"memory"`
}

// Config echoes the flags that shape the numbers.
type Config struct {
	Duration    string  `json:"duration"`
	Warmup      string  `json:"warmup"`
	Concurrency int     `json:"concurrency"`
	PolicySet   string  `json:"policySet"`
	NodeSize    string  `json:"nodeSize"`
	OneOffShare float64 `json:"oneOffShare"`
	Seed        uint64  `json:"seed"`
	Nodes       []int   `json:"nodes"`
	FullNodes   []int   `json:"fullNodes"`
	PeerNodes   []int   `json:"peerNodes,omitempty"`
	PeerPods    int     `json:"peerPods,omitempty"`
	// GCHeapFloor is the service's heap floor in bytes (-1: the
	// -service binary's own default).
	GCHeapFloor int64 `json:"gcHeapFloor"`
	// EvalParallelism is the engine's Options.Parallelism (0: its
	// default, GOMAXPROCS; -1: the -service binary's own default).
	EvalParallelism int `json:"evalParallelism"`
	// Churn is the Node updates a second written during the scenarios,
	// ChurnKind what they change; NodeFiles the Nodes per file of the
	// -service folder (0: one kind: List file).
	Churn     float64 `json:"churn"`
	ChurnKind string  `json:"churnKind,omitempty"`
	NodeFiles int     `json:"nodeFiles,omitempty"`
	// FloorCPU is the CPU time the floor server spent per request ("match":
	// the service's in each scenario, FloorCPUMsPerCall)
	// (-floor-cpu), when it spent some.
	FloorCPU string `json:"floorCPU,omitempty"`
	// Rotate: the names-only calls named successive windows of the
	// inventory (-rotate), not the same first Nodes.
	Rotate bool `json:"rotate,omitempty"`
}

func (f *flags) config() Config {
	c := Config{Duration: f.duration.String(), Warmup: f.warmup.String(), Concurrency: f.concurrency, PolicySet: f.policySet,
		NodeSize: string(f.nodeSize), OneOffShare: f.oneOffShare, Seed: f.seed, Nodes: f.nodes, FullNodes: f.fullNodes}
	if f.peer {
		c.PeerNodes, c.PeerPods = f.peerNodes, f.peerPods
	}
	c.GCHeapFloor = f.gcHeapFloor
	if f.service != "" && !f.gcHeapFloorSet {
		c.GCHeapFloor = -1
	}
	c.EvalParallelism = f.evalParallelism
	if f.service != "" && !f.evalParallelismSet {
		c.EvalParallelism = -1
	}
	if f.churn > 0 {
		c.Churn, c.ChurnKind = f.churn, string(f.churnKind)
	}
	if f.floor && f.floorCPU > 0 {
		c.FloorCPU = f.floorCPU.String()
	}
	if f.floor && f.floorCPUMatch {
		c.FloorCPU = "match"
	}
	if f.service != "" {
		c.NodeFiles = f.nodeFiles
	}
	c.Rotate = f.rotate
	return c
}

// Load is what was loaded and what it cost.
type Load struct {
	PolicySet       string `json:"policySet"`
	Templates       int    `json:"templates"`
	Constraints     int    `json:"constraints"`
	DenyConstraints int    `json:"denyConstraints"`
	Nodes           int    `json:"nodes"`
	NodeSize        string `json:"nodeSize"`
	Namespaces      int    `json:"namespaces"`
	// NodeJSONBytes is the mean JSON size of the first 500 nodes.
	NodeJSONBytes int     `json:"nodeJSONBytes"`
	Seconds       float64 `json:"seconds"`
	// Memory right after loading (no request served yet).
	Memory Memory `json:"memory"`
	// Service is the binary measured with -service (empty: in process).
	Service string `json:"service,omitempty"`
}

// Memory is perf.Memory.
type Memory = perf.Memory

func memory() (Memory, error) { return perf.ReadMemory() }

// Scenario is one scenario's measurement. Latencies are measured by the
// client: from sending the request to reading the last byte of the answer.
type Scenario struct {
	Name        string `json:"name"`
	Verb        string `json:"verb"`
	Mode        string `json:"mode"` // names (NodeNames) or nodes (full Node objects)
	Nodes       int    `json:"nodes"`
	Concurrency int    `json:"concurrency"`
	Requests    int    `json:"requests"`
	// StartedAt is the first measured request's start (RFC 3339, UTC):
	// with the slowest requests' AtSeconds, the times to match against
	// logs and samplers outside loadgen (the service's, the kernel's).
	StartedAt string  `json:"startedAt,omitempty"`
	Seconds   float64 `json:"seconds"`
	RPS       float64 `json:"rps"`
	P50Ms     float64 `json:"p50Ms"`
	P90Ms     float64 `json:"p90Ms"`
	P99Ms     float64 `json:"p99Ms"`
	P999Ms    float64 `json:"p999Ms"`
	MaxMs     float64 `json:"maxMs"`
	// MaxCallMs is the longest single call: for a cycle the longer of
	// its filter and prioritize, each timed from its request's first
	// byte sent to its answer's last byte read (the extender's httpTimeout
	// applies to each); MaxMs, the longest cycle, adds the two.
	MaxCallMs float64 `json:"maxCallMs"`
	// NodeUpdatesPerSecond is the Node updates written while the
	// scenario was measured (-churn), per second.
	NodeUpdatesPerSecond float64 `json:"nodeUpdatesPerSecond"`
	MeanMs               float64 `json:"meanMs"`
	// ServerMeanMs is the service's own mean (its request_duration_seconds
	// histogram's sum/count over the measured requests): handler start to
	// answer written, without the client and the connection.
	ServerMeanMs float64 `json:"serverMeanMs"`
	// ServerOver10ms and ServerOver25ms count the service's own calls
	// (filter and prioritize for a cycle) past 10 and 25 ms, from the
	// same histogram: how many of the longest requests the service's
	// handler made, and how many the rest of the way (the connection, the
	// client, the machine's two processes) did; -1 where the histogram has
	// no such buckets.
	ServerOver10ms int `json:"serverOver10ms"`
	ServerOver25ms int `json:"serverOver25ms"`
	// OneOff* are the one-off pods' requests alone (memo misses).
	OneOffRequests int     `json:"oneOffRequests"`
	OneOffP50Ms    float64 `json:"oneOffP50Ms,omitempty"`
	OneOffMeanMs   float64 `json:"oneOffMeanMs,omitempty"`
	// ReplicaP99Ms is the p99 of the replicas' requests alone, and
	// QuietReplicaP99Ms that of those that had no collection;
	// GCEndedPercent is the share of requests that had one (-1: not
	// known). In process a request had one when a collection of this
	// process ended while it was in flight; with -service, when one of
	// the service's collections (its GODEBUG=gctrace=1 lines) overlapped
	// it. SlowGCPercent and SlowOneOffPercent are the shares of the
	// requests at or past the p99 that had a collection (-1: not known)
	// and that were one-off pods: what the p99 is made of.
	ReplicaP99Ms      float64 `json:"replicaP99Ms"`
	QuietReplicaP99Ms float64 `json:"quietReplicaP99Ms,omitempty"`
	GCEndedPercent    float64 `json:"gcEndedPercent"`
	SlowGCPercent     float64 `json:"slowGCPercent"`
	SlowOneOffPercent float64 `json:"slowOneOffPercent"`
	// Slowest are the scenario's slowest requests, the slowest first
	// (-slowest): when in the run each came and what it was, so that the
	// longest call is read as one call, not as a percentile.
	Slowest []SlowCall `json:"slowest,omitempty"`
	// ReorderedCycles counts the measured requests during which the
	// connection received segments out of order (nil: not known).
	ReorderedCycles *int `json:"reorderedCycles,omitempty"`
	// Collections counts the service's collections that ended during the
	// measured requests (-service, from its gctrace lines), with the
	// medians of their mark phases' wall time and CPU and of the heap
	// each marked live: the work that the slowest calls wait beside.
	Collections     int     `json:"collections,omitempty"`
	MarkMedianMs    float64 `json:"markMedianMs,omitempty"`
	MarkCPUMedianMs float64 `json:"markCPUMedianMs,omitempty"`
	LiveMedianMB    float64 `json:"liveMedianMB,omitempty"`
	// AllocsPerRequest and BytesPerRequest are the whole process's
	// (client and server share it) runtime.MemStats Mallocs and TotalAlloc
	// deltas over the measured requests.
	AllocsPerRequest float64 `json:"allocsPerRequest"`
	BytesPerRequest  float64 `json:"bytesPerRequest"`
	GCs              uint32  `json:"gcs"`
	// CPUMsPerRequest is the CPU time (user and system) of the process
	// the server runs in per measured request: in process, the load
	// generator's too; with -service, the service's alone (its
	// process_cpu_seconds_total, in steps of 10 ms). Each includes one
	// forced collection of the counters' readings.
	CPUMsPerRequest float64 `json:"cpuMsPerRequest"`
	// FloorCPUMsPerCall is, for a floor row with -floor-cpu-match, the
	// CPU time its server burned on each call, past its own work.
	FloorCPUMsPerCall float64 `json:"floorCpuMsPerCall,omitempty"`
	// FloorCPUMatched: a floor row that spent the service's CPU per
	// request (-floor-cpu-match), which the targets judge the service
	// against.
	FloorCPUMatched bool `json:"floorCpuMatched,omitempty"`
	// StealPercent is the share of the machine's CPU time the hypervisor
	// gave other guests during the measured requests (/proc/stat's steal,
	// over every CPU); -1 where it cannot be read. Tails measured while
	// it is high are the host's, not the service's.
	StealPercent  float64 `json:"stealPercent"`
	RequestBytes  int64   `json:"requestBytes"`
	ResponseBytes int64   `json:"responseBytes"`
	// PrioritizedPercent is the share of a cycle scenario's cycles that
	// called prioritize (at least two nodes passed the filter), and
	// PrioritizedNodes the mean number of nodes those calls were sent.
	PrioritizedPercent float64 `json:"prioritizedPercent,omitempty"`
	PrioritizedNodes   float64 `json:"prioritizedNodes,omitempty"`
	// EvaluationsPerRequest, MemoHitsPerRequest and MemoMissesPerRequest
	// are the deltas of the engine's Stats() (Evaluations: Rego queries
	// run; MemoHits and MemoMisses: (pod, node, constraint) verdicts found
	// and not found in the memo) over the measured requests, divided by
	// their number. EvalErrorsPerRequest likewise counts the evaluations
	// that failed (a template's runtime error, or the service's request
	// timeout).
	EvaluationsPerRequest float64 `json:"evaluationsPerRequest"`
	MemoHitsPerRequest    float64 `json:"memoHitsPerRequest"`
	MemoMissesPerRequest  float64 `json:"memoMissesPerRequest"`
	EvalErrorsPerRequest  float64 `json:"evalErrorsPerRequest"`
}

// PeerResult compares the engine with Gatekeeper's constraint framework at
// one node count.
type PeerResult struct {
	Nodes       int       `json:"nodes"`
	Constraints int       `json:"constraints"` // constraints loaded into the framework
	Pods        []PeerPod `json:"pods"`
	// PeerMsPerPod is the framework's mean time per pod: one
	// ReviewPodOnNode per candidate node, one after the other.
	PeerMsPerPod float64 `json:"peerMsPerPod"`
	// EngineFilterMeanMs is the mean filter latency of the names-only
	// scenario at this node count (HTTP included); 0 if it did not run.
	EngineFilterMeanMs float64 `json:"engineFilterMeanMs,omitempty"`
	// Ratio is EngineFilterMeanMs / PeerMsPerPod; Speedup its inverse.
	Ratio   float64 `json:"ratio,omitempty"`
	Speedup float64 `json:"speedup,omitempty"`
	// SamePods* compare on the reviewed pods themselves: one filter request
	// each (replicas of known ReplicaSets, and a one-off pod the engine has
	// never seen).
	SamePodsEngineMs float64 `json:"samePodsEngineMs"`
	SamePodsSpeedup  float64 `json:"samePodsSpeedup"`
	// Agree is true when the framework denied exactly the nodes the
	// engine's filter answer denied, for every pod.
	Agree bool `json:"agree"`
}

// PeerPod is one pod of the comparison.
type PeerPod struct {
	Pod      string  `json:"pod"`
	Kind     string  `json:"kind"`
	PeerMs   float64 `json:"peerMs"`
	EngineMs float64 `json:"engineMs"`
	Denied   int     `json:"denied"`
	Mismatch int     `json:"mismatchedNodes"`
	// MessageMismatch counts the nodes both sides denied with different
	// messages: the engine's "[<constraint>] <msg>" parts against the
	// framework's results.
	MessageMismatch int    `json:"mismatchedMessages"`
	PeerError       string `json:"peerError,omitempty"`
}

// TargetResult is one target of the issue and whether this run met it.
type TargetResult struct {
	Name     string  `json:"name"`
	Target   string  `json:"target"`
	Measured string  `json:"measured"`
	Value    float64 `json:"value"`
	Met      bool    `json:"met"`
}

func targets(r *Report) []TargetResult {
	var out []TargetResult
	for _, t := range []struct {
		nodes int
		maxMs float64
	}{{500, 2}, {5000, 15}} {
		for _, s := range r.Scenarios {
			if (s.Verb == "filter" || s.Verb == "cycle") && s.Mode == "names" && s.Nodes == t.nodes {
				what := "filter"
				if s.Verb == "cycle" {
					what = "filter+prioritize (one cycle)"
				}
				out = append(out, TargetResult{
					Name:   fmt.Sprintf("%s p99, %d nodes (names)", what, t.nodes),
					Target: fmt.Sprintf("< %g ms", t.maxMs), Measured: fmt.Sprintf("%.3f ms", s.P99Ms),
					Value: s.P99Ms, Met: s.P99Ms < t.maxMs,
				})
			}
		}
	}
	out = append(out, floorTargets(r.Scenarios)...)
	out = append(out, longestCallTargets(r.Scenarios)...)
	for _, p := range r.Peer {
		if p.Speedup > 0 {
			out = append(out, TargetResult{
				Name:   fmt.Sprintf("time per pod vs. the framework, %d nodes", p.Nodes),
				Target: ">= 200x less", Measured: fmt.Sprintf("%.0fx less", p.Speedup),
				Value: p.Speedup, Met: p.Speedup >= 200,
			})
		}
	}
	for _, fp := range r.Footprints {
		if fp.PolicySet != perf.SetAll && fp.PolicySet != perf.SetRealistic {
			continue
		}
		out = append(out, TargetResult{
			Name:   fmt.Sprintf("VmRSS, %d %s nodes and %d templates (%s), after %d filter requests", fp.Nodes, fp.NodeSize, fp.Templates, fp.PolicySet, fp.Requests),
			Target: "< 150 MiB", Measured: fmt.Sprintf("%.1f MiB", fp.AfterRequests.RSSMiB),
			Value: fp.AfterRequests.RSSMiB, Met: fp.AfterRequests.RSSMiB < 150,
		})
	}
	return out
}

// maxFloorRatio is the service's tail the targets allow, as a multiple of
// the p99 of a floor server that spends the service's CPU per call in the
// same run (-floor-cpu-match): what this machine gives the same work with
// no engine, collector or garbage.
const maxFloorRatio = 1.5

// floorTargets judge a cycle's p99 at 500 nodes (names) against its floor
// row's, when the floor spent the service's CPU (FloorCPUMatched).
func floorTargets(scenarios []Scenario) []TargetResult {
	var out []TargetResult
	for _, s := range scenarios {
		if s.Verb != "cycle" || s.Mode != "names" || s.Nodes != 500 {
			continue
		}
		for _, fl := range scenarios {
			if fl.Verb != "floor "+s.Verb || fl.Mode != s.Mode || fl.Nodes != s.Nodes || !fl.FloorCPUMatched || fl.P99Ms <= 0 {
				continue
			}
			ratio := s.P99Ms / fl.P99Ms
			out = append(out, TargetResult{
				Name:     fmt.Sprintf("filter+prioritize (one cycle) p99 against the floor's, %d nodes (names)", s.Nodes),
				Target:   fmt.Sprintf("<= %gx the floor's", maxFloorRatio),
				Measured: fmt.Sprintf("%.2fx (%.3f ms against %.3f ms)", ratio, s.P99Ms, fl.P99Ms),
				Value:    ratio, Met: ratio <= maxFloorRatio,
			})
		}
	}
	return out
}

// longestCallTargets are the target "no call over 20 ms in 60 s of calls
// on a still cluster", for each names-only scenario that ran 60 s or more
// without Node updates.
func longestCallTargets(scenarios []Scenario) []TargetResult {
	var out []TargetResult
	for _, s := range scenarios {
		if s.Mode != "names" || s.NodeUpdatesPerSecond > 0 || s.Seconds < 60 || s.MaxCallMs <= 0 {
			continue
		}
		out = append(out, TargetResult{
			Name:   fmt.Sprintf("the longest call (%s), %d nodes (names), %.0f s on a still cluster", verbsNamed(s.Verb), s.Nodes, s.Seconds),
			Target: "< 20 ms", Measured: fmt.Sprintf("%.3f ms (the longest %s %.3f)", s.MaxCallMs, s.Verb, s.MaxMs),
			Value: s.MaxCallMs, Met: s.MaxCallMs < 20,
		})
	}
	return out
}

// verbsNamed names the calls a scenario's verb sends.
func verbsNamed(verb string) string {
	if verb == "cycle" {
		return "filter or prioritize"
	}
	return verb
}

func printMarkdown(w io.Writer, r *Report) {
	fmt.Fprintf(w, "Machine: %d CPUs (%s), GOMAXPROCS %d, %s; load average at start %s.\n\n",
		r.Machine.NumCPU, r.Machine.CPUModel, r.Machine.GOMAXPROCS, r.Machine.GoVersion, r.Machine.LoadAverage)
	if j := r.Machine.Jitter; j != nil {
		fmt.Fprintf(w, "Fixed work timed for %s before the scenarios (-machine-jitter): on registers alone p50 %.1f µs, p99 %.1f (x%.2f), p99.9 %.1f; as dependent reads over %d MiB p50 %.1f µs, p99 %.1f (x%.2f), p99.9 %.1f: how evenly the machine ran work that neither allocates nor waits on anything else.\n\n",
			j.Duration, j.CPU.P50Micros, j.CPU.P99Micros, j.CPU.Ratio(), j.CPU.P999Micros,
			j.MemoryMiB, j.Memory.P50Micros, j.Memory.P99Micros, j.Memory.Ratio(), j.Memory.P999Micros)
	}
	if r.Load.Service != "" {
		fmt.Fprintf(w, "Service: %s, run as its own process on a policy folder written for it (-service).\n\n", r.Load.Service)
	}
	floor := "the binary's default"
	if r.Config.GCHeapFloor >= 0 {
		floor = fmt.Sprintf("%d MiB", r.Config.GCHeapFloor>>20)
	}
	parallelism := "the binary's default"
	switch p := r.Config.EvalParallelism; {
	case p == 0:
		parallelism = "GOMAXPROCS"
	case p > 0:
		parallelism = strconv.Itoa(p)
	}
	fmt.Fprintf(w, "Policies: %q, %d templates, %d constraints (%d deny); %d %s nodes (%d B of JSON each on average), %d namespaces; %s per scenario after %s warm-up, concurrency %d, %.0f%% one-off pods; heap floor %s; evaluation parallelism %s.\n\n",
		r.Load.PolicySet, r.Load.Templates, r.Load.Constraints, r.Load.DenyConstraints, r.Load.Nodes, r.Load.NodeSize, r.Load.NodeJSONBytes,
		r.Load.Namespaces, r.Config.Duration, r.Config.Warmup, r.Config.Concurrency, 100*r.Config.OneOffShare, floor, parallelism)
	if r.Config.FloorCPU != "" {
		where := "in this process"
		if r.Load.Service != "" {
			where = "in a process of its own"
		}
		if r.Config.FloorCPU == "match" {
			fmt.Fprintf(w, "Floor rows: a server %s that answers with the service's bytes after spending the CPU time the service spent per request in the same scenario: its own work, and a burn on each call for the rest (-floor-cpu-match; the floor rows' CPU ms/req is the floor process's).\n\n", where)
		} else {
			fmt.Fprintf(w, "Floor rows: a server %s that answers with the service's bytes after %s of CPU time per request (-floor-cpu).\n\n", where, r.Config.FloorCPU)
		}
	}
	if r.Config.Rotate {
		fmt.Fprintf(w, "Candidates: each names-only call names the next window of its node count through the %d Nodes, as kube-scheduler's cycles do (-rotate).\n\n", r.Load.Nodes)
	} else {
		fmt.Fprintf(w, "Candidates: every names-only call names the same first Nodes of the %d (-rotate=false).\n\n", r.Load.Nodes)
	}
	printScenarios(w, r.Scenarios)
	if slices.ContainsFunc(r.Scenarios, func(s Scenario) bool { return len(s.Slowest) > 0 }) {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Slowest requests of each scenario (-slowest), from its first measured request's start; GC: one of the server's collections overlapped it; reordered: part of an answer arrived out of order (the service resent it); client GC: one of loadgen's own collections ended during it; longer call: the longer of a cycle's two calls, where shorter than the cycle:")
		fmt.Fprintln(w)
		printSlowest(w, r.Scenarios)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| memory | VmRSS MiB | peak VmRSS MiB | live heap MiB | heap spans in use MiB | VmRSS after FreeOSMemory MiB |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	row := func(what string, m Memory) {
		fmt.Fprintf(w, "| %s | %.1f | %.1f | %.1f | %.1f | %.1f |\n", what, m.RSSMiB, m.PeakRSSMiB, m.HeapLiveMiB, m.HeapInuseMiB, m.ReleasedRSSMiB)
	}
	whose := "this process" // the engine and the server run in it
	if r.Load.Service != "" {
		whose = "the service (" + r.Load.Service + ")"
	}
	row(fmt.Sprintf("%s: %d nodes, %d templates, after loading", whose, r.Load.Nodes, r.Load.Templates), r.Load.Memory)
	for _, c := range r.Checkpoints {
		row(fmt.Sprintf("%s: after %s (%d requests)", whose, c.After, c.Requests), c.Memory)
	}
	for _, fp := range r.Footprints {
		row(fmt.Sprintf("footprint %q: %d %s nodes, %d templates, after loading", fp.PolicySet, fp.Nodes, fp.NodeSize, fp.Templates), fp.AfterLoad)
		row(fmt.Sprintf("footprint %q: the same, after %d filter requests", fp.PolicySet, fp.Requests), fp.AfterRequests)
	}
	if len(r.Peer) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| framework comparison | nodes | pods | framework ms/pod | engine filter mean ms | engine/framework | engine on the same pods ms | same-pod speedup | same verdicts |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---|")
		for _, p := range r.Peer {
			mean, ratio := "-", "-" // no names-only filter scenario at this node count
			if p.EngineFilterMeanMs > 0 {
				mean, ratio = fmt.Sprintf("%.3f", p.EngineFilterMeanMs), fmt.Sprintf("1/%.0f", p.Speedup)
			}
			fmt.Fprintf(w, "| %d constraints | %d | %d | %.1f | %s | %s | %.3f | %.0fx | %v |\n",
				p.Constraints, p.Nodes, len(p.Pods), p.PeerMsPerPod, mean, ratio, p.SamePodsEngineMs, p.SamePodsSpeedup, p.Agree)
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, "\"same verdicts\": the framework denied exactly the nodes the engine's filter denied, with the same messages, for every pod.")
	}
	if len(r.Targets) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| target | wanted | measured | met |")
		fmt.Fprintln(w, "|---|---|---|---|")
		for _, t := range r.Targets {
			met := "yes"
			if !t.Met {
				met = "**no**"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", t.Name, t.Target, t.Measured, met)
		}
	}
}

// SlowCall is one of a scenario's slowest requests.
type SlowCall struct {
	Ms float64 `json:"ms"`
	// CallMs is its longest call (the longer of a cycle's two).
	CallMs float64 `json:"callMs"`
	// AtSeconds is when it started, from the first measured request's
	// start.
	AtSeconds float64 `json:"atSeconds"`
	OneOff    bool    `json:"oneOff"`
	// GC: a collection of the server's overlapped it ("unknown" where the
	// server's collections are not known).
	GC string `json:"gc"`
	// Reordered: the connection received part of the answer out of order
	// (TCP_INFO on Linux), so the service resent part of it.
	Reordered bool `json:"reordered,omitempty"`
	// ClientGC: a collection of loadgen's own (with -service) ended
	// while it was in flight.
	ClientGC bool `json:"clientGC,omitempty"`
}

// printSlowest lists each scenario's slowest requests, one line each
// scenario.
func printSlowest(w io.Writer, scenarios []Scenario) {
	for _, s := range scenarios {
		if len(s.Slowest) == 0 {
			continue
		}
		parts := make([]string, len(s.Slowest))
		for i, c := range s.Slowest {
			var what []string
			if c.OneOff {
				what = append(what, "one-off")
			}
			switch c.GC {
			case "yes":
				what = append(what, "GC")
			case "unknown":
				what = append(what, "GC unknown")
			}
			if c.Reordered {
				what = append(what, "reordered")
			}
			if c.ClientGC {
				what = append(what, "client GC")
			}
			parts[i] = fmt.Sprintf("%.1f ms at %.2f s", c.Ms, c.AtSeconds)
			if c.CallMs > 0 && c.CallMs < c.Ms {
				what = append([]string{fmt.Sprintf("longer call %.1f ms", c.CallMs)}, what...)
			}
			if len(what) > 0 {
				parts[i] += " (" + strings.Join(what, ", ") + ")"
			}
		}
		server := ""
		if s.ServerMeanMs > 0 && s.ServerOver10ms >= 0 {
			server = fmt.Sprintf("; the service's own calls past 10 ms: %d, past 25 ms: %d", s.ServerOver10ms, s.ServerOver25ms)
		}
		if s.Collections > 0 {
			server += fmt.Sprintf("; its %d collections' mark phase (medians) %.1f ms, %.1f ms of CPU, %.0f MB marked live",
				s.Collections, s.MarkMedianMs, s.MarkCPUMedianMs, s.LiveMedianMB)
		}
		if s.ReorderedCycles != nil {
			server += fmt.Sprintf("; %d of its requests received part of an answer out of order", *s.ReorderedCycles)
		}
		fmt.Fprintf(w, "- %s: %s%s\n", s.Name, strings.Join(parts, "; "), server)
	}
}

// printScenarios is the table of the scenarios' figures, a row each.
func printScenarios(w io.Writer, scenarios []Scenario) {
	fmt.Fprintln(w, "| scenario | nodes | requests | req/s | p50 ms | p99 ms | p99.9 ms | max ms | longest call ms | mean ms | server mean ms | one-off p50 ms | replica p99 ms | replica p99 without a GC ms | calls with a GC % | p99 calls with a GC % | p99 calls one-off % | evaluations/req | memo hits/req | memo misses/req | eval errors/req | allocs/req | KiB alloc/req | request KiB | answer KiB | GCs | CPU ms/req | CPU steal % | cycles prioritized % | nodes prioritized | node updates/s |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range scenarios {
		oneOff := "-" // no one-off pod among the measured requests
		if s.OneOffRequests > 0 {
			oneOff = fmt.Sprintf("%.3f", s.OneOffP50Ms)
		}
		quiet, gcEnded, slowGC := "-", "-", "-"
		if s.GCEndedPercent >= 0 {
			quiet, gcEnded = fmt.Sprintf("%.3f", s.QuietReplicaP99Ms), fmt.Sprintf("%.1f", s.GCEndedPercent)
		}
		if s.SlowGCPercent >= 0 {
			slowGC = fmt.Sprintf("%.1f", s.SlowGCPercent)
		}
		steal := "-"
		if s.StealPercent >= 0 {
			steal = fmt.Sprintf("%.1f", s.StealPercent)
		}
		prioritized, scored := "-", "-"
		if strings.HasSuffix(s.Verb, "cycle") {
			prioritized, scored = fmt.Sprintf("%.1f", s.PrioritizedPercent), fmt.Sprintf("%.1f", s.PrioritizedNodes)
		}
		fmt.Fprintf(w, "| %s %s | %d | %d | %.0f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %s | %.3f | %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f | %.0f | %.1f | %.1f | %d | %.3f | %s | %s | %s | %.1f |\n",
			s.Verb, s.Mode, s.Nodes, s.Requests, s.RPS, s.P50Ms, s.P99Ms, s.P999Ms, s.MaxMs, s.MaxCallMs, s.MeanMs, s.ServerMeanMs, oneOff, s.ReplicaP99Ms, quiet, gcEnded, slowGC, s.SlowOneOffPercent,
			s.EvaluationsPerRequest, s.MemoHitsPerRequest, s.MemoMissesPerRequest, s.EvalErrorsPerRequest,
			s.AllocsPerRequest, s.BytesPerRequest/1024, float64(s.RequestBytes)/1024, float64(s.ResponseBytes)/1024, s.GCs, s.CPUMsPerRequest, steal, prioritized, scored, s.NodeUpdatesPerSecond)
	}
}

func machine() Machine {
	m := Machine{NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version(),
		GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, Started: time.Now().UTC().Format(time.RFC3339)}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if fs := strings.Fields(string(b)); len(fs) >= 3 {
			m.LoadAverage = strings.Join(fs[:3], " ")
		}
	}
	return m
}

func round1(x float64) float64 { return math.Round(x*10) / 10 }
