package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/perf"
)

// serviceRun is what -service measures.
type serviceRun struct {
	set      string
	size     perf.NodeSize
	nodes    int
	requests int
	seed     uint64
	keepDir  string
}

// measureService writes the policy folder, runs bin on it and reports its
// memory after loading and after the requests, as the in-process mode does.
func measureService(bin string, ps []perf.Policy, r serviceRun) error {
	dir := r.keepDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "footprint-policies-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	if err := perf.WritePolicyDir(dir, ps, r.size, r.nodes); err != nil {
		return fmt.Errorf("write policy folder: %w", err)
	}
	start := time.Now()
	svc, err := perf.StartService(bin, dir)
	if err != nil {
		return err
	}
	defer svc.Stop()
	base := svc.Base
	if err := svc.WaitLoaded(r.nodes, 5*time.Minute); err != nil {
		return err
	}
	rep := perf.Footprint{PolicySet: r.set, Templates: len(ps), Constraints: perf.CountConstraints(ps), Nodes: r.nodes, NodeSize: string(r.size),
		Namespaces: len(perf.ClusterNamespaces), LoadSeconds: time.Since(start).Seconds(), Requests: r.requests}
	if rep.AfterLoad, err = svc.Memory(); err != nil {
		return err
	}
	if err := sendFilters(base, r.nodes, r.requests, r.seed); err != nil {
		return err
	}
	if rep.AfterRequests, err = svc.Memory(); err != nil {
		return err
	}
	if m, err := perf.Scrape(base + "/metrics"); err == nil {
		fmt.Fprintf(os.Stderr, "footprint: service memo after the requests: %.0f verdicts, %.1f MiB estimated\n",
			m["opa_scheduler_extender_memo_results"], m["opa_scheduler_extender_memo_bytes"]/(1<<20))
	}
	fmt.Fprintf(os.Stderr, "footprint: service %s: %d templates, %d constraints, %d %s nodes from --policy-dir: VmRSS %.1f MiB when loaded, %.1f MiB after %d filter requests (live heap %.1f MiB)\n",
		rep.PolicySet, rep.Templates, rep.Constraints, rep.Nodes, rep.NodeSize, rep.AfterLoad.RSSMiB, rep.AfterRequests.RSSMiB, rep.Requests, rep.AfterRequests.HeapLiveMiB)
	return json.NewEncoder(os.Stdout).Encode(rep)
}
