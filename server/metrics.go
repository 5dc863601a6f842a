package server

import (
	"errors"
	"fmt"
	"sync"

	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/enginemetrics"
)

// MetricsNamespace prefixes every metric of the service.
const MetricsNamespace = enginemetrics.Namespace

// Values of the "result" label of request_duration_seconds.
const (
	resultOK         = "ok"
	resultError      = "error"       // engine failure, panic, or an answer with Error set
	resultBadRequest = "bad_request" // client fault (HTTP 400)
)

// Values of the "reason" label of nodes_rejected_total.
const (
	reasonDenied  = "denied"
	reasonUnknown = "unknown"
)

// requestBuckets span a memoised names-only filter (tens of microseconds)
// to the scheduler's 5 s extender timeout.
var requestBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5,
}

var verbs = []string{verbFilter, verbPrioritize, verbPreempt, verbBind}

type metrics struct {
	duration   *prometheus.HistogramVec
	decisions  *prometheus.CounterVec
	rejectedV  *prometheus.CounterVec
	evaluatedV *prometheus.CounterVec
	panics     prometheus.Counter
	// bodyBytes and bodyRefusals watch the request-body budget.
	bodyBytes    prometheus.Gauge
	bodyRefusals prometheus.Counter
	// evalsPer is the evaluations one answer took.
	evalsPer *prometheus.HistogramVec
	evalsBy  map[string]prometheus.Observer

	// Pre-resolved children for the hot path.
	durationBy  map[string]map[string]prometheus.Observer
	rejectedBy  map[string]map[string]prometheus.Counter
	evaluatedBy map[string]prometheus.Counter
}

func newMetrics(reg *prometheus.Registry, policy Policy, enforcementPoint string, build BuildInfo) (*metrics, error) {
	m := &metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: MetricsNamespace,
			Name:      "request_duration_seconds",
			Help:      "Time to answer one extender call, from routing to the last byte written, by verb and result (ok, error, bad_request).",
			Buckets:   requestBuckets,
		}, []string{"verb", "result"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace,
			Name:      "decisions_total",
			Help:      "Constraint violations per (pod, node) pair judged, by verb, constraint kind, constraint name and enforcement action (a constraint violated several times on one pair counts once).",
		}, []string{"verb", "constraint_kind", "constraint", "action"}),
		rejectedV: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace,
			Name:      "nodes_rejected_total",
			Help:      "Candidate nodes rejected, by verb and reason (denied by a policy, unknown to the extender's inventory).",
		}, []string{"verb", "reason"}),
		evaluatedV: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace,
			Name:      "nodes_evaluated_total",
			Help:      "Candidate nodes evaluated against the policy, by verb.",
		}, []string{"verb"}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: MetricsNamespace,
			Name:      "handler_panics_total",
			Help:      "Panics recovered in HTTP handlers.",
		}),
		evalsPer: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: MetricsNamespace,
			Name:      "evaluations_per_request",
			Help:      "Evaluations of templates' code (Rego or CEL) one call took, by verb (the rest came from the memo or were pod-wide).",
			Buckets:   []float64{0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000},
		}, []string{"verb"}),
		evalsBy: map[string]prometheus.Observer{},
		bodyBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: MetricsNamespace,
			Name:      "request_body_bytes_in_flight",
			Help:      "Request-body bytes reserved by requests being handled (see --max-inflight-body-bytes).",
		}),
		bodyRefusals: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: MetricsNamespace,
			Name:      "requests_refused_total",
			Help:      "Requests answered 429 because their body did not fit the in-flight budget in time.",
		}),
		durationBy:  map[string]map[string]prometheus.Observer{},
		rejectedBy:  map[string]map[string]prometheus.Counter{},
		evaluatedBy: map[string]prometheus.Counter{},
	}
	// Initialise every bounded series so that rates start at zero.
	for _, v := range verbs {
		m.evalsBy[v] = m.evalsPer.WithLabelValues(v)
		m.durationBy[v] = map[string]prometheus.Observer{}
		for _, r := range []string{resultOK, resultError, resultBadRequest} {
			m.durationBy[v][r] = m.duration.WithLabelValues(v, r)
		}
		m.rejectedBy[v] = map[string]prometheus.Counter{
			reasonDenied:  m.rejectedV.WithLabelValues(v, reasonDenied),
			reasonUnknown: m.rejectedV.WithLabelValues(v, reasonUnknown),
		}
		m.evaluatedBy[v] = m.evaluatedV.WithLabelValues(v)
	}

	for _, c := range []prometheus.Collector{
		m.duration, m.decisions, m.rejectedV, m.evaluatedV, m.panics, m.evalsPer, m.bodyBytes, m.bodyRefusals, constantGauge("info", "Constant 1, labelled with the enforcement point this service answers to.",
			prometheus.Labels{"enforcement_point": enforcementPoint}), buildInfoGauge(build),
		enginemetrics.New(policy, nil),
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("server: registering metrics: %w", err)
		}
	}
	// The Go and process collectors may already be in a registry the
	// caller shares; that is fine.
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, fmt.Errorf("server: registering metrics: %w", err)
			}
		}
	}
	return m, nil
}

