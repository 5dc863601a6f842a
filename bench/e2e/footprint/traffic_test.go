package footprint

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/policyset"
)

// trafficReport is the SyncAndTraffic part of the figures.
type trafficReport struct {
	SyncSeconds float64 `json:"syncSeconds"`
	AfterSync   memory  `json:"afterSync"`
	// Pairs is the filter+prioritize pairs sent (one pod each).
	Pairs        int     `json:"pairs"`
	Workers      int     `json:"workers"`
	Seconds      float64 `json:"seconds"`
	FilterP50ms  float64 `json:"filterP50Ms"`
	FilterP99ms  float64 `json:"filterP99Ms"`
	PrioP50ms    float64 `json:"prioritizeP50Ms"`
	PrioP99ms    float64 `json:"prioritizeP99Ms"`
	PassedAvg    float64 `json:"nodesPassedAverage"`
	AfterTraffic memory  `json:"afterTraffic"`
}

// pairResult is one filter+prioritize pair.
type pairResult struct {
	filter, prio time.Duration
	passed       int
	err          error
}

func runTraffic(t *testing.T, e *env) *trafficReport {
	s, took := startService(t, e)
	rep := &trafficReport{SyncSeconds: took.Seconds(), Workers: *workers}
	rep.AfterSync = s.measure(t)
	t.Logf("after sync (%d nodes): %v", *numNodes, rep.AfterSync)

	results, seconds := sendTraffic(s, e.names)
	rep.Pairs, rep.Seconds = len(results), seconds
	var filters, prios []time.Duration
	var passed, failed int
	for j, r := range results {
		if r.err != nil {
			failed++
			if failed <= 5 {
				t.Errorf("pair %d: %v", j, r.err)
			}
			continue
		}
		filters, prios = append(filters, r.filter), append(prios, r.prio)
		passed += r.passed
	}
	if failed > 0 {
		t.Errorf("%d of %d filter+prioritize pairs failed", failed, len(results))
	}
	if len(filters) == 0 {
		t.Fatal("no filter+prioritize pair succeeded")
	}
	rep.FilterP50ms, rep.FilterP99ms = quantileMs(filters, 0.5), quantileMs(filters, 0.99)
	rep.PrioP50ms, rep.PrioP99ms = quantileMs(prios, 0.5), quantileMs(prios, 0.99)
	rep.PassedAvg = float64(passed) / float64(len(filters))
	t.Logf("traffic: %d pairs in %.1fs from %d clients (%.1f pairs/s); filter p50 %.2f ms p99 %.2f ms, prioritize p50 %.2f ms p99 %.2f ms; %.1f of %d nodes pass on average",
		rep.Pairs, rep.Seconds, rep.Workers, float64(rep.Pairs)/rep.Seconds, rep.FilterP50ms, rep.FilterP99ms, rep.PrioP50ms, rep.PrioP99ms, rep.PassedAvg, *numNodes)
	rep.AfterTraffic = s.measure(t)
	t.Logf("after traffic: %v", rep.AfterTraffic)
	return rep
}

