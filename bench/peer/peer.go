package peer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/go-logr/logr"
	frameworkapis "github.com/open-policy-agent/frameworks/constraint/pkg/apis"
	templatesv1 "github.com/open-policy-agent/frameworks/constraint/pkg/apis/templates/v1"
	constraintclient "github.com/open-policy-agent/frameworks/constraint/pkg/client"
	"github.com/open-policy-agent/frameworks/constraint/pkg/client/drivers/rego"
	"github.com/open-policy-agent/frameworks/constraint/pkg/client/reviews"
	"github.com/open-policy-agent/frameworks/constraint/pkg/core/templates"
	"github.com/open-policy-agent/frameworks/constraint/pkg/types"
	mutationtypes "github.com/open-policy-agent/gatekeeper/v3/pkg/mutation/types"
	"github.com/open-policy-agent/gatekeeper/v3/pkg/target"
	gkutil "github.com/open-policy-agent/gatekeeper/v3/pkg/util"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// EnforcementPoint is the enforcement point name of the scheduler extender,
// the default point the Peer reviews at.
const EnforcementPoint = "opa-scheduler-extender"

// Result is one violation reported by the constraint framework.
type Result struct {
	ConstraintKind string
	ConstraintName string
	Msg            string
	// Details is the violation's `details` ({} when the rule gave none); nil
	// for an autorejection (a spec.match error), which carries no details.
	Details any
	// EnforcementAction is the constraint's spec.enforcementAction ("deny"
	// when unset, "scoped" for scoped constraints).
	EnforcementAction string
	// ScopedEnforcementActions are the actions a scoped constraint has at the
	// reviewed enforcement point (unordered set; sorted here), nil otherwise.
	ScopedEnforcementActions []string
}

// Option configures a Peer.
type Option func(*config)

type config struct {
	enforcementPoint string
	tracing          bool
}

// WithEnforcementPoint sets the single enforcement point the client is
// created with and that every review runs at (default EnforcementPoint).
// Scoped constraints without an action for this point do not match at all.
func WithEnforcementPoint(ep string) Option {
	return func(c *config) { c.enforcementPoint = ep }
}

// WithTracing turns on the Rego driver's query tracing (slow; debugging only).
func WithTracing(enabled bool) Option {
	return func(c *config) { c.tracing = enabled }
}

// Peer wraps a constraint framework client with the Rego driver and
// Gatekeeper's K8sValidationTarget. Reviews are safe for concurrent use;
// mutations (Add*/Remove*) must not run concurrently with each other.
type Peer struct {
	client           *constraintclient.Client
	enforcementPoint string
}

var (
	schemeOnce sync.Once
	scheme     *runtime.Scheme
	schemeErr  error
)

func templateScheme() (*runtime.Scheme, error) {
	schemeOnce.Do(func() {
		s := runtime.NewScheme()
		// Registers templates.gatekeeper.sh v1, v1beta1, v1alpha1 (and the
		// externaldata types), as gator's runner does with its scheme.
		schemeErr = frameworkapis.AddToScheme(s)
		scheme = s
	})
	return scheme, schemeErr
}

// New builds a Peer: rego.New(rego.Tracing(false), rego.Externs("inventory")),
// the K8sValidationTarget and one enforcement point, as Gatekeeper's main.go
// does with --enable-referential-rules (the default) and without the CEL
// driver, external data or disabled builtins.
func New(opts ...Option) (*Peer, error) {
	cfg := config{enforcementPoint: EnforcementPoint}
	for _, o := range opts {
		o(&cfg)
	}
	if _, err := templateScheme(); err != nil {
		return nil, err
	}
	driver, err := rego.New(rego.Tracing(cfg.tracing), rego.Externs("inventory"))
	if err != nil {
		return nil, err
	}
	c, err := constraintclient.NewClient(
		constraintclient.Targets(&target.K8sValidationTarget{}),
		constraintclient.Driver(driver),
		constraintclient.EnforcementPoints(cfg.enforcementPoint),
	)
	if err != nil {
		return nil, err
	}
	return &Peer{client: c, enforcementPoint: cfg.enforcementPoint}, nil
}

// Client exposes the underlying constraint framework client.
func (p *Peer) Client() *constraintclient.Client { return p.client }

// ToTemplate converts a ConstraintTemplate (templates.gatekeeper.sh v1,
// v1beta1 or v1alpha1) to the framework's versionless type exactly as gator's
// reader.ToTemplate does: decode into the versioned type through JSON, apply
// the CRD structural defaults, then convert (the conversion moves a non-empty
// targets[].rego/libs into the code[] entry with engine Rego).
func ToTemplate(u *unstructured.Unstructured) (*templates.ConstraintTemplate, error) {
	s, err := templateScheme()
	if err != nil {
		return nil, err
	}
	gvk := u.GroupVersionKind()
	if gvk.Group != templatesv1.SchemeGroupVersion.Group || gvk.Kind != "ConstraintTemplate" {
		return nil, fmt.Errorf("not a ConstraintTemplate: %s", gvk)
	}
	obj, err := s.New(gvk)
	if err != nil {
		return nil, err
	}
	raw, err := u.MarshalJSON()
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, obj); err != nil {
		return nil, err
	}
	v, ok := obj.(interface {
		ToVersionless() (*templates.ConstraintTemplate, error)
	})
	if !ok {
		return nil, fmt.Errorf("cannot convert %T to a versionless ConstraintTemplate", obj)
	}
	return v.ToVersionless()
}

