package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
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
	"github.com/open-policy-agent/gatekeeper/v3/pkg/drivers/k8scel"
	celschema "github.com/open-policy-agent/gatekeeper/v3/pkg/drivers/k8scel/schema"
	mutationtypes "github.com/open-policy-agent/gatekeeper/v3/pkg/mutation/types"
	"github.com/open-policy-agent/gatekeeper/v3/pkg/target"
	gkutil "github.com/open-policy-agent/gatekeeper/v3/pkg/util"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// EnforcementPoint is the one enforcement point of the client: the
// opa-scheduler-extender's.
const EnforcementPoint = "opa-scheduler-extender"

// corpus is the input. Objects are Kubernetes objects as JSON; numbers
// are decoded as the API server's JSON decoder does (whole numbers int64).
type corpus struct {
	Templates   []json.RawMessage `json:"templates"`
	Constraints []json.RawMessage `json:"constraints"`
	// Data are objects for data.inventory (Rego templates only: the CEL
	// engine has no inventory) and the namespace cache of namespaceSelector.
	Data    []json.RawMessage `json:"data"`
	Reviews []review          `json:"reviews"`
}

// review is one admission request for a Pod.
type review struct {
	ID string `json:"id"`
	// Object is the Pod as the request carries it (spec.nodeName set for a
	// placement).
	Object json.RawMessage `json:"object"`
	// Namespace is the Pod's Namespace object, or null.
	Namespace json.RawMessage `json:"namespace"`
	// Operation is the admission operation (default CREATE).
	Operation string `json:"operation"`
	// UserInfo is an authentication/v1 UserInfo.
	UserInfo json.RawMessage `json:"userInfo"`
}

// output is what celpeer prints.
type output struct {
	// TemplateErrors and ConstraintErrors are the refusals by
	// "ConstraintTemplate/name" and "Kind/name".
	TemplateErrors   map[string]string `json:"templateErrors"`
	ConstraintErrors map[string]string `json:"constraintErrors"`
	DataErrors       map[string]string `json:"dataErrors"`
	Reviews          []reviewResult    `json:"reviews"`
}

type reviewResult struct {
	ID string `json:"id"`
	// Error is the error of the whole review, if any.
	Error   string   `json:"error,omitempty"`
	Results []result `json:"results"`
}

// result is one violation, as types.Result holds it.
type result struct {
	Kind              string `json:"kind"`
	Name              string `json:"name"`
	EnforcementAction string `json:"enforcementAction"`
	Msg               string `json:"msg"`
	// Details is metadata.details (Rego templates); absent for CEL.
	Details                  any      `json:"details,omitempty"`
	ScopedEnforcementActions []string `json:"scopedEnforcementActions,omitempty"`
}

func main() {
	in := flag.String("in", "-", "corpus file (JSON); - for stdin")
	enableCEL := flag.Bool("enable-k8s-native-validation", true, "register the K8sNativeValidation (CEL) driver before the Rego driver, as Gatekeeper does")
	flag.Parse()
	if err := celschema.ValidateDefaultFailurePolicyForK8sNativeValidation(); err != nil {
		fatal(err)
	}
	// The drivers log through controller-runtime; nothing of it is wanted
	// on stderr.
	logf.SetLogger(logr.Discard())

	var r io.Reader = os.Stdin
	if *in != "-" {
		f, err := os.Open(*in)
		if err != nil {
			fatal(err)
		}
		defer f.Close()
		r = f
	}
	var c corpus
	if err := json.NewDecoder(r).Decode(&c); err != nil {
		fatal(fmt.Errorf("corpus: %w", err))
	}
	out, err := run(context.Background(), &c, *enableCEL)
	if err != nil {
		fatal(err)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "celpeer:", err)
	os.Exit(1)
}

// newClient builds the constraint client as Gatekeeper's main.go does.
func newClient(enableCEL bool) (*constraintclient.Client, error) {
	opts := []constraintclient.Opt{constraintclient.Targets(&target.K8sValidationTarget{})}
	if enableCEL {
		d, err := k8scel.New()
		if err != nil {
			return nil, err
		}
		opts = append(opts, constraintclient.Driver(d))
	}
	d, err := rego.New(rego.Tracing(false), rego.Externs("inventory"))
	if err != nil {
		return nil, err
	}
	opts = append(opts, constraintclient.Driver(d), constraintclient.EnforcementPoints(EnforcementPoint))
	return constraintclient.NewClient(opts...)
}