func (m *metrics) observe(verb, result string, d time.Duration) {
	if byResult, ok := m.durationBy[verb]; ok {
		byResult[result].Observe(d.Seconds())
		return
	}
	m.duration.WithLabelValues(verb, result).Observe(d.Seconds())
}

// evaluations records the evaluations of one answer.
func (m *metrics) evaluations(verb string, p *opa.Placement) {
	if o, ok := m.evalsBy[verb]; ok {
		o.Observe(float64(p.Evaluations))
	}
}

func (m *metrics) evaluated(verb string, n int) {
	if n > 0 {
		m.evaluatedBy[verb].Add(float64(n))
	}
}

func (m *metrics) rejected(verb string, denied, unknown int) {
	if denied > 0 {
		m.rejectedBy[verb][reasonDenied].Add(float64(denied))
	}
	if unknown > 0 {
		m.rejectedBy[verb][reasonUnknown].Add(float64(unknown))
	}
}

// countDecisions counts, for every known node of an answer, each
// (constraint, action) violated there once. Labels are bounded:
// constraint names and kinds come from the cluster's policy set, never
// from pods or nodes.
func (m *metrics) countDecisions(verb string, p *opa.Placement) {
	m.evaluations(verb, p)
	d := m.newDecisionCount(verb)
	d.add(p)
	d.flush()
}

// decisionCount gathers the decisions of one request and adds them to the
// counter once per (constraint, action): label lookups per node cost as
// much as the policy at thousands of candidates.
type decisionCount struct {
	m      *metrics
	verb   string
	counts map[decisionKey]int
}

type decisionKey struct {
	c opa.ConstraintKey
	a opa.Action
}

// decisionCounts reuses the counts' maps: one per call made a map every
// filter and prioritize call.
var decisionCounts = sync.Pool{New: func() any { return &decisionCount{counts: map[decisionKey]int{}} }}

func (m *metrics) newDecisionCount(verb string) *decisionCount {
	d := decisionCounts.Get().(*decisionCount)
	d.m, d.verb = m, verb
	return d
}

// add counts an answer's (constraint, action) pairs, once per known node
// they are violated on.
func (d *decisionCount) add(p *opa.Placement) {
	p.Decisions(func(c opa.ConstraintKey, a opa.Action, nodes int) {
		d.counts[decisionKey{c, a}] += nodes
	})
}

func (d *decisionCount) flush() {
	for k, n := range d.counts {
		d.m.decisions.WithLabelValues(d.verb, k.c.Kind, k.c.Name, string(k.a)).Add(float64(n))
	}
	clear(d.counts)
	d.m = nil
	decisionCounts.Put(d) // d is not used after flush
}

// constantGauge is a gauge set to 1 whose labels carry the information.
func constantGauge(name, help string, labels prometheus.Labels) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: MetricsNamespace, Name: name, Help: help, ConstLabels: labels})
	g.Set(1)
	return g
}

// buildInfoGauge is opa_scheduler_extender_build_info; empty fields are
// reported as "unknown".
func buildInfoGauge(build BuildInfo) prometheus.Gauge {
	unknown := func(s string) string {
		if s == "" {
			return "unknown"
		}
		return s
	}
	return constantGauge("build_info", "Constant 1, labelled with the version, VCS revision and Go version of the binary.",
		prometheus.Labels{"version": unknown(build.Version), "revision": unknown(build.Revision), "goversion": unknown(build.GoVersion)})
}
