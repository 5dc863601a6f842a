package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

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
	if err := writePolicyDir(dir, ps, r.size, r.nodes); err != nil {
		return fmt.Errorf("write policy folder: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	ln.Close()
	start := time.Now()
	cmd := exec.Command(bin, "serve", "--policy-dir", dir, "--no-cluster", "--listen", addr, "--enable-pprof", "--log-level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	base := "http://" + addr
	if err := waitLoaded(base, r.nodes, 5*time.Minute); err != nil {
		return err
	}
	rep := perf.Footprint{PolicySet: r.set, Templates: len(ps), Constraints: perf.CountConstraints(ps), Nodes: r.nodes, NodeSize: string(r.size),
		Namespaces: len(perf.ClusterNamespaces), LoadSeconds: time.Since(start).Seconds(), Requests: r.requests}
	if rep.AfterLoad, err = processMemory(base, cmd.Process.Pid); err != nil {
		return err
	}
	if err := sendFilters(base, r.nodes, r.requests, r.seed); err != nil {
		return err
	}
	if rep.AfterRequests, err = processMemory(base, cmd.Process.Pid); err != nil {
		return err
	}
	if m, err := scrape(base + "/metrics"); err == nil {
		fmt.Fprintf(os.Stderr, "footprint: service memo after the requests: %.0f verdicts, %.1f MiB estimated\n",
			m["opa_scheduler_extender_memo_results"], m["opa_scheduler_extender_memo_bytes"]/(1<<20))
	}
	fmt.Fprintf(os.Stderr, "footprint: service %s: %d templates, %d constraints, %d %s nodes from --policy-dir: VmRSS %.1f MiB when loaded, %.1f MiB after %d filter requests (live heap %.1f MiB)\n",
		rep.PolicySet, rep.Templates, rep.Constraints, rep.Nodes, rep.NodeSize, rep.AfterLoad.RSSMiB, rep.AfterRequests.RSSMiB, rep.Requests, rep.AfterRequests.HeapLiveMiB)
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// writePolicyDir writes one file per template with its constraints, the
// namespaces in one file and the nodes in files of 250, made one at a time.
func writePolicyDir(dir string, ps []perf.Policy, size perf.NodeSize, nodes int) error {
	for i, p := range ps {
		objs := append([]*unstructured.Unstructured{p.Template}, p.Constraints...)
		if err := writeYAML(filepath.Join(dir, "policies", fmt.Sprintf("%03d.yaml", i)), objs); err != nil {
			return err
		}
	}
	if err := writeYAML(filepath.Join(dir, "inventory", "namespaces.yaml"), perf.Namespaces()); err != nil {
		return err
	}
	const perFile = 250
	for first := 0; first < nodes; first += perFile {
		var objs []*unstructured.Unstructured
		for i := first; i < min(first+perFile, nodes); i++ {
			objs = append(objs, size.Node(i))
		}
		if err := writeYAML(filepath.Join(dir, "inventory", fmt.Sprintf("nodes-%05d.yaml", first)), objs); err != nil {
			return err
		}
	}
	return nil
}

// writeYAML writes objects as a multi-document YAML file (each document in
// JSON, which is YAML).
func writeYAML(path string, objs []*unstructured.Unstructured) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	var b bytes.Buffer
	for _, o := range objs {
		j, err := json.Marshal(o.Object)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		b.WriteString("---\n")
		b.Write(j)
		b.WriteByte('\n')
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// waitLoaded waits until the service is ready and holds every node.
func waitLoaded(base string, nodes int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var st struct {
			Inventory map[string]int `json:"inventory"`
		}
		ready, err := getStatus(base + "/readyz")
		if err == nil && ready == http.StatusOK {
			err = getJSON(base+"/debug/policies", &st)
		}
		if err == nil && ready == http.StatusOK && st.Inventory["v1/Node"] == nodes {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the service did not load %d nodes within %s (readyz %d, nodes %d, %v)", nodes, timeout, ready, st.Inventory["v1/Node"], err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// processMemory reads the service's VmRSS as it is, forces a GC (the heap
// profile endpoint with gc=1) and reads its heap from /metrics.
func processMemory(base string, pid int) (perf.Memory, error) {
	status, err := procStatus(pid)
	if err != nil {
		return perf.Memory{}, err
	}
	if code, err := getStatus(base + "/debug/pprof/heap?gc=1"); err != nil || code != http.StatusOK {
		return perf.Memory{}, fmt.Errorf("force a GC through /debug/pprof/heap?gc=1: HTTP %d, %v", code, err)
	}
	metrics, err := scrape(base + "/metrics")
	if err != nil {
		return perf.Memory{}, err
	}
	mib := func(v float64) float64 { return float64(int(v/(1<<20)*10+0.5)) / 10 }
	return perf.Memory{RSSMiB: status["VmRSS"], PeakRSSMiB: status["VmHWM"],
		HeapLiveMiB: mib(metrics["go_memstats_heap_alloc_bytes"]), HeapInuseMiB: mib(metrics["go_memstats_heap_inuse_bytes"]),
		GoSysMiB: mib(metrics["go_memstats_sys_bytes"]), ReleasedRSSMiB: -1}, nil
}

// procStatus reads the Vm* lines of /proc/PID/status, in MiB.
func procStatus(pid int) (map[string]float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		f := strings.Fields(v)
		if !ok || !strings.HasPrefix(k, "Vm") || len(f) != 2 || f[1] != "kB" {
			continue
		}
		kib, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("/proc/%d/status %s: %w", pid, k, err)
		}
		out[k] = float64(int(kib/1024*10+0.5)) / 10
	}
	return out, nil
}

// scrape reads the unlabelled samples of a Prometheus text exposition.
func scrape(url string) (map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

func getStatus(url string) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
