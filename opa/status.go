package opa

import (
	"sort"
	"strings"
	"time"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/gatekeeper"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/policyset"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/policy"
)

// Status describes every template and constraint the engine was given:
// what is in force, what was refused and why.
func (e *Engine) Status() Status {
	snap := e.snap.Load()
	e.mu.Lock()
	defer e.mu.Unlock()
	s := Status{Generation: snap.Generation, Inventory: map[string]int{}}
	for k, v := range e.invCounts {
		s.Inventory[k] = v
	}
	for name, st := range e.templates {
		ts := TemplateStatus{Name: name, Active: st.current != nil}
		if st.err != nil {
			ts.Error = st.err.Error()
		}
		if st.current != nil {
			ts.Kind = st.current.Kind
			ts.Engine = st.current.Engine
			ts.ObservedGeneration = st.current.Generation
			if ct := snap.Templates[st.current.Kind]; ct != nil && ct.Template == st.current {
				ts.PerPod = ct.Analysis.PerPod()
				ts.Memoised = !ct.Analysis.Nondeterministic && !e.opts.DisableMemo
				ts.Reads = ct.Analysis.Describe()
				ts.Evaluated = string(ct.Analysis.Classify())
				ts.Why = ct.Analysis.Why
				ts.Guards = describeGuards(ct.Guards)
			}
		}
		s.Templates = append(s.Templates, ts)
	}
	bound := map[policy.ConstraintKey]*policyset.BoundConstraint{}
	for _, bc := range snap.Constraints {
		if bc.Constraint == e.constraints[bc.Constraint.Key].currentOrNil() {
			bound[bc.Constraint.Key] = bc
		}
	}
	for key, st := range e.constraints {
		cs := ConstraintStatus{Kind: key.Kind, Name: key.Name}
		if bc := bound[key]; bc != nil {
			cs.Active = true
			cs.PerPod = bc.Analysis.PerPod()
			cs.Memoised = !bc.Analysis.Nondeterministic && !e.opts.DisableMemo
			cs.Reads = bc.Analysis.Describe()
			cs.Evaluated = string(bc.Class)
			cs.Why = bc.Analysis.Why
		}
		if st.err != nil {
			cs.Error = st.err.Error()
		}
		if st.bindErr != nil {
			cs.Error = st.bindErr.Error()
		}
		if st.current != nil {
			cs.Action = st.current.Action
			cs.ObservedGeneration = st.current.Generation
			if !cs.Active && cs.Error == "" {
				cs.Inactive = "no ConstraintTemplate in force defines kind " + key.Kind
			}
		}
		s.Constraints = append(s.Constraints, cs)
	}
	sort.Slice(s.Templates, func(i, j int) bool { return s.Templates[i].Name < s.Templates[j].Name })
	sort.Slice(s.Constraints, func(i, j int) bool {
		a, b := s.Constraints[i], s.Constraints[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.Name < b.Name
	})
	return s
}

func (st *constraintState) currentOrNil() *gatekeeper.Constraint {
	if st == nil {
		return nil
	}
	return st.current
}

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	ms := e.memo.Stats()
	s := Stats{
		MemoResults:       ms.Results,
		MemoBytes:         ms.Bytes,
		MemoRotations:     ms.Rotations,
		AnswersReused:     e.recent.reused.Load(),
		KeysReused:        e.workloadKeys.reused.Load(),
		Evaluations:       e.stats.evaluations.Load(),
		HelperEvaluations: e.stats.helperEvaluations.Load(),
		MemoHits:          e.stats.memoHits.Load(),
		MemoMisses:        e.stats.memoMisses.Load(),
		EvalErrors:        e.stats.evalErrors.Load(),
		CompileErrors:     e.stats.compileErrors.Load(),
		ConstraintErrors:  e.stats.constraintErrors.Load(),
		PolicyGeneration:  e.snap.Load().Generation,
	}
	if ns := e.stats.lastApply.Load(); ns != 0 {
		s.LastApply = time.Unix(0, ns)
	}
	return s
}

// Health of a template or constraint, as the constraint_templates and
// constraints gauges label it (Gatekeeper's gatekeeper_constraint_templates
// and gatekeeper_constraints use the same words).
const (
	HealthActive   = "active"   // in force, newest version
	HealthError    = "error"    // newest version refused (an older one may be in force)
	HealthInactive = "inactive" // not in force, no error of its own (its template is not)
)

// Health is HealthActive, HealthError or HealthInactive.
func (t TemplateStatus) Health() string { return health(t.Error, t.Active) }

// Health is HealthActive, HealthError or HealthInactive.
func (c ConstraintStatus) Health() string { return health(c.Error, c.Active) }

func health(err string, active bool) string {
	switch {
	case err != "":
		return HealthError
	case active:
		return HealthActive
	}
	return HealthInactive
}

// describeGuards renders each violation rule's guards joined with " && ".
func describeGuards(gs [][]analysis.Guard) []string {
	var out []string
	for _, rule := range gs {
		parts := make([]string, len(rule))
		for i, g := range rule {
			parts[i] = g.String()
		}
		out = append(out, strings.Join(parts, " && "))
	}
	return out
}