func run(ctx context.Context, c *corpus, enableCEL bool) (*output, error) {
	client, err := newClient(enableCEL)
	if err != nil {
		return nil, err
	}
	out := &output{
		TemplateErrors:   map[string]string{},
		ConstraintErrors: map[string]string{},
		DataErrors:       map[string]string{},
		Reviews:          make([]reviewResult, len(c.Reviews)),
	}
	for _, raw := range c.Templates {
		u, err := decodeObject(raw)
		if err != nil {
			return nil, fmt.Errorf("template: %w", err)
		}
		t, err := toTemplate(u)
		if err == nil {
			_, err = client.AddTemplate(ctx, t)
		}
		if err != nil {
			out.TemplateErrors["ConstraintTemplate/"+u.GetName()] = err.Error()
		}
	}
	for _, raw := range c.Constraints {
		u, err := decodeObject(raw)
		if err != nil {
			return nil, fmt.Errorf("constraint: %w", err)
		}
		if _, err := client.AddConstraint(ctx, u); err != nil {
			out.ConstraintErrors[u.GetKind()+"/"+u.GetName()] = err.Error()
		}
	}
	for _, raw := range c.Data {
		u, err := decodeObject(raw)
		if err != nil {
			return nil, fmt.Errorf("data: %w", err)
		}
		if _, err := client.AddData(ctx, u); err != nil {
			out.DataErrors[u.GetKind()+"/"+u.GetName()] = err.Error()
		}
	}

	// Reviews are independent; the client is safe for concurrent reviews.
	work := make(chan int)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				rv := &c.Reviews[i]
				rr := reviewResult{ID: rv.ID, Results: []result{}}
				res, err := reviewPod(ctx, client, rv)
				if err != nil {
					rr.Error = err.Error()
				} else {
					rr.Results = res
				}
				out.Reviews[i] = rr
			}
		}()
	}
	for i := range c.Reviews {
		work <- i
	}
	close(work)
	wg.Wait()
	return out, nil
}

// reviewPod reviews as Gatekeeper's admission webhook does
// (pkg/webhook/policy.go: createReviewForRequest, review).
func reviewPod(ctx context.Context, client *constraintclient.Client, rv *review) ([]result, error) {
	obj, err := decodeObject(rv.Object)
	if err != nil {
		return nil, fmt.Errorf("object: %w", err)
	}
	raw, err := json.Marshal(obj.Object)
	if err != nil {
		return nil, err
	}
	var ui authenticationv1.UserInfo
	if len(rv.UserInfo) > 0 && string(rv.UserInfo) != "null" {
		if err := json.Unmarshal(rv.UserInfo, &ui); err != nil {
			return nil, fmt.Errorf("userInfo: %w", err)
		}
	}
	var ns *corev1.Namespace
	if len(rv.Namespace) > 0 && string(rv.Namespace) != "null" {
		m, err := decodeObject(rv.Namespace)
		if err != nil {
			return nil, fmt.Errorf("namespace: %w", err)
		}
		ns = &corev1.Namespace{}
		if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(m.Object, ns); err != nil {
			return nil, fmt.Errorf("namespace: %w", err)
		}
	}
	op := admissionv1.Operation(rv.Operation)
	if op == "" {
		op = admissionv1.Create
	}
	req := &admissionv1.AdmissionRequest{
		Kind:      metav1.GroupVersionKind{Group: "", Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Group: "", Version: "v1", Resource: "pods"},
		Name:      obj.GetName(),
		Namespace: obj.GetNamespace(),
		Operation: op,
		UserInfo:  ui,
		Object:    k8sruntime.RawExtension{Raw: raw},
	}
	ar := &target.AugmentedReview{
		AdmissionRequest: req,
		Namespace:        ns,
		Source:           mutationtypes.SourceTypeOriginal,
		IsAdmission:      true,
	}
	opts := []reviews.ReviewOpt{reviews.EnforcementPoint(EnforcementPoint)}
	if o := gkutil.NamespaceReviewOpt(ns, logr.Discard()); o != nil {
		opts = append(opts, o)
	}
	resp, err := client.Review(ctx, ar, opts...)
	if err != nil {
		return nil, err
	}
	return toResults(resp.Results()), nil
}

func toResults(rs []*types.Result) []result {
	out := make([]result, 0, len(rs))
	for _, r := range rs {
		res := result{Msg: r.Msg, EnforcementAction: r.EnforcementAction}
		if r.Constraint != nil {
			res.Kind = r.Constraint.GetKind()
			res.Name = r.Constraint.GetName()
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
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Msg < b.Msg
	})
	return out
}

// decodeObject decodes a Kubernetes object as the API server's JSON
// decoder does (whole numbers int64, others float64).
func decodeObject(raw json.RawMessage) (*unstructured.Unstructured, error) {
	var m map[string]any
	if err := utiljson.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errors.New("not an object")
	}
	return &unstructured.Unstructured{Object: m}, nil
}

var (
	schemeOnce sync.Once
	scheme     *k8sruntime.Scheme
	schemeErr  error
)

// toTemplate converts a ConstraintTemplate (templates.gatekeeper.sh v1,
// v1beta1 or v1alpha1) to the framework's versionless type as gator's
// reader.ToTemplate does: decode into the versioned type, apply its
// defaults, convert (a non-empty rego field becomes a code entry with
// engine Rego).
func toTemplate(u *unstructured.Unstructured) (*templates.ConstraintTemplate, error) {
	schemeOnce.Do(func() {
		scheme = k8sruntime.NewScheme()
		schemeErr = frameworkapis.AddToScheme(scheme)
	})
	if schemeErr != nil {
		return nil, schemeErr
	}
	gvk := u.GroupVersionKind()
	if gvk.Group != templatesv1.SchemeGroupVersion.Group || gvk.Kind != "ConstraintTemplate" {
		return nil, fmt.Errorf("not a ConstraintTemplate: %s", gvk)
	}
	obj, err := scheme.New(gvk)
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
