// Command loadgen replays what the kube-scheduler sends to the
// opa-scheduler-extender against the real engine and HTTP server, in
// process, on a loopback listener, and reports throughput, latency,
// allocations and memory; side by side, it times the same placement work
// through Gatekeeper's constraint framework (bench/peer).
//
// Run it from bench/:
//
//	go run ./cmd/loadgen -duration 5s -json /tmp/loadgen.json
//	go run ./cmd/loadgen -policy-set realistic -duration 5s -nodes 500,5000 -full-nodes ''
//
// See bench/README.md, "Load generator"; bench/regenerate-results.sh runs
// it for the figures there.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/perf"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/cmd/opa-scheduler-extender/heapfloor"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

type flags struct {
	duration    time.Duration
	warmup      time.Duration
	nodes       []int
	fullNodes   []int
	verbs       []string
	concurrency int
	inventory   int
	// rotate: names-only calls name successive windows of the inventory.
	rotate      bool
	jsonPath    string
	policySet   string
	nodeSize    perf.NodeSize
	library     string
	examples    string
	realistic   string
	oneOffShare float64
	seed        uint64
	peer        bool
	peerNodes   []int
	peerPods    int
	peerAll     bool
	footprint   bool
	// footprintSets are the policy sets bench/cmd/footprint measures.
	footprintSets []string
	cpuProfile    string
	memProfile    string
	// tracePrefix: write a runtime trace of each scenario's measured
	// requests to <tracePrefix><verb>-<mode>-<nodes>.trace.
	tracePrefix string
	// slowest: list this many of each scenario's slowest requests.
	slowest int
	// gcHeapFloor is the in-process service's heap floor (heapfloor);
	// gcHeapFloorSet: given on the command line, so passed to -service too.
	gcHeapFloor    int64
	gcHeapFloorSet bool
	// evalParallelism is the engine's Options.Parallelism (0: its
	// default); with -service, passed as --eval-parallelism when given.
	evalParallelism    int
	evalParallelismSet bool
	// service is the opa-scheduler-extender binary to measure as its own
	// process (empty: the engine and server in this process).
	service string
	// floor: time the scenarios against a server without the engine too;
	// floorCPU: the CPU time it spends per request.
	floor    bool
	floorCPU time.Duration
	// floorCPUMatch: each scenario's floor spends the service's CPU per
	// call measured in that scenario.
	floorCPUMatch bool
	// serveFloor: only serve a floor (the floor process of -floor with
	// -service).
	serveFloor bool
	// churn is how many Node updates a second are written during the
	// scenarios (0: a still cluster), churnKind what they change;
	// nodeFiles how many Nodes one file of -service's folder holds (0:
	// all in one kind: List file).
	churn     float64
	churnKind perf.ChurnKind
	nodeFiles int
	// extra is a folder of policies added to the set (-extra).
	extra string
	// machineJitter is how long fixed work is timed before the scenarios
	// (perf.MachineJitter, in a process of its own: timeJitter; 0: not
	// timed).
	machineJitter time.Duration
	// timeJitter: only time fixed work for machineJitter and print it as
	// JSON (the process -machine-jitter starts).
	timeJitter bool
}

