package opa

import (
	"encoding/json"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/policy"
)

// Violation is one element of a template's violation set, or an evaluation
// or match error turned into a violation (fail closed).
type Violation struct {
	Constraint policy.ConstraintKey `json:"constraint"`
	Action     policy.Action        `json:"action"`
	Message    string               `json:"msg"`
	Details    json.RawMessage      `json:"details,omitempty"`
	// Error is true when the violation stands for an evaluation error or a
	// match error rather than a rule of the template.
	Error bool `json:"error,omitempty"`
	// order is the constraint's place in the policy set: violations of a
	// node are listed in that order.
	order int
}

// Candidate is a node the scheduler asks about. Without Object or JSON the
// node is looked up in the inventory (nodeCacheCapable mode); with either
// the given node is what the policy sees, in place of the inventory's Node
// of that name.
type Candidate struct {
	Name   string
	Object map[string]any
	// JSON is the Node as the scheduler sent it, read as it is (no
	// field's type is checked: templates see what was sent, as they see
	// a pod's fields), and only as far as the policy set reads Nodes: the
	// rest of it is scanned over, never built. Object, when set, wins.
	JSON []byte
}

// PlacementRequest asks which candidate nodes a pod may go to.
type PlacementRequest struct {
	// Pod is the pod being scheduled, as unstructured content
	// (apiVersion/kind may be missing: they are set to v1/Pod).
	Pod map[string]any
	// Decoded is the pod already converted (PodDecoder, DecodePod, NewPod): when set,
	// Pod is not read.
	Decoded *Pod
	// Candidates are the nodes to judge, in the scheduler's order. A name
	// may repeat when it stands for one Node each time (the inventory's,
	// or sent Nodes equal in what the policy set reads); Evaluate refuses
	// a request that gives one name two different Nodes.
	Candidates []Candidate
	// Explain records, per node, every constraint that matched the pod with
	// its verdict and the time spent, for /debug/explain.
	Explain bool
	// Reuse is how the answer may be shared with the next request for the
	// same pod (reuse.go): the extender's filter keeps its answer, and
	// prioritize, which can only change scores, takes it. Zero: neither.
	Reuse Reuse
}

// Reuse says whether a request keeps its answer for the next one, or may
// take a kept answer.
type Reuse uint8

const (
	// ReuseNone evaluates and keeps nothing.
	ReuseNone Reuse = iota
	// ReuseKeep evaluates and keeps the answer (filter).
	ReuseKeep
	// ReuseTake answers from a kept answer when one fits, else evaluates
	// (prioritize).
	ReuseTake
)

// pod is the request's pod, converted.
func (req *PlacementRequest) pod() (*Pod, error) {
	if req.Decoded != nil {
		return req.Decoded, nil
	}
	return NewPod(req.Pod)
}

// NodeVerdict is the engine's answer for one candidate node; its
// violations are Placement.Violations(i), its trace (explain requests
// only) Placement.Trace(i). It is kept small: an answer holds one per
// candidate, 5000 of them on a large cluster's every call.
type NodeVerdict struct {
	Name string `json:"name"`
	// Unknown is true when the node was neither supplied nor in the
	// inventory: no policy was evaluated for it.
	Unknown bool `json:"unknown,omitempty"`
}

// ConstraintTrace is one constraint's verdict on one node, for explain.
type ConstraintTrace struct {
	Constraint policy.ConstraintKey `json:"constraint"`
	Action     policy.Action        `json:"action"`
	// Engine is the engine its template runs on: Rego or
	// K8sNativeValidation (CEL).
	Engine     string   `json:"engine"`
	Violations []string `json:"violations,omitempty"`
	// Validations are, on CEL, the validations (1 for the template's
	// first) that Violations failed or errored on, one each; 0 where the
	// match conditions or the variables errored.
	Validations []int `json:"validations,omitempty"`
	// Memoised is true when the verdict came from the memo.
	Memoised bool `json:"memoised"`
	// PerPod is true when the template cannot read the node, so the verdict
	// was computed once for the pod.
	PerPod bool `json:"perPod"`
	// Evaluated says how often the constraint's code runs: "per pod class",
	// "per (pod class, node class)", ... "per (pod, node)".
	Evaluated string `json:"evaluated"`
	// Why names what makes it costlier than once per (pod class, node
	// class): the path, the construct and its line.
	Why []string `json:"why,omitempty"`
	// Keyed names this pod's printed values that stayed in the memo key
	// (no placeholder could stand for them) and why: not a string, %q
	// would escape it, an annotation key holds it. Each is a class of
	// its own.
	Keyed []string `json:"keyed,omitempty"`
	// NotEvaluated says why the constraint was not evaluated for this pod
	// at all (a test its violation rules begin with is false).
	NotEvaluated string        `json:"notEvaluated,omitempty"`
	Duration     time.Duration `json:"durationNanos"`
}