// AddTemplate adds or replaces a ConstraintTemplate.
func (p *Peer) AddTemplate(u *unstructured.Unstructured) error {
	t, err := ToTemplate(u)
	if err != nil {
		return err
	}
	_, err = p.client.AddTemplate(context.Background(), t)
	return err
}

// RemoveTemplate removes a ConstraintTemplate and its constraints.
func (p *Peer) RemoveTemplate(u *unstructured.Unstructured) error {
	t, err := ToTemplate(u)
	if err != nil {
		return err
	}
	_, err = p.client.RemoveTemplate(context.Background(), t)
	return err
}

// AddConstraint adds or replaces a constraint (its template must be present).
// The client validates it against the template's CRD schema, applies the
// schema defaults to spec.parameters and builds its spec.match matcher.
func (p *Peer) AddConstraint(u *unstructured.Unstructured) error {
	_, err := p.client.AddConstraint(context.Background(), u.DeepCopy())
	return err
}

// RemoveConstraint removes a constraint.
func (p *Peer) RemoveConstraint(u *unstructured.Unstructured) error {
	_, err := p.client.RemoveConstraint(context.Background(), u)
	return err
}

// AddData puts an object into data.inventory exactly as Gatekeeper's sync
// (cachemanager.AddObject) does: Client.AddData with the whole object, stored
// at inventory.cluster[gv][kind][name] or
// inventory.namespace[ns][gv][kind][name]. Namespaces also feed the target's
// namespace cache used by namespaceSelector matching.
func (p *Peer) AddData(u *unstructured.Unstructured) error {
	_, err := p.client.AddData(context.Background(), u)
	return err
}

// RemoveData removes an object from data.inventory (and the namespace cache).
func (p *Peer) RemoveData(u *unstructured.Unstructured) error {
	_, err := p.client.RemoveData(context.Background(), u)
	return err
}

// ReviewPodOnNode reviews pod as Gatekeeper's admission webhook reviews a Pod
// CREATE whose spec.nodeName is nodeName: an AdmissionRequest with kind
// {"",v1,Pod}, resource {"",v1,pods}, name, namespace, operation CREATE,
// userInfo, object (a copy of pod with spec.nodeName set) and oldObject null,
// wrapped in target.AugmentedReview{Namespace: ns, Source: Original,
// IsAdmission: true} and reviewed with util.NamespaceReviewOpt(ns), as
// pkg/webhook/policy.go (createReviewForRequest, review) does. namespace may be
// nil (then input.review.namespaceObject is {} and namespaceSelector matching
// falls back to namespaces added with AddData). userInfo is an
// authentication/v1 UserInfo ({"username":..., "groups":[...], ...}); may be
// nil.
func (p *Peer) ReviewPodOnNode(ctx context.Context, pod map[string]any, nodeName string, namespace map[string]any, userInfo map[string]any) ([]Result, error) {
	review, ns, err := PodOnNodeReview(pod, nodeName, namespace, userInfo)
	if err != nil {
		return nil, err
	}
	return p.review(ctx, review, ns)
}

// PodOnNodeReview builds the review ReviewPodOnNode passes to the client and
// the Namespace to pass with util.NamespaceReviewOpt (nil when namespace is).
func PodOnNodeReview(pod map[string]any, nodeName string, namespace map[string]any, userInfo map[string]any) (*target.AugmentedReview, *corev1.Namespace, error) {
	obj, err := jsonCopy(pod)
	if err != nil {
		return nil, nil, fmt.Errorf("pod: %w", err)
	}
	if err := unstructured.SetNestedField(obj, nodeName, "spec", "nodeName"); err != nil {
		return nil, nil, fmt.Errorf("pod: setting spec.nodeName: %w", err)
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, nil, err
	}
	u := unstructured.Unstructured{Object: obj}

	var ui authenticationv1.UserInfo
	if userInfo != nil {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(userInfo, &ui); err != nil {
			return nil, nil, fmt.Errorf("userInfo: %w", err)
		}
	}
	ns, err := toNamespace(namespace)
	if err != nil {
		return nil, nil, err
	}

	req := &admissionv1.AdmissionRequest{
		Kind:      metav1.GroupVersionKind{Group: "", Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Group: "", Version: "v1", Resource: "pods"},
		Name:      u.GetName(),
		Namespace: u.GetNamespace(),
		Operation: admissionv1.Create,
		UserInfo:  ui,
		Object:    runtime.RawExtension{Raw: raw},
	}
	review := &target.AugmentedReview{
		AdmissionRequest: req,
		Namespace:        ns,
		Source:           mutationtypes.SourceTypeOriginal,
		IsAdmission:      true,
	}
	return review, ns, nil
}