func parseFlags() (*flags, error) {
	f := &flags{}
	d := perf.DefaultDirs(".")
	var raw rawFlags
	// Its own flag set: the framework's dependencies register glog flags
	// on the default one.
	fs := flag.NewFlagSet("loadgen", flag.ExitOnError)
	fs.DurationVar(&f.duration, "duration", 10*time.Second, "measured time per scenario")
	fs.DurationVar(&f.warmup, "warmup", 500*time.Millisecond, "unmeasured time before each scenario (fills the memo, as a running service's is)")
	fs.StringVar(&raw.nodes, "nodes", "100,500,5000", "candidate node counts of the names-only (nodeCacheCapable) scenarios; the inventory holds the largest of all node counts")
	fs.StringVar(&raw.fullNodes, "full-nodes", "100,500", "candidate node counts of the scenarios that send full Node objects (empty: none)")
	fs.StringVar(&raw.verbs, "verbs", "filter,prioritize", "extender verbs to replay: filter, prioritize, and cycle (filter then prioritize for the same pod, timed together: what kube-scheduler asks per pod; prioritize gets the nodes the filter passed, and is not sent when fewer than two did, as kube-scheduler does)")
	fs.IntVar(&f.concurrency, "concurrency", 1, "requests in flight (the scheduler sends one at a time)")
	fs.IntVar(&f.inventory, "inventory", 0, "nodes in the engine's inventory (0: the largest node count of -nodes, -full-nodes and -peer-nodes)")
	fs.BoolVar(&f.rotate, "rotate", true, "names-only scenarios send each call the next window of their node count through the inventory, as kube-scheduler's filter starts where the last cycle stopped (false: the same first Nodes every call)")
	fs.StringVar(&f.jsonPath, "json", "", "write the report as JSON to this file")
	fs.StringVar(&f.policySet, "policy-set", perf.SetMix, `policies: "mix" (16 library Pod templates + the 4 placement examples, 20 constraints), "all" (49 library templates + 4 examples, one sample constraint each) or "realistic" (every library template with one sample constraint, all warn here, + the 5 placement templates of testdata/realistic, 3 of them deny)`)
	fs.StringVar(&raw.nodeSize, "node-size", "", `Node objects: "small" (3.6 KB of JSON each) or "kubelet" (what a kubelet reports, 30 to 50 images, about 10 KB); empty: "kubelet" for -policy-set realistic, else "small"`)
	fs.StringVar(&f.library, "library", d.Library, "gatekeeper-library's library/ folder")
	fs.StringVar(&f.examples, "examples", d.Examples, "the repository's deploy/examples folder")
	fs.StringVar(&f.realistic, "realistic", d.Realistic, "the realistic set's placement templates (bench/testdata/realistic)")
	fs.Float64Var(&f.oneOffShare, "one-off", 0.05, "share of one-off pods (new images and labels, never in the memo) in the pod stream")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the pod stream")
	fs.BoolVar(&f.peer, "peer", true, "also time the same work through Gatekeeper's constraint framework")
	fs.StringVar(&raw.peerNodes, "peer-nodes", "100,500", "candidate node counts of the framework comparison")
	fs.IntVar(&f.peerPods, "peer-pods", 3, "pods reviewed by the framework per node count (the last one is a one-off pod)")
	fs.BoolVar(&f.peerAll, "peer-all", true, "the framework reviews every constraint, as the engine does (false: only the deny ones, whose verdicts are compared)")
	fs.BoolVar(&f.footprint, "footprint", true, `also measure the memory of separate processes that link only the engine and the server (bench/cmd/footprint, built with go build; run loadgen from bench/), with the largest -nodes count: see -footprint-sets`)
	fs.StringVar(&raw.footprintSets, "footprint-sets", "", `policy sets the footprint processes load, comma-separated; empty: "mix,all" for -policy-set mix or all, "realistic" for realistic (with -node-size's nodes; the other sets with their default nodes)`)
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the measured scenarios to this file")
	fs.StringVar(&f.memProfile, "memprofile", "", "write a heap profile, taken after the scenarios, to this file")
	fs.IntVar(&f.slowest, "slowest", 5, "list this many of each scenario's slowest requests in the report: when each came (seconds from the scenario's first request), whether a one-off pod, whether one of the server's collections overlapped it (0: none)")
	fs.StringVar(&f.tracePrefix, "trace", "", "write a runtime trace of each scenario's measured requests to <this prefix><verb>-<mode>-<nodes>.trace (read them with bench/cmd/tracetail; not with -service)")
	fs.BoolVar(&f.floorCPUMatch, "floor-cpu-match", false, "with -floor: each scenario's floor server spends, per request, the CPU time the service spent per request in that scenario (a short run measures the floor's own work; each call burns the rest, a cycle's two calls half each): the floor rows then show the tail this machine gives the service's work with no collector and no garbage, and the targets judge the service's p99 against theirs")
	fs.DurationVar(&f.floorCPU, "floor-cpu", 0, "with -floor: CPU time the floor server spends on each request before answering, on the request's thread and without allocating (e.g. the service's CPU ms/req): the floor rows then show the tail this machine gives that much work with no collector and no garbage")
	fs.BoolVar(&f.floor, "floor", false, "after the scenarios, time each again against a server that answers with the service's answer to the probe's pod without evaluating anything: what the host, HTTP and the load generator take of a request (rows \"floor <verb>\"); in this process, or with -service in a process of its own, as the service runs")
	fs.BoolVar(&f.serveFloor, "serve-floor", false, "serve only a floor server, its address the first line of standard output, until standard input closes: the process -floor starts with -service")
	fs.StringVar(&f.service, "service", "", "measure this opa-scheduler-extender binary, run as its own process in folder mode on a policy folder written for it (the policy set, the namespaces, the nodes), instead of the engine and server in this process: the service as it ships, with its own garbage collector (without -peer, -footprint, -cpuprofile, -memprofile, which are this process's)")
	fs.Int64Var(&f.gcHeapFloor, "gc-heap-floor", heapfloor.Default, "the in-process service's heap floor in bytes, as the service's --gc-heap-floor-bytes sets it (0: none; the in-process service keeps the default growth bound); with -service, passed to the service when given")
	fs.IntVar(&f.evalParallelism, "eval-parallelism", 0, "goroutines one request evaluates a new pod's memo misses on, as the service's --eval-parallelism sets it (0: the engine's default, GOMAXPROCS); with -service, passed to the service when given")
	fs.StringVar(&f.extra, "extra", "", "a folder of policies laid out as deploy/examples (*/template.yaml, */constraint.yaml) added to the policy set, e.g. testdata/inventory-readers (templates that read inventory objects besides the candidate node)")
	fs.Float64Var(&f.churn, "churn", 0, "Node updates per second written while the scenarios run (warm-ups included), as a living cluster writes them: in process through the engine's Apply, with -service by rewriting the node's file in the policy folder (0: a still cluster)")
	fs.StringVar(&raw.churnKind, "churn-kind", string(perf.ChurnHeartbeat), `what a Node update changes: "heartbeat" (the conditions' heartbeat times and the resourceVersion, as a kubelet's status report) or "labels" (a heartbeat that also flips the maintenance label the realistic set reads)`)
	fs.IntVar(&f.nodeFiles, "node-files", 250, "with -service: Nodes per file of the policy folder (0: every Node in one file, a kind: List in YAML as `kubectl get nodes -o yaml` writes it; such a folder is measured still); -churn rewrites a file with all its Nodes updated")
	fs.BoolVar(&f.timeJitter, "time-jitter", false, "only time fixed work for -machine-jitter and print the result as JSON: the process -machine-jitter starts, so that the 64 MiB it reads is never this process's")
	fs.DurationVar(&f.machineJitter, "machine-jitter", 3*time.Second, "time fixed work this long before the scenarios, in a process of its own, on registers alone and as dependent reads over 64 MiB, and report how evenly the machine ran each (p50, p99, p99.9): the machine's own tail at the time of the run (0: not timed)")
	_ = fs.Parse(os.Args[1:]) // ExitOnError: never returns an error
	fs.Visit(func(fl *flag.Flag) {
		f.gcHeapFloorSet = f.gcHeapFloorSet || fl.Name == "gc-heap-floor"
		f.evalParallelismSet = f.evalParallelismSet || fl.Name == "eval-parallelism"
	})
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if err := f.parseLists(raw); err != nil {
		return nil, err
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	return f, nil
}

// loadPolicies reads the policy set, and -extra's policies with it.
func (f *flags) loadPolicies(dirs perf.Dirs) ([]perf.Policy, error) {
	ps, err := perf.LoadSet(dirs, f.policySet)
	if err != nil || f.extra == "" {
		return ps, err
	}
	extra, err := perf.LoadExtra(f.extra)
	if err != nil {
		return nil, fmt.Errorf("-extra: %w", err)
	}
	return append(ps, extra...), nil
}

// rawFlags are the flags given as text, which parseLists reads.
type rawFlags struct {
	nodes, fullNodes, peerNodes, verbs, nodeSize, footprintSets, churnKind string
}

// parseLists reads the flags given as lists and names into f.
func (f *flags) parseLists(raw rawFlags) error {
	var err error
	if f.nodes, err = parseInts(raw.nodes); err != nil {
		return fmt.Errorf("-nodes: %w", err)
	}
	if f.fullNodes, err = parseInts(raw.fullNodes); err != nil {
		return fmt.Errorf("-full-nodes: %w", err)
	}
	if f.peerNodes, err = parseInts(raw.peerNodes); err != nil {
		return fmt.Errorf("-peer-nodes: %w", err)
	}
	known := func(set string) bool { return slices.Contains(perf.PolicySets, set) }
	if !known(f.policySet) {
		return fmt.Errorf("-policy-set: unknown set %q (want one of %v)", f.policySet, perf.PolicySets)
	}
	if f.nodeSize, err = perf.ParseNodeSize(raw.nodeSize, perf.DefaultNodeSize(f.policySet)); err != nil {
		return fmt.Errorf("-node-size: %w", err)
	}
	if f.churnKind, err = perf.ParseChurnKind(raw.churnKind); err != nil {
		return fmt.Errorf("-churn-kind: %w", err)
	}
	for _, set := range strings.Split(raw.footprintSets, ",") {
		if set = strings.TrimSpace(set); set == "" {
			continue
		}
		if !known(set) {
			return fmt.Errorf("-footprint-sets: unknown set %q (want some of %v)", set, perf.PolicySets)
		}
		f.footprintSets = append(f.footprintSets, set)
	}
	if len(f.footprintSets) == 0 {
		if f.policySet == perf.SetMix || f.policySet == perf.SetAll {
			f.footprintSets = []string{perf.SetMix, perf.SetAll}
		} else {
			f.footprintSets = []string{f.policySet}
		}
	}
	for _, v := range strings.Split(raw.verbs, ",") {
		v = strings.TrimSpace(v)
		if v != "filter" && v != "prioritize" && v != "cycle" {
			return fmt.Errorf("-verbs: unknown verb %q", v)
		}
		f.verbs = append(f.verbs, v)
	}
	return nil
}

// check refuses values and combinations of flags that make no run.
func (f *flags) check() error {
	if f.evalParallelism < 0 {
		return fmt.Errorf("-eval-parallelism %d: want 0 or more", f.evalParallelism)
	}
	if f.churn < 0 {
		return errors.New("-churn must be 0 or more updates per second")
	}
	if f.churn > 0 && f.service != "" && f.nodeFiles <= 0 {
		return errors.New("-churn with -service needs -node-files > 0: the one-file layout is measured still")
	}
	if f.concurrency < 1 {
		return errors.New("-concurrency must be at least 1")
	}
	if f.duration <= 0 {
		return errors.New("-duration must be positive")
	}
	if f.slowest < 0 {
		return errors.New("-slowest must be 0 or more")
	}
	if f.oneOffShare < 0 || f.oneOffShare > 1 {
		return errors.New("-one-off must be within 0..1")
	}
	if f.peer && f.peerPods < 1 {
		return errors.New("-peer-pods must be at least 1 (or -peer=false)")
	}
	if len(f.nodes) == 0 && len(f.fullNodes) == 0 {
		return errors.New("no scenario: -nodes and -full-nodes are both empty")
	}
	if f.floorCPU < 0 || (f.floorCPU > 0 && !f.floor && !f.serveFloor) {
		return errors.New("-floor-cpu must be positive and goes with -floor")
	}
	if f.floorCPUMatch && (!f.floor || f.floorCPU > 0) {
		return errors.New("-floor-cpu-match goes with -floor, and without -floor-cpu")
	}
	if _, ok := threadCPU(); (f.floorCPU > 0 || f.floorCPUMatch) && !ok {
		return errors.New("-floor-cpu and -floor-cpu-match need a per-thread CPU clock (CLOCK_THREAD_CPUTIME_ID), which this system does not give")
	}
	if f.service != "" && (f.peer || f.footprint || f.cpuProfile != "" || f.memProfile != "" || f.tracePrefix != "") {
		return errors.New("-service measures the service's latency only: pass -peer=false -footprint=false, and profile the service through its /debug/pprof")
	}
	return nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, x := range strings.Split(s, ",") {
		x = strings.TrimSpace(x)
		if x == "" {
			continue
		}
		n, err := strconv.Atoi(x)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive node count", x)
		}
		out = append(out, n)
	}
	return out, nil
}

