package server

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

type ctxKey struct{}

// TestCallContext: a call's context behaves as context.WithTimeout's
// whether or not anything waits on Done, and makes its timer only when
// something does.
func TestCallContext(t *testing.T) {
	closed := func(c context.Context) bool { return closes(c.Done()) }
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		// run does what the case is about to c (parent cancels the
		// request's context) and says what it found wrong, if anything.
		run func(t *testing.T, c *callContext, stop, parent context.CancelFunc)
	}{
		{"a call that never waits makes no timer", time.Minute, func(t *testing.T, c *callContext, stop, _ context.CancelFunc) {
			if err := c.Err(); err != nil {
				t.Errorf("Err %v before the deadline", err)
			}
			if dl, ok := c.Deadline(); !ok || time.Until(dl) < 50*time.Second {
				t.Errorf("Deadline %v, %v; want about a minute from now", dl, ok)
			}
			if c.Value(ctxKey{}) != "request" {
				t.Errorf("Value %v; want the request's", c.Value(ctxKey{}))
			}
			stop()
			if c.real.Load() != nil {
				t.Error("Err, Deadline, Value or stop made the real context")
			}
			if err := c.Err(); !errors.Is(err, context.Canceled) {
				t.Errorf("Err %v after stop; want Canceled", err)
			}
			if !closed(c) {
				t.Error("Done open after stop")
			}
		}},
		{"the deadline passes before anything waits", time.Millisecond, func(t *testing.T, c *callContext, _, _ context.CancelFunc) {
			time.Sleep(5 * time.Millisecond)
			if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Err %v past the deadline; want DeadlineExceeded", err)
			}
			if !closed(c) {
				t.Error("Done open past the deadline")
			}
			if err := context.Cause(c); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Cause %v; want DeadlineExceeded", err)
			}
		}},
		{"Done closes at the deadline", 20 * time.Millisecond, func(t *testing.T, c *callContext, _, _ context.CancelFunc) {
			done := c.Done()
			if c.Err() != nil {
				t.Errorf("Err %v while Done is open", c.Err())
			}
			if !closed(c) {
				t.Fatal("Done open past the deadline")
			}
			<-done
			if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Err %v; want DeadlineExceeded", err)
			}
		}},
		{"the request ends before anything waits", time.Minute, func(t *testing.T, c *callContext, _, parent context.CancelFunc) {
			parent()
			if err := c.Err(); !errors.Is(err, context.Canceled) {
				t.Errorf("Err %v after the request's end; want Canceled", err)
			}
			if !closed(c) {
				t.Error("Done open after the request's end")
			}
		}},
		{"the request ends while an evaluation waits", time.Minute, func(t *testing.T, c *callContext, _, parent context.CancelFunc) {
			ran := make(chan struct{})
			stopAfter := context.AfterFunc(c, func() { close(ran) }) // as evalCancel does
			defer stopAfter()
			parent()
			if !closes(ran) {
				t.Fatal("AfterFunc did not run when the request ended")
			}
			if err := c.Err(); !errors.Is(err, context.Canceled) {
				t.Errorf("Err %v; want Canceled", err)
			}
		}},
		{"stop while an evaluation waits", time.Minute, func(t *testing.T, c *callContext, stop, _ context.CancelFunc) {
			done := c.Done()
			stop()
			if !closes(done) {
				t.Fatal("Done open after stop")
			}
			if err := c.Err(); !errors.Is(err, context.Canceled) {
				t.Errorf("Err %v after stop; want Canceled", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "request"))
			defer cancelParent()
			c, stop := newCallContext(parent, tc.timeout)
			defer stop()
			tc.run(t, c, stop, cancelParent)
		})
	}
}

// closes reports whether ch closes within 2 s.
func closes(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-time.After(2 * time.Second):
		return false
	}
}

// TestCallContextConcurrent: evaluations waiting, checking and a stop at
// once, under -race, end with Done closed and Err set for everyone.
func TestCallContextConcurrent(t *testing.T) {
	for range 100 {
		c, stop := newCallContext(context.Background(), time.Minute)
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if i%2 == 0 {
					<-c.Done()
				}
				for c.Err() == nil {
					time.Sleep(10 * time.Microsecond)
				}
			}()
		}
		stop()
		wg.Wait()
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatalf("Err %v; want Canceled", c.Err())
		}
		select {
		case <-c.Done():
		default:
			t.Fatal("Done open after stop")
		}
	}
}

// TestCallContextAllocations: a call that never waits allocates its
// context and its stop function, no timer, no channel and nothing in
// the request's context (context.WithTimeout: 4 here, and in a request's
// context, made for each request, its done channel and children map too).
func TestCallContextAllocations(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	allocs := testing.AllocsPerRun(1000, func() {
		c, stop := newCallContext(parent, time.Minute)
		_ = c.Err()
		stop()
	})
	if allocs > 2 {
		t.Errorf("%.0f allocations per call that never waits; want at most 2", allocs)
	}
}
