// Package throughput measures pods bound per second by the stock
// kube-scheduler with no extender, with a no-op extender, and with
// opa-scheduler-extender (names-only and full node lists), at the
// scheduler's default client QPS and at 5000, and the plugin build
// (cmd/opa-kube-scheduler: the same engine as a Scheduling Framework plugin,
// no HTTP hop), in one run on one cluster.
//
// -policy-set picks what the service enforces and what the cluster looks
// like: "examples" (the default) is the four placement policies of
// deploy/examples on fake nodes (cluster.FakeNode); "realistic" is the
// whole Gatekeeper library (every template with its first sample
// constraint, made warn here by the opa-scheduler-extender/enforcement-action
// annotation) plus the five placement templates of bench/testdata/realistic
// (three deny, two warn), on kubelet-sized nodes (cluster.KubeletNode:
// about 10 KB each, in the ten pools of bench/perf), with pods that
// tolerate spot capacity or use the host network where the deny templates
// allow it (policyset.RealisticPod).
//
// Speed is measured, not asserted: the test fails only if pods are not
// all bound. The default `go test ./...` run is small; the figures in
// bench/README.md come from bench/regenerate-results.sh (scenarios
// throughput, throughput-examples and throughput-churn), for example:
//
//	cd bench/e2e && go test -count=1 -run TestSchedulerThroughput -timeout 60m -v ./throughput/ -args -policy-set realistic -nodes 1000 -pods 2000 -full-pods 0 -setups 'no extender|plugin|\(names\)' -rounds 3
//
// -full-pods 0 leaves out the full-node-list setups. -setups picks setups
// by name, and -rounds repeats the qps 5000 ones alternately, for ratios
// that do not rest on one run each. -out writes the results as JSON.
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
	"regexp"
	"slices"
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
	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/policyset"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/source"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/server"
)

var (
	numNodes   = flag.Int("nodes", 200, "nodes in the cluster")
	numPods    = flag.Int("pods", 300, "pending pods per run")
	fullPods   = flag.Int("full-pods", 100, "pending pods per run with full node lists (the slow mode)")
	outFile    = flag.String("out", "", "write the results as JSON to this file")
	policySet  = flag.String("policy-set", policyset.Examples, `policies and cluster: "examples" (deploy/examples, fake nodes) or "realistic" (the whole Gatekeeper library, warn, plus bench/testdata/realistic; kubelet-sized nodes)`)
	profDir    = flag.String("scheduler-profile", "", "write a 5 s CPU profile of each setup's kube-scheduler (from 1 s after its start) to this folder")
	library    = flag.String("library", policyset.DefaultLibraryDir(), "the gatekeeper-library's library/ folder (-policy-set realistic)")
	setupsRE   = flag.String("setups", "", "run only the setups whose names match this regular expression (the warm-up always runs)")
	defaultQPS = flag.Bool("default-qps", true, "also run the setups at the scheduler's default client QPS")
	rounds     = flag.Int("rounds", 1, "run the qps 5000 setups this many times, alternately; ratios are reported per round and as the median")
	churnRate  = flag.Float64("churn", 0, "Node status updates a second written through the API server during every run, as kubelets' heartbeats (0: a still cluster)")
)

type result struct {
	PolicySet  string  `json:"policySet"`
	Setup      string  `json:"setup"`
	QPS        string  `json:"qps"`
	Pods       int     `json:"pods"`
	Seconds    float64 `json:"seconds"`
	PodsPerSec float64 `json:"podsPerSecond"`
	// Round counts the qps 5000 setups' repetitions (-rounds), from 1.
	Round int `json:"round,omitempty"`
	// Engine is the service's evaluation counters during this run (service setups only).
	Engine *engineDelta `json:"engine,omitempty"`
	// NodeUpdatesPerSec are the Node status updates written during the
	// run (-churn), per second.
	NodeUpdatesPerSec float64 `json:"nodeUpdatesPerSecond,omitempty"`
}

type engineDelta struct {
	Evaluations uint64 `json:"evaluations"`
	MemoHits    uint64 `json:"memoHits"`
	MemoMisses  uint64 `json:"memoMisses"`
	EvalErrors  uint64 `json:"evalErrors"`
}

func delta(a, b opa.Stats) *engineDelta {
	return &engineDelta{Evaluations: b.Evaluations - a.Evaluations, MemoHits: b.MemoHits - a.MemoHits, MemoMisses: b.MemoMisses - a.MemoMisses, EvalErrors: b.EvalErrors - a.EvalErrors}
}