// ReviewRequest is a general admission-style review, as gator verify and
// Gatekeeper's audit see objects. Placement builds its own reviews.
type ReviewRequest struct {
	// Object under review (nil for a DELETE with only OldObject).
	Object map[string]any
	// OldObject, for UPDATE and DELETE requests.
	OldObject map[string]any
	// Operation: CREATE, UPDATE, DELETE, CONNECT, or "" (gator's plain
	// objects carry none).
	Operation string
	// Kind and Resource of the request; Kind defaults to the object's.
	Kind     schema.GroupVersionKind
	Resource schema.GroupVersionResource
	// Name and Namespace of the request; default to the object's.
	Name, Namespace string
	// UserInfo is the requester, as authentication/v1 UserInfo JSON.
	UserInfo map[string]any
	// NamespaceObject is the object's Namespace; Gatekeeper passes {} when
	// there is none (nil is null in the review).
	NamespaceObject map[string]any
	// Extra holds further AdmissionRequest fields (uid, dryRun, options, ...)
	// copied into the review as they are.
	Extra map[string]any
}

// Status describes the loaded policy set, for /debug/policies and metrics.
type Status struct {
	Generation  uint64             `json:"generation"`
	Templates   []TemplateStatus   `json:"templates"`
	Constraints []ConstraintStatus `json:"constraints"`
	// Inventory counts objects per "groupVersion/Kind".
	Inventory map[string]int `json:"inventory"`
}

// TemplateStatus is one ConstraintTemplate as the engine holds it.
type TemplateStatus struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Engine is the engine its code runs on: Rego, or K8sNativeValidation
	// (CEL), chosen as Gatekeeper chooses (Options.DisableK8sNativeValidation).
	Engine string `json:"engine,omitempty"`
	// Active is true when a compiled version is in force (possibly an older
	// one, if Error is set).
	Active bool `json:"active"`
	// Error is the last rejected version's error (compile error, invalid
	// template), empty when the newest version is in force.
	Error string `json:"error,omitempty"`
	// ObservedGeneration is metadata.generation of the version in force.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// PerPod is true when the template cannot read the candidate node.
	PerPod bool `json:"perPod"`
	// Memoised is false for templates using nondeterministic builtins.
	Memoised bool `json:"memoised"`
	// Reads lists the input and node paths the memo key is made of, and
	// the paths that are only printed into messages ("(message only)").
	Reads []string `json:"reads,omitempty"`
	// Evaluated and Why are as in ConstraintTrace.
	Evaluated string   `json:"evaluated,omitempty"`
	Why       []string `json:"why,omitempty"`
	// Guards are the tests each violation rule begins with, one entry per
	// rule ("a && b"): a pod failing one test of every rule is not
	// evaluated at all. Empty when some rule begins with none.
	Guards []string `json:"guards,omitempty"`
}

// ConstraintStatus is one Constraint as the engine holds it.
type ConstraintStatus struct {
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Active bool   `json:"active"`
	// Action at this enforcement point; empty when the constraint does not
	// apply here (scoped to other points).
	Action policy.Action `json:"action,omitempty"`
	// Error is why the newest version was refused (an older one may be in
	// force: Active).
	Error string `json:"error,omitempty"`
	// Inactive says why a constraint with no error of its own is not in
	// force (its template is not).
	Inactive string `json:"inactive,omitempty"`
	// ObservedGeneration is metadata.generation of the version in force.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// PerPod, Memoised and Reads are as for templates, with this
	// constraint's parameters known (a label key given as a parameter
	// narrows a read of all labels to one).
	PerPod    bool     `json:"perPod"`
	Memoised  bool     `json:"memoised"`
	Reads     []string `json:"reads,omitempty"`
	Evaluated string   `json:"evaluated,omitempty"`
	Why       []string `json:"why,omitempty"`
}

// Stats are monotonic counters and gauges for metrics; read with Stats().
type Stats struct {
	Evaluations uint64 // evaluations of templates' code (Rego or CEL) run
	// HelperEvaluations are the evaluations of a template's function
	// alone, for a memo key made of its answer (is_exempt on an image
	// new to the engine), not counted in Evaluations.
	HelperEvaluations uint64
	MemoHits          uint64
	MemoMisses        uint64
	MemoResults       int    // results held now
	MemoBytes         int64  // their estimated size
	MemoRotations     uint64 // times the memo dropped its older half
	AnswersReused     uint64 // answers given from a kept one (reuse.go): prioritize after filter
	KeysReused        uint64 // key values taken from the workload's previous pod (workloadkeys.go)
	EvalErrors        uint64 // evaluations that failed (turned into violations)
	CompileErrors     uint64 // templates rejected
	ConstraintErrors  uint64 // constraints rejected
	PolicyGeneration  uint64
	LastApply         time.Time // last successful policy or inventory change
}
