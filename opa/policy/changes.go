package policy

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ObjectRef identifies an object for removal.
type ObjectRef struct {
	GroupVersionKind schema.GroupVersionKind
	Namespace, Name  string
}

// Change is one object added, updated or removed. Sources send batches of
// them to Apply.
type Change struct {
	// Object to upsert; nil for a deletion.
	Object *unstructured.Unstructured
	// Delete names the object to remove when Object is nil.
	Delete *ObjectRef
}

// ApplyError reports one change that was refused.
type ApplyError struct {
	Ref ObjectRef
	Err error
}

func (e *ApplyError) Error() string {
	gvk := e.Ref.GroupVersionKind
	name := e.Ref.Name
	if e.Ref.Namespace != "" {
		name = e.Ref.Namespace + "/" + name
	}
	return gvk.Kind + "." + gvk.Group + " " + name + ": " + e.Err.Error()
}

func (e *ApplyError) Unwrap() error { return e.Err }
