package source

import (
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

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
	metav1.ObjectMeta // name, namespace, uid and resourceVersion only
	ref               opa.ObjectRef
	object            atomic.Pointer[unstructured.Unstructured]
}

// handOver is the inventory informers' transform. It runs on every object
// before the informer stores it; it must be idempotent (client-go may
// hand it an object it already transformed).
func handOver(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil // a keptObject already, or a tombstone
	}
	k := &keptObject{
		ObjectMeta: metav1.ObjectMeta{Name: u.GetName(), Namespace: u.GetNamespace(), UID: u.GetUID(), ResourceVersion: u.GetResourceVersion()},
		ref:        opa.ObjectRef{GroupVersionKind: u.GroupVersionKind(), Namespace: u.GetNamespace(), Name: u.GetName()},
	}
	u.SetManagedFields(nil) // the engine drops them too; drop them early
	k.object.Store(u)
	return k, nil
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
