package policy

// DefaultEnforcementPoint is the name this service answers to in a
// constraint's scopedEnforcementActions.
const DefaultEnforcementPoint = "opa-scheduler-extender"

// ActionAnnotation overrides, for this enforcement point only, the action a
// constraint's spec gives. Gatekeeper ignores it, so it works in clusters
// whose Gatekeeper rejects unknown enforcement points in
// scopedEnforcementActions.
const ActionAnnotation = "opa-scheduler-extender/enforcement-action"

// Action is what a violated constraint does at this enforcement point.
type Action string

const (
	// Deny filters the node out.
	Deny Action = "deny"
	// Warn lowers the node's score.
	Warn Action = "warn"
	// DryRun only counts and logs.
	DryRun Action = "dryrun"
)

// Well-known API groups of Gatekeeper objects.
const (
	TemplateGroup   = "templates.gatekeeper.sh"
	ConstraintGroup = "constraints.gatekeeper.sh"
	// TargetName is the only target this engine evaluates.
	TargetName = "admission.k8s.gatekeeper.sh"
)

// ConstraintKey names a constraint: its kind (the template's CRD kind) and name.
type ConstraintKey struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
}

func (k ConstraintKey) String() string { return k.Kind + "/" + k.Name }
