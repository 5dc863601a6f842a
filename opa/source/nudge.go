package source

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// NudgeAnnotation is the annotation the nudger sets on a pending pod: the
// policy generation that may now admit it.
const NudgeAnnotation = "opa-scheduler-extender/policy-generation"

// maxRemembered bounds the pods remembered for a nudge.
const maxRemembered = 10000

// Nudger gets pods this service rejected rescheduled when policy changes.
//
// The scheduler retries an unschedulable pod on cluster events it knows
// could help, or after up to 5 minutes; a policy change inside this
// service is not such an event. So when the policy generation moves, the
// nudger patches an annotation on each remembered pod that is still
// pending: a pod update, which puts the pod back in the scheduler's active
// queue. Pods that were bound meanwhile are left alone.
type Nudger struct {
	client kubernetes.Interface
	engine interface{ Stats() opa.Stats }
	log    *slog.Logger
	// Interval between checks of the policy generation (default 200ms).
	Interval time.Duration

	mu      sync.Mutex
	pods    map[types.UID]podRef
	nudged  uint64
	lastGen uint64
}

type podRef struct {
	namespace, name string
	seen            time.Time
}

// NewNudger makes a nudger; Run starts it and Rejected feeds it.
func NewNudger(client kubernetes.Interface, engine interface{ Stats() opa.Stats }, log *slog.Logger) *Nudger {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Nudger{client: client, engine: engine, log: log, Interval: 200 * time.Millisecond, pods: map[types.UID]podRef{}}
}

// Rejected remembers a pod that was denied on some node. It never blocks.
func (n *Nudger) Rejected(namespace, name string, uid types.UID) {
	if uid == "" || name == "" {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.pods) >= maxRemembered {
		// Forget the oldest half: they had the longest to be retried.
		cutoff := time.Now()
		for _, p := range n.pods {
			if p.seen.Before(cutoff) {
				cutoff = p.seen
			}
		}
		for uid, p := range n.pods {
			if len(n.pods) < maxRemembered/2 {
				break
			}
			if !p.seen.After(cutoff.Add(time.Minute)) {
				delete(n.pods, uid)
			}
		}
	}
	n.pods[uid] = podRef{namespace: namespace, name: name, seen: time.Now()}
}

// Nudged counts the pods nudged so far.
func (n *Nudger) Nudged() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.nudged
}

// Run checks the policy generation until ctx ends.
func (n *Nudger) Run(ctx context.Context) {
	n.mu.Lock()
	n.lastGen = n.engine.Stats().PolicyGeneration
	n.mu.Unlock()
	t := time.NewTicker(n.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		gen := n.engine.Stats().PolicyGeneration
		n.mu.Lock()
		if gen == n.lastGen || len(n.pods) == 0 {
			n.lastGen = gen
			n.mu.Unlock()
			continue
		}
		n.lastGen = gen
		pods := n.pods
		n.pods = map[types.UID]podRef{}
		n.mu.Unlock()
		n.nudge(ctx, gen, pods)
	}
}

func (n *Nudger) nudge(ctx context.Context, gen uint64, pods map[types.UID]podRef) {
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, NudgeAnnotation, fmt.Sprint(gen)))
	count := 0
	for uid, p := range pods {
		pod, err := n.client.CoreV1().Pods(p.namespace).Get(ctx, p.name, metav1.GetOptions{})
		if err != nil {
			if !apierrors.IsNotFound(err) {
				n.log.Warn("cannot read pod to nudge", "pod", p.namespace+"/"+p.name, "err", err)
			}
			continue
		}
		if pod.UID != uid || pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil {
			continue
		}
		if _, err := n.client.CoreV1().Pods(p.namespace).Patch(ctx, p.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			n.log.Warn("cannot nudge pod", "pod", p.namespace+"/"+p.name, "err", err)
			continue
		}
		count++
	}
	if count > 0 {
		n.mu.Lock()
		n.nudged += uint64(count)
		n.mu.Unlock()
		n.log.Info("nudged pending pods after a policy change", "pods", count, "policyGeneration", gen)
	}
}
