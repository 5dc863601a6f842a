package cluster

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// FakeNode returns a Node that the scheduler treats as a healthy, empty
// machine: capacity and allocatable of 32 CPU, 256Gi memory, 110 pods and
// 1Ti ephemeral storage, a Ready=True condition, and the usual
// kubernetes.io/hostname, kubernetes.io/os and kubernetes.io/arch labels
// (labels given here win). No kubelet runs, so nothing ever changes it.
func FakeNode(name string, labels map[string]string, taints []corev1.Taint) *corev1.Node {
	l := map[string]string{
		"kubernetes.io/hostname": name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
	}
	for k, v := range labels {
		l[k] = v
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("32"),
		corev1.ResourceMemory:           resource.MustParse("256Gi"),
		corev1.ResourcePods:             resource.MustParse("110"),
		corev1.ResourceEphemeralStorage: resource.MustParse("1Ti"),
	}
	now := metav1.Now()
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{
			Capacity:    res,
			Allocatable: res.DeepCopy(),
			Phase:       corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{{
				Type:               corev1.NodeReady,
				Status:             corev1.ConditionTrue,
				Reason:             "KubeletReady",
				Message:            "fake node for the e2e harness",
				LastHeartbeatTime:  now,
				LastTransitionTime: now,
			}},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}},
		},
	}
}

// CreateNodes creates n nodes, mk(i) for i in [0, n), with up to 16 requests
// in flight. If the API server dropped the status on create, it is written
// with UpdateStatus. It returns the created nodes in index order.
func (c *Cluster) CreateNodes(ctx context.Context, n int, mk func(i int) *corev1.Node) ([]*corev1.Node, error) {
	out := make([]*corev1.Node, n)
	errs := make(chan error, n)
	idx := make(chan int)
	var wg sync.WaitGroup
	cs := c.Client()
	for w := 0; w < 16 && w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range idx {
				want := mk(i)
				got, err := cs.CoreV1().Nodes().Create(ctx, want, metav1.CreateOptions{})
				if err != nil {
					errs <- fmt.Errorf("cluster: creating node %d (%s): %w", i, want.Name, err)
					continue
				}
				if len(got.Status.Allocatable) == 0 && len(want.Status.Allocatable) > 0 {
					got.Status = want.Status
					if got, err = cs.CoreV1().Nodes().UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
						errs <- fmt.Errorf("cluster: node %s status: %w", want.Name, err)
						continue
					}
				}
				out[i] = got
			}
		}()
	}
	for i := 0; i < n; i++ {
		idx <- i
	}
	close(idx)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	return out, nil
}

// PausePod returns a pod with one pause container requesting 10m CPU and
// 16Mi memory. Nothing runs it (no kubelet): it only gets scheduled.
func PausePod(namespace, name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "pause",
				Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse("10m"),
					corev1.ResourceMemory: resource.MustParse("16Mi"),
				}},
			}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
}

// WaitForPod polls the pod every 100ms until cond returns true or timeout
// passes, and returns the last version seen.
func (c *Cluster) WaitForPod(ctx context.Context, namespace, name string, timeout time.Duration, cond func(*corev1.Pod) bool) (*corev1.Pod, error) {
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client().CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return cond(p), nil
	})
	if err != nil {
		if last != nil {
			return last, fmt.Errorf("cluster: pod %s/%s: %w (node %q, conditions %v)", namespace, name, err, last.Spec.NodeName, last.Status.Conditions)
		}
		return nil, fmt.Errorf("cluster: pod %s/%s: %w", namespace, name, err)
	}
	return last, nil
}

// WaitForPodBound waits until the pod has spec.nodeName set.
func (c *Cluster) WaitForPodBound(ctx context.Context, namespace, name string, timeout time.Duration) (*corev1.Pod, error) {
	return c.WaitForPod(ctx, namespace, name, timeout, func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
}
