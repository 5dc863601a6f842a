// Package enginemetrics exposes an engine's counters and policy health as
// Prometheus metrics, for every front end that runs the engine: the
// extender's /metrics (package server) and kube-scheduler's /metrics in
// the plugin build.
//
// It owns the metric names and help texts of the engine's series
// (evaluations, memo, errors, policy generation, inventory, template and
// constraint health) and reads them at scrape time. It does not own HTTP,
// registries or the front ends' own series (request durations, decisions).
package enginemetrics

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// Namespace prefixes every metric of the project.
const Namespace = "opa_scheduler_extender"

// Engine is what the collector reads; *opa.Engine satisfies it.
type Engine interface {
	Stats() opa.Stats
	Status() opa.Status
}

var _ Engine = (*opa.Engine)(nil)

// Collector reads the engine's Stats and Status at scrape time: one Stats
// call and one Status call per scrape, consistent values.
type Collector struct {
	engine Engine

	evaluations, memoHits, memoMisses, evalErrors        *prometheus.Desc
	helperEvaluations                                    *prometheus.Desc
	memoResults, memoBytes, memoRotations, answersReused *prometheus.Desc
	keysReused                                           *prometheus.Desc
	compileErrors, constraintErrors                      *prometheus.Desc
	generation, lastApply, inventory                     *prometheus.Desc
	templates, constraints                               *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// New makes a collector of e's metrics; constLabels tell engines apart
// when one process runs several (the plugin build runs one per distinct
// plugin configuration, labelled with its profiles).
func New(e Engine, constLabels prometheus.Labels) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, constLabels)
	}
	return &Collector{
		engine:            e,
		evaluations:       d("evaluations_total", "Evaluations of templates' code (Rego or CEL) run by the engine."),
		helperEvaluations: d("helper_evaluations_total", "Evaluations of a template's function alone (is_exempt on an image new to the engine), whose answer keys the memo in place of what the function reads."),
		memoHits:          d("memo_hits_total", "Constraint verdicts answered from the engine's memo."),
		memoMisses:        d("memo_misses_total", "Constraint verdicts the engine's memo did not hold."),
		memoResults:       d("memo_results", "Verdicts the engine's memo holds now (bounded by results and bytes)."),
		memoBytes:         d("memo_bytes", "Estimated size of the verdicts the engine's memo holds."),
		memoRotations:     d("memo_rotations_total", "Times the memo dropped its older half to stay within its bounds."),
		answersReused:     d("answers_reused_total", "Answers given from the engine's answer to the same pod moments before (prioritize after filter), restricted to the request's nodes."),
		keysReused:        d("key_values_reused_total", "Memo key values a pod took from the previous pod of its workload (same namespace and generateName) instead of looking them up: those no difference between the two pods can move."),
		evalErrors:        d("evaluation_errors_total", "Evaluations that failed (and were turned into violations: fail closed)."),
		compileErrors:     d("template_compile_errors_total", "ConstraintTemplates the engine rejected."),
		constraintErrors:  d("constraint_errors_total", "Constraints the engine rejected."),
		generation:        d("policy_generation", "Generation of the policy set in force."),
		lastApply:         d("last_policy_apply_timestamp_seconds", "Unix time of the last successful policy or inventory change (0 before the first)."),
		inventory:         d("inventory_objects", "Objects in the engine's inventory (data.inventory), by group_version and kind.", "group_version", "kind"),
		templates:         d("constraint_templates", "ConstraintTemplates by status: active (newest version in force), error (newest version refused), inactive.", "status"),
		constraints:       d("constraints", "Constraints by enforcement action here (none: scoped to other enforcement points) and status: active, error (refused), inactive (no template in force).", "enforcement_action", "status"),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.evaluations, c.helperEvaluations, c.memoHits, c.memoMisses, c.evalErrors, c.compileErrors,
		c.memoResults, c.memoBytes, c.memoRotations, c.answersReused, c.keysReused,
		c.constraintErrors, c.generation, c.lastApply, c.inventory, c.templates, c.constraints,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.engine.Stats()
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	counter(c.evaluations, st.Evaluations)
	counter(c.helperEvaluations, st.HelperEvaluations)
	counter(c.memoHits, st.MemoHits)
	counter(c.memoMisses, st.MemoMisses)
	counter(c.memoRotations, st.MemoRotations)
	counter(c.answersReused, st.AnswersReused)
	counter(c.keysReused, st.KeysReused)
	ch <- prometheus.MustNewConstMetric(c.memoResults, prometheus.GaugeValue, float64(st.MemoResults))
	ch <- prometheus.MustNewConstMetric(c.memoBytes, prometheus.GaugeValue, float64(st.MemoBytes))
	counter(c.evalErrors, st.EvalErrors)
	counter(c.compileErrors, st.CompileErrors)
	counter(c.constraintErrors, st.ConstraintErrors)
	ch <- prometheus.MustNewConstMetric(c.generation, prometheus.GaugeValue, float64(st.PolicyGeneration))
	last := 0.0
	if !st.LastApply.IsZero() {
		last = float64(st.LastApply.UnixNano()) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(c.lastApply, prometheus.GaugeValue, last)

	status := c.engine.Status()
	for key, n := range status.Inventory {
		gv, kind := splitInventoryKey(key)
		ch <- prometheus.MustNewConstMetric(c.inventory, prometheus.GaugeValue, float64(n), gv, kind)
	}
	c.collectHealth(ch, status)
}

// collectHealth writes the template and constraint gauges, every series
// always present (zero included) so that alerts on them need no absent().
func (c *Collector) collectHealth(ch chan<- prometheus.Metric, status opa.Status) {
	statuses := []string{opa.HealthActive, opa.HealthError, opa.HealthInactive}
	templates := map[string]int{}
	for _, t := range status.Templates {
		templates[t.Health()]++
	}
	for _, s := range statuses {
		ch <- prometheus.MustNewConstMetric(c.templates, prometheus.GaugeValue, float64(templates[s]), s)
	}
	type key struct{ action, status string }
	constraints := map[key]int{}
	for _, k := range status.Constraints {
		action := string(k.Action)
		if action == "" {
			action = "none"
		}
		constraints[key{action, k.Health()}]++
	}
	for _, a := range []string{string(opa.Deny), string(opa.Warn), string(opa.DryRun), "none"} {
		for _, s := range statuses {
			ch <- prometheus.MustNewConstMetric(c.constraints, prometheus.GaugeValue, float64(constraints[key{a, s}]), a, s)
		}
	}
}

// splitInventoryKey splits "groupVersion/Kind" ("v1/Node", "apps/v1/Deployment").
func splitInventoryKey(key string) (groupVersion, kind string) {
	i := strings.LastIndexByte(key, '/')
	if i < 0 {
		return "", key
	}
	return key[:i], key[i+1:]
}
