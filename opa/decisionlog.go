package opa

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/open-policy-agent/opa/v1/plugins/logs"
	"github.com/open-policy-agent/opa/v1/server"
	"sigs.k8s.io/yaml"
)

// refusedOPAConfig are the OPA configuration sections the engine cannot
// honour: they would load policies or data into the store it owns.
var refusedOPAConfig = []string{"bundle", "bundles", "discovery"}

// checkOPAConfig validates an OPA configuration for the embedded SDK and
// returns it as JSON ("{}" when empty).
func checkOPAConfig(config []byte) ([]byte, error) {
	if len(config) == 0 {
		return []byte("{}"), nil
	}
	var sections map[string]any
	if err := yaml.Unmarshal(config, &sections); err != nil {
		return nil, fmt.Errorf("OPA configuration: %w", err)
	}
	for _, k := range refusedOPAConfig {
		if _, ok := sections[k]; ok {
			return nil, fmt.Errorf("OPA configuration: %q is not supported: policies and inventory come from ConstraintTemplates, Constraints and the cluster (or --policy-dir), not from OPA bundles", k)
		}
	}
	out, err := yaml.YAMLToJSON(config)
	if err != nil {
		return nil, fmt.Errorf("OPA configuration: %w", err)
	}
	return out, nil
}

// DecisionLogging reports whether the OPA configuration enables the
// decision_logs plugin.
func (e *Engine) DecisionLogging() bool { return logs.Lookup(e.mgr) != nil }

// LogDecision hands one decision to the SDK's decision-log plugin, as an
// OPA server logs a query: path names the decision ("opa_scheduler_extender/filter"),
// input what was asked, result what was answered (both must marshal to
// JSON). The plugin buffers and uploads as configured. No-op without the
// plugin.
func (e *Engine) LogDecision(ctx context.Context, path string, input, result any) error {
	p := logs.Lookup(e.mgr)
	if p == nil {
		return nil
	}
	var id [16]byte
	_, _ = rand.Read(id[:])
	return p.Log(ctx, &server.Info{
		DecisionID: hex.EncodeToString(id[:]),
		Path:       path,
		Timestamp:  time.Now(),
		Input:      &input,
		Results:    &result,
	})
}
