// Command gkfootprint measures the memory of a process that holds what a
// Gatekeeper-based extender would hold: Gatekeeper's constraint framework
// (bench/peer: the Rego driver and the K8sValidationTarget) with a policy
// set, the Namespaces and a node inventory in data.inventory, after a few
// pods have been reviewed. It is the counterpart of bench/cmd/footprint,
// which measures the opa-scheduler-extender's engine doing the same work,
// and prints the same JSON report (perf.Footprint) on stdout and a summary
// on stderr.
//
// Every constraint of the set is loaded, as bench/cmd/loadgen loads the
// framework with -peer-all (its default): the realistic set's library
// constraints carry the service's warn annotation, which Gatekeeper
// ignores, so the framework evaluates them as shipped; it does the same
// work, only their verdicts differ. The framework has no filter over a
// node list: it reviews one (pod, node) pair at a time, so each request
// here is one ReviewPodOnNode per node of a sample of -review-nodes nodes
// spread over the inventory, rather than one call naming all of them.
//
// The binary also links the engine's code (package perf imports it) but
// never starts an engine. Run it from bench/:
//
//	go run ./cmd/gkfootprint -nodes 5000
//	go run ./cmd/gkfootprint -policy-set all -nodes 1000 -review-nodes 100
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/peer"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/perf"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/perf/peerset"
)

type options struct {
	dirs        perf.Dirs
	set         string
	size        perf.NodeSize
	nodes       int
	requests    int
	reviewNodes int
	seed        uint64
	memProfile  string
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gkfootprint:", err)
		os.Exit(1)
	}
}

func run() error {
	o, err := parseFlags()
	if err != nil {
		return err
	}
	ps, err := perf.LoadSet(o.dirs, o.set)
	if err != nil {
		return fmt.Errorf("loading policy set %q: %w", o.set, err)
	}
	start := time.Now()
	p, err := load(ps, o)
	if err != nil {
		return err
	}
	rep := perf.Footprint{PolicySet: o.set, Templates: len(ps), Constraints: perf.CountConstraints(ps), Nodes: o.nodes, NodeSize: string(o.size),
		Namespaces: len(perf.ClusterNamespaces), LoadSeconds: time.Since(start).Seconds()}
	if rep.AfterLoad, err = perf.ReadMemory(); err != nil {
		return fmt.Errorf("reading memory after loading: %w", err)
	}
	start = time.Now()
	reviews, err := review(context.Background(), p, o)
	if err != nil {
		return err
	}
	reviewTime := time.Since(start)
	rep.Requests = o.requests
	if rep.AfterRequests, err = perf.ReadMemory(); err != nil {
		return fmt.Errorf("reading memory after the requests: %w", err)
	}
	if err := writeHeapProfile(o.memProfile); err != nil {
		return err
	}
	runtime.KeepAlive(p) // measured above; held until then
	fmt.Fprintf(os.Stderr, "gkfootprint: %s: %d templates, %d constraints, %d %s nodes: loaded in %.1fs, VmRSS %.1f MiB after loading, %.1f MiB after %d requests of %d (pod, node) reviews each (%d reviews in %.1fs; live heap %.1f MiB)\n",
		rep.PolicySet, rep.Templates, rep.Constraints, rep.Nodes, rep.NodeSize, rep.LoadSeconds, rep.AfterLoad.RSSMiB, rep.AfterRequests.RSSMiB,
		rep.Requests, min(o.reviewNodes, o.nodes), reviews, reviewTime.Seconds(), rep.AfterRequests.HeapLiveMiB)
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	return nil
}

