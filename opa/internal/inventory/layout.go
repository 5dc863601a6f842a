package inventory

import (
	"fmt"

	"github.com/open-policy-agent/opa/v1/storage"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/policy"
)

// Where things live in the store.
var (
	// NodesPath is data.inventory.cluster["v1"].Node.
	NodesPath = storage.Path{"inventory", "cluster", "v1", "Node"}
	// NamespacesPath is data.inventory.cluster["v1"].Namespace.
	NamespacesPath = storage.Path{"inventory", "cluster", "v1", "Namespace"}
	// GenerationPath holds the whole inventory's generation inside the
	// store, so that a request reads it in the same transaction as the
	// inventory itself.
	GenerationPath = storage.Path{"opa_scheduler_extender", "inventory_generation"}
	// KindGenerationsPath holds the generation of each kind of inventory
	// object ("v1/Namespace"), read in the request's transaction.
	KindGenerationsPath = storage.Path{"opa_scheduler_extender", "kind_generations"}
)

// NodeKind is the Nodes' Key.
const NodeKind = "v1/Node"

// Path is where Gatekeeper's sync puts an object:
// data.inventory.cluster[gv][Kind][name] for cluster-scoped objects and
// data.inventory.namespace[ns][gv][Kind][name] for namespaced ones.
func Path(gvk schema.GroupVersionKind, namespace, name string) storage.Path {
	gv := gvk.GroupVersion().String()
	if namespace == "" {
		return storage.Path{"inventory", "cluster", gv, gvk.Kind, name}
	}
	return storage.Path{"inventory", "namespace", namespace, gv, gvk.Kind, name}
}

// Key names a kind of inventory object ("v1/Namespace", "apps/v1/Deployment").
func Key(gvk schema.GroupVersionKind) string {
	return gvk.GroupVersion().String() + "/" + gvk.Kind
}

// IsNode says whether ref names a Node.
func IsNode(ref policy.ObjectRef) bool {
	return ref.GroupVersionKind.Group == "" && ref.GroupVersionKind.Version == "v1" && ref.GroupVersionKind.Kind == "Node" && ref.Namespace == ""
}

// IsNamespace: ref is a core v1 Namespace.
func IsNamespace(ref policy.ObjectRef) bool {
	return ref.GroupVersionKind.Group == "" && ref.GroupVersionKind.Version == "v1" && ref.GroupVersionKind.Kind == "Namespace" && ref.Namespace == ""
}

// CheckNamespace refuses a Namespace that does not decode as one (a label
// that is not a string), as Gatekeeper's cache refuses it: matching by
// namespaceSelector and CEL's namespaceObject read it typed.
func CheckNamespace(content map[string]any) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(content, &corev1.Namespace{}); err != nil {
		return fmt.Errorf("not a Namespace: %w", err)
	}
	return nil
}

// WithoutManagedFields is content without metadata.managedFields, as a
// shallow copy when it has them (content belongs to the caller).
//
// metadata.managedFields is the bulk of a Node's size and no policy has a
// reason to read it: the inventory of a 5000-node cluster must stay small.
// This is the one place the inventory differs from Gatekeeper's.
func WithoutManagedFields(content map[string]any) map[string]any {
	md, ok := content["metadata"].(map[string]any)
	if !ok {
		return content
	}
	if _, has := md["managedFields"]; !has {
		return content
	}
	md2 := make(map[string]any, len(md))
	for k, v := range md {
		if k != "managedFields" {
			md2[k] = v
		}
	}
	c2 := make(map[string]any, len(content))
	for k, v := range content {
		c2[k] = v
	}
	c2["metadata"] = md2
	return c2
}
