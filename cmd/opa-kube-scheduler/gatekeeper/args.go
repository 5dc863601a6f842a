package gatekeeper

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/source"
)

// Args are the plugin's pluginConfig args, the extender's serve flags of
// the same names:
//
//	pluginConfig:
//	- name: OPAGatekeeper
//	  args:
//	    enforcementPoint: tenant-a-scheduler
//	    policyDir: /policies/tenant-a
type Args struct {
	// PolicyDir reads ConstraintTemplates, Constraints and inventory
	// objects from a folder, watched for changes (as --policy-dir).
	PolicyDir string `json:"policyDir,omitempty"`
	// ClusterPolicies reads ConstraintTemplates and Constraints from the
	// cluster. Default: true without PolicyDir, false with it (a tenant's
	// folder is its whole policy).
	ClusterPolicies *bool `json:"clusterPolicies,omitempty"`
	// EnforcementPoint is this profile's name in constraints'
	// scopedEnforcementActions (default opa-scheduler-extender, as the
	// extender, so that one set of constraints serves both).
	EnforcementPoint string `json:"enforcementPoint,omitempty"`
	// SyncKinds are further inventory kinds, group/version/Kind or
	// v1/Kind (Nodes and Namespaces always are).
	SyncKinds []string `json:"syncKinds,omitempty"`
	// IgnoreGatekeeperConfig stops reading Gatekeeper's Config
	// (spec.sync.syncOnly) for more inventory kinds.
	IgnoreGatekeeperConfig bool `json:"ignoreGatekeeperConfig,omitempty"`
	// MemoMaxBytes and MemoMaxResults bound the engine's memo (0: the
	// engine's defaults, 16 MiB).
	MemoMaxBytes   int64 `json:"memoMaxBytes,omitempty"`
	MemoMaxResults int   `json:"memoMaxResults,omitempty"`
	// AllowNetworkBuiltins lets templates call http.send and net.lookup_*.
	AllowNetworkBuiltins bool `json:"allowNetworkBuiltins,omitempty"`
	// EnableK8sNativeValidation runs a template's K8sNativeValidation
	// (CEL) code when it has some, as Gatekeeper's flag of that name
	// (default true); false runs templates on Rego and refuses CEL-only
	// ones.
	EnableK8sNativeValidation *bool `json:"enableK8sNativeValidation,omitempty"`
	// DefaultK8sNativeValidationFailurePolicy is the failure policy of CEL
	// code that names none: Fail (the default) or Ignore.
	DefaultK8sNativeValidationFailurePolicy string `json:"defaultK8sNativeValidationFailurePolicy,omitempty"`
	// PolicyPollInterval is how often the policy folder is scanned where no
	// file-system watch covers it (default 250ms); with one, it paces the
	// content check (source.DirOptions.Interval).
	PolicyPollInterval Duration `json:"policyPollInterval,omitempty"`
	// NodeMessages judges every node in Filter, so that each node a deny
	// constraint forbids is reported in the pod's FailedScheduling event
	// with the constraint's message. By default PreFilter hands the
	// scheduler the nodes policy allows (when it allows some, not all) and
	// the others are reported as "node(s) didn't satisfy plugin(s)
	// [OPAGatekeeper]": the scheduler then never visits them, which is
	// most of this plugin's cost on a cluster where policy denies many
	// nodes.
	NodeMessages bool `json:"nodeMessages,omitempty"`
}

// Duration is a time.Duration written as Go writes one ("250ms", "1m").
type Duration struct{ time.Duration }

// UnmarshalJSON reads "250ms" (or a number of nanoseconds).
func (d *Duration) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if v, err := time.ParseDuration(s); err == nil {
		d.Duration = v
		return nil
	}
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil {
		return fmt.Errorf("duration %s: want a Go duration such as \"250ms\"", b)
	}
	d.Duration = time.Duration(n)
	return nil
}

// MarshalJSON writes the duration as "250ms".
func (d Duration) MarshalJSON() ([]byte, error) { return []byte(`"` + d.String() + `"`), nil }

// decodeArgs reads the profile's args (nil: none given) with defaults,
// and validates them.
func decodeArgs(obj runtime.Object) (Args, error) {
	var a Args
	switch o := obj.(type) {
	case nil:
	case *runtime.Unknown:
		// Strictly: a misspelt arg must not be ignored.
		dec := json.NewDecoder(bytes.NewReader(o.Raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&a); err != nil {
			return Args{}, fmt.Errorf("decode %s args: %w", Name, err)
		}
	default:
		if err := frameworkruntime.DecodeInto(obj, &a); err != nil {
			return Args{}, fmt.Errorf("decode %s args: %w", Name, err)
		}
	}
	if a.EnforcementPoint == "" {
		a.EnforcementPoint = opa.DefaultEnforcementPoint
	}
	if a.ClusterPolicies == nil {
		cluster := a.PolicyDir == ""
		a.ClusterPolicies = &cluster
	}
	if err := a.validate(); err != nil {
		return Args{}, fmt.Errorf("%s args: %w", Name, err)
	}
	return a, nil
}

func (a Args) validate() error {
	var errs []error
	if a.PolicyDir != "" {
		if fi, err := os.Stat(a.PolicyDir); err != nil {
			errs = append(errs, fmt.Errorf("policyDir: %w", err))
		} else if !fi.IsDir() {
			errs = append(errs, fmt.Errorf("policyDir %s: not a folder", a.PolicyDir))
		}
	}
	if !*a.ClusterPolicies && a.PolicyDir == "" {
		errs = append(errs, errors.New("clusterPolicies is false and no policyDir is given: nothing to enforce"))
	}
	if _, err := source.ParseKinds(a.SyncKinds); err != nil {
		errs = append(errs, fmt.Errorf("syncKinds: %w", err))
	}
	if p := a.DefaultK8sNativeValidationFailurePolicy; p != "" && p != "Fail" && p != "Ignore" {
		errs = append(errs, fmt.Errorf("defaultK8sNativeValidationFailurePolicy %q: want Fail or Ignore", p))
	}
	if a.MemoMaxBytes < 0 || a.MemoMaxResults < 0 {
		errs = append(errs, errors.New("memoMaxBytes and memoMaxResults must not be negative"))
	}
	if a.PolicyPollInterval.Duration < 0 {
		errs = append(errs, errors.New("policyPollInterval must not be negative"))
	}
	if strings.TrimSpace(a.EnforcementPoint) != a.EnforcementPoint {
		errs = append(errs, fmt.Errorf("enforcementPoint %q has surrounding spaces", a.EnforcementPoint))
	}
	return errors.Join(errs...)
}
