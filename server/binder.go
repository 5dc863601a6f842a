package server

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// kubeBinder is the Binder backed by a Kubernetes client.
type kubeBinder struct {
	client  kubernetes.Interface
	timeout time.Duration
}

// NewKubeBinder returns a Binder that creates the pods/binding subresource,
// as the scheduler's DefaultBinder does, and reads pods with a GET. timeout
// bounds each API call (on top of the request's own deadline); zero or less
// means no extra bound.
//
// Every /bind costs two API calls (GET pod, POST binding): give the client
// a QPS and burst to match the scheduling rate (client-go's defaults, 5 and
// 10, would cap binding at a few pods per second).
func NewKubeBinder(client kubernetes.Interface, timeout time.Duration) Binder {
	return &kubeBinder{client: client, timeout: timeout}
}

func (b *kubeBinder) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	if b.timeout > 0 {
		return context.WithTimeout(ctx, b.timeout)
	}
	return context.WithCancel(ctx)
}

// Bind binds namespace/name to node, with uid as precondition (the API
// server refuses the binding if the pod was recreated under the same name).
// It is idempotent: when the API server answers Conflict (the pod is
// already bound), it reads the pod and returns nil if it is bound to node
// with that UID.
func (b *kubeBinder) Bind(ctx context.Context, namespace, name string, uid types.UID, node string) error {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	binding := &v1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: uid},
		Target:     v1.ObjectReference{Kind: "Node", Name: node},
	}
	err := b.client.CoreV1().Pods(namespace).Bind(ctx, binding, metav1.CreateOptions{})
	if err == nil {
		return nil
	}
	if apierrors.IsConflict(err) {
		pod, gerr := b.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if gerr == nil && pod.Spec.NodeName == node && (uid == "" || pod.UID == uid) {
			return nil
		}
	}
	return fmt.Errorf("bind pod %s/%s to node %s: %w", namespace, name, node, err)
}

// GetPod reads the pod from the API server.
func (b *kubeBinder) GetPod(ctx context.Context, namespace, name string) (*v1.Pod, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}
