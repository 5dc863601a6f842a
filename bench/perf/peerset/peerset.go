// Package peerset loads the load generator's policies and inventory
// (package perf) into Gatekeeper's constraint framework (bench/peer).
package peerset

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/peer"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/perf"
)

// Load builds a framework client with the templates of ps that have at
// least one constraint in keep ("kind/name"; perf.DenyConstraints gives
// the ones the engine's filter enforces), those constraints, and the
// inventory objects. It returns the number of constraints loaded.
func Load(ps []perf.Policy, keep map[string]bool, inventory []*unstructured.Unstructured) (*peer.Peer, int, error) {
	p, err := peer.New()
	if err != nil {
		return nil, 0, err
	}
	n := 0
	for _, pol := range ps {
		var cons []*unstructured.Unstructured
		for _, c := range pol.Constraints {
			if keep[c.GetKind()+"/"+c.GetName()] {
				cons = append(cons, c)
			}
		}
		if len(cons) == 0 {
			continue
		}
		if err := p.AddTemplate(pol.Template.DeepCopy()); err != nil {
			return nil, 0, fmt.Errorf("framework refused template %s: %w", pol.Source, err)
		}
		for _, c := range cons {
			if err := p.AddConstraint(c.DeepCopy()); err != nil {
				return nil, 0, fmt.Errorf("framework refused constraint %s/%s: %w", c.GetKind(), c.GetName(), err)
			}
			n++
		}
	}
	for _, o := range inventory {
		if err := p.AddData(o); err != nil {
			return nil, 0, fmt.Errorf("framework refused %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return p, n, nil
}
