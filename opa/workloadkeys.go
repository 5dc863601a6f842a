package opa

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/policyset"
)

// The pods of one workload (a ReplicaSet's, a Job's: one generateName in
// one namespace) reach the scheduler one after the other, their reviews
// alike but for a few values: the name, the uid, the token volume's name
// in the volumes and in each container's mounts. A pod's memo keys are
// the values at a few hundred paths of its review, looked up anew for
// each pod: a quarter of the /filter handler's CPU for a replica at 500
// candidates (bench/perf BenchmarkFilterHandler/replica, 13% with the
// lookups and the comparison below). workloadKeys keeps, per workload,
// the last pod's review and the values its request looked up; the next
// pod's request finds where the two reviews differ (lookup.Differ, which
// walks only what the decoding did not share) and takes the kept value
// of every path that no difference can move (the policy set's
// lookup.ReadIndex). A path a difference can move is looked up as
// before, so a key is always the value at its path in the pod's own
// review, whatever pod it is compared with: a workload's first pod (a new
// Job's), and a pod of no workload (a StatefulSet's), is compared with
// the last pod kept in its namespace.

// workloadKeys holds the kept key values, by workload.
type workloadKeys struct {
	mu   sync.Mutex
	byWL map[string]*keptKeys
	// reused counts the key values taken from a kept pod (Stats).
	reused atomic.Uint64
}

// keptKeys are a pod's key values: immutable once kept, read by any
// number of requests.
type keptKeys struct {
	snap   *policyset.Snapshot
	review ast.Value
	slots  []*ast.Term // by key path number; nil where none was looked up
	values int         // slots that hold a value
}

const (
	// maxKeptWorkloads bounds the workloads and namespaces kept (each
	// holds a review and a value per key path, some 10 KB); the table
	// starts over past it.
	maxKeptWorkloads = 64
	// maxReviewDiffs bounds the differences a pod may have with the kept
	// one: past it the pod is not of the workload as kept (a new
	// template), and its keys are looked up.
	maxReviewDiffs = 32
	// maxUnsharedValues bounds the equal values a pod's review may hold
	// apart from the kept review's (compared, not skipped) before its own
	// replaces it: the first pod of a workload is decoded before its
	// parts were seen twice (jsonvalue.Shared), and shares none of them
	// with the pods after it.
	maxUnsharedValues = 4
)

// workloadNames are the names a pod's key values are kept under: its
// workload ("" for a pod without generateName: a StatefulSet's, a bare
// pod, which only its namespace's last pod serves) and its namespace's
// last (a name no workload has: namespaces hold no '/'). Made once per
// decoded pod.
func workloadNames(namespace, generateName string) (workload, nsLast string) {
	nsLast = namespace + "/"
	if generateName != "" {
		workload = nsLast + generateName
	}
	return workload, nsLast
}

func (w *workloadKeys) get(name string) *keptKeys {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.byWL[name]
}

// put keeps k for the workload name (unless "") and as its namespace's
// last (ns).
func (w *workloadKeys) put(name, ns string, k *keptKeys) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byWL == nil || len(w.byWL) >= maxKeptWorkloads {
		w.byWL = map[string]*keptKeys{}
	}
	if name != "" {
		w.byWL[name] = k
	}
	w.byWL[ns] = k
}

// reuseKeys fills the request's key cache with the values kept for the
// pod's workload (or, for its first pod, the last kept in its namespace)
// that no difference between the two reviews can move. It gives the
// workload's kept values when they serve its next pod as well, nil when
// keepKeys should keep this pod's (none of the workload's were kept, or
// the kept review shares little with this one). Without the memo there
// are no keys: the engine is the reference the fast paths are tested
// against.
func (r *memoKeys) reuseKeys(pod *Pod) *keptKeys {
	if r.e.opts.DisableMemo {
		return nil
	}
	var kept *keptKeys
	if pod.workload != "" {
		kept = r.e.workloadKeys.get(pod.workload)
	}
	own := kept != nil && kept.snap == r.snap
	if !own {
		// A workload's first pod (a new Job's), or a pod of none, is
		// compared with the last pod kept in its namespace: another
		// workload's, alike in much that templates read (the namespace,
		// the absent oldObject, fields neither sets).
		if kept = r.e.workloadKeys.get(pod.nsLast); kept == nil || kept.snap != r.snap {
			return nil
		}
	}
	b := r.buffers()
	diffs, ok := b.differ.Diff(kept.review, r.podReview.Value, maxReviewDiffs)
	if !ok {
		return nil
	}
	index := r.snap.KeyReads()
	moved := b.moved[:0]
	for _, d := range diffs {
		moved = index.Touched(d, moved)
	}
	b.moved = moved
	// The request's cache is empty: it takes the kept values whole, then
	// drops those the differences can move.
	b.keyCache = append(b.keyCache[:0], kept.slots...)
	n := uint64(kept.values)
	for _, id := range moved {
		if id < len(b.keyCache) && b.keyCache[id] != nil {
			b.keyCache[id] = nil
			n--
		}
	}
	r.e.workloadKeys.reused.Add(n)
	if !own || b.differ.Unshared() > maxUnsharedValues {
		return nil
	}
	return kept
}

// keepKeys keeps the request's key values for the pod's workload (if it
// has one) and as its namespace's last, unless serving (reuseKeys's
// answer) serves it: of this policy set, within maxReviewDiffs of the
// pod and sharing its decoded parts, and holding every path the pod
// looked up. The next pod is compared with the kept one, which differs
// from it as little as this one does, and a pod that keeps nothing makes
// no garbage.
func (r *memoKeys) keepKeys(pod *Pod, serving *keptKeys) {
	if r.e.opts.DisableMemo || r.pb == nil || len(r.pb.keyCache) == 0 {
		return
	}
	if serving != nil && !lacks(serving.slots, r.pb.keyCache) {
		return
	}
	// Only the values of indexed paths are kept: a value the index does
	// not know could not be told moved.
	index := r.snap.KeyReads()
	k := &keptKeys{snap: r.snap, review: r.podReview.Value, slots: slices.Clone(r.pb.keyCache)}
	for id, v := range k.slots {
		switch {
		case v == nil:
		case !index.Has(id):
			k.slots[id] = nil
		default:
			k.values++
		}
	}
	r.e.workloadKeys.put(pod.workload, pod.nsLast, k)
}

// lacks reports whether got holds a value where kept has none.
func lacks(kept, got []*ast.Term) bool {
	for id, v := range got {
		if v != nil && (id >= len(kept) || kept[id] == nil) {
			return true
		}
	}
	return false
}
