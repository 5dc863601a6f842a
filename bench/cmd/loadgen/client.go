package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime/metrics"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/perf"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// scenario is one verb, one mode, one candidate count.
type scenario struct {
	verb  string
	full  bool // Nodes (full objects) rather than NodeNames
	nodes int
}

func (s scenario) mode() string {
	if s.full {
		return "nodes"
	}
	return "names"
}

func (s scenario) name() string { return fmt.Sprintf("%s/%s/%d", s.verb, s.mode(), s.nodes) }

type client struct {
	base string
	http *http.Client
	// streams counts the pod streams started, so that every scenario's
	// pods (and its one-off images) are new to the service.
	streams int
	// counters reads the server's counters before and after a measured
	// phase (processCounters in process, serviceCounters for -service).
	counters func() (counters, error)
	// memory reads the server's memory, for the report's checkpoints.
	memory func() (Memory, error)
	// nodeSize is the Node objects full-node scenarios send.
	nodeSize perf.NodeSize
	// churn writes Node updates while the scenarios run (-churn).
	churn *perf.Churn
	// noMetrics: the server has no /metrics of the service's (the floor).
	noMetrics bool
	// inProcess: the server runs in this process (its collections are
	// this process's).
	inProcess bool
	// collections are the server's collections so far, when it is a
	// process of its own that reports them (perf.Service.Collections).
	collections func() []perf.GCWindow
}

func newClient(base string, concurrency int) *client {
	tr := &http.Transport{
		MaxIdleConns:        concurrency + 2,
		MaxIdleConnsPerHost: concurrency + 2,
		DisableCompression:  true,
		IdleConnTimeout:     time.Minute,
	}
	return &client{base: base, http: &http.Client{Transport: tr, Timeout: time.Minute}}
}

// post sends one request, reads the whole answer and returns it with the
// time from sending to the last byte of the answer.
func (c *client) post(ctx context.Context, verb string, body []byte) ([]byte, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/"+verb, bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, 0, err
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if err != nil {
		return nil, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("%s: HTTP %d: %.300s", verb, resp.StatusCode, out)
	}
	return out, d, nil
}

// timed sends one request on w and drains the answer without keeping it.
func (c *client) timed(w *wire, verb string, body []byte, sink *bytes.Buffer) (time.Duration, int, error) {
	start := time.Now()
	status, n, err := w.do(verb, body, sink)
	d := time.Since(start)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", verb, err)
	}
	if status != http.StatusOK {
		return 0, 0, fmt.Errorf("%s: HTTP %d: %.300s", verb, status, sink.Bytes())
	}
	return d, n, nil
}

// wire is a worker's keep-alive HTTP/1.1 connection for its measured
// requests, written and read here rather than by net/http's client, which
// allocates per request (the request, its URL and headers, and a copy
// buffer the size of the body: a third of the garbage of an in-process
// run). In this process that garbage paced the service's collector, which
// the scheduler's own client never does. The service sees the same
// requests: POST, Content-Type and Content-Length, one connection.
type wire struct {
	host string
	conn net.Conn
	br   *bufio.Reader
	out  []byte
}

func dialWire(base string) (*wire, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	conn, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
	if err != nil {
		return nil, err
	}
	return &wire{host: u.Host, conn: conn, br: bufio.NewReaderSize(conn, 64<<10)}, nil
}

func (w *wire) close() { _ = w.conn.Close() }