// ReviewObject reviews a plain object the way `gator verify` reviews a case
// object: target.AugmentedUnstructured{Object, Source: Original} (so the
// AdmissionRequest has kind, name, namespace and object only: no resource,
// operation "" and empty userInfo). If obj is an admission.k8s.io
// AdmissionReview it is reviewed as gator does (its request is decoded
// strictly and wrapped in target.AugmentedReview). namespace is nil in gator;
// when given it is passed as Gatekeeper's audit passes it (AugmentedUnstructured
// .Namespace plus util.NamespaceReviewOpt).
func (p *Peer) ReviewObject(ctx context.Context, obj map[string]any, namespace map[string]any) ([]Result, error) {
	cp, err := jsonCopy(obj)
	if err != nil {
		return nil, fmt.Errorf("object: %w", err)
	}
	u := unstructured.Unstructured{Object: cp}
	ns, err := toNamespace(namespace)
	if err != nil {
		return nil, err
	}
	if u.GetKind() == "AdmissionReview" && u.GroupVersionKind().Group == admissionv1.SchemeGroupVersion.Group {
		var ar admissionv1.AdmissionReview
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.UnstructuredContent(), &ar, true); err != nil {
			return nil, fmt.Errorf("unable to convert to an AdmissionReview object: %w", err)
		}
		if ar.Request == nil {
			return nil, errors.New("AdmissionReview has no request")
		}
		if ar.Request.Object.Raw == nil && ar.Request.OldObject.Raw == nil {
			return nil, errors.New(`AdmissionRequest does not contain an "object" or "oldObject" to review`)
		}
		// gator decodes object and oldObject as Unstructured (which needs a
		// kind) before reviewing; do the same to fail the same inputs.
		for _, r := range [][]byte{ar.Request.Object.Raw, ar.Request.OldObject.Raw} {
			if r == nil {
				continue
			}
			if err := (&unstructured.Unstructured{}).UnmarshalJSON(r); err != nil {
				return nil, fmt.Errorf("unmarshalling AdmissionRequest object: %w", err)
			}
		}
		review := target.AugmentedReview{
			AdmissionRequest: ar.Request,
			Namespace:        ns,
			Source:           mutationtypes.SourceTypeOriginal,
		}
		return p.review(ctx, review, ns)
	}
	review := target.AugmentedUnstructured{
		Object:    u,
		Namespace: ns,
		Source:    mutationtypes.SourceTypeOriginal,
	}
	return p.review(ctx, review, ns)
}

// ReviewRaw passes review (any type the K8sValidationTarget handles) to the
// client at the Peer's enforcement point, with extra review options.
func (p *Peer) ReviewRaw(ctx context.Context, review any, opts ...reviews.ReviewOpt) (*types.Responses, error) {
	opts = append([]reviews.ReviewOpt{reviews.EnforcementPoint(p.enforcementPoint)}, opts...)
	return p.client.Review(ctx, review, opts...)
}

// NamespaceOpts returns the review options Gatekeeper adds for ns
// (util.NamespaceReviewOpt; none when ns is nil).
func NamespaceOpts(ns *corev1.Namespace) []reviews.ReviewOpt {
	if opt := gkutil.NamespaceReviewOpt(ns, logr.Discard()); opt != nil {
		return []reviews.ReviewOpt{opt}
	}
	return nil
}

func (p *Peer) review(ctx context.Context, review any, ns *corev1.Namespace) ([]Result, error) {
	resp, err := p.ReviewRaw(ctx, review, NamespaceOpts(ns)...)
	if err != nil {
		return nil, err
	}
	return toResults(resp.Results()), nil
}

func toResults(rs []*types.Result) []Result {
	out := make([]Result, 0, len(rs))
	for _, r := range rs {
		res := Result{
			Msg:               r.Msg,
			EnforcementAction: r.EnforcementAction,
		}
		if r.Constraint != nil {
			res.ConstraintKind = r.Constraint.GetKind()
			res.ConstraintName = r.Constraint.GetName()
		}
		if r.Metadata != nil {
			res.Details = r.Metadata["details"]
		}
		if len(r.ScopedEnforcementActions) > 0 {
			res.ScopedEnforcementActions = append([]string(nil), r.ScopedEnforcementActions...)
			sort.Strings(res.ScopedEnforcementActions)
		}
		out = append(out, res)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.ConstraintKind != b.ConstraintKind {
			return a.ConstraintKind < b.ConstraintKind
		}
		if a.ConstraintName != b.ConstraintName {
			return a.ConstraintName < b.ConstraintName
		}
		return a.Msg < b.Msg
	})
	return out
}

func toNamespace(m map[string]any) (*corev1.Namespace, error) {
	if m == nil {
		return nil, nil
	}
	cp, err := jsonCopy(m)
	if err != nil {
		return nil, fmt.Errorf("namespace: %w", err)
	}
	ns := &corev1.Namespace{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(cp, ns); err != nil {
		return nil, fmt.Errorf("namespace: %w", err)
	}
	return ns, nil
}

// jsonCopy deep-copies m through JSON, which also normalises Go types (ints,
// typed slices) to what the API server and gator would hand Gatekeeper.
func jsonCopy(m map[string]any) (map[string]any, error) {
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := utiljson.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	return out, nil
}
