package cel

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/authentication/user"
)

// The review's keys, as the engine builds reviews.
var (
	keyObject          = ast.StringTerm("object")
	keySpec            = ast.StringTerm("spec")
	keyNodeName        = ast.StringTerm("nodeName")
	keyKind            = ast.StringTerm("kind")
	keyResource        = ast.StringTerm("resource")
	keyOperation       = ast.StringTerm("operation")
	keyUserInfo        = ast.StringTerm("userInfo")
	keyName            = ast.StringTerm("name")
	keyNamespace       = ast.StringTerm("namespace")
	keyNamespaceObject = ast.StringTerm("namespaceObject")
)

// reviewCache keeps the Go form of the last pods, Namespace and user
// evaluated: CEL reads Go values (as unstructured objects hold them), and
// a request asks every CEL template about one pod, with spec.nodeName set
// to each candidate in turn while the rest of the review's values are
// shared (gatekeeper.WithNodeName). The pod is converted once, and each
// evaluation copies only the two maps on the way to spec.nodeName.
type reviewCache struct {
	mu   sync.Mutex
	pods [8]podEntry
	next int
	ns   termCache[map[string]any]
	user termCache[user.Info]
	// request is the unstructured admission request of the last review:
	// it is the same for every candidate of one pod.
	requestMu  sync.Mutex
	requestKey requestKey
	request    map[string]any
}

// requestKey is what an admission request is made of.
type requestKey struct {
	kind      schema.GroupVersionKind
	resource  schema.GroupVersionResource
	namespace string
	name      string
	operation string
	user      *ast.Term
}

// podEntry is a pod converted without spec.nodeName, known by the terms
// its review shares with every candidate's (identity).
type podEntry struct {
	ids []*ast.Term
	pod map[string]any
}

// termCache is the conversion of the last value seen (terms are
// immutable).
type termCache[T any] struct {
	mu   sync.Mutex
	term *ast.Term
	val  T
}

func (c *termCache[T]) get(t *ast.Term, convert func(*ast.Term) (T, error)) (T, error) {
	c.mu.Lock()
	// Each request builds its review anew: an equal value is a hit too.
	if t != nil && c.term != nil && (c.term == t || c.term.Value.Compare(t.Value) == 0) {
		v := c.val
		c.mu.Unlock()
		return v, nil
	}
	c.mu.Unlock()
	v, err := convert(t)
	if err == nil {
		c.mu.Lock()
		c.term, c.val = t, v
		c.mu.Unlock()
	}
	return v, err
}

// input is what CEL sees of review (an admission review as the engine
// builds it: a Pod CREATE), params aside: its admission attributes (for
// the match conditions' matcher) and the activation's unstructured
// object, request and namespaceObject.
func (c *reviewCache) input(review *ast.Term) (*admission.VersionedAttributes, activationInput, error) {
	var in activationInput
	rv, ok := review.Value.(ast.Object)
	if !ok {
		return nil, in, errors.New("the review is not an object")
	}
	pod, err := c.pod(rv.Get(keyObject))
	if err != nil {
		return nil, in, err
	}
	ns, err := c.ns.get(rv.Get(keyNamespaceObject), namespaceOf)
	if err != nil {
		return nil, in, fmt.Errorf("namespaceObject: %w", err)
	}
	userTerm := rv.Get(keyUserInfo)
	userInfo, err := c.user.get(userTerm, userOf)
	if err != nil {
		return nil, in, fmt.Errorf("userInfo: %w", err)
	}
	key := requestKey{
		kind:      schema.GroupVersionKind{Group: stringAt(rv, keyKind, "group"), Version: stringAt(rv, keyKind, "version"), Kind: stringAt(rv, keyKind, "kind")},
		resource:  schema.GroupVersionResource{Group: stringAt(rv, keyResource, "group"), Version: stringAt(rv, keyResource, "version"), Resource: stringAt(rv, keyResource, "resource")},
		namespace: stringAt(rv, keyNamespace),
		name:      stringAt(rv, keyName),
		operation: stringAt(rv, keyOperation),
		user:      userTerm,
	}
	var object *unstructured.Unstructured
	if pod != nil {
		object = &unstructured.Unstructured{Object: pod}
		in.object = pod
	}
	attrs := admission.NewAttributesRecord(object, nil, key.kind, key.namespace, key.name, key.resource, "",
		admission.Operation(key.operation), nil, false, userInfo)
	va := &admission.VersionedAttributes{Attributes: attrs, VersionedKind: key.kind}
	if object != nil {
		va.VersionedObject = admission.NewLazyObject(object)
	}
	if in.request, err = c.requestOf(key, va); err != nil {
		return nil, in, err
	}
	if ns != nil { // an untyped nil: CEL's null
		in.namespace = ns
	}
	return va, in, nil
}

