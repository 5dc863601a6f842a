package policy

import (
	"errors"

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
	kind := gvk.Kind
	if gvk.Group != "" {
		kind += "." + gvk.Group
	}
	return kind + " " + name + ": " + e.Err.Error()
}

func (e *ApplyError) Unwrap() error { return e.Err }

// Ref names the object ch adds, updates or removes, or says why ch names
// none.
func (ch Change) Ref() (ObjectRef, error) {
	if ch.Object != nil {
		ref := ObjectRef{GroupVersionKind: ch.Object.GroupVersionKind(), Namespace: ch.Object.GetNamespace(), Name: ch.Object.GetName()}
		if ref.GroupVersionKind.Kind == "" || ref.GroupVersionKind.Version == "" {
			return ref, errors.New("apiVersion and kind are required")
		}
		if ref.Name == "" {
			return ref, errors.New("metadata.name is required")
		}
		return ref, nil
	}
	if ch.Delete == nil {
		return ObjectRef{}, errors.New("change has neither an object nor a deletion")
	}
	return *ch.Delete, nil
}
