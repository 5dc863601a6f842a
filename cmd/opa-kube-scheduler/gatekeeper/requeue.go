package gatekeeper

import (
	"context"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// EventsToRegister implements fwk.EnqueueExtensions: a pod this plugin
// rejected can pass once a Node is added or changes (labels, taints,
// conditions, allocatable, annotations: what the scheduler reports as a
// Node update). What the scheduler cannot see (a policy change, the
// engine becoming ready, a Namespace change) is handled by the requeuer.
func (pl *Plugin) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: pl.nodeChanged},
	}, nil
}

// nodeChanged requeues the pod: any change the scheduler reports may be
// one a policy reads. The engine applies the change within its batch
// window (20ms) while the pod waits out its backoff (1s and more).
func (pl *Plugin) nodeChanged(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	pl.metrics.requeued(requeueNode)
	return fwk.Queue, nil
}

// maxRemembered bounds the rejected pods kept for requeueing.
const maxRemembered = 10000

// requeuer moves the pods this plugin rejected back to the active queue
// (Handle.Activate) when what rejected them may have changed in a way the
// scheduler has no event for: the policy generation moved, the engine
// became ready, or their Namespace changed and the engine has applied it.
// It only reads the engine and calls Activate: no API writes (the
// extender must patch pods to the same effect; source.Nudger).
type requeuer struct {
	activator fwk.PodActivator
	engine    interface{ Stats() opa.Stats }
	ready     func() (bool, string)
	metrics   *profileMetrics
	interval  time.Duration

	mu   sync.Mutex
	pods map[types.UID]*v1.Pod
	// namespaces changed, with the time their change arrived: their pods
	// are activated once the engine has applied something after it.
	namespaces map[string]time.Time
	// unready is true when a pod was rejected because the policies had not
	// synced: every remembered pod is activated once they have.
	unready bool
}

func newRequeuer(a fwk.PodActivator, engine interface{ Stats() opa.Stats }, ready func() (bool, string), m *profileMetrics) *requeuer {
	return &requeuer{activator: a, engine: engine, ready: ready, metrics: m, interval: 100 * time.Millisecond,
		pods: map[types.UID]*v1.Pod{}, namespaces: map[string]time.Time{}}
}

// rejected remembers a pod denied somewhere (or everywhere); unready
// says it was rejected because the policies had not synced yet.
func (r *requeuer) rejected(pod *v1.Pod, unready bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unready = r.unready || unready
	if _, ok := r.pods[pod.UID]; !ok && len(r.pods) >= maxRemembered {
		for uid := range r.pods { // drop any one: bounded, not ordered
			delete(r.pods, uid)
			break
		}
	}
	r.pods[pod.UID] = pod
}

// namespaceChanged is the Namespace informer's handler.
func (r *requeuer) namespaceChanged(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.namespaces[name]; !ok {
		r.namespaces[name] = time.Now()
	}
}

// run checks the engine every interval until ctx ends.
func (r *requeuer) run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	t := time.NewTicker(r.interval)
	defer t.Stop()
	lastGen := r.engine.Stats().PolicyGeneration
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := r.engine.Stats()
		ready, _ := r.ready()
		r.mu.Lock()
		unready := r.unready && ready
		r.mu.Unlock()
		switch {
		case unready:
			r.activateAll(logger, requeueReady)
		case st.PolicyGeneration != lastGen:
			r.activateAll(logger, requeuePolicy)
		default:
			r.activateNamespaces(logger, st.LastApply)
		}
		lastGen = st.PolicyGeneration
	}
}

func (r *requeuer) activateAll(logger klog.Logger, reason string) {
	r.mu.Lock()
	pods := r.pods
	r.pods = map[types.UID]*v1.Pod{}
	r.unready = false
	clear(r.namespaces)
	r.mu.Unlock()
	r.activate(logger, pods, reason)
}

// activateNamespaces activates the pods of namespaces whose change the
// engine has applied (its last apply is later than the change).
func (r *requeuer) activateNamespaces(logger klog.Logger, lastApply time.Time) {
	now := time.Now()
	r.mu.Lock()
	var pods map[types.UID]*v1.Pod
	for ns, at := range r.namespaces {
		if !namespaceApplied(at, lastApply, now) {
			continue
		}
		delete(r.namespaces, ns)
		for uid, p := range r.pods {
			if p.Namespace == ns {
				if pods == nil {
					pods = map[types.UID]*v1.Pod{}
				}
				pods[uid] = p
				delete(r.pods, uid)
			}
		}
	}
	r.mu.Unlock()
	r.activate(logger, pods, requeueNamespace)
}

// namespaceApplied tells whether the engine has taken a Namespace change
// that arrived at `at`, its last apply having ended at lastApply:
//   - an apply that ends 50ms after the change arrived has taken it (the
//     cluster source batches for 20ms);
//   - in a quiet cluster the change's own apply is the last one and ends
//     sooner: once the change is namespaceSettle old, an apply that ended
//     after it arrived is taken to be that one;
//   - and after namespaceGiveUp the change is taken as applied anyway (the
//     source applied it before this handler ran). An activation too early
//     costs a pod one more rejection, one never made strands it until the
//     scheduler's own flush (5 minutes).
func namespaceApplied(at, lastApply, now time.Time) bool {
	switch {
	case lastApply.After(at.Add(50 * time.Millisecond)):
		return true
	case lastApply.After(at) && now.Sub(at) >= namespaceSettle:
		return true
	}
	return now.Sub(at) >= namespaceGiveUp
}

const (
	namespaceSettle = 500 * time.Millisecond
	namespaceGiveUp = 5 * time.Second
)

func (r *requeuer) activate(logger klog.Logger, pods map[types.UID]*v1.Pod, reason string) {
	if len(pods) == 0 {
		return
	}
	byName := make(map[string]*v1.Pod, len(pods))
	for _, p := range pods {
		byName[p.Namespace+"/"+p.Name] = p
	}
	r.activator.Activate(logger, byName)
	r.metrics.activated(reason, len(byName))
	logger.V(2).Info("requeued pods the policy rejected", "plugin", Name, "reason", reason, "pods", len(byName))
}