// requestOf is CEL's request for the attributes va, made of key.
func (c *reviewCache) requestOf(key requestKey, va *admission.VersionedAttributes) (map[string]any, error) {
	c.requestMu.Lock()
	if c.request != nil && c.requestKey == key {
		r := c.request
		c.requestMu.Unlock()
		return r, nil
	}
	c.requestMu.Unlock()
	request := plugincel.CreateAdmissionRequest(va.Attributes, metav1.GroupVersionResource(va.GetResource()), metav1.GroupVersionKind(va.VersionedKind))
	r, err := runtime.DefaultUnstructuredConverter.ToUnstructured(request)
	if err != nil {
		return nil, fmt.Errorf("failed to prepare request variable for evaluation: %w", err)
	}
	c.requestMu.Lock()
	c.requestKey, c.request = key, r
	c.requestMu.Unlock()
	return r, nil
}

// pod is the review's object as Go values, spec.nodeName included.
func (c *reviewCache) pod(t *ast.Term) (map[string]any, error) {
	if t == nil {
		return nil, nil
	}
	obj, ok := t.Value.(ast.Object)
	if !ok {
		if _, null := t.Value.(ast.Null); null {
			return nil, nil
		}
		return nil, errors.New("the review's object is not an object")
	}
	var spec ast.Object
	if s := obj.Get(keySpec); s != nil {
		spec, _ = s.Value.(ast.Object)
	}
	var nodeName *ast.Term
	if spec != nil {
		nodeName = spec.Get(keyNodeName)
	}
	ids := identity(obj, spec)
	base := c.lookup(ids)
	if base == nil {
		v, err := toGo(obj)
		if err != nil {
			return nil, err
		}
		base = v.(map[string]any)
		if s, ok := base["spec"].(map[string]any); ok {
			delete(s, "nodeName")
		}
		c.store(ids, base)
	}
	if nodeName == nil {
		return base, nil
	}
	name, err := toGo(nodeName.Value)
	if err != nil {
		return nil, err
	}
	// The base is shared: only the maps on the way to nodeName are new.
	out := make(map[string]any, len(base))
	for k, v := range base {
		out[k] = v
	}
	specGo, _ := base["spec"].(map[string]any)
	specOut := make(map[string]any, len(specGo)+1)
	for k, v := range specGo {
		specOut[k] = v
	}
	specOut["nodeName"] = name
	out["spec"] = specOut
	return out, nil
}

// identity are the terms that make a pod, spec.nodeName aside: the reviews
// of one pod on several candidates share them.
func identity(obj, spec ast.Object) []*ast.Term {
	ids := make([]*ast.Term, 0, obj.Len()+8)
	obj.Foreach(func(k, v *ast.Term) {
		if !k.Equal(keySpec) || spec == nil {
			ids = append(ids, k, v)
		}
	})
	if spec != nil {
		ids = append(ids, nil) // spec's terms follow
		spec.Foreach(func(k, v *ast.Term) {
			if !k.Equal(keyNodeName) {
				ids = append(ids, k, v)
			}
		})
	}
	return ids
}

func (c *reviewCache) lookup(ids []*ast.Term) map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.pods {
		if samePointers(c.pods[i].ids, ids) {
			return c.pods[i].pod
		}
	}
	return nil
}