func parseFlags() (options, error) {
	o := options{dirs: perf.DefaultDirs(".")}
	flag.StringVar(&o.set, "policy-set", perf.SetRealistic, `policies: "mix" (20 constraints), "all" (49 library templates + 4 examples) or "realistic" (the library + the 5 placement templates of testdata/realistic)`)
	nodeSize := flag.String("node-size", "", `Node objects: "small" (3.6 KB of JSON) or "kubelet" (about 10 KB, 30 to 50 images); empty: "kubelet" for -policy-set realistic, else "small"`)
	flag.IntVar(&o.nodes, "nodes", 5000, "nodes in data.inventory")
	flag.IntVar(&o.requests, "requests", 20, "pods reviewed after loading (replicas of every ReplicaSet, then one-off pods, as bench/cmd/footprint sends them)")
	flag.IntVar(&o.reviewNodes, "review-nodes", 50, "nodes, spread over the inventory, each pod is reviewed on (one ReviewPodOnNode each)")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the pod stream")
	flag.StringVar(&o.memProfile, "memprofile", "", "write a heap profile, taken after the requests, to this file")
	flag.StringVar(&o.dirs.Library, "library", o.dirs.Library, "gatekeeper-library's library/ folder")
	flag.StringVar(&o.dirs.Examples, "examples", o.dirs.Examples, "the repository's deploy/examples folder")
	flag.StringVar(&o.dirs.Realistic, "realistic", o.dirs.Realistic, "the realistic set's placement templates (bench/testdata/realistic)")
	flag.Parse()
	if o.nodes <= 0 || o.requests < 0 || o.reviewNodes <= 0 {
		return o, fmt.Errorf("-nodes and -review-nodes must be positive and -requests not negative")
	}
	var err error
	if o.size, err = perf.ParseNodeSize(*nodeSize, perf.DefaultNodeSize(o.set)); err != nil {
		return o, fmt.Errorf("-node-size: %w", err)
	}
	return o, nil
}

// load builds the framework with every constraint of ps, then adds the
// Namespaces and the nodes to data.inventory (peerset.Load, as
// bench/cmd/loadgen loads it). The inventory objects are not held
// afterwards, so they do not count in the measurement.
func load(ps []perf.Policy, o options) (*peer.Peer, error) {
	all := map[string]bool{}
	for _, pol := range ps {
		for _, c := range pol.Constraints {
			all[c.GetKind()+"/"+c.GetName()] = true
		}
	}
	p, loaded, err := peerset.Load(ps, all, append(perf.Namespaces(), o.size.Nodes(o.nodes)...))
	if err != nil {
		return nil, fmt.Errorf("loading the framework: %w", err)
	}
	if want := perf.CountConstraints(ps); loaded != want {
		return nil, fmt.Errorf("framework holds %d constraints, want %d (duplicate kind/name in policy set %q?)", loaded, want, o.set)
	}
	return p, nil
}

// review reviews o.requests pods, each on a sample of o.reviewNodes nodes,
// and returns the number of (pod, node) reviews.
func review(ctx context.Context, p *peer.Peer, o options) (int, error) {
	names := sampleNames(o.nodes, o.reviewNodes)
	user := perf.SchedulerUserInfo()
	s := perf.NewStream(o.seed, 0, 0)
	n := 0
	for i := range o.requests {
		var pod perf.Pod
		if i < 2*len(perf.ReplicaSets) {
			pod = s.Replica(i%len(perf.ReplicaSets), i)
		} else {
			pod = s.OneOff(i)
		}
		obj, err := perf.ServerView(pod.JSON)
		if err != nil {
			return n, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		ns := perf.NamespaceObject(pod.Namespace)
		for _, name := range names {
			if _, err := p.ReviewPodOnNode(ctx, obj, name, ns, user); err != nil {
				return n, fmt.Errorf("reviewing pod %s/%s on node %s: %w", pod.Namespace, pod.Name, name, err)
			}
			n++
		}
	}
	return n, nil
}

// sampleNames are the names of k of nodes 0..n-1, evenly spread (all of
// them when k >= n).
func sampleNames(n, k int) []string {
	k = min(k, n)
	out := make([]string, k)
	for j := range out {
		out[j] = perf.NodeName(j * n / k)
	}
	return out
}

func writeHeapProfile(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	runtime.GC() // the profile is as of the last GC cycle but one
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("heap profile %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("heap profile %s: %w", path, err)
	}
	return nil
}