func TestSchedulerThroughput(t *testing.T) {
	set := *policySet
	ps, err := policyset.Load(set, *library)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("policy set %s: %d templates, %d constraints", set, len(ps), policyset.CountConstraints(ps))
	testStart := time.Now()
	c := cluster.Start(t, cluster.Options{})
	ctx := context.Background()
	if err := c.InstallGatekeeperCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	mkNode := func(i int) *corev1.Node {
		labels := map[string]string{"pool": fmt.Sprintf("pool-%d", i%10), "topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", i%3)}
		switch i % 10 {
		case 0:
			labels["tenant"] = "alpha"
		case 1:
			labels["node.kubernetes.io/lifecycle"] = "spot"
		}
		return cluster.FakeNode(fmt.Sprintf("node-%04d", i), labels, nil)
	}
	mkPod := func(ns string, i int) *corev1.Pod {
		return cluster.PausePod(ns, fmt.Sprintf("p-%04d", i), map[string]string{"app": fmt.Sprintf("rs-%d", i%4)})
	}
	var nsLabels map[string]string
	nodeKind := "fake"
	if set == policyset.Realistic {
		mkNode, mkPod, nsLabels, nodeKind = cluster.KubeletNode, policyset.RealisticPod, policyset.RealisticNamespaceLabels, "kubelet"
		var total int
		for i := 0; i < 20; i++ {
			b, _ := json.Marshal(cluster.KubeletNode(i))
			total += len(b)
		}
		t.Logf("kubelet-sized nodes: %d bytes of JSON on average (first 20)", total/20)
	}
	start := time.Now()
	nodes, err := c.CreateNodes(ctx, *numNodes, mkNode)
	if err != nil {
		t.Fatal(err)
	}
	var nodeNames []string
	for _, n := range nodes {
		nodeNames = append(nodeNames, n.Name)
	}
	t.Logf("%d %s nodes created in %v", *numNodes, nodeKind, time.Since(start).Round(time.Millisecond))

	// The service, with the policy set's templates and constraints, synced
	// from the cluster as in production.
	start = time.Now()
	if err := policyset.Install(ctx, c, ps); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d templates and %d constraints created in %v", len(ps), policyset.CountConstraints(ps), time.Since(start).Round(time.Millisecond))
	start = time.Now()
	svcURL, engine := startService(t, c, len(ps), policyset.CountConstraints(ps))
	t.Logf("service ready in %v", time.Since(start).Round(time.Millisecond))
	noopURL := startNoop(t)

	pluginBin, err := cluster.BuildPluginScheduler(t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	ext := func(url string, nodeCache bool) []configv1.Extender {
		return []configv1.Extender{{URLPrefix: url, FilterVerb: "filter", PrioritizeVerb: "prioritize", Weight: 1, NodeCacheCapable: nodeCache, HTTPTimeout: metav1.Duration{Duration: 5 * time.Second}}}
	}
	// The plugin build runs right after no extender, the figure it is
	// compared with; a warm-up run before both keeps the first measured
	// run from paying for the cluster's start (informer lists, the API
	// server's caches).
	setups := []setup{
		{"warm-up (no extender, not reported)", nil, max(*numPods/10, 50), false},
		{"no extender", nil, *numPods, false},
		{"plugin build (OPAGatekeeper)", nil, *numPods, true},
		{"no-op extender (names)", ext(noopURL, true), *numPods, false},
		{"opa-scheduler-extender (names)", ext(svcURL, true), *numPods, false},
		{"no-op extender (full nodes)", ext(noopURL, false), *fullPods, false},
		{"opa-scheduler-extender (full nodes)", ext(svcURL, false), *fullPods, false},
	}
	env := &runEnv{c: c, set: set, engine: engine, svcURL: svcURL, pluginBin: pluginBin, nsLabels: nsLabels, mkPod: mkPod, nodeNames: nodeNames}
	only, err := regexp.Compile(*setupsRE)
	if err != nil {
		t.Fatalf("-setups: %v", err)
	}
	var results []result
	run := 0
	for _, qps := range []struct {
		name       string
		qps, burst int
		rounds     int
	}{{"5000/5000", 5000, 5000, max(*rounds, 1)}, {"default 50/100", 0, 0, 1}} {
		if qps.qps == 0 && !*defaultQPS {
			continue
		}
		for round := 1; round <= qps.rounds; round++ {
			for _, s := range setups {
				warmUp := strings.HasPrefix(s.name, "warm-up")
				if s.pods <= 0 || (warmUp && (qps.qps == 0 || round > 1)) || (!warmUp && !only.MatchString(s.name)) {
					continue
				}
				run++
				if r, ok := env.runSetup(t, s, qps.name, qps.qps, qps.burst, fmt.Sprintf("run-%d", run)); ok {
					if qps.rounds > 1 {
						r.Round = round
					}
					results = append(results, r)
				}
			}
		}
	}
	report(t, set, nodeKind, len(ps), policyset.CountConstraints(ps), results, engine.Stats(), testStart)
}