// do sends body to /verb and reads the answer into sink: the status and
// the answer's length.
func (w *wire) do(verb string, body []byte, sink *bytes.Buffer) (int, int, error) {
	w.out = append(w.out[:0], "POST /"...)
	w.out = append(w.out, verb...)
	w.out = append(w.out, " HTTP/1.1\r\nHost: "...)
	w.out = append(w.out, w.host...)
	w.out = append(w.out, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	w.out = strconv.AppendInt(w.out, int64(len(body)), 10)
	w.out = append(w.out, "\r\n\r\n"...)
	w.out = append(w.out, body...)
	if err := w.conn.SetDeadline(time.Now().Add(time.Minute)); err != nil {
		return 0, 0, err
	}
	if _, err := w.conn.Write(w.out); err != nil {
		return 0, 0, err
	}
	resp, err := http.ReadResponse(w.br, nil)
	if err != nil {
		return 0, 0, err
	}
	sink.Reset()
	n, err := sink.ReadFrom(resp.Body)
	resp.Body.Close()
	if err == nil && resp.Close {
		err = fmt.Errorf("the service closed the connection")
	}
	return resp.StatusCode, int(n), err
}

// serverTotals are the service's own request_duration_seconds for a verb
// (result ok) from /metrics: the time from the handler's start to the
// answer written, without the client and the connection.
type serverTotals struct {
	sum, count float64
	// over10ms and over25ms count the calls past those buckets' bounds:
	// the service's own long calls, against which the client's longest
	// cycles are read. long: the histogram has both buckets (a service
	// with other bounds has neither count).
	over10ms, over25ms float64
	long               bool
}

func (t serverTotals) add(o serverTotals) serverTotals {
	return serverTotals{t.sum + o.sum, t.count + o.count, t.over10ms + o.over10ms, t.over25ms + o.over25ms, t.long && o.long}
}

func (t serverTotals) sub(o serverTotals) serverTotals {
	return serverTotals{t.sum - o.sum, t.count - o.count, t.over10ms - o.over10ms, t.over25ms - o.over25ms, t.long && o.long}
}

// serverTotals reads them for verb.
func (c *client) serverTotals(ctx context.Context, verb string) (serverTotals, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/metrics", nil)
	if err != nil {
		return serverTotals{}, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return serverTotals{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return serverTotals{}, err
	}
	return parseServerTotals(string(b), verb)
}

// parseServerTotals reads verb's totals from a /metrics exposition.
func parseServerTotals(exposition, verb string) (serverTotals, error) {
	const name = "opa_scheduler_extender_request_duration_seconds"
	labels := `{result="ok",verb="` + verb + `"`
	var t serverTotals
	var within10ms, within25ms float64
	series := map[string]*float64{
		name + "_sum" + labels + "} ":               &t.sum,
		name + "_count" + labels + "} ":             &t.count,
		name + "_bucket" + labels + `,le="0.01"} `:  &within10ms,
		name + "_bucket" + labels + `,le="0.025"} `: &within25ms,
	}
	found := map[*float64]bool{}
	for line := range strings.SplitSeq(exposition, "\n") {
		for prefix, dst := range series {
			if v, ok := strings.CutPrefix(line, prefix); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					return serverTotals{}, fmt.Errorf("/metrics: %s: %w", line, err)
				}
				*dst = f
				found[dst] = true
			}
		}
	}
	if !found[&t.sum] || !found[&t.count] {
		return serverTotals{}, fmt.Errorf("/metrics: no %s_sum and _count%s}", name, labels)
	}
	if t.long = found[&within10ms] && found[&within25ms]; t.long {
		t.over10ms, t.over25ms = t.count-within10ms, t.count-within25ms
	}
	return t, nil
}

// serverTotalsOf is serverTotals for a measured call of verb: a cycle's
// filter and prioritize summed (the mean per cycle is filter's count's),
// the long calls of either counted.
func (c *client) serverTotalsOf(ctx context.Context, verb string) (serverTotals, error) {
	if c.noMetrics {
		return serverTotals{}, nil
	}
	sum := serverTotals{long: true}
	for i, v := range verbsOf(verb) {
		t, err := c.serverTotals(ctx, v)
		if err != nil {
			return serverTotals{}, err
		}
		if i > 0 {
			t.count = 0 // a cycle counts once
		}
		sum = sum.add(t)
	}
	return sum, nil
}

// filterOutcome checks a filter answer and counts its nodes.
type filterOutcome struct {
	passed, denied, unknown int
	deniedNodes             map[string]string
}

func checkFilter(out []byte, s scenario) (filterOutcome, error) {
	var res extenderv1.ExtenderFilterResult
	if err := json.Unmarshal(out, &res); err != nil {
		return filterOutcome{}, fmt.Errorf("filter answer: %w", err)
	}
	if res.Error != "" {
		return filterOutcome{}, fmt.Errorf("filter answer: Error %q", res.Error)
	}
	o := filterOutcome{denied: len(res.FailedAndUnresolvableNodes), unknown: len(res.FailedNodes), deniedNodes: res.FailedAndUnresolvableNodes}
	if s.full {
		if res.Nodes != nil {
			o.passed = len(res.Nodes.Items)
		}
	} else if res.NodeNames != nil {
		o.passed = len(*res.NodeNames)
	}
	if o.unknown > 0 {
		return o, fmt.Errorf("filter answer: %d nodes unknown to the extender", o.unknown)
	}
	if o.passed+o.denied != s.nodes {
		return o, fmt.Errorf("filter answer covers %d+%d nodes, want %d", o.passed, o.denied, s.nodes)
	}
	return o, nil
}