func (f *flags) maxNodes() int {
	m := f.inventory
	for _, l := range [][]int{f.nodes, f.fullNodes} {
		for _, n := range l {
			m = max(m, n)
		}
	}
	if f.peer {
		for _, n := range f.peerNodes {
			m = max(m, n)
		}
	}
	return m
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "loadgen: "+format+"\n", args...)
}

func run() error {
	f, err := parseFlags()
	if err != nil {
		return err
	}
	if f.serveFloor {
		return serveFloor(f.floorCPU)
	}
	if f.timeJitter {
		return json.NewEncoder(os.Stdout).Encode(perf.MachineJitter(f.machineJitter))
	}
	dirs := perf.Dirs{Library: f.library, Examples: f.examples, Realistic: f.realistic}
	if err := dirs.Check(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	rep := &Report{Machine: machine(), Config: f.config()}
	if f.machineJitter > 0 {
		if rep.Machine.Jitter, err = timeJitter(f.machineJitter); err != nil {
			return err
		}
	}
	nInv := f.maxNodes()
	logf("loading policy set %q and %d %s nodes", f.policySet, nInv, f.nodeSize)
	if f.service != "" {
		return runService(ctx, f, dirs, nInv, rep)
	}
	heapfloor.SetDefaultPercent() // as the service runs, from its start
	env, err := load(ctx, f, dirs, nInv)
	if err != nil {
		return err
	}
	defer env.engine.Close(ctx)
	rep.Load = env.load
	logf("loaded %d templates, %d constraints, %d nodes in %.1fs; RSS %.1f MiB",
		env.load.Templates, env.load.Constraints, env.load.Nodes, env.load.Seconds, env.load.Memory.RSSMiB)
	defer heapfloor.Start(f.gcHeapFloor, heapfloor.DefaultMaxGrowth).Stop() // as the service runs
	base, stop, err := perf.Serve(ctx, env.engine)
	if err != nil {
		return err
	}
	defer func() {
		if err := stop(); err != nil {
			logf("server: %v", err)
		}
	}()
	churn := &perf.Churn{Rate: f.churn, Nodes: nInv, Write: func(ctx context.Context, nodes, updates []int) error {
		changes := make([]opa.Change, len(nodes))
		for j, i := range nodes {
			changes[j].Object = f.nodeSize.UpdatedNode(i, updates[j], f.churnKind)
		}
		if errs := env.engine.Apply(ctx, changes); len(errs) > 0 {
			return errs[0]
		}
		return nil
	}}
	c, err := measure(ctx, f, rep, base, processCounters(env.engine), memory, churn, nil)
	if err != nil {
		return err
	}
	if f.floor {
		if err := floorScenarios(ctx, f, c, rep); err != nil {
			return err
		}
	}
	if f.memProfile != "" {
		if err := writeHeapProfile(f.memProfile); err != nil {
			return err
		}
	}

	if f.peer && len(f.peerNodes) > 0 {
		logf("timing Gatekeeper's constraint framework: %d pods at %v nodes", f.peerPods, f.peerNodes)
		pr, err := comparePeer(ctx, f, env, c, rep.Scenarios)
		if err != nil {
			return fmt.Errorf("peer: %w", err)
		}
		rep.Peer = pr
	}

	if f.footprint {
		n := 0
		for _, x := range f.nodes {
			n = max(n, x)
		}
		if n == 0 {
			n = nInv
		}
		fps, err := footprints(f, n)
		if err != nil {
			return fmt.Errorf("footprint: %w", err)
		}
		rep.Footprints = fps
	}
	return finish(f, rep)
}

// finish writes the report: as JSON to -json, as Markdown to stdout.
func finish(f *flags, rep *Report) error {
	rep.Targets = targets(rep)
	if f.jsonPath != "" {
		if err := writeJSON(f.jsonPath, rep); err != nil {
			return err
		}
		logf("wrote %s", f.jsonPath)
	}
	printMarkdown(os.Stdout, rep)
	return nil
}

// runService measures -service: the binary run on a policy folder written
// for it, driven over HTTP from this process.
func runService(ctx context.Context, f *flags, dirs perf.Dirs, n int, rep *Report) error {
	start := time.Now()
	ps, err := f.loadPolicies(dirs)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "loadgen-service-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	folder, err := perf.WritePolicyDirLayout(dir, ps, f.nodeSize, n, f.nodeFiles)
	if err != nil {
		return fmt.Errorf("write policy folder: %w", err)
	}
	folder.SetKind(f.churnKind)
	var extra []string
	if f.gcHeapFloorSet {
		extra = append(extra, "--gc-heap-floor-bytes="+strconv.FormatInt(f.gcHeapFloor, 10))
	}
	if f.evalParallelismSet {
		extra = append(extra, "--eval-parallelism="+strconv.Itoa(f.evalParallelism))
	}
	svc, err := perf.StartService(f.service, dir, extra...)
	if err != nil {
		return err
	}
	defer svc.Stop()
	if err := svc.WaitLoaded(n, 5*time.Minute); err != nil {
		return err
	}
	m, err := svc.Memory()
	if err != nil {
		return err
	}
	rep.Load = Load{PolicySet: f.policySet, Templates: len(ps), Constraints: perf.CountConstraints(ps),
		DenyConstraints: perf.CountDenyConstraints(ps), Nodes: n, NodeSize: string(f.nodeSize), Namespaces: len(perf.ClusterNamespaces),
		NodeJSONBytes: meanNodeJSON(f.nodeSize, n), Seconds: time.Since(start).Seconds(), Memory: m, Service: f.service}
	logf("service %s loaded %d templates, %d constraints, %d nodes in %.1fs (folder written and read); RSS %.1f MiB",
		f.service, rep.Load.Templates, rep.Load.Constraints, n, rep.Load.Seconds, m.RSSMiB)
	// A file's Nodes change together, as a tool that dumps them rewrites
	// the file: 20 updates a second are two files of 10.
	churn := &perf.Churn{Rate: f.churn, Nodes: n, Batch: folder.PerFile(), Write: folder.Update}
	if f.churn > 0 {
		// The files are rendered now, for the scenarios' time and half
		// again: rendering is the writer's work, not the service's.
		if err := folder.Prerender(churn.Plan(f.scenarioTime() * 3 / 2)); err != nil {
			return err
		}
	}
	c, err := measure(ctx, f, rep, svc.Base, serviceCounters(svc), svc.Memory, churn, svc.Collections)
	if err != nil {
		return err
	}
	if r := folder.Rendered(); r > 0 {
		logf("%d Node updates rendered during the run (past the prerendered ones)", r)
	}
	if f.floor {
		if err := floorScenarios(ctx, f, c, rep); err != nil {
			return err
		}
	}
	return finish(f, rep)
}

// scenarioTime is how long the scenarios run, warm-ups included.
func (f *flags) scenarioTime() time.Duration {
	return time.Duration(len(f.verbs)*(len(f.nodes)+len(f.fullNodes))) * (f.warmup + f.duration)
}

// measure runs the scenarios against the server at base, reading its
// counters, memory and (nil: in process) collections with the functions
// given, and records its memory after them.
func measure(ctx context.Context, f *flags, rep *Report, base string, readCounters func() (counters, error), mem func() (Memory, error), churn *perf.Churn, collections func() []perf.GCWindow) (*client, error) {
	c := newClient(base, f.concurrency)
	c.counters, c.memory, c.nodeSize, c.inProcess, c.churn = readCounters, mem, f.nodeSize, f.service == "", churn
	c.collections = collections
	churn.Start(ctx)
	err := runScenarios(ctx, f, c, rep)
	written, churnErr := churn.Stop()
	if err != nil {
		return nil, err
	}
	if churnErr != nil {
		return nil, churnErr
	}
	if f.churn > 0 {
		logf("%d Node updates written (%s)", written, f.churnKind)
	}
	if m, err := mem(); err == nil {
		rep.Checkpoints = append(rep.Checkpoints, Checkpoint{After: "all scenarios", Requests: requestsSoFar(rep), Memory: m})
	}
	return c, nil
}

// runScenarios times every scenario (names-only first, then full Node
// lists, each for every verb), under the CPU profile when one is asked.
func runScenarios(ctx context.Context, f *flags, c *client, rep *Report) error {
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var scenarios []scenario
	for _, n := range f.nodes {
		for _, v := range f.verbs {
			scenarios = append(scenarios, scenario{verb: v, full: false, nodes: n})
		}
	}
	for _, n := range f.fullNodes {
		for _, v := range f.verbs {
			scenarios = append(scenarios, scenario{verb: v, full: true, nodes: n})
		}
	}
	for i, s := range scenarios {
		if i > 0 && s.full && !scenarios[i-1].full {
			// The names-only scenarios are done: memory in the
			// nodeCacheCapable steady state, before full Node lists.
			if m, err := c.memory(); err == nil {
				rep.Checkpoints = append(rep.Checkpoints, Checkpoint{After: "the NodeNames scenarios", Requests: requestsSoFar(rep), Memory: m})
			}
		}
		res, err := c.run(ctx, s, f)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name(), err)
		}
		logf("%-28s %7d requests  %8.1f req/s  p50 %7.3f ms  p99 %7.3f ms  p99.9 %7.3f ms  max %7.3f ms (longest call %7.3f)  %7.0f allocs/req  %7.1f evaluations/req  %5.1f node updates/s",
			res.Name, res.Requests, res.RPS, res.P50Ms, res.P99Ms, res.P999Ms, res.MaxMs, res.MaxCallMs, res.AllocsPerRequest, res.EvaluationsPerRequest, res.NodeUpdatesPerSecond)
		if res.EvalErrorsPerRequest > 0 {
			logf("%s: %.1f evaluation errors per request (failing templates, or the service's request timeout)", res.Name, res.EvalErrorsPerRequest)
		}
		rep.Scenarios = append(rep.Scenarios, res)
	}
	return nil
}

