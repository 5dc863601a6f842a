package source

import (
	"context"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// An inventory informer would keep every Node, Namespace and synced object
// a second time (the engine holds the first), as unstructured maps several
// times their JSON size: some 200 MiB for 5000 kubelet-sized Nodes. Its
// transform (handOver) turns each object into a keptObject instead: the
// identity the informer's store needs (key, resourceVersion, for relists
// and deletions) and the object itself, which the event handler takes out
// on its way to the engine. After that the informer holds the stub only.
type keptObject struct {
	metav1.TypeMeta
	metav1.ObjectMeta // name, namespace, uid and resourceVersion only
	ref               opa.ObjectRef
	object            atomic.Pointer[unstructured.Unstructured]
}

// DeepCopyObject makes keptObject a runtime.Object, as informer lists need.
func (k *keptObject) DeepCopyObject() runtime.Object {
	c := &keptObject{TypeMeta: k.TypeMeta, ObjectMeta: *k.ObjectMeta.DeepCopy(), ref: k.ref}
	c.object.Store(k.object.Load())
	return c
}

// stub is the keptObject of u, holding u until the engine takes it.
func stub(u *unstructured.Unstructured) *keptObject {
	k := &keptObject{
		TypeMeta:   metav1.TypeMeta{APIVersion: u.GetAPIVersion(), Kind: u.GetKind()},
		ObjectMeta: metav1.ObjectMeta{Name: u.GetName(), Namespace: u.GetNamespace(), UID: u.GetUID(), ResourceVersion: u.GetResourceVersion()},
		ref:        opa.ObjectRef{GroupVersionKind: u.GroupVersionKind(), Namespace: u.GetNamespace(), Name: u.GetName()},
	}
	u.SetManagedFields(nil) // the engine drops them too; drop them early
	k.object.Store(u)
	return k
}

// handOver is the inventory informers' transform. It runs on every object
// before the informer stores it; it must be idempotent (client-go may
// hand it an object it already transformed).
func handOver(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil // a keptObject already, or a tombstone
	}
	return stub(u), nil
}

// The initial list is the other place a second copy would build up: a
// list (or client-go's streaming watch-list) holds every object until the
// informer has stored them all, 5000 kubelet-sized Nodes at once. An
// inventory informer lists through handingOver instead: page by page,
// each page handed to the engine before the next is read, the informer
// given stubs only. Watch-list streaming is turned off for it for that
// reason (the API server serves paged lists from etcd).
type handingOver struct {
	res dynamic.NamespaceableResourceInterface
	// hand queues a listed object for the engine and waits while too much
	// is queued (backpressure: the pages wait for the engine).
	hand func(ctx context.Context, u *unstructured.Unstructured)
}

// listPage is how many objects one list call asks for.
const listPage = 200

// ListWithContext lists every page (the caller's Limit and Continue are
// not used: one call returns everything, as stubs), with the caller's
// resourceVersion semantics dropped for a consistent read of the newest
// state, which is never older than what the caller asked for.
func (h *handingOver) ListWithContext(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
	out := &keptList{}
	opts := metav1.ListOptions{Limit: listPage}
	for {
		page, err := h.res.List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for i := range page.Items {
			k := stub(&page.Items[i])
			out.Items = append(out.Items, k)
			h.hand(ctx, k.object.Swap(nil))
		}
		out.ResourceVersion = page.GetResourceVersion()
		if opts.Continue = page.GetContinue(); opts.Continue == "" {
			return out, nil
		}
	}
}

func (h *handingOver) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return h.res.Watch(ctx, opts)
}

func (h *handingOver) List(opts metav1.ListOptions) (runtime.Object, error) {
	return h.ListWithContext(context.Background(), opts)
}

func (h *handingOver) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return h.WatchWithContext(context.Background(), opts)
}

// IsWatchListSemanticsUnSupported keeps client-go from streaming the
// initial list through a watch (see handingOver).
func (h *handingOver) IsWatchListSemanticsUnSupported() bool { return true }

// keptList is what handingOver lists: stubs.
type keptList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []runtime.Object
}

func (l *keptList) DeepCopyObject() runtime.Object {
	c := &keptList{TypeMeta: l.TypeMeta, ListMeta: *l.ListMeta.DeepCopy()}
	for _, o := range l.Items {
		c.Items = append(c.Items, o.DeepCopyObject())
	}
	return c
}

// objectOf is the object an informer event carries: the object itself for
// informers without the transform, what a keptObject still holds (once:
// the engine keeps it from then on) for those with it.
func objectOf(obj any) (*unstructured.Unstructured, bool) {
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		return o, true
	case *keptObject:
		u := o.object.Swap(nil)
		return u, u != nil
	}
	return nil, false
}

// typedObject converts a typed object of a shared informer (a *v1.Node)
// into the unstructured form the engine takes, with its kind set (typed
// informers drop apiVersion and kind).
func typedObject(obj any, gvk schema.GroupVersionKind) (*unstructured.Unstructured, bool) {
	ro, ok := obj.(runtime.Object)
	if !ok {
		return nil, false
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ro)
	if err != nil {
		return nil, false
	}
	u := &unstructured.Unstructured{Object: content}
	u.SetGroupVersionKind(gvk)
	u.SetManagedFields(nil) // as handOver: the engine never keeps them
	return u, true
}