func checkPrioritize(out []byte, want int) error {
	var res extenderv1.HostPriorityList
	if err := json.Unmarshal(out, &res); err != nil {
		return fmt.Errorf("prioritize answer: %w", err)
	}
	if len(res) != want {
		return fmt.Errorf("prioritize answer has %d hosts, want %d", len(res), want)
	}
	return nil
}

// verbsOf are the requests one measured call of verb may send: a cycle
// is what kube-scheduler asks per pod, filter then, when at least two
// nodes passed, prioritize on those (cycle.go).
func verbsOf(verb string) []string {
	if verb == "cycle" {
		return []string{"filter", "prioritize"}
	}
	return []string{verb}
}

// sent is what one measured call of a verb sent and left in the sink.
type sent struct {
	d       time.Duration
	longest time.Duration // the longest of its calls (a cycle's filter or prioritize)
	answer  int           // answer bytes, every request's
	request int           // request bytes, every request's
	scored  int           // nodes sent to a cycle's prioritize (0: not called)
	last    scenario
}

// want is the number of hosts the last answer must hold when it is a
// prioritize answer: the nodes a cycle's filter passed, else every
// candidate.
func (o sent) want() int {
	if o.scored > 0 {
		return o.scored
	}
	return o.last.nodes
}

// send times verb's requests for pod (body is its filter or prioritize
// request on the scenario's candidates): their times and sizes added, the
// last answer left in sink. A cycle's prioritize body is built in pbuf.
func (c *client) send(w *wire, s scenario, body, pod []byte, sink, pbuf *bytes.Buffer) (sent, error) {
	if s.verb != "cycle" {
		d, n, err := c.timed(w, s.verb, body, sink)
		return sent{d: d, longest: d, answer: n, request: len(body), last: s}, err
	}
	d, n, err := c.timed(w, "filter", body, sink)
	if err != nil {
		return sent{}, err
	}
	out := sent{d: d, longest: d, answer: n, request: len(body), last: scenario{verb: "filter", full: s.full, nodes: s.nodes}}
	p, err := passedNodes(sink.Bytes())
	if err != nil || !p.scored() {
		return out, err
	}
	pbody := p.prioritizeBody(pbuf, pod)
	d, n, err = c.timed(w, "prioritize", pbody, sink)
	if err != nil {
		return sent{}, err
	}
	out.d += d
	out.longest = max(out.longest, d)
	out.answer += n
	out.request += len(pbody)
	out.scored = p.count
	out.last = scenario{verb: "prioritize", full: s.full, nodes: s.nodes}
	return out, nil
}

// check checks an answer to the verb of s: a prioritize answer holds want
// hosts.
func check(out []byte, s scenario, want int) error {
	if s.verb == "filter" {
		_, err := checkFilter(out, s)
		return err
	}
	return checkPrioritize(out, want)
}

// sample is one measured request.
type sample struct {
	d time.Duration
	// call is its longest call: d itself for one verb, the longer of
	// filter and prioritize for a cycle.
	call   time.Duration
	oneOff bool
	// gc: in process, a collection of this process (the service's own
	// collector then) ended while the request was in flight; start and end
	// are its wall-clock times, against which a service's collections are
	// set after the phase (withCollections).
	gc         bool
	start, end int64 // Unix nanoseconds
	// reordered: the connection received segments out of order during
	// the request (outOfOrder), known when tcpKnown.
	reordered, tcpKnown bool
	// clientGC: with -service, one of this client's own collections
	// ended while the request was in flight.
	clientGC bool
}

