// Command footprint measures the memory of a process that holds what the
// opa-scheduler-extender holds: the engine with a policy set and a node
// inventory, and its HTTP server, after a few filter requests. It links
// the engine and the server only (not Gatekeeper's framework, which
// bench/cmd/loadgen links for its comparison), so its VmRSS is comparable
// with the service's. bench/cmd/loadgen runs it; by hand, from bench/:
//
//	go run ./cmd/footprint -policy-set all -nodes 5000
//	go run ./cmd/footprint -policy-set realistic -nodes 5000   # kubelet-sized nodes
//
// With -service it measures the service itself instead: it writes the
// policy set, the namespaces and the nodes as YAML files into a folder,
// runs the given binary on it (--policy-dir, folder mode) and reads the
// process's VmRSS from /proc and its live heap from /metrics after a GC
// forced through /debug/pprof/heap?gc=1:
//
//	go build -o /tmp/ose ../cmd/opa-scheduler-extender
//	go run ./cmd/footprint -policy-set realistic -nodes 5000 -service /tmp/ose
//
// It prints a JSON report on stdout and a summary on stderr.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/perf"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "footprint:", err)
		os.Exit(1)
	}
}

func run() error {
	d := perf.DefaultDirs(".")
	set := flag.String("policy-set", perf.SetAll, `policies: "mix" (20 constraints), "all" (49 library templates + 4 examples) or "realistic" (the library, all warn here, + the 5 placement templates of testdata/realistic)`)
	nodeSize := flag.String("node-size", "", `Node objects: "small" (3.6 KB of JSON) or "kubelet" (about 10 KB, 30 to 50 images); empty: "kubelet" for -policy-set realistic, else "small"`)
	nodes := flag.Int("nodes", 5000, "nodes in the inventory; requests name all of them")
	requests := flag.Int("requests", 20, "filter requests sent after loading (replicas of every ReplicaSet, then one-off pods)")
	seed := flag.Uint64("seed", 1, "seed of the pod stream")
	memProfile := flag.String("memprofile", "", "write a heap profile, taken after the requests, to this file")
	service := flag.String("service", "", "measure this opa-scheduler-extender binary instead, run as a process on a policy folder written for it (--policy-dir: the policy set, the namespaces and the nodes as YAML files)")
	keepDir := flag.String("write-dir", "", "with -service: write the policy folder here and keep it (default: a temporary folder, removed)")
	flag.StringVar(&d.Library, "library", d.Library, "gatekeeper-library's library/ folder")
	flag.StringVar(&d.Examples, "examples", d.Examples, "the repository's deploy/examples folder")
	flag.StringVar(&d.Realistic, "realistic", d.Realistic, "the realistic set's placement templates (bench/testdata/realistic)")
	flag.Parse()
	if *nodes <= 0 || *requests < 0 {
		return fmt.Errorf("-nodes must be positive and -requests not negative")
	}
	size, err := perf.ParseNodeSize(*nodeSize, perf.DefaultNodeSize(*set))
	if err != nil {
		return fmt.Errorf("-node-size: %w", err)
	}
	ps, err := perf.LoadSet(d, *set)
	if err != nil {
		return err
	}
	if *service != "" {
		return measureService(*service, ps, serviceRun{set: *set, size: size, nodes: *nodes, requests: *requests, seed: *seed, keepDir: *keepDir})
	}
	ctx := context.Background()
	start := time.Now()
	e, err := perf.NewEngine(ctx, opa.Options{}, ps, append(perf.Namespaces(), size.Nodes(*nodes)...), 500)
	if err != nil {
		return err
	}
	defer e.Close(ctx)
	rep := perf.Footprint{PolicySet: *set, Templates: len(ps), Constraints: perf.CountConstraints(ps), Nodes: *nodes, NodeSize: string(size),
		Namespaces: len(perf.ClusterNamespaces), LoadSeconds: time.Since(start).Seconds()}
	if rep.AfterLoad, err = perf.ReadMemory(); err != nil {
		return err
	}

	base, stop, err := perf.Serve(ctx, e)
	if err != nil {
		return err
	}
	if err := sendFilters(base, *nodes, *requests, *seed); err != nil {
		return err
	}
	rep.Requests = *requests
	if rep.AfterRequests, err = perf.ReadMemory(); err != nil {
		return err
	}
	if *memProfile != "" {
		f, err := os.Create(*memProfile)
		if err != nil {
			return err
		}
		runtime.GC() // the profile is as of the last GC cycle but one
		runtime.GC()
		err = pprof.WriteHeapProfile(f)
		f.Close()
		if err != nil {
			return err
		}
	}
	if err := stop(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "footprint: %s: %d templates, %d constraints, %d %s nodes: VmRSS %.1f MiB after loading, %.1f MiB after %d filter requests (live heap %.1f MiB)\n",
		rep.PolicySet, rep.Templates, rep.Constraints, rep.Nodes, rep.NodeSize, rep.AfterLoad.RSSMiB, rep.AfterRequests.RSSMiB, rep.Requests, rep.AfterRequests.HeapLiveMiB)
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// sendFilters sends requests filter calls naming nodes nodes, replicas of
// every ReplicaSet first, then one-off pods, and checks each answer is 200.
func sendFilters(base string, nodes, requests int, seed uint64) error {
	args := perf.NewArgs(nodes, false)
	s := perf.NewStream(seed, 0, 0)
	client := &http.Client{Timeout: time.Minute}
	for i := range requests {
		var p perf.Pod
		if i < 2*len(perf.ReplicaSets) {
			p = s.Replica(i%len(perf.ReplicaSets), i)
		} else {
			p = s.OneOff(i)
		}
		resp, err := client.Post(base+"/filter", "application/json", bytes.NewReader(args.Build(p)))
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("filter: HTTP %d", resp.StatusCode)
		}
	}
	return nil
}
