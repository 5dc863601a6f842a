package source

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

func TestHandOver(t *testing.T) {
	node := func() *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Node",
			"metadata": map[string]any{"name": "n1", "resourceVersion": "7", "uid": "u1", "labels": map[string]any{"pool": "a"}}}}
		u.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kubelet"}})
		return u
	}
	kept, err := handOver(node())
	if err != nil {
		t.Fatal(err)
	}
	k, ok := kept.(*keptObject)
	if !ok {
		t.Fatalf("transform gave %T, want a *keptObject", kept)
	}
	if k.Name != "n1" || k.ResourceVersion != "7" || k.UID != "u1" || k.ref.GroupVersionKind.Kind != "Node" || k.ref.Name != "n1" {
		t.Errorf("stub %+v lost the object's identity", k)
	}
	again, _ := handOver(k)
	if again != kept {
		t.Error("the transform is not idempotent on a stub")
	}
	for _, tc := range []struct {
		name string
		obj  any
		want bool
	}{
		{"first take", k, true},
		{"second take: the engine has it", k, false},
		{"plain object", node(), true},
		{"something else", "n1", false},
	} {
		u, ok := objectOf(tc.obj)
		if ok != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, ok, tc.want)
		}
		if ok && tc.name == "first take" {
			if u.GetManagedFields() != nil || u.GetLabels()["pool"] != "a" {
				t.Errorf("%s: object %v, want the labels without managedFields", tc.name, u.Object)
			}
		}
	}
}

// latest is an Applier that keeps the latest version of every object.
type latest struct {
	mu      sync.Mutex
	objects map[string]*unstructured.Unstructured
}

func (r *latest) Apply(_ context.Context, changes []opa.Change) []*opa.ApplyError {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ch := range changes {
		if ch.Object != nil {
			r.objects[ch.Object.GetName()] = ch.Object
		} else {
			delete(r.objects, ch.Delete.Name)
		}
	}
	return nil
}

func (r *latest) get(name string) *unstructured.Unstructured {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.objects[name]
}

func (r *latest) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.objects)
}

// TestInventoryInformerKeepsStubs runs a Node informer against a fake API:
// the engine gets every object whole, updates and deletions included,
// while the informer's store holds stubs only.
func TestInventoryInformerKeepsStubs(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var objs []runtime.Object
	for i := range 20 {
		objs = append(objs, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Node",
			"metadata": map[string]any{"name": fmt.Sprintf("n%d", i), "labels": map[string]any{"pool": "a"}},
			"status":   map[string]any{"nodeInfo": map[string]any{"kubeletVersion": "v1.37.2"}}}})
	}
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{nodeGVR: "NodeList"}, objs...)
	rec := &latest{objects: map[string]*unstructured.Unstructured{}}
	c := &Cluster{opts: ClusterOptions{BatchWindow: time.Millisecond}, applier: rec, dyn: dyn, log: slog.New(slog.DiscardHandler),
		informers: map[schema.GroupVersionResource]*watched{}, pending: map[string]opa.Change{}, wake: make(chan struct{}, 1), ctx: ctx}
	go c.applyLoop(ctx)
	c.watch(nodeGVR, "inventory", "")
	waitFor(t, "the initial list", func() bool { return rec.len() == 20 })
	if v, _, _ := unstructured.NestedString(rec.get("n3").Object, "status", "nodeInfo", "kubeletVersion"); v != "v1.37.2" {
		t.Errorf("the engine got n3 without its status: %v", rec.get("n3").Object)
	}

	n3 := rec.get("n3").DeepCopy()
	n3.SetLabels(map[string]string{"pool": "b"})
	if _, err := dyn.Resource(nodeGVR).Update(ctx, n3, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := dyn.Resource(nodeGVR).Delete(ctx, "n4", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the update and the deletion", func() bool {
		return rec.get("n3").GetLabels()["pool"] == "b" && rec.get("n4") == nil
	})

	c.mu.Lock()
	store := c.informers[nodeGVR].inf.GetStore()
	c.mu.Unlock()
	if n := len(store.List()); n != 19 {
		t.Errorf("the informer holds %d objects, want 19", n)
	}
	for _, obj := range store.List() {
		k, ok := obj.(*keptObject)
		if !ok {
			t.Fatalf("the informer holds a %T, want stubs only", obj)
		}
		if k.object.Load() != nil {
			t.Errorf("stub %s still holds its object after the engine took it", k.Name)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// refuser is an Applier that refuses the objects named in bad.
type refuser struct {
	mu  sync.Mutex
	bad map[string]error
}

func (r *refuser) Apply(_ context.Context, changes []opa.Change) []*opa.ApplyError {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []*opa.ApplyError
	for _, ch := range changes {
		if ch.Object == nil {
			continue
		}
		if err := r.bad[ch.Object.GetName()]; err != nil {
			errs = append(errs, &opa.ApplyError{Ref: opa.ObjectRef{GroupVersionKind: ch.Object.GroupVersionKind(), Name: ch.Object.GetName()}, Err: err})
		}
	}
	return errs
}

func TestRefusalEvents(t *testing.T) {
	template := func(rv string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "templates.gatekeeper.sh/v1", "kind": "ConstraintTemplate",
			"metadata": map[string]any{"name": "k8sbroken", "resourceVersion": rv}}}
	}
	node := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": "k8sbroken-node"}}}
	events := record.NewFakeRecorder(10)
	c := &Cluster{opts: ClusterOptions{Events: events}}
	r := &refuser{bad: map[string]error{"k8sbroken": fmt.Errorf("compile: undefined function foo")}}
	apply := func(objs ...*unstructured.Unstructured) {
		var batch []opa.Change
		for _, o := range objs {
			batch = append(batch, opa.Change{Object: o})
		}
		c.recordRefusals(batch, r.Apply(context.Background(), batch))
	}
	next := func() string {
		select {
		case e := <-events.Events:
			return e
		default:
			return ""
		}
	}
	apply(template("1"), node)
	if e := next(); !strings.HasPrefix(e, "Warning Refused ") || !strings.Contains(e, "undefined function foo") || !strings.Contains(e, "constraints are inactive") {
		t.Errorf("first refusal: event %q", e)
	}
	apply(template("2"))
	if e := next(); e != "" {
		t.Errorf("the same error again made another event: %q", e)
	}
	r.bad["k8sbroken"] = fmt.Errorf("compile: another error")
	apply(template("3"))
	if e := next(); !strings.Contains(e, "another error") {
		t.Errorf("a new error: event %q", e)
	}
	delete(r.bad, "k8sbroken")
	apply(template("4"))
	if e := next(); !strings.HasPrefix(e, "Normal Accepted ") {
		t.Errorf("accepted again: event %q", e)
	}
	if e := next(); e != "" {
		t.Errorf("unexpected event %q (inventory objects make none)", e)
	}
}