// gcCycles reads this process's completed collections into s, a worker's
// own one-sample slice (read twice per request: no allocation).
func gcCycles(s []metrics.Sample) uint64 {
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// workerResult is what one worker measured.
type workerResult struct {
	samples   []sample
	bodyBytes int64
	respBytes int64
	// scoredCycles counts a cycle's prioritize calls, scoredNodes the
	// nodes they were sent.
	scoredCycles, scoredNodes int64
	err                       error
}

// run measures one scenario: a warm-up, then -duration of requests from
// -concurrency workers, each sending its next request when the previous
// answer has arrived.
func (c *client) run(ctx context.Context, s scenario, f *flags) (Scenario, error) {
	b := perf.NewArgsOf(c.nodeSize, s.nodes, s.full)
	if f.rotate && !s.full {
		b = perf.NewRotatingArgs(s.nodes, f.maxNodes())
	}
	if err := c.probe(ctx, s, f, b); err != nil {
		return Scenario{}, err
	}
	workers := make([]*worker, f.concurrency)
	for w := range workers {
		c.streams++
		conn, err := dialWire(c.base)
		if err != nil {
			return Scenario{}, err
		}
		defer conn.close()
		workers[w] = &worker{stream: perf.NewStream(f.seed, c.streams, f.oneOffShare), conn: conn}
	}
	if f.warmup > 0 {
		for _, r := range c.phase(ctx, s, b, workers, f.warmup, false) {
			if r.err != nil {
				return Scenario{}, r.err
			}
		}
	}
	server0, err := c.serverTotalsOf(ctx, s.verb)
	if err != nil {
		return Scenario{}, err
	}
	before, err := c.counters()
	if err != nil {
		return Scenario{}, err
	}
	stopTrace, err := startTrace(f.tracePrefix, s)
	if err != nil {
		return Scenario{}, err
	}
	steal0, stealOK := perf.StealTicks()
	updates0 := c.churn.Written()
	start := time.Now()
	results := c.phase(ctx, s, b, workers, f.duration, true)
	elapsed := time.Since(start)
	updates := c.churn.Written() - updates0
	if err := stopTrace(); err != nil {
		return Scenario{}, err
	}
	steal1, _ := perf.StealTicks()
	after, err := c.counters()
	if err != nil {
		return Scenario{}, err
	}
	server1, err := c.serverTotalsOf(ctx, s.verb)
	if err != nil {
		return Scenario{}, err
	}
	gcKnown := c.inProcess
	var windows []perf.GCWindow
	if c.collections != nil {
		windows = c.collections()
		withCollections(results, windows)
		gcKnown = true
	}
	res, err := summarize(s, f, results, elapsed, gcKnown)
	if err != nil {
		return Scenario{}, err
	}
	var wall, cpu float64
	res.Collections, wall, cpu, res.LiveMedianMB = perf.MarkMedians(windows, start, start.Add(elapsed))
	res.MarkMedianMs, res.MarkCPUMedianMs = math.Round(wall*10)/10, math.Round(cpu*10)/10
	n := float64(res.Requests)
	res.NodeUpdatesPerSecond = math.Round(float64(updates)/elapsed.Seconds()*10) / 10
	res.AllocsPerRequest = float64(after.mallocs-before.mallocs) / n
	res.BytesPerRequest = float64(after.allocBytes-before.allocBytes) / n
	res.GCs = uint32(after.gcs - before.gcs)
	res.CPUMsPerRequest = (after.cpu - before.cpu).Seconds() * 1000 / n
	res.StealPercent = -1
	if stealOK {
		res.StealPercent = perf.StealPercent(steal1-steal0, elapsed)
	}
	per := func(a, b uint64) float64 { return math.Round(float64(b-a)/n*10) / 10 }
	res.EvaluationsPerRequest = per(before.stats.Evaluations, after.stats.Evaluations)
	res.MemoHitsPerRequest = per(before.stats.MemoHits, after.stats.MemoHits)
	res.MemoMissesPerRequest = per(before.stats.MemoMisses, after.stats.MemoMisses)
	res.EvalErrorsPerRequest = per(before.stats.EvalErrors, after.stats.EvalErrors)
	if server := server1.sub(server0); server.count > 0 {
		res.ServerMeanMs = math.Round(server.sum/server.count*1e6) / 1e3
		res.ServerOver10ms, res.ServerOver25ms = -1, -1
		if server.long {
			res.ServerOver10ms, res.ServerOver25ms = int(server.over10ms), int(server.over25ms)
		}
	}
	return res, nil
}

// counters are what a scenario reads of the server before and after its
// measured phase: the engine's counts and the Go runtime's.
type counters struct {
	stats      opa.Stats // Evaluations, MemoHits, MemoMisses, EvalErrors
	mallocs    uint64
	allocBytes uint64
	gcs        uint64
	// cpu is the CPU time (user and system) of the process the server
	// runs in: on a shared VM whose speed changes from minute to minute,
	// the work per request is steadier than its latency.
	cpu time.Duration
}

// processCounters reads the in-process engine's and this process's
// counters, after a collection (the phase starts with a clean heap).
func processCounters(e *opa.Engine) func() (counters, error) {
	return func() (counters, error) {
		c, err := ownCounters()
		c.stats = e.Stats()
		return c, err
	}
}

// serviceCounters reads a service process's counters from its /metrics,
// after a collection forced through /debug/pprof/heap?gc=1.
func serviceCounters(svc *perf.Service) func() (counters, error) {
	return func() (counters, error) {
		if code, err := perf.GetStatus(svc.Base + "/debug/pprof/heap?gc=1"); err != nil || code != http.StatusOK {
			return counters{}, fmt.Errorf("force a GC in the service: HTTP %d, %v", code, err)
		}
		m, err := perf.Scrape(svc.Base + "/metrics")
		if err != nil {
			return counters{}, err
		}
		u := func(name string) uint64 { return uint64(m[name]) }
		const ns = "opa_scheduler_extender_"
		return counters{
			stats: opa.Stats{Evaluations: u(ns + "evaluations_total"), MemoHits: u(ns + "memo_hits_total"),
				MemoMisses: u(ns + "memo_misses_total"), EvalErrors: u(ns + "evaluation_errors_total")},
			mallocs: u("go_memstats_mallocs_total"), allocBytes: u("go_memstats_alloc_bytes_total"), gcs: u("go_gc_duration_seconds_count"),
			cpu: time.Duration(m["process_cpu_seconds_total"] * float64(time.Second)),
		}, nil
	}
}

// probePod is the pod the probe sends (and the floor answers for).
func probePod(f *flags) perf.Pod { return perf.NewStream(f.seed, 99, 0).Replica(0, 0) }

// probe checks the envelope and the answers once with the upstream types.
func (c *client) probe(ctx context.Context, s scenario, f *flags, b *perf.Args) error {
	pod := probePod(f)
	body := b.Build(pod)
	if err := b.Check(body, pod); err != nil {
		return err
	}
	_, err := c.probeAnswers(ctx, s, pod, body)
	return err
}

// probeAnswers sends pod's requests of s once, as a measured call would
// (a cycle's prioritize on the nodes its filter passed, if two or more),
// checks each answer with the upstream types and returns them by path.
func (c *client) probeAnswers(ctx context.Context, s scenario, pod perf.Pod, body []byte) (map[string][]byte, error) {
	answers := map[string][]byte{}
	for _, v := range verbsOf(s.verb) {
		want := s.nodes
		if v == "prioritize" && s.verb == "cycle" {
			p, err := passedNodes(answers["/filter"])
			if err != nil || !p.scored() {
				return answers, err
			}
			body, want = p.prioritizeBody(new(bytes.Buffer), pod.JSON), p.count
		}
		out, _, err := c.post(ctx, v, body)
		if err != nil {
			return nil, err
		}
		if err := check(out, scenario{verb: v, full: s.full, nodes: s.nodes}, want); err != nil {
			return nil, err
		}
		answers["/"+v] = out
	}
	return answers, nil
}

// worker is one of a scenario's connections, with the stream of pods it
// sends and the buffers it reuses. A worker lives through the scenario's
// warm-up and measured phase alike: kube-scheduler keeps its connection to
// an extender alive between cycles, so a measured phase starts on a
// connection, and with buffers, that have carried calls before. A phase
// that dialed its own put its first calls among a 60-s run's slowest at
// 5000 candidates, answers of hundreds of KiB (11.9 to 23.0 ms, no collection
// overlapping them), which a kept-alive connection never sees.
type worker struct {
	stream                 *perf.Stream
	conn                   *wire
	body, sink, prioritize bytes.Buffer
	pod                    []byte
}

// phase sends requests from each worker for d, each worker its next
// request when the previous answer has arrived; keep records them.
func (c *client) phase(ctx context.Context, s scenario, b *perf.Args, workers []*worker, d time.Duration, keep bool) []workerResult {
	results := make([]workerResult, len(workers))
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for w, wk := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[w]
			if keep {
				r.samples = make([]sample, 0, 4096)
			}
			gcSample := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
			for n := 0; time.Now().Before(deadline) && ctx.Err() == nil; n++ {
				p := wk.stream.NextInto(&wk.pod)
				body := b.BuildInto(&wk.body, p)
				gc0 := gcCycles(gcSample)
				ooo0, tcpKnown := outOfOrder(wk.conn.conn)
				start := time.Now()
				out, err := c.send(wk.conn, s, body, p.JSON, &wk.sink, &wk.prioritize)
				end := time.Now()
				ooo1, _ := outOfOrder(wk.conn.conn)
				// In process the collection is the server's as much as
				// this client's; with -service it is the client's own.
				ownGC := gcCycles(gcSample) != gc0
				gcEnded := c.inProcess && ownGC
				if err != nil {
					r.err = err
					return
				}
				if n%500 == 0 { // spot-check answers, outside the timed part
					if err := check(wk.sink.Bytes(), out.last, out.want()); err != nil {
						r.err = err
						return
					}
				}
				if keep {
					r.samples = append(r.samples, sample{d: out.d, call: out.longest, oneOff: p.Kind == "one-off", gc: gcEnded, start: start.UnixNano(), end: end.UnixNano(),
						reordered: ooo1 != ooo0, tcpKnown: tcpKnown, clientGC: !c.inProcess && ownGC})
					r.bodyBytes += int64(out.request)
					r.respBytes += int64(out.answer)
					r.scoredNodes += int64(out.scored)
					if out.scored > 0 {
						r.scoredCycles++
					}
				}
			}
		}()
	}
	wg.Wait()
	return results
}

