package gatekeeper

import (
	"fmt"
	"testing"

	"k8s.io/component-base/metrics/legacyregistry"
)

var metricsRuns int

// TestEngineMetricsOnTheLegacyRegistry: a profile's engine series are
// served by kube-scheduler's registry, labelled with the profile; a second
// registration of the same profile is an error, not a panic.
func TestEngineMetricsOnTheLegacyRegistry(t *testing.T) {
	_, engine := tableEngine(t)
	metricsRuns++ // a profile name of its own for each run (go test -count)
	profile := fmt.Sprintf("metrics-test-%d", metricsRuns)
	if _, err := newProfileMetrics(profile, engine); err != nil {
		t.Fatal(err)
	}
	if _, err := newProfileMetrics(profile, engine); err == nil {
		t.Error("registering the same profile twice succeeded")
	}
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range families {
		if f.GetName() != "opa_scheduler_extender_constraints" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "profile" && l.GetValue() == profile {
					found = true
				}
			}
		}
	}
	if !found {
		t.Errorf("opa_scheduler_extender_constraints{profile=%q} is not on the legacy registry", profile)
	}
}