// requestsSoFar counts the measured requests of the scenarios run so far
// (warm-ups excluded).
func requestsSoFar(r *Report) int {
	n := 0
	for _, s := range r.Scenarios {
		n += s.Requests
	}
	return n
}

// env is the loaded engine and what went into it.
type env struct {
	engine   *opa.Engine
	policies []perf.Policy
	load     Load
}

func load(ctx context.Context, f *flags, dirs perf.Dirs, n int) (*env, error) {
	start := time.Now()
	ps, err := f.loadPolicies(dirs)
	if err != nil {
		return nil, err
	}
	// Nodes in batches of 500, as an informer's initial list arrives in
	// pages. The objects are not kept: the engine holds its own copy.
	e, err := perf.NewEngine(ctx, opa.Options{Parallelism: f.evalParallelism}, ps, append(perf.Namespaces(), f.nodeSize.Nodes(n)...), 500)
	if err != nil {
		return nil, err
	}
	secs := time.Since(start).Seconds()
	nodeJSON := meanNodeJSON(f.nodeSize, n)
	m, err := memory()
	if err != nil {
		e.Close(ctx)
		return nil, err
	}
	return &env{engine: e, policies: ps, load: Load{
		PolicySet: f.policySet, Templates: len(ps), Constraints: perf.CountConstraints(ps),
		DenyConstraints: len(perf.DenyConstraints(e)), Nodes: n, NodeSize: string(f.nodeSize), Namespaces: len(perf.ClusterNamespaces),
		NodeJSONBytes: nodeJSON, Seconds: secs, Memory: m,
	}}, nil
}

