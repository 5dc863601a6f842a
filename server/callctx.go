package server

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// callContext is an extender call's evaluation context: the request's
// context with the call's deadline (--request-timeout), whose timer and
// done channel are made only when something waits on Done.
//
// context.WithTimeout made them for every call: the timer context, its
// timer, a done channel and a children map in the request's context (six
// allocations a call; in an allocation profile of the service at 500
// candidates, 1.6 KB of a cycle's 24 KiB of garbage), while
// a replica answered from the memo never waits: the engine checks Err
// between its steps and waits on Done only to stop an evaluation
// (opa/evaluate.go, evalCancel), which a memo hit does not run. Until
// Done is called, Err reads the request's context and the clock; after,
// every method is the real context's (context.WithDeadline(parent,
// deadline)).
type callContext struct {
	parent   context.Context
	deadline time.Time
	once     sync.Once
	real     atomic.Pointer[deadlineContext]
	stopped  atomic.Bool
}

// deadlineContext is the real context Done makes.
type deadlineContext struct {
	ctx    context.Context
	cancel context.CancelFunc
}

var _ context.Context = (*callContext)(nil)

// newCallContext is parent with a deadline timeout from now, and the
// function that releases it (as context.WithTimeout's cancel: call it
// when the call is done).
func newCallContext(parent context.Context, timeout time.Duration) (*callContext, context.CancelFunc) {
	c := &callContext{parent: parent, deadline: time.Now().Add(timeout)}
	return c, c.stop
}

func (c *callContext) Deadline() (time.Time, bool) { return c.deadline, true }

// Done makes the real context on first call.
func (c *callContext) Done() <-chan struct{} {
	c.once.Do(c.start)
	return c.real.Load().ctx.Done()
}

func (c *callContext) start() {
	ctx, cancel := context.WithDeadline(c.parent, c.deadline)
	c.real.Store(&deadlineContext{ctx: ctx, cancel: cancel})
	// stop stores stopped before it loads real, and start stores real
	// before it loads stopped: one of them sees the other.
	if c.stopped.Load() {
		cancel()
	}
}

// Err is what the real context's Err would be: the request's end first,
// then the deadline, then a stop.
func (c *callContext) Err() error {
	if r := c.real.Load(); r != nil {
		return r.ctx.Err()
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	if c.stopped.Load() {
		return context.Canceled
	}
	return nil
}

// Value is the real context's once made (context.Cause and the context
// package's own children find their cancelCtx through it), else the
// request's.
func (c *callContext) Value(key any) any {
	if r := c.real.Load(); r != nil {
		return r.ctx.Value(key)
	}
	return c.parent.Value(key)
}

// stop releases the real context's timer, if Done made one; Err and Done
// report the call canceled after it, as a cancelled context would.
func (c *callContext) stop() {
	c.stopped.Store(true)
	if r := c.real.Load(); r != nil {
		r.cancel()
	}
}