func (c *reviewCache) store(ids []*ast.Term, pod map[string]any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pods[c.next] = podEntry{ids: ids, pod: pod}
	c.next = (c.next + 1) % len(c.pods)
}

func samePointers(a, b []*ast.Term) bool {
	if len(a) != len(b) || a == nil {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// toGo is v as an unstructured object holds it: integers as int64, other
// numbers as float64, as the API server decodes JSON for CEL.
func toGo(v ast.Value) (any, error) {
	switch x := v.(type) {
	case ast.Null:
		return nil, nil
	case ast.Boolean:
		return bool(x), nil
	case ast.String:
		return string(x), nil
	case ast.Number:
		if i, err := json.Number(x).Int64(); err == nil {
			return i, nil
		}
		f, err := json.Number(x).Float64()
		if err != nil {
			return nil, fmt.Errorf("number %s: %w", x, err)
		}
		return f, nil
	case *ast.Array:
		out := make([]any, x.Len())
		for i := range out {
			e, err := toGo(x.Elem(i).Value)
			if err != nil {
				return nil, err
			}
			out[i] = e
		}
		return out, nil
	case ast.Object:
		out := make(map[string]any, x.Len())
		var err error
		x.Foreach(func(k, e *ast.Term) {
			if err != nil {
				return
			}
			key, ok := k.Value.(ast.String)
			if !ok {
				err = fmt.Errorf("object key %v is not a string", k)
				return
			}
			out[string(key)], err = toGo(e.Value)
		})
		return out, err
	case ast.Set:
		out := make([]any, 0, x.Len())
		var err error
		x.Foreach(func(e *ast.Term) {
			if err != nil {
				return
			}
			var g any
			if g, err = toGo(e.Value); err == nil {
				out = append(out, g)
			}
		})
		return out, err
	}
	return nil, fmt.Errorf("value %v has no JSON form", v)
}

// namespaceOf is the review's namespaceObject as CEL's namespaceObject
// sees it: the typed Namespace Gatekeeper hands the validator, cut to what
// the validator keeps of it, as unstructured content. Nil when null, and
// nil when empty (the
// engine's review of a pod whose Namespace is not synced, where
// Gatekeeper's validator gets none). A Namespace that does not convert (a
// label that is not a string) is nil too: Gatekeeper's k8scel driver logs
// the error and goes on without one.
func namespaceOf(t *ast.Term) (map[string]any, error) {
	if t == nil {
		return nil, nil
	}
	if _, null := t.Value.(ast.Null); null {
		return nil, nil
	}
	if obj, ok := t.Value.(ast.Object); ok && obj.Len() == 0 {
		return nil, nil
	}
	v, err := toGo(t.Value)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{}
	if err := json.Unmarshal(b, ns); err != nil {
		return nil, nil
	}
	return runtime.DefaultUnstructuredConverter.ToUnstructured(plugincel.CreateNamespaceObject(ns))
}

// userOf is the review's userInfo as the admission attributes carry it.
func userOf(t *ast.Term) (user.Info, error) {
	info := &user.DefaultInfo{}
	if t == nil {
		return info, nil
	}
	obj, ok := t.Value.(ast.Object)
	if !ok {
		return info, nil
	}
	v, err := toGo(obj)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var u struct {
		Username string              `json:"username"`
		UID      string              `json:"uid"`
		Groups   []string            `json:"groups"`
		Extra    map[string][]string `json:"extra"`
	}
	if err := json.Unmarshal(b, &u); err != nil {
		return nil, err
	}
	info.Name, info.UID, info.Groups, info.Extra = u.Username, u.UID, u.Groups, u.Extra
	return info, nil
}

// stringAt is the string at review[key] (or review[key][field]), else "".
func stringAt(review ast.Object, key *ast.Term, field ...string) string {
	t := review.Get(key)
	for _, f := range field {
		if t == nil {
			return ""
		}
		obj, ok := t.Value.(ast.Object)
		if !ok {
			return ""
		}
		t = obj.Get(ast.StringTerm(f))
	}
	if t == nil {
		return ""
	}
	s, _ := t.Value.(ast.String)
	return string(s)
}
