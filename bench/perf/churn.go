package perf

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A living cluster writes its Nodes all the time: the kubelet's status
// reports (heartbeat times in every condition), node-problem-detector's
// conditions, controllers' labels and annotations. A benchmark on a still
// inventory hides what those writes cost. Churn replays them at a rate.

// ChurnKind is what a Node update changes.
type ChurnKind string

const (
	// ChurnHeartbeat changes what a kubelet's status report changes: the
	// conditions' lastHeartbeatTime and the resourceVersion. No policy of
	// the sets here reads either.
	ChurnHeartbeat ChurnKind = "heartbeat"
	// ChurnLabels is a heartbeat that also flips MaintenanceLabel on the
	// node (on at one update, off at the next), a label the realistic
	// set's maintenance template reads.
	ChurnLabels ChurnKind = "labels"
)

// ParseChurnKind reads a -churn-kind flag.
func ParseChurnKind(s string) (ChurnKind, error) {
	switch ChurnKind(s) {
	case ChurnHeartbeat, ChurnLabels:
		return ChurnKind(s), nil
	}
	return "", fmt.Errorf("unknown churn kind %q (want %q or %q)", s, ChurnHeartbeat, ChurnLabels)
}

// UpdatedNode is node i of this size as its update number k (k >= 1)
// writes it; k = 0 is the node as first written.
func (s NodeSize) UpdatedNode(i, k int, kind ChurnKind) *unstructured.Unstructured {
	n := s.Node(i)
	if k == 0 {
		return n
	}
	heartbeat := rfc3339(1764000000 + int64(k)*10)
	if st, ok := n.Object["status"].(map[string]any); ok {
		if conds, ok := st["conditions"].([]any); ok {
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok {
					m["lastHeartbeatTime"] = heartbeat
				}
			}
		}
	}
	n.SetResourceVersion(fmt.Sprint(900000000 + int64(i)*100000 + int64(k)))
	if kind == ChurnLabels {
		labels := n.GetLabels()
		if k%2 == 1 {
			labels[MaintenanceLabel] = "true"
		} else if !UnderMaintenance(i) {
			delete(labels, MaintenanceLabel)
		}
		n.SetLabels(labels)
	}
	return n
}

// Churn updates Nodes at a rate until stopped, Batch of them at a time
// (a file of a policy folder rewritten whole, as a tool that dumps Nodes
// rewrites it): batch k holds the Batch nodes from k*stride mod nodes,
// rounded down to a multiple of Batch (stride prime to the node count, so
// every node is updated as often), written by Write, which receives the
// nodes' indexes and each one's update number. It counts the updates
// written and the write errors.
type Churn struct {
	Rate   float64 // Node updates per second
	Nodes  int
	Batch  int // Nodes per write (0: 1)
	Write  func(ctx context.Context, nodes, updates []int) error
	done   chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup

	written, failed atomic.Int64
	firstErr        atomic.Pointer[error]
	updates         map[int]int // per node: its last update number
}

// Start begins writing; Stop ends it.
func (c *Churn) Start(ctx context.Context) {
	ctx, c.cancel = context.WithCancel(ctx)
	c.updates = map[int]int{}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.loop(ctx)
	}()
}

func (c *Churn) loop(ctx context.Context) {
	if c.Rate <= 0 || c.Nodes == 0 {
		return
	}
	interval := time.Duration(float64(time.Second) * float64(max(c.Batch, 1)) / c.Rate)
	next := time.Now()
	for k := 0; ; k++ {
		next = next.Add(interval)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		nodes, updates := c.write(k, c.updates)
		if err := c.Write(ctx, nodes, updates); err != nil {
			if ctx.Err() != nil {
				return
			}
			c.failed.Add(int64(len(nodes)))
			c.firstErr.CompareAndSwap(nil, &err)
			continue
		}
		c.written.Add(int64(len(nodes)))
	}
}

// write is the k-th write: its nodes and their update numbers, counted
// in updates (per node, its last update number).
func (c *Churn) write(k int, updates map[int]int) (nodes, numbers []int) {
	batch := max(c.Batch, 1)
	first := (k * churnStride(c.Nodes)) % c.Nodes
	first -= first % batch
	for i := first; i < min(first+batch, c.Nodes); i++ {
		updates[i]++
		nodes, numbers = append(nodes, i), append(numbers, updates[i])
	}
	return nodes, numbers
}

// Plan is what the writes Start makes in d hold, in order (nodes and their
// update numbers, as Write receives them), for a writer that prepares
// them before the run: a writer's work is not the measured server's, and
// done in the load generator's process it would be counted in the
// latencies it measures.
func (c *Churn) Plan(d time.Duration) (nodes, updates [][]int) {
	if c.Rate <= 0 || c.Nodes == 0 {
		return nil, nil
	}
	n := int(c.Rate / float64(max(c.Batch, 1)) * d.Seconds())
	counts := map[int]int{}
	for k := range n {
		ns, us := c.write(k, counts)
		nodes, updates = append(nodes, ns), append(updates, us)
	}
	return nodes, updates
}

// Stop ends the updates and reports how many were written, and the first
// write error.
func (c *Churn) Stop() (written int64, err error) {
	if c.cancel != nil {
		c.cancel()
	}
	c.wg.Wait()
	if p := c.firstErr.Load(); p != nil {
		err = fmt.Errorf("%d node updates failed, the first: %w", c.failed.Load(), *p)
	}
	return c.written.Load(), err
}

// Written is how many updates were written so far (0 for no Churn: a
// client of a still cluster, such as the load generator's floor server's).
func (c *Churn) Written() int64 {
	if c == nil {
		return 0
	}
	return c.written.Load()
}

// churnStride is a step through n nodes that reaches every one: a prime
// near n/3 that does not divide n (updates spread over pools and files).
func churnStride(n int) int {
	for s := max(1, n/3) | 1; s < 4*n+3; s += 2 {
		if isPrime(s) && n%s != 0 {
			return s
		}
	}
	return 1
}

func isPrime(n int) bool {
	if n < 2 {
		return false
	}
	for d := 2; d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}