// summarize is the scenario's latencies and sizes from its workers'
// samples.
func summarize(s scenario, f *flags, results []workerResult, elapsed time.Duration, gcKnown bool) (Scenario, error) {
	var all, oneOff, replicas, quiet []time.Duration
	var longestCall time.Duration
	var reqBytes, resp, scoredCycles, scoredNodes int64
	withGC := 0
	first := int64(math.MaxInt64)
	for _, r := range results {
		if r.err != nil {
			return Scenario{}, r.err
		}
		for _, x := range r.samples {
			all = append(all, x.d)
			first = min(first, x.start)
			longestCall = max(longestCall, x.call)
			if x.oneOff {
				oneOff = append(oneOff, x.d)
			} else {
				replicas = append(replicas, x.d)
				if !x.gc {
					quiet = append(quiet, x.d)
				}
			}
			if x.gc {
				withGC++
			}
		}
		reqBytes += r.bodyBytes
		resp += r.respBytes
		scoredCycles += r.scoredCycles
		scoredNodes += r.scoredNodes
	}
	n := len(all)
	if n == 0 {
		return Scenario{}, fmt.Errorf("no request finished within %v", f.duration)
	}
	slices.Sort(all)
	slices.Sort(oneOff)
	slices.Sort(replicas)
	slices.Sort(quiet)
	res := Scenario{
		Name: s.name(), Verb: s.verb, Mode: s.mode(), Nodes: s.nodes, Concurrency: f.concurrency,
		Requests: n, StartedAt: time.Unix(0, first).UTC().Format(time.RFC3339Nano), Seconds: elapsed.Seconds(), RPS: float64(n) / elapsed.Seconds(),
		P50Ms: ms(percentile(all, 0.50)), P90Ms: ms(percentile(all, 0.90)), P99Ms: ms(percentile(all, 0.99)),
		P999Ms: ms(percentile(all, 0.999)), MaxMs: ms(all[n-1]), MaxCallMs: ms(longestCall), MeanMs: ms(mean(all)),
		OneOffRequests: len(oneOff),
		ReplicaP99Ms:   ms(percentile(replicas, 0.99)),
		GCEndedPercent: -1,
		RequestBytes:   reqBytes / int64(n),
		ResponseBytes:  resp / int64(n),
	}
	if gcKnown {
		res.GCEndedPercent = percent(withGC, n)
		res.QuietReplicaP99Ms = ms(percentile(quiet, 0.99))
	}
	res.SlowGCPercent, res.SlowOneOffPercent = tailShares(results, percentile(all, 0.99), gcKnown)
	res.Slowest = slowest(results, f.slowest, gcKnown)
	res.ReorderedCycles = reorderedCount(results)
	if s.verb == "cycle" {
		res.PrioritizedPercent = percent(int(scoredCycles), n)
		if scoredCycles > 0 {
			res.PrioritizedNodes = math.Round(10*float64(scoredNodes)/float64(scoredCycles)) / 10
		}
	}
	if len(oneOff) > 0 {
		res.OneOffP50Ms = ms(percentile(oneOff, 0.50))
		res.OneOffMeanMs = ms(mean(oneOff))
	}
	return res, nil
}

