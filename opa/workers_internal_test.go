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
	for _, tc := range []struct{ workers, n int }{{1, 5}, {2, 1}, {2, 7}, {4, 100}, {8, 3}} {
		var callers sync.WaitGroup
		for range 4 {
			callers.Add(1)
			go func() {
				defer callers.Done()
				counts := make([]atomic.Int32, tc.n)
				var running, peak atomic.Int32
				inParallel(tc.workers, tc.n, func(i int) {
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
// to maxIdleWorkers; the others end, and a task never waits for a worker.
func TestWorkerPoolKeepsFewIdle(t *testing.T) {
	p := &workerPool{tasks: make(chan func())}
	var done sync.WaitGroup
	release := make(chan struct{})
	for range 3 * maxIdleWorkers {
		done.Add(1)
		p.start(func() { <-release; done.Done() })
	}
	close(release)
	done.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p.mu.Lock()
		idle := p.idle
		p.mu.Unlock()
		if idle == maxIdleWorkers {
			break
		}
		if idle > maxIdleWorkers || time.Now().After(deadline) {
			t.Fatalf("%d idle workers, want %d", idle, maxIdleWorkers)
		}
		time.Sleep(time.Millisecond)
	}
	var ran atomic.Int32
	done.Add(2 * maxIdleWorkers)
	for range 2 * maxIdleWorkers { // more than wait: the rest start their own
		p.start(func() { ran.Add(1); done.Done() })
	}
	done.Wait()
	if ran.Load() != 2*maxIdleWorkers {
		t.Fatalf("%d tasks ran, want %d", ran.Load(), 2*maxIdleWorkers)
	}
}
