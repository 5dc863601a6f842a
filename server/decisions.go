package server

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// DecisionLevel selects the scheduling decisions recorded
// (Options.LogDecisions, --log-decisions).
type DecisionLevel int

const (
	// DecisionsOff records nothing (the default).
	DecisionsOff DecisionLevel = iota
	// DecisionsDeny records calls in which a constraint denied a node,
	// naming the deny constraints.
	DecisionsDeny
	// DecisionsWarn also records calls in which a warn constraint scored
	// a node down, naming deny and warn constraints.
	DecisionsWarn
	// DecisionsAll records every filter, prioritize and bind call, naming
	// every violated constraint (dryrun included).
	DecisionsAll
)

// ParseDecisionLevel reads "off" (or ""), "deny", "warn" or "all".
func ParseDecisionLevel(s string) (DecisionLevel, error) {
	switch s {
	case "", "off":
		return DecisionsOff, nil
	case "deny":
		return DecisionsDeny, nil
	case "warn":
		return DecisionsWarn, nil
	case "all":
		return DecisionsAll, nil
	}
	return DecisionsOff, fmt.Errorf("decision level %q: want off, deny, warn or all", s)
}

// includes reports whether a violation of action belongs in records of
// this level.
func (l DecisionLevel) includes(a opa.Action) bool {
	switch a {
	case opa.Deny:
		return l >= DecisionsDeny
	case opa.Warn:
		return l >= DecisionsWarn
	}
	return l >= DecisionsAll
}

// Decision is the record of one filter, prioritize or bind call.
type Decision struct {
	Verb             string `json:"verb"`
	Pod              string `json:"pod"`
	UID              string `json:"uid,omitempty"`
	PolicyGeneration uint64 `json:"policyGeneration"`
	Nodes            int    `json:"nodes"`
	// Rejected nodes: denied or unknown (filter, bind).
	Rejected    int                  `json:"rejected"`
	Duration    time.Duration        `json:"durationNanos"`
	Constraints []ConstraintDecision `json:"constraints,omitempty"`
}

// ConstraintDecision is one constraint's part in a decision: the known
// nodes it was violated on (denied, scored down, or only counted for
// dryrun), with one of them and its message as a sample.
type ConstraintDecision struct {
	Constraint    opa.ConstraintKey `json:"constraint"`
	Action        opa.Action        `json:"action"`
	Nodes         int               `json:"nodes"`
	SampleNode    string            `json:"sampleNode"`
	SampleMessage string            `json:"sampleMessage"`
}

// DecisionSink receives decision records; it is called on the request path
// and must not block.
type DecisionSink func(context.Context, Decision)

// DecisionOutput is one destination of decision records (Options.Decisions):
// the records of Level, to Sink.
type DecisionOutput struct {
	Level DecisionLevel
	Sink  DecisionSink
}

// filter narrows a record made at a higher level to this one: only the
// constraints this level names; false when none is left (and the level
// does not record every call).
func (l DecisionLevel) filter(d Decision) (Decision, bool) {
	kept := make([]ConstraintDecision, 0, len(d.Constraints))
	for _, c := range d.Constraints {
		if l.includes(c.Action) {
			kept = append(kept, c)
		}
	}
	if len(kept) == 0 && l != DecisionsAll {
		return Decision{}, false
	}
	d.Constraints = kept
	return d, true
}

// LogDecisions is the default sink: one structured log record per
// decision, at info level, message "decision".
func LogDecisions(log *slog.Logger) DecisionSink {
	return func(ctx context.Context, d Decision) {
		log.InfoContext(ctx, "decision", "verb", d.Verb, "pod", d.Pod, "uid", d.UID,
			"policyGeneration", d.PolicyGeneration, "nodes", d.Nodes, "rejected", d.Rejected,
			"duration", d.Duration, "constraints", d.Constraints)
	}
}

// decision builds the record of a call, or reports false when the level
// does not record it.
func (l DecisionLevel) decision(c *verbCall) (Decision, bool) {
	p := c.placement
	if l == DecisionsOff || p == nil {
		return Decision{}, false
	}
	d := Decision{Verb: c.verb, Pod: c.pod, UID: c.uid, PolicyGeneration: p.Generation, Nodes: c.nodes,
		Rejected: c.rejected, Duration: time.Since(c.start)}
	index := map[constraintAction]int{}
	p.Decisions(func(k opa.ConstraintKey, a opa.Action, nodes int) {
		if l.includes(a) {
			index[constraintAction{k, a}] = len(d.Constraints)
			d.Constraints = append(d.Constraints, ConstraintDecision{Constraint: k, Action: a, Nodes: nodes})
		}
	})
	if len(d.Constraints) == 0 && l != DecisionsAll {
		return Decision{}, false
	}
	sampleDecisions(&d, p, c.names, index)
	return d, true
}

type constraintAction struct {
	k opa.ConstraintKey
	a opa.Action
}

// sampleDecisions fills each constraint's sample from the first known
// node it is violated on, rendering messages only until all have one.
func sampleDecisions(d *Decision, p *opa.Placement, names []string, index map[constraintAction]int) {
	missing := len(d.Constraints)
	for i := 0; i < len(p.Nodes) && i < len(names) && missing > 0; i++ {
		if p.Nodes[i].Unknown {
			continue
		}
		p.EachViolation(i, func(v *opa.Violation) {
			j, ok := index[constraintAction{v.Constraint, v.Action}]
			if !ok || d.Constraints[j].SampleNode != "" {
				return
			}
			d.Constraints[j].SampleNode, d.Constraints[j].SampleMessage = names[i], v.Message
			missing--
		})
	}
}
