package opa

import (
	"runtime"

	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/policyset"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/verdict"
)

// Evaluating a pod's memo misses in parallel. kube-scheduler sends one
// filter or prioritize at a time and waits for the answer, so while a pod
// that is new to the memo (a one-off Job's pod, a new image) is evaluated
// constraint after constraint, the other cores are idle: its latency is
// the sum of its misses. prefetch finds the pod-only constraints whose
// verdict the memo does not hold and evaluates them on up to
// Options.Parallelism goroutines before judgePod records them in policy
// order; only Rego runs in parallel (a prepared query and the request's
// read transaction, both safe for concurrent readers), every request
// field is written by the request's own goroutine. Verdicts, messages,
// explain and counters are those of the sequential path: evalPod takes a
// prefetched result exactly where it would have evaluated.

// prefetched is one pod-only constraint's memo entry and what it held
// (hit, res), or, for a miss, its evaluation (evaluated, res, err), so that
// evalPod neither computes the key nor looks it up again.
type prefetched struct {
	set       bool // prefetch looked this constraint up
	view      *podView
	entry     *memoEntry
	hit       bool
	evaluated bool
	res       []verdict.Result
	err       error
	took      time.Duration
}

// fetchedAt is what prefetch found for the constraint at order, or nil.
func (r *prefetcher) fetchedAt(order int) *prefetched {
	if r.pb != nil && order < len(r.pb.fetched) && r.pb.fetched[order].set {
		return &r.pb.fetched[order]
	}
	return nil
}

// parallelism is the number of goroutines a request evaluates misses on:
// Options.Parallelism, or by default one fewer than GOMAXPROCS, at least
// one. The scheduler sends one request at a time, so the other Ps are
// idle, but not free: handing a share of a pod's misses to another thread
// costs a wake-up and that thread's cold caches, and the collector's mark
// worker runs on the idle P. On two vCPUs a new pod's misses are judged
// sooner one after the other: BenchmarkPodStream/one-off (bench/perf)
// measured 0.56 ms against 0.66 on both cores, and through HTTP the
// one-off pods' cycle p50 1.24 to 1.30 ms against 1.34 to 1.40.
func (e *Engine) parallelism() int {
	if e.opts.Parallelism > 0 {
		return e.opts.Parallelism
	}
	return max(1, runtime.GOMAXPROCS(0)-1)
}

// prefetch evaluates the misses among the pod-only constraints of the
// policy set at orders, when there are at least two and more than one
// goroutine may run them.
func (r *prefetcher) prefetch(orders []int) {
	workers := r.e.parallelism()
	if workers < 2 || len(orders) < 2 {
		return
	}
	var jobs []prefetchJob
	// Keys whose helpers (helper.go) miss their memo are made after those
	// helpers ran, on the goroutines too: a new Job's image is new to
	// every is_exempt.
	var rekey []int
	r.deferHelpers = true
	for _, order := range orders {
		if j, ok, deferred := r.fetch.prefetchLookup(order); deferred {
			rekey = append(rekey, order)
		} else if ok {
			jobs = append(jobs, j)
		}
	}
	r.deferHelpers = false
	if len(rekey) > 0 {
		// The misses found so far are evaluated beside the helpers: a
		// one-off pod's image templates need no helper answer, and its
		// helper answers decide the other keys, made afterwards.
		calls := r.helpers.deferredCalls()
		r.e.workers.inParallel(workers, len(calls)+len(jobs), func(i int) {
			if i < len(calls) {
				c := calls[i]
				r.helpers.evalHelper(c.h, c.v, c.entry, c.read)
				return
			}
			runJob(r.request, jobs[i-len(calls)])
		})
		clear(r.deferred)
		r.deferred = r.deferred[:0]
		r.evals += uint64(len(jobs))
		jobs = jobs[:0]
		for _, order := range rekey {
			if j, ok, _ := r.fetch.prefetchLookup(order); ok {
				jobs = append(jobs, j)
			}
		}
		if len(jobs) < 2 {
			return // evaluated in place by evalPod, with the entry found here
		}
	} else if len(jobs) < 2 {
		return // evaluated in place by evalPod, with the entry found here
	}
	r.e.workers.inParallel(workers, len(jobs), func(i int) { runJob(r.request, jobs[i]) })
	r.evals += uint64(len(jobs))
}