// report logs the ratios between setups and the engine's totals, and
// writes the results to -out.
func report(t *testing.T, set, nodeKind string, templates, constraints int, results []result, st opa.Stats, testStart time.Time) {
	t.Helper()
	byKey := map[string]float64{}
	maxRound := 0
	for _, r := range results {
		byKey[fmt.Sprintf("%s|%s|%d", r.Setup, r.QPS, r.Round)] = r.PodsPerSec
		maxRound = max(maxRound, r.Round)
	}
	ratios := map[string][]float64{}
	for _, q := range []string{"5000/5000", "default 50/100"} {
		for round := range maxRound + 1 {
			at := func(setup string) float64 { return byKey[fmt.Sprintf("%s|%s|%d", setup, q, round)] }
			none, noop, svc := at("no extender"), at("no-op extender (names)"), at("opa-scheduler-extender (names)")
			plugin := at("plugin build (OPAGatekeeper)")
			noopFull, svcFull := at("no-op extender (full nodes)"), at("opa-scheduler-extender (full nodes)")
			label := "qps " + q
			if round > 0 {
				label += fmt.Sprintf(", round %d", round)
			}
			var parts []string
			for _, x := range []struct {
				name     string
				num, den float64
			}{{"service/no-op", svc, noop}, {"service/none", svc, none}, {"no-op/none", noop, none}, {"plugin/none", plugin, none}, {"service/no-op (full nodes)", svcFull, noopFull}} {
				if x.num > 0 && x.den > 0 {
					parts = append(parts, fmt.Sprintf("%s = %.2f", x.name, x.num/x.den))
					ratios[q+"|"+x.name] = append(ratios[q+"|"+x.name], x.num/x.den)
				}
			}
			if len(parts) > 0 {
				t.Logf("[%s] %s: %s", set, label, strings.Join(parts, ", "))
			}
		}
	}
	if maxRound > 1 {
		var parts []string
		for _, name := range []string{"service/no-op", "service/none", "no-op/none", "plugin/none", "service/no-op (full nodes)"} {
			if rs := ratios["5000/5000|"+name]; len(rs) > 0 {
				parts = append(parts, fmt.Sprintf("%s = %.2f (rounds %s)", name, median(rs), formatRatios(rs)))
			}
		}
		t.Logf("[%s] qps 5000/5000, median of %d rounds: %s", set, maxRound, strings.Join(parts, ", "))
	}
	t.Logf("[%s] engine: %d evaluations, %d memo hits, %d misses, %d evaluation errors; test wall time %v", set, st.Evaluations, st.MemoHits, st.MemoMisses, st.EvalErrors, time.Since(testStart).Round(time.Second))
	if *outFile != "" {
		b, _ := json.MarshalIndent(map[string]any{
			"policySet":   set,
			"nodes":       *numNodes,
			"nodeKind":    nodeKind,
			"templates":   templates,
			"constraints": constraints,
			"results":     results,
			"engine":      map[string]uint64{"evaluations": st.Evaluations, "memoHits": st.MemoHits, "memoMisses": st.MemoMisses, "evalErrors": st.EvalErrors},
		}, "", "  ")
		if err := os.WriteFile(*outFile, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func formatRatios(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, " ")
}

type setup struct {
	name      string
	extenders []configv1.Extender
	pods      int
	// plugin runs the plugin build with the OPAGatekeeper plugin
	// enabled in the default profile, no extender.
	plugin bool
}

// runEnv is what every setup's run shares.
type runEnv struct {
	c         *cluster.Cluster
	set       string
	engine    *opa.Engine
	svcURL    string
	pluginBin string
	nsLabels  map[string]string
	mkPod     func(ns string, i int) *corev1.Pod
	// nodeNames are the cluster's Nodes, which -churn updates.
	nodeNames []string
}

// createPending creates namespace ns with n pending pods and returns the
// pods' list resource version, where waitBound starts.
func (env *runEnv) createPending(t *testing.T, ns string, n int) string {
	t.Helper()
	ctx := context.Background()
	client := env.c.Client().CoreV1()
	if _, err := client.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: env.nsLabels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := client.Pods(ns).Create(ctx, env.mkPod(ns, i), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	list, err := client.Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.ResourceVersion
}

// runSetup schedules s.pods pending pods in namespace ns with one
// scheduler of the setup and measures it; ok is false for the warm-up,
// which is not reported.
func (env *runEnv) runSetup(t *testing.T, s setup, qpsName string, qps, burst int, ns string) (r result, ok bool) {
	t.Helper()
	c, set := env.c, env.set
	rv := env.createPending(t, ns, s.pods)
	opts := cluster.SchedulerOptions{Extenders: s.extenders}
	if s.plugin {
		// The admin identity reads Gatekeeper's objects, as
		// deploy/plugin's ClusterRole lets the scheduler do.
		opts.Binary, opts.ProfilesYAML, opts.AsAdmin = env.pluginBin, pluginProfile, true
	}
	if qps > 0 {
		opts.QPS, opts.Burst = float32(qps), int32(burst)
	}
	before := env.engine.Stats()
	runStart := time.Now()
	churn := c.StartNodeChurn(*churnRate, env.nodeNames)
	sched := c.StartScheduler(t, opts)
	profiled := profileScheduler(t, sched, s.name, qpsName)
	first, last, bound := waitBound(t, c, ns, rv, s.pods, 10*time.Minute)
	<-profiled
	written, failed, churnErr := churn.Stop()
	if failed > 0 {
		t.Errorf("%s: %d of %d Node updates failed, the last: %v", s.name, failed, written+failed, churnErr)
	}
	var pluginEvals float64
	if s.plugin {
		pluginEvals = scrapeEvaluations(t, sched)
	}
	logSchedulerCosts(t, sched, s.name)
	sched.Stop()
	n := len(bound)
	after := env.engine.Stats()
	r = result{PolicySet: set, Setup: s.name, QPS: qpsName, Pods: n, Seconds: last.Sub(first).Seconds()}
	if written > 0 {
		r.NodeUpdatesPerSec = float64(written) / time.Since(runStart).Seconds()
	}
	if n > 1 && r.Seconds > 0 {
		r.PodsPerSec = float64(n-1) / r.Seconds
	}
	service := len(s.extenders) > 0 && s.extenders[0].URLPrefix == env.svcURL
	evals := ""
	if service {
		r.Engine = delta(before, after)
		evals = fmt.Sprintf("; engine %d evaluations, %d memo hits, %d misses, %d errors", r.Engine.Evaluations, r.Engine.MemoHits, r.Engine.MemoMisses, r.Engine.EvalErrors)
	}
	if s.plugin {
		r.Engine = &engineDelta{Evaluations: uint64(pluginEvals)}
		evals = fmt.Sprintf("; the plugin's engine: %d evaluations (its whole life: sync and this run)", r.Engine.Evaluations)
	}
	if set == policyset.Realistic {
		// Where the pods went: with the service or the plugin, none may
		// be where a deny placement constraint forbids it.
		pl, off := placementSummary(bound)
		t.Logf("[%s] %s, qps %s: pods per pool %v; %d pods where a deny placement constraint forbids them", set, s.name, qpsName, pl, off)
		if (service || s.plugin) && off > 0 {
			t.Errorf("%s, qps %s: %d pods bound where a deny placement constraint forbids them", s.name, qpsName, off)
		}
	}
	t.Logf("[%s] %-38s qps %-15s %5d pods in %6.2fs: %7.1f pods/s (run %v, %.1f Node updates/s)%s", set, s.name, qpsName, n, r.Seconds, r.PodsPerSec, time.Since(runStart).Round(time.Second), r.NodeUpdatesPerSec, evals)
	if n != s.pods {
		t.Errorf("%s, qps %s: %d of %d pods bound", s.name, qpsName, n, s.pods)
	}
	removePods(t, c, ns)
	return r, !strings.HasPrefix(s.name, "warm-up")
}

// removePods deletes the run's pods at once (no kubelet runs to finish a
// graceful deletion: they would stay bound, Terminating, on the nodes of
// every later run) and waits until they are gone, so that the next run
// neither shares the API server with the deletion nor finds the nodes
// fuller than the run before it did.
func removePods(t *testing.T, c *cluster.Cluster, ns string) {
	t.Helper()
	ctx := context.Background()
	pods := c.Client().CoreV1().Pods(ns)
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{}); err != nil {
		t.Fatalf("delete the pods of %s: %v", ns, err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		list, err := pods.List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil && len(list.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pods of %s are not gone after 2 minutes (%v)", ns, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// pluginProfile enables the OPAGatekeeper plugin at every extension point
// of the default profile, policies from the cluster.
const pluginProfile = `
- schedulerName: default-scheduler
  plugins:
    preFilter: {enabled: [{name: OPAGatekeeper}]}
    filter: {enabled: [{name: OPAGatekeeper}]}
    postFilter: {enabled: [{name: OPAGatekeeper}]}
    preScore: {enabled: [{name: OPAGatekeeper}]}
    score: {enabled: [{name: OPAGatekeeper, weight: 1}]}
`

// scrapeEvaluations reads opa_scheduler_extender_evaluations_total from
// the plugin build's /metrics.
func scrapeEvaluations(t *testing.T, s *cluster.Scheduler) float64 {
	t.Helper()
	b, err := s.Metrics(context.Background())
	if err != nil {
		t.Errorf("plugin build metrics: %v", err)
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "opa_scheduler_extender_evaluations_total{") {
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
				return v
			}
		}
	}
	t.Errorf("plugin build metrics carry no opa_scheduler_extender_evaluations_total")
	return 0
}

// profileScheduler writes, with -scheduler-profile, a CPU profile of the
// scheduler taken while it schedules; the channel closes when it is done.
func profileScheduler(t *testing.T, s *cluster.Scheduler, setup, qps string) <-chan struct{} {
	done := make(chan struct{})
	if *profDir == "" {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		time.Sleep(time.Second)
		b, err := s.Get(context.Background(), "/debug/pprof/profile?seconds=5")
		if err != nil {
			t.Logf("%s: profile: %v", setup, err)
			return
		}
		name := strings.NewReplacer(" ", "-", "(", "", ")", "", "/", "-").Replace(setup + "-" + qps)
		if err := os.WriteFile(filepath.Join(*profDir, name+".pprof"), b, 0o644); err != nil {
			t.Logf("%s: profile: %v", setup, err)
		}
	}()
	return done
}

// logSchedulerCosts logs where the scheduler's time went: the scheduling
// algorithm's total, the OPAGatekeeper plugin's share by extension point
// (kube-scheduler samples these), and opportunistic batching's attempts.
func logSchedulerCosts(t *testing.T, s *cluster.Scheduler, setup string) {
	t.Helper()
	b, err := s.Metrics(context.Background())
	if err != nil {
		t.Logf("%s: scheduler metrics: %v", setup, err)
		return
	}
	var lines []string
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "scheduler_batch_attempts_total"),
			strings.HasPrefix(line, "scheduler_scheduling_algorithm_duration_seconds_sum"),
			strings.HasPrefix(line, "scheduler_scheduling_algorithm_duration_seconds_count"),
			strings.HasPrefix(line, "scheduler_plugin_execution_duration_seconds_sum") && strings.Contains(line, `plugin="OPAGatekeeper"`),
			strings.HasPrefix(line, "scheduler_plugin_execution_duration_seconds_count") && strings.Contains(line, `plugin="OPAGatekeeper"`):
			lines = append(lines, line)
		}
	}
	t.Logf("%s: scheduler costs:\n  %s", setup, strings.Join(lines, "\n  "))
}

// waitBound follows the pods' watch (re-opened from the last resource
// version when the API server closes it) until want of them are bound,
// and returns the times of the first and last binding seen and the node
// of each pod bound.
func waitBound(t *testing.T, c *cluster.Cluster, ns, rv string, want int, timeout time.Duration) (first, last time.Time, bound map[string]string) {
	t.Helper()
	bound = map[string]string{}
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
			if _, seen := bound[p.Name]; p.Spec.NodeName == "" || seen {
				continue
			}
			now := time.Now()
			if first.IsZero() {
				first = now
			}
			last = now
			bound[p.Name] = p.Spec.NodeName
		case <-deadline:
			return first, last, bound
		}
	}
	return first, last, bound
}

// startService starts the service on the cluster and waits until it is
// ready with the policy set loaded: every template and constraint active
// and every node in its inventory.
func startService(t *testing.T, c *cluster.Cluster, wantTemplates, wantConstraints int) (string, *opa.Engine) {
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
	srv, err := server.New(server.Options{Policy: engine, Logger: log, ReadinessChecks: []server.ReadinessCheck{{Name: "cluster-sync", Ready: src.Ready}}})
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
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if st := engine.Status(); resp.StatusCode == 200 && policyset.Loaded(st, wantTemplates, wantConstraints) && st.Inventory["v1/Node"] == *numNodes {
				return url, engine
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	st := engine.Status()
	t.Fatalf("service not ready: %d of %d templates, %d of %d constraints, inventory %v; not in force:\n%s",
		len(st.Templates), wantTemplates, len(st.Constraints), wantConstraints, st.Inventory, strings.Join(policyset.NotInForce(st), "\n"))
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
		} else if args.Nodes != nil {
			for _, n := range args.Nodes.Items {
				names = append(names, n.Name)
			}
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