// TestSharedInventory feeds Nodes from a typed informer the caller owns
// (as kube-scheduler's factory): the engine gets them as unstructured
// objects with their kind, updates and deletions included, and the source
// starts no watch of its own for them.
func TestSharedInventory(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := kubefake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"pool": "a"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}})
	factory := informers.NewSharedInformerFactory(client, 0)
	nodes := factory.Core().V1().Nodes().Informer()
	rec := &latest{objects: map[string]*unstructured.Unstructured{}}
	c := &Cluster{opts: ClusterOptions{BatchWindow: time.Millisecond, SharedInventory: []SharedInformer{
		{Resource: nodeGVR, Kind: schema.GroupVersionKind{Version: "v1", Kind: "Node"}, Informer: nodes}}},
		applier: rec, log: slog.New(slog.DiscardHandler),
		informers: map[schema.GroupVersionResource]*watched{}, pending: map[string]opa.Change{}, wake: make(chan struct{}, 1), ctx: ctx}
	go c.applyLoop(ctx)
	for _, si := range c.opts.SharedInventory {
		c.share(si)
	}
	c.watch(nodeGVR, "inventory", "") // what Run does next: must not replace the shared one
	if c.informers[nodeGVR].inf != nodes {
		t.Fatal("the source started its own Node watch beside the shared informer")
	}
	factory.Start(ctx.Done())
	waitFor(t, "the shared informer's Nodes", func() bool { return rec.len() == 2 })
	n1 := rec.get("n1")
	if n1.GetKind() != "Node" || n1.GetAPIVersion() != "v1" || n1.GetLabels()["pool"] != "a" || n1.GetManagedFields() != nil {
		t.Errorf("n1 reached the engine as %v, want kind v1/Node, its labels, no managedFields", n1.Object)
	}
	if ok, msg := c.Ready(); !ok {
		t.Errorf("not ready with the shared informer synced: %s", msg)
	}
	upd := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"pool": "b"}}}
	if _, err := client.CoreV1().Nodes().Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().Nodes().Delete(ctx, "n2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the update and the deletion", func() bool {
		return rec.get("n1").GetLabels()["pool"] == "b" && rec.get("n2") == nil
	})
}
