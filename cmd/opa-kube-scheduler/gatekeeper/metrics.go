package gatekeeper

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/enginemetrics"
)

// The plugin's own series, beside the engine's (enginemetrics, one set
// per profile, labelled profile=<schedulerName>), all on kube-scheduler's
// /metrics. kube-scheduler serves only its legacy registry there.
const subsystem = "plugin"

// Reasons a pod is rejected as a whole, and reasons pods are requeued.
const (
	reasonDenied     = "denied"    // a pod-only deny constraint
	reasonNotReady   = "not_ready" // policies not synced yet
	requeueNode      = "node"
	requeuePolicy    = "policy"
	requeueReady     = "ready"
	requeueNamespace = "namespace"
)

var (
	decisionsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: enginemetrics.Namespace, Subsystem: subsystem, Name: "decisions_total",
		Help:           "Constraint violations per (pod, node) pair judged (the nodes Filter or Score asked about, a block of 32 at a time), by profile, constraint kind, constraint name and enforcement action. Pods denied on every node at PreFilter are counted by pods_rejected_total.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"profile", "constraint_kind", "constraint", "action"})
	podsRejectedTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: enginemetrics.Namespace, Subsystem: subsystem, Name: "pods_rejected_total",
		Help:           "Pods rejected at PreFilter on every node, by profile and reason (denied: a constraint that cannot see the node; not_ready: policies not synced yet).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"profile", "reason"})
	requeuesTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: enginemetrics.Namespace, Subsystem: subsystem, Name: "requeues_total",
		Help:           "Pods sent back to the active queue, by profile and reason (node: a Node event's queueing hint; policy, ready, namespace: activated by the plugin).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"profile", "reason"})
	registerOnce sync.Once
)

// profileMetrics are the plugin's series of one profile.
type profileMetrics struct{ profile string }

func newProfileMetrics(profile string, engine enginemetrics.Engine) (*profileMetrics, error) {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(decisionsTotal, podsRejectedTotal, requeuesTotal)
	})
	if engine != nil {
		// The engine's series are client_golang collectors, registered
		// raw (the legacy registry serves them as they are); an error
		// rather than RawMustRegister's panic if a profile's name were
		// registered twice.
		if err := legacyregistry.Registerer().Register(enginemetrics.New(engine, prometheus.Labels{"profile": profile})); err != nil {
			return nil, err
		}
	}
	return &profileMetrics{profile: profile}, nil
}

func (m *profileMetrics) decisions(p *opa.Placement) {
	p.Decisions(func(c opa.ConstraintKey, a opa.Action, nodes int) {
		decisionsTotal.WithLabelValues(m.profile, c.Kind, c.Name, string(a)).Add(float64(nodes))
	})
}

func (m *profileMetrics) rejectedPod(reason string) {
	podsRejectedTotal.WithLabelValues(m.profile, reason).Inc()
}

func (m *profileMetrics) requeued(reason string) {
	requeuesTotal.WithLabelValues(m.profile, reason).Inc()
}

func (m *profileMetrics) activated(reason string, n int) {
	requeuesTotal.WithLabelValues(m.profile, reason).Add(float64(n))
}
