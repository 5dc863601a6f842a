package opa

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestInParallelRunsEachOnce: every index runs exactly once, on up to
// workers goroutines at a time, from callers running at once.
func TestInParallelRunsEachOnce(t *testing.T) {
	pool := newWorkerPool()
	for _, tc := range []struct{ workers, n int }{{1, 5}, {2, 1}, {2, 7}, {4, 100}, {8, 3}} {
		var callers sync.WaitGroup
		for range 4 {
			callers.Add(1)
			go func() {
				defer callers.Done()
				counts := make([]atomic.Int32, tc.n)
				var running, peak atomic.Int32
				pool.inParallel(tc.workers, tc.n, func(i int) {
					now := running.Add(1)
					for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
					}
					time.Sleep(50 * time.Microsecond)
					counts[i].Add(1)
					running.Add(-1)
				})
				for i := range counts {
					if c := counts[i].Load(); c != 1 {
						t.Errorf("workers %d, n %d: index %d ran %d times", tc.workers, tc.n, i, c)
					}
				}
				if p := peak.Load(); int(p) > tc.workers {
					t.Errorf("workers %d, n %d: %d ran at once", tc.workers, tc.n, p)
				}
			}()
		}
		callers.Wait()
	}
}

// TestWorkerPoolKeepsFewIdle: workers that finish wait for more work up
// to maxIdleWorkers, the others end, a task never waits for a worker, and
// workers idle for idleTimeout end too.
func TestWorkerPoolKeepsFewIdle(t *testing.T) {
	p := &workerPool{tasks: make(chan func()), idleTimeout: time.Hour}
	var done sync.WaitGroup
	release := make(chan struct{})
	for range 3 * maxIdleWorkers {
		done.Add(1)
		p.start(func() { <-release; done.Done() })
	}
	close(release)
	done.Wait()
	settles(t, p, maxIdleWorkers, maxIdleWorkers)
	var ran atomic.Int32
	done.Add(2 * maxIdleWorkers)
	for range 2 * maxIdleWorkers { // more than wait: the rest start their own
		p.start(func() { ran.Add(1); done.Done() })
	}
	done.Wait()
	if ran.Load() != 2*maxIdleWorkers {
		t.Fatalf("%d tasks ran, want %d", ran.Load(), 2*maxIdleWorkers)
	}

	short := &workerPool{tasks: make(chan func()), idleTimeout: 20 * time.Millisecond}
	done.Add(3)
	for range 3 {
		short.start(done.Done)
	}
	done.Wait()
	settles(t, short, 0, 0)
}

// settles waits until p has idle workers waiting and live ones running.
func settles(t *testing.T, p *workerPool, idle, live int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p.mu.Lock()
		gotIdle, gotLive := p.idle, p.live
		p.mu.Unlock()
		if gotIdle == idle && gotLive == live {
			return
		}
		if gotIdle > maxIdleWorkers || time.Now().After(deadline) {
			t.Fatalf("%d idle and %d live workers, want %d and %d", gotIdle, gotLive, idle, live)
		}
		time.Sleep(time.Millisecond)
	}
}