// meanNodeJSON is the mean JSON size of the first nodes (500 at most).
func meanNodeJSON(size perf.NodeSize, n int) int {
	total, k := 0, min(n, 500)
	for i := range k {
		b, _ := json.Marshal(size.Node(i).Object)
		total += len(b)
	}
	return total / max(k, 1)
}

// footprints builds bench/cmd/footprint and runs it for each of
// -footprint-sets with n nodes: the run's own set with -node-size's nodes,
// the others with their default nodes.
func footprints(f *flags, n int) ([]perf.Footprint, error) {
	if _, err := os.Stat(filepath.Join("cmd", "footprint", "main.go")); err != nil {
		return nil, fmt.Errorf("run loadgen from bench/ (it builds ./cmd/footprint), or pass -footprint=false: %w", err)
	}
	dir, err := os.MkdirTemp("", "loadgen-footprint-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	exe := filepath.Join(dir, "footprint")
	build := exec.Command("go", "build", "-o", exe, "./cmd/footprint")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/footprint: %w", err)
	}
	var out []perf.Footprint
	for _, set := range f.footprintSets {
		size := perf.DefaultNodeSize(set)
		if set == f.policySet {
			size = f.nodeSize
		}
		logf("measuring the memory of a separate process: policy set %q, %d %s nodes", set, n, size)
		cmd := exec.Command(exe, "-policy-set", set, "-node-size", string(size), "-nodes", strconv.Itoa(n),
			"-library", f.library, "-examples", f.examples, "-realistic", f.realistic, "-seed", strconv.FormatUint(f.seed, 10))
		cmd.Stderr = os.Stderr
		b, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("footprint -policy-set %s: %w", set, err)
		}
		var fp perf.Footprint
		if err := json.Unmarshal(b, &fp); err != nil {
			return nil, fmt.Errorf("footprint output: %w", err)
		}
		out = append(out, fp)
	}
	return out, nil
}

func writeHeapProfile(path string) error {
	// The heap profile is as of the last completed GC cycle but one:
	// collect twice so that it shows what is live now.
	runtime.GC()
	runtime.GC()
	pf, err := os.Create(path)
	if err != nil {
		return err
	}
	defer pf.Close()
	return pprof.WriteHeapProfile(pf)
}

func writeJSON(path string, v any) error {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// timeJitter times fixed work for d in a process of its own (this binary,
// -time-jitter): the array it reads would otherwise be in this process's
// peak RSS, which the in-process scenarios report.
func timeJitter(d time.Duration) (*perf.Jitter, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-time-jitter", "-machine-jitter", d.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("time the machine's jitter: %w", err)
	}
	var j perf.Jitter
	if err := json.Unmarshal(out, &j); err != nil {
		return nil, fmt.Errorf("read the machine's jitter %q: %w", out, err)
	}
	logf("machine: fixed work on registers p50 %.1f µs, p99 x%.2f; dependent reads over %d MiB p50 %.1f µs, p99 x%.2f",
		j.CPU.P50Micros, j.CPU.Ratio(), j.MemoryMiB, j.Memory.P50Micros, j.Memory.Ratio())
	return &j, nil
}
