package cluster

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeChurn writes Node status updates through the API server at a rate,
// as the kubelets of a living cluster do: every condition's
// lastHeartbeatTime advances (what a kubelet's status report changes), so
// the Node's resourceVersion does, and every informer sees an update.
// Nothing a placement policy reads changes.
type NodeChurn struct {
	c      *Cluster
	rate   float64
	names  []string
	cancel context.CancelFunc
	wg     sync.WaitGroup

	written, failed atomic.Int64
	lastErr         atomic.Pointer[error]
}

// StartNodeChurn begins updating the named Nodes' status, rate updates a
// second in all, round robin, up to maxInFlight at once; Stop ends it. A
// rate of 0 writes nothing.
func (c *Cluster) StartNodeChurn(rate float64, names []string) *NodeChurn {
	ctx, cancel := context.WithCancel(context.Background())
	ch := &NodeChurn{c: c, rate: rate, names: names, cancel: cancel}
	if rate <= 0 || len(names) == 0 {
		return ch
	}
	ch.wg.Add(1)
	go func() {
		defer ch.wg.Done()
		ch.loop(ctx)
	}()
	return ch
}

// maxInFlight bounds the updates written at once. Kubelets write
// concurrently; one writer at a time, each update a get and a status
// update through a loaded API server, reached 30 to 55 updates a second
// on two vCPUs when 100 were asked.
const maxInFlight = 8

func (ch *NodeChurn) loop(ctx context.Context) {
	interval := time.Duration(float64(time.Second) / ch.rate)
	next := time.Now()
	slots := make(chan struct{}, maxInFlight)
	var writes sync.WaitGroup
	defer writes.Wait()
	for k := 0; ; k++ {
		next = next.Add(interval)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		select {
		case <-ctx.Done():
			return
		case slots <- struct{}{}: // the rate falls behind when every slot is busy
		}
		name := ch.names[k%len(ch.names)]
		writes.Add(1)
		go func() {
			defer func() { <-slots; writes.Done() }()
			if err := ch.heartbeat(ctx, name); err != nil {
				if ctx.Err() == nil {
					ch.failed.Add(1)
					ch.lastErr.Store(&err)
				}
				return
			}
			ch.written.Add(1)
		}()
	}
}

// heartbeat advances the Node's conditions' heartbeat times, as the
// kubelet's status report does (a get, then an update of the status).
func (ch *NodeChurn) heartbeat(ctx context.Context, name string) error {
	nodes := ch.c.Client().CoreV1().Nodes()
	n, err := nodes.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get node %s: %w", name, err)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	if len(n.Status.Conditions) == 0 {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
	}
	for i := range n.Status.Conditions {
		n.Status.Conditions[i].LastHeartbeatTime = now
	}
	if _, err := nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update node %s status: %w", name, err)
	}
	return nil
}

// Stop ends the updates; it reports how many were written and failed,
// and the last failure.
func (ch *NodeChurn) Stop() (written, failed int64, last error) {
	ch.cancel()
	ch.wg.Wait()
	if p := ch.lastErr.Load(); p != nil {
		last = *p
	}
	return ch.written.Load(), ch.failed.Load(), last
}
