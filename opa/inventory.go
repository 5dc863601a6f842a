package opa

import (
	"context"
	"fmt"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/policy"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// inventoryPath is where Gatekeeper's sync puts an object:
// data.inventory.cluster[gv][Kind][name] for cluster-scoped objects and
// data.inventory.namespace[ns][gv][Kind][name] for namespaced ones.
func inventoryPath(gvk schema.GroupVersionKind, namespace, name string) storage.Path {
	gv := gvk.GroupVersion().String()
	if namespace == "" {
		return storage.Path{"inventory", "cluster", gv, gvk.Kind, name}
	}
	return storage.Path{"inventory", "namespace", namespace, gv, gvk.Kind, name}
}

func inventoryKey(gvk schema.GroupVersionKind) string {
	return gvk.GroupVersion().String() + "/" + gvk.Kind
}

// writeInventory applies one inventory change inside txn and reports how
// the object count changed (+1 added, -1 removed, 0 replaced or absent)
// and whether what the store holds changed. A write of the value the
// store holds already (a Node whose heartbeat is all that changed, once
// cut to what policies read; an informer's resync) writes nothing: what
// keys on the inventory's state stays valid.
//
// metadata.managedFields is dropped: it is the bulk of a Node's size, no
// policy has a reason to read it, and the inventory of a 5000-node cluster
// must stay small. This is the one place the inventory differs from
// Gatekeeper's.
func (e *Engine) writeInventory(ctx context.Context, txn storage.Transaction, ch policy.Change, view nodeView, raw map[string][]byte) (delta int, changed bool, err error) {
	ref, _ := changeRef(ch)
	path := inventoryPath(ref.GroupVersionKind, ref.Namespace, ref.Name)
	old, err := e.store.Read(ctx, txn, path)
	exists := err == nil
	if err != nil && !storage.IsNotFound(err) {
		return 0, false, fmt.Errorf("read inventory: %w", err)
	}
	if ch.Object == nil {
		if !exists {
			return 0, false, nil
		}
		if err := e.store.Write(ctx, txn, storage.RemoveOp, path, nil); err != nil {
			return 0, false, fmt.Errorf("remove from inventory: %w", err)
		}
		if isNode(ref) {
			raw[ref.Name] = nil
		}
		return -1, true, nil
	}
	content := withoutManagedFields(ch.Object.Object)
	var value ast.Value
	if isNode(ref) {
		value, err = e.keepNode(ref.Name, content, view, raw)
	} else {
		value, err = ast.InterfaceToValue(content)
	}
	if err != nil {
		return 0, false, fmt.Errorf("convert object: %w", err)
	}
	if exists {
		if held, ok := old.(ast.Value); ok && held.Compare(value) == 0 {
			return 0, false, nil
		}
		if err := e.store.Write(ctx, txn, storage.ReplaceOp, path, value); err != nil {
			return 0, false, fmt.Errorf("write inventory: %w", err)
		}
		return 0, true, nil
	}
	if err := storage.MakeDir(ctx, e.store, txn, path[:len(path)-1]); err != nil {
		return 0, false, fmt.Errorf("make inventory path: %w", err)
	}
	if err := e.store.Write(ctx, txn, storage.AddOp, path, value); err != nil {
		return 0, false, fmt.Errorf("write inventory: %w", err)
	}
	return 1, true, nil
}

// withoutManagedFields is content without metadata.managedFields, as a
// shallow copy when it has them (content belongs to the caller).
func withoutManagedFields(content map[string]any) map[string]any {
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

func isNode(ref policy.ObjectRef) bool {
	return ref.GroupVersionKind.Group == "" && ref.GroupVersionKind.Version == "v1" && ref.GroupVersionKind.Kind == "Node" && ref.Namespace == ""
}

// readValue reads an AST value from the store, nil when absent.
func (e *Engine) readValue(ctx context.Context, txn storage.Transaction, path storage.Path) ast.Value {
	v, err := e.store.Read(ctx, txn, path)
	if err != nil {
		return nil
	}
	if av, ok := v.(ast.Value); ok {
		return av
	}
	av, err := ast.InterfaceToValue(v)
	if err != nil {
		return nil
	}
	return av
}