// sendTraffic runs the traffic clients: -footprint-requests pairs, or as
// many as fit in -footprint-duration.
func sendTraffic(s *service, names []string) ([]pairResult, float64) {
	var next atomic.Int64
	deadline := time.Now().Add(*trafficFor)
	more := func() (int, bool) {
		i := int(next.Add(1) - 1)
		if *trafficCount > 0 {
			return i, i < *trafficCount
		}
		return i, time.Now().Before(deadline)
	}
	var mu sync.Mutex
	var results []pairResult
	var wg sync.WaitGroup
	start := time.Now()
	for range max(1, *workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, ok := more(); ok; i, ok = more() {
				r := s.pair(i, names)
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return results, time.Since(start).Seconds()
}

// pair sends what kube-scheduler sends a nodeCacheCapable extender for
// pod i: /filter with every node name, then /prioritize with the nodes
// that passed, and checks both answers.
func (s *service) pair(i int, names []string) pairResult {
	pod := policyset.RealisticPod(namespaces[i%len(namespaces)], i)
	pod.UID = types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i))
	args := extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names}
	start := time.Now()
	code, body, err := s.post("/filter", &args)
	r := pairResult{filter: time.Since(start)}
	if err == nil {
		err = checkAnswer(code, body)
	}
	if err != nil {
		r.err = fmt.Errorf("filter %s/%s: %w", pod.Namespace, pod.Name, err)
		return r
	}
	var fr extenderv1.ExtenderFilterResult
	if err := json.Unmarshal(body, &fr); err != nil {
		r.err = fmt.Errorf("filter %s/%s: %w", pod.Namespace, pod.Name, err)
		return r
	}
	passed, err := checkFilter(&fr, names)
	if err != nil {
		r.err = fmt.Errorf("filter %s/%s: %w", pod.Namespace, pod.Name, err)
		return r
	}
	r.passed = len(passed)
	args.NodeNames = &passed
	start = time.Now()
	code, body, err = s.post("/prioritize", &args)
	r.prio = time.Since(start)
	if err == nil {
		err = checkAnswer(code, body)
	}
	if err == nil {
		err = checkPriorities(body, passed)
	}
	if err != nil {
		r.err = fmt.Errorf("prioritize %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return r
}

func checkAnswer(code int, body []byte) error {
	if code != http.StatusOK {
		return fmt.Errorf("status %d: %.300s", code, body)
	}
	if !json.Valid(body) {
		return fmt.Errorf("answer is not JSON: %.300s", body)
	}
	return nil
}

// checkFilter checks that a filter answer has no error and puts every
// node it was given either among the passed names or the failed ones,
// once; it returns the passed names.
func checkFilter(fr *extenderv1.ExtenderFilterResult, names []string) ([]string, error) {
	if fr.Error != "" {
		return nil, fmt.Errorf("answer has error %q", fr.Error)
	}
	if fr.NodeNames == nil {
		return nil, fmt.Errorf("answer has no nodenames")
	}
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	seen := make(map[string]bool, len(names))
	count := func(n string) error {
		if !want[n] {
			return fmt.Errorf("answer names node %q it was not given", n)
		}
		if seen[n] {
			return fmt.Errorf("answer names node %q twice", n)
		}
		seen[n] = true
		return nil
	}
	for _, n := range *fr.NodeNames {
		if err := count(n); err != nil {
			return nil, err
		}
	}
	for n := range fr.FailedNodes {
		if err := count(n); err != nil {
			return nil, err
		}
	}
	for n := range fr.FailedAndUnresolvableNodes {
		if err := count(n); err != nil {
			return nil, err
		}
	}
	if len(seen) != len(names) {
		return nil, fmt.Errorf("answer accounts for %d of %d nodes (%d passed, %d failed, %d unresolvable)",
			len(seen), len(names), len(*fr.NodeNames), len(fr.FailedNodes), len(fr.FailedAndUnresolvableNodes))
	}
	return *fr.NodeNames, nil
}

// checkPriorities checks that a prioritize answer scores every node it was
// given once, within the extender range.
func checkPriorities(body []byte, names []string) error {
	var list extenderv1.HostPriorityList
	if err := json.Unmarshal(body, &list); err != nil {
		return err
	}
	if len(list) != len(names) {
		return fmt.Errorf("%d scores for %d nodes", len(list), len(names))
	}
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	for _, hp := range list {
		if !want[hp.Host] {
			return fmt.Errorf("score for node %q not given or twice", hp.Host)
		}
		delete(want, hp.Host)
		if hp.Score < extenderv1.MinExtenderPriority || hp.Score > extenderv1.MaxExtenderPriority {
			return fmt.Errorf("node %s: score %d out of [%d, %d]", hp.Host, hp.Score, extenderv1.MinExtenderPriority, extenderv1.MaxExtenderPriority)
		}
	}
	return nil
}

func quantileMs(ds []time.Duration, q float64) float64 {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	return float64(s[int(q*float64(len(s)-1))]) / 1e6
}
