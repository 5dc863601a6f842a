package source

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// blockingApplier holds every Apply until released.
type blockingApplier struct {
	entered chan []opa.Change
	release chan struct{}
}

func (b *blockingApplier) Apply(_ context.Context, changes []opa.Change) []*opa.ApplyError {
	b.entered <- changes
	<-b.release
	return nil
}

// TestReadyNotBeforeFirstBatchApplied: Ready is not true while the first
// changes are still being applied (applyLoop empties pending before Apply
// returns), and stays true while later ones are.
func TestReadyNotBeforeFirstBatchApplied(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	app := &blockingApplier{entered: make(chan []opa.Change, 1), release: make(chan struct{})}
	c := &Cluster{opts: ClusterOptions{BatchWindow: time.Millisecond}, applier: app, log: slog.New(slog.DiscardHandler),
		informers: map[schema.GroupVersionResource]*watched{}, pending: map[string]opa.Change{}, wake: make(chan struct{}, 1), ctx: ctx, connected: true}
	go c.applyLoop(ctx)
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "alpha"}}}
	c.enqueue(opa.Change{Object: ns})
	<-app.entered // the batch is in Apply, not yet in the engine
	if ok, _ := c.Ready(); ok {
		t.Error("Ready while the first batch is still being applied")
	}
	app.release <- struct{}{}
	deadline := time.Now().Add(10 * time.Second)
	for ok, why := c.Ready(); !ok; ok, why = c.Ready() {
		if time.Now().After(deadline) {
			t.Fatalf("not ready once the first batch was applied: %s", why)
		}
		time.Sleep(time.Millisecond)
	}
	// A later change being applied does not make the source unready (the
	// extender's /readyz would flap with every Node update).
	ns2 := ns.DeepCopy()
	ns2.SetName("beta")
	c.enqueue(opa.Change{Object: ns2})
	<-app.entered
	if ok, why := c.Ready(); !ok {
		t.Errorf("not ready while a later change is applied: %s", why)
	}
	close(app.release)
}

// TestReadyNotBeforeSharedHandlerDelivered: Ready is not true before the
// shared informer's handler has handed its initial objects to the engine
// (informer.HasSynced is true once its store holds them, before the
// handlers have been called).
func TestReadyNotBeforeSharedHandlerDelivered(t *testing.T) {
	for i := range 30 { // the race showed within a few iterations
		func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var objs []any
			for j := 0; j < 50; j++ {
				objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ns-%02d", j)}})
			}
			client := kubefake.NewClientset()
			for _, o := range objs {
				_, _ = client.CoreV1().Namespaces().Create(ctx, o.(*corev1.Namespace), metav1.CreateOptions{})
			}
			factory := informers.NewSharedInformerFactory(client, 0)
			inf := factory.Core().V1().Namespaces().Informer()
			rec := &latest{objects: map[string]*unstructured.Unstructured{}}
			c := &Cluster{opts: ClusterOptions{BatchWindow: time.Millisecond}, applier: rec, log: slog.New(slog.DiscardHandler),
				informers: map[schema.GroupVersionResource]*watched{}, pending: map[string]opa.Change{}, wake: make(chan struct{}, 1), ctx: ctx, connected: true}
			go c.applyLoop(ctx)
			c.share(SharedInformer{Resource: nsGVR, Kind: schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, Informer: inf})
			factory.Start(ctx.Done())
			for {
				if ok, _ := c.Ready(); ok {
					break
				}
				time.Sleep(50 * time.Microsecond)
			}
			if n := rec.len(); n != 50 {
				t.Fatalf("iteration %d: Ready with %d of 50 namespaces applied", i, n)
			}
		}()
	}
}
