// Package throughput measures pods bound per second by the stock
// kube-scheduler with no extender, with a no-op extender, and with
// opa-scheduler-extender (names-only and full node lists), at the
// scheduler's default client QPS and at 5000, in one run on one cluster.
//
// Speed is measured, not asserted: the test fails only if pods are not
// all bound. The default `go test ./...` run is small; the figures in
// bench/README.md come from:
//
//	cd bench/e2e && go test -run TestSchedulerThroughput -timeout 60m -v ./throughput/ -args -nodes 1000 -pods 2000 -full-pods 500
package throughput

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	configv1 "k8s.io/kube-scheduler/config/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/cluster"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/source"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/server"
)

var (
	numNodes = flag.Int("nodes", 200, "nodes in the cluster")
	numPods  = flag.Int("pods", 300, "pending pods per run")
	fullPods = flag.Int("full-pods", 100, "pending pods per run with full node lists (the slow mode)")
	outFile  = flag.String("out", "", "write the results as JSON to this file")
)

type result struct {
	Setup      string  `json:"setup"`
	QPS        string  `json:"qps"`
	Pods       int     `json:"pods"`
	Seconds    float64 `json:"seconds"`
	PodsPerSec float64 `json:"podsPerSecond"`
}

func TestSchedulerThroughput(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	ctx := context.Background()
	if err := c.InstallGatekeeperCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.CreateNodes(ctx, *numNodes, func(i int) *corev1.Node {
		labels := map[string]string{"pool": fmt.Sprintf("pool-%d", i%10), "topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", i%3)}
		switch i % 10 {
		case 0:
			labels["tenant"] = "alpha"
		case 1:
			labels["node.kubernetes.io/lifecycle"] = "spot"
		}
		return cluster.FakeNode(fmt.Sprintf("node-%04d", i), labels, nil)
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d nodes created in %v", *numNodes, time.Since(start).Round(time.Millisecond))

	// The service, with the example placement policies, synced from the
	// cluster as in production.
	root := filepath.Join("..", "..", "..")
	for _, p := range []string{"tenant-isolation", "spot-toleration", "privileged-nodes", "node-preference"} {
		objs, err := source.ReadFile(filepath.Join(root, "deploy", "examples", p, "template.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		cons, err := source.ReadFile(filepath.Join(root, "deploy", "examples", p, "constraint.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.CreateConstraintCRDForTemplate(ctx, objs[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Dynamic().Resource(cluster.ConstraintTemplateGVR).Create(ctx, objs[0], metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Dynamic().Resource(cluster.ConstraintGVR(cons[0].GetKind())).Create(ctx, cons[0], metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	svcURL, engine := startService(t, c)
	noopURL := startNoop(t)

	type setup struct {
		name      string
		extenders []configv1.Extender
		pods      int
	}
	ext := func(url string, nodeCache bool) []configv1.Extender {
		return []configv1.Extender{{URLPrefix: url, FilterVerb: "filter", PrioritizeVerb: "prioritize", Weight: 1, NodeCacheCapable: nodeCache, HTTPTimeout: metav1.Duration{Duration: 5 * time.Second}}}
	}
	setups := []setup{
		{"no extender", nil, *numPods},
		{"no-op extender (names)", ext(noopURL, true), *numPods},
		{"opa-scheduler-extender (names)", ext(svcURL, true), *numPods},
		{"opa-scheduler-extender (full nodes)", ext(svcURL, false), *fullPods},
	}
	var results []result
	run := 0
	for _, qps := range []struct {
		name       string
		qps, burst int
	}{{"5000/5000", 5000, 5000}, {"default 50/100", 0, 0}} {
		for _, s := range setups {
			run++
			ns := fmt.Sprintf("run-%d", run)
			if err := c.EnsureNamespace(ctx, ns); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < s.pods; i++ {
				p := cluster.PausePod(ns, fmt.Sprintf("p-%04d", i), map[string]string{"app": fmt.Sprintf("rs-%d", i%4)})
				if _, err := c.Client().CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			list, err := c.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			opts := cluster.SchedulerOptions{Extenders: s.extenders}
			if qps.qps > 0 {
				opts.QPS, opts.Burst = float32(qps.qps), int32(qps.burst)
			}
			sched := c.StartScheduler(t, opts)
			first, last, n := waitBound(t, c, ns, list.ResourceVersion, s.pods, 10*time.Minute)
			sched.Stop()
			r := result{Setup: s.name, QPS: qps.name, Pods: n, Seconds: last.Sub(first).Seconds()}
			if n > 1 && r.Seconds > 0 {
				r.PodsPerSec = float64(n-1) / r.Seconds
			}
			results = append(results, r)
			t.Logf("%-38s qps %-15s %5d pods in %6.2fs: %7.1f pods/s", s.name, qps.name, n, r.Seconds, r.PodsPerSec)
			if n != s.pods {
				t.Errorf("%s, qps %s: %d of %d pods bound", s.name, qps.name, n, s.pods)
			}
			go func() {
				_ = c.Client().CoreV1().Pods(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
			}()
		}
	}
	byKey := map[string]float64{}
	for _, r := range results {
		byKey[r.Setup+"|"+r.QPS] = r.PodsPerSec
	}
	for _, q := range []string{"5000/5000", "default 50/100"} {
		none, noop, svc := byKey["no extender|"+q], byKey["no-op extender (names)|"+q], byKey["opa-scheduler-extender (names)|"+q]
		if noop > 0 && none > 0 {
			t.Logf("qps %s: service/no-op = %.2f, service/none = %.2f, no-op/none = %.2f", q, svc/noop, svc/none, noop/none)
		}
	}
	st := engine.Stats()
	t.Logf("engine: %d evaluations, %d memo hits, %d misses", st.Evaluations, st.MemoHits, st.MemoMisses)
	if *outFile != "" {
		b, _ := json.MarshalIndent(map[string]any{"nodes": *numNodes, "results": results}, "", "  ")
		if err := os.WriteFile(*outFile, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// waitBound follows the pods' watch (re-opened from the last resource
// version when the API server closes it) until want of them are bound,
// and returns the times of the first and last binding seen.
func waitBound(t *testing.T, c *cluster.Cluster, ns, rv string, want int, timeout time.Duration) (first, last time.Time, n int) {
	t.Helper()
	bound := map[string]bool{}
	deadline := time.After(timeout)
	var w watch.Interface
	defer func() {
		if w != nil {
			w.Stop()
		}
	}()
	for len(bound) < want {
		if w == nil {
			var err error
			if w, err = c.Client().CoreV1().Pods(ns).Watch(context.Background(), metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}); err != nil {
				t.Fatalf("watch: %v", err)
			}
		}
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				w = nil
				continue
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if !isPod {
				continue
			}
			rv = p.ResourceVersion
			if p.Spec.NodeName == "" || bound[p.Name] {
				continue
			}
			now := time.Now()
			if first.IsZero() {
				first = now
			}
			last = now
			bound[p.Name] = true
		case <-deadline:
			return first, last, len(bound)
		}
	}
	return first, last, len(bound)
}

func startService(t *testing.T, c *cluster.Cluster) (string, *opa.Engine) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	engine, err := opa.New(ctx, opa.Options{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := source.NewCluster(engine, source.ClusterOptions{Config: c.RESTConfig(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	go src.Run(ctx)
	srv, err := server.New(server.Options{Policy: engine, Logger: log, ReadinessChecks: []server.ReadinessCheck{src.Ready}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.ServeListener(ctx, ln, server.ListenConfig{}); close(done) }()
	t.Cleanup(func() { cancel(); <-done; engine.Close(context.Background()) })
	url := "http://" + ln.Addr().String()
	for i := 0; i < 600; i++ {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 && len(engine.Status().Constraints) == 4 && engine.Status().Inventory["v1/Node"] == *numNodes {
				return url, engine
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("service not ready: %+v", engine.Status())
	return "", nil
}

// startNoop is an extender that keeps every node and gives every node the
// same score: the cost of the HTTP round trips alone.
func startNoop(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/filter", func(w http.ResponseWriter, r *http.Request) {
		var args extenderv1.ExtenderArgs
		_ = json.NewDecoder(r.Body).Decode(&args)
		_ = json.NewEncoder(w).Encode(&extenderv1.ExtenderFilterResult{NodeNames: args.NodeNames, Nodes: args.Nodes})
	})
	mux.HandleFunc("/prioritize", func(w http.ResponseWriter, r *http.Request) {
		var args extenderv1.ExtenderArgs
		_ = json.NewDecoder(r.Body).Decode(&args)
		var names []string
		if args.NodeNames != nil {
			names = *args.NodeNames
		}
		out := make(extenderv1.HostPriorityList, len(names))
		for i, n := range names {
			out[i] = extenderv1.HostPriority{Host: n, Score: 5}
		}
		_ = json.NewEncoder(w).Encode(out)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); wg.Wait() })
	return "http://" + ln.Addr().String()
}

var _ = sort.Strings
var _ = strings.Contains