// slowest are the n slowest samples of results, the slowest first, each
// timed from the earliest sample's start.
func slowest(results []workerResult, n int, gcKnown bool) []SlowCall {
	var all []sample
	for _, r := range results {
		all = append(all, r.samples...)
	}
	if n <= 0 || len(all) == 0 {
		return nil
	}
	first := slices.MinFunc(all, func(a, b sample) int { return cmp.Compare(a.start, b.start) }).start
	slices.SortStableFunc(all, func(a, b sample) int { return cmp.Compare(b.d, a.d) })
	out := make([]SlowCall, 0, min(n, len(all)))
	for _, x := range all[:min(n, len(all))] {
		gc := "unknown"
		if gcKnown {
			gc = map[bool]string{true: "yes", false: "no"}[x.gc]
		}
		out = append(out, SlowCall{Ms: ms(x.d), CallMs: ms(x.call), AtSeconds: math.Round(float64(x.start-first)/1e6) / 1e3, OneOff: x.oneOff, GC: gc,
			Reordered: x.tcpKnown && x.reordered, ClientGC: x.clientGC})
	}
	return out
}

// reorderedCount counts the requests during which the connection
// received segments out of order; nil when the kernel does not say.
func reorderedCount(results []workerResult) *int {
	n := 0
	for _, r := range results {
		for _, x := range r.samples {
			if !x.tcpKnown {
				return nil
			}
			if x.reordered {
				n++
			}
		}
	}
	return &n
}