// runJob evaluates a prefetched miss into its slot.
func runJob(r *request, j prefetchJob) {
	start := time.Now()
	j.out.res, j.out.err = r.evalQuery(j.bc, j.review, nil)
	j.out.took, j.out.evaluated = time.Since(start), true
}

// prefetchJob is a pod-only constraint's miss, to be evaluated.
type prefetchJob struct {
	bc     *policyset.BoundConstraint
	review *ast.Term
	out    *prefetched
}

// prefetchLookup finds the memo entry of the constraint at order and
// records it for evalPod; ok: a miss, to evaluate. deferred: its key
// needs a helper answer the helper memo does not hold (with
// r.deferHelpers), and nothing was recorded.
func (r *prefetcher) prefetchLookup(order int) (j prefetchJob, ok, deferred bool) {
	bc := r.snap.Constraints[order]
	if !r.keys.memoOK(bc) {
		return prefetchJob{}, false, false
	}
	view := r.reviews.podView(bc, true)
	pending := len(r.deferred)
	key := r.keys.keyTerms(bc, r.podReview, view)
	if len(r.deferred) > pending {
		return prefetchJob{}, false, true
	}
	e := r.keys.entry(bc, key)
	b := r.buffers()
	if len(b.fetched) == 0 { // this request's first: one slot per constraint
		b.fetched = resize(b.fetched, len(r.snap.Constraints))
	}
	f := &b.fetched[order]
	*f = prefetched{set: true, view: view, entry: e}
	if f.res, f.hit = e.Get(0); f.hit {
		return prefetchJob{}, false, false
	}
	return prefetchJob{bc: bc, review: r.reviews.reviewOf(view), out: f}, true, false
}

// inParallel runs do(0) ... do(n-1) on up to workers goroutines, the
// caller's among them.
func (p *workerPool) inParallel(workers, n int, do func(i int)) {
	workers = min(workers, n)
	var next sync.Mutex
	i := 0
	take := func() (int, bool) {
		next.Lock()
		defer next.Unlock()
		if i == n {
			return 0, false
		}
		i++
		return i - 1, true
	}
	run := func() {
		for k, ok := take(); ok; k, ok = take() {
			do(k)
		}
	}
	var wg sync.WaitGroup
	for w := 1; w < workers; w++ {
		wg.Add(1)
		p.start(func() {
			defer wg.Done()
			run()
		})
	}
	run()
	wg.Wait()
}

// newWorkerPool is an engine's pool of evaluation workers, which run
// inParallel's shares on goroutines that outlive a request. A goroutine
// started for each request begins with a small stack, and topdown's deep
// recursion grew it by copying, again on every request: 4% of a one-off
// pod's CPU. A share finds an idle worker or starts a goroutine of its own
// (never waits); a worker ends when maxIdleWorkers others already wait, or
// after idleWorkerTimeout without work, so that an idle engine keeps no
// goroutines.
func newWorkerPool() *workerPool {
	return &workerPool{tasks: make(chan func()), idleTimeout: idleWorkerTimeout}
}

const (
	// maxIdleWorkers bounds the workers kept waiting between requests.
	maxIdleWorkers = 16
	// idleWorkerTimeout is how long a worker waits for work before it
	// ends: one-off pods come every few dozen requests under load.
	idleWorkerTimeout = 2 * time.Second
)

type workerPool struct {
	tasks       chan func()
	idleTimeout time.Duration
	mu          sync.Mutex
	idle        int // workers waiting on tasks, or about to
	live        int // workers running
}

func (p *workerPool) start(task func()) {
	select {
	case p.tasks <- task:
		return
	default:
	}
	p.mu.Lock()
	p.live++
	p.mu.Unlock()
	go p.work(task)
}

// work runs task, then the tasks handed to it, until it would be one
// idle worker too many or it waited idleTimeout for one.
func (p *workerPool) work(task func()) {
	timer := time.NewTimer(p.idleTimeout)
	defer func() {
		timer.Stop()
		p.mu.Lock()
		p.live--
		p.mu.Unlock()
	}()
	for {
		task()
		p.mu.Lock()
		if p.idle >= maxIdleWorkers {
			p.mu.Unlock()
			return
		}
		p.idle++
		p.mu.Unlock()
		timer.Reset(p.idleTimeout)
		var ok bool
		select {
		case task = <-p.tasks:
			ok = true
		case <-timer.C:
		}
		p.mu.Lock()
		p.idle--
		p.mu.Unlock()
		if !ok {
			return
		}
	}
}