// withCollections marks the samples that a collection overlapped.
func withCollections(results []workerResult, windows []perf.GCWindow) {
	for i := range results {
		for j := range results[i].samples {
			x := &results[i].samples[j]
			x.gc = perf.GCOverlaps(windows, time.Unix(0, x.start), time.Unix(0, x.end))
		}
	}
}

// tailShares are the shares of the requests at or past p99 that had a
// collection (-1 when unknown) and that were one-off pods: what the p99
// is made of.
func tailShares(results []workerResult, p99 time.Duration, gcKnown bool) (gc, oneOff float64) {
	var slow, withGC, oneOffs int
	for _, r := range results {
		for _, x := range r.samples {
			if x.d < p99 {
				continue
			}
			slow++
			if x.gc {
				withGC++
			}
			if x.oneOff {
				oneOffs++
			}
		}
	}
	gc = -1
	if gcKnown {
		gc = percent(withGC, slow)
	}
	return gc, percent(oneOffs, slow)
}

// percent is part of whole in percent, to one decimal (0 of none).
func percent(part, whole int) float64 {
	if whole == 0 {
		return 0
	}
	return math.Round(1000*float64(part)/float64(whole)) / 10
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

// startTrace starts a runtime trace of s's measured requests when a
// prefix is given; the server's verb handlers mark each call as a region.
// The returned function stops it and closes the file.
func startTrace(prefix string, s scenario) (stop func() error, err error) {
	if prefix == "" {
		return func() error { return nil }, nil
	}
	tf, err := os.Create(fmt.Sprintf("%s%s-%s-%d.trace", prefix, s.verb, s.mode(), s.nodes))
	if err != nil {
		return nil, err
	}
	if err := trace.Start(tf); err != nil {
		tf.Close()
		return nil, fmt.Errorf("start trace: %w", err)
	}
	return func() error {
		trace.Stop()
		return tf.Close()
	}, nil
}
