package server

import (
	"context"
	"io"
	"math"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"time"
)

// A few large requests at once must not take the process past its memory
// limit: request bodies share a budget of bytes in flight. A request
// reserves its Content-Length (the largest allowed body when it has none)
// before its body is read, waits up to BodyWait for room, and is answered
// 429 with Retry-After when none comes; the scheduler retries the pod. The
// reservation is held until the answer is written, since the decoded
// request lives that long.

// compactAbove is the body size from which white space is dropped as the
// body is read: below it, holding the padding costs less than looking at
// every byte twice.
const compactAbove = 1 << 20

// DefaultBodyWait is the default Options.BodyWait.
const DefaultBodyWait = time.Second

// defaultBodyBudget is the budget when none is given: a quarter of the
// memory limit (GOMEMLIMIT, which deploy/ sets from the container's limit),
// but at least one largest body; without a limit, four largest bodies.
func defaultBodyBudget(maxBody int64) int64 {
	limit := debug.SetMemoryLimit(-1)
	if limit <= 0 || limit == math.MaxInt64 {
		return 4 * maxBody
	}
	return max(maxBody, limit/4)
}

// bodyBudget is a weighted semaphore of body bytes.
type bodyBudget struct {
	mu       sync.Mutex
	capacity int64
	used     int64
	// changed, made by the first request that waits, is closed when
	// bytes are released (and a later waiter makes another): a budget
	// nobody waits on costs no channel per request.
	changed chan struct{}
}

func newBodyBudget(capacity int64) *bodyBudget {
	return &bodyBudget{capacity: capacity}
}

// acquire reserves n bytes (at most the capacity), waiting at most wait
// and until ctx ends. A budget with room answers at once, without a timer.
func (b *bodyBudget) acquire(ctx context.Context, wait time.Duration, n int64) (int64, bool) {
	n = min(n, b.capacity)
	if b.tryAcquire(n) {
		return n, true
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		b.mu.Lock()
		if b.used+n <= b.capacity {
			b.used += n
			b.mu.Unlock()
			return n, true
		}
		if b.changed == nil {
			b.changed = make(chan struct{})
		}
		changed := b.changed
		b.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return 0, false
		}
	}
}

func (b *bodyBudget) tryAcquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.capacity {
		return false
	}
	b.used += n
	return true
}

func (b *bodyBudget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
	b.mu.Unlock()
}

func (b *bodyBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// limitBodies is the middleware that holds a request until its body fits
// the budget.
func (s *Server) limitBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		want := r.ContentLength
		if want < 0 || want > s.maxBodyBytes {
			want = s.maxBodyBytes // unknown length, or refused later as too large
		}
		got, ok := s.bodies.acquire(r.Context(), s.bodyWait, want)
		if !ok {
			s.metrics.bodyRefusals.Inc()
			w.Header().Set("Retry-After", strconv.Itoa(max(1, int(s.bodyWait/time.Second))))
			writeJSON(w, http.StatusTooManyRequests, errorBody{Error: "too many large requests in flight: " +
				strconv.FormatInt(s.bodies.capacity, 10) + " bytes of request bodies are being processed; retry"})
			return
		}
		s.metrics.bodyBytes.Add(float64(got))
		defer func() {
			s.bodies.release(got)
			s.metrics.bodyBytes.Sub(float64(got))
		}()
		// The size cap counts the bytes on the wire, padding included.
		raw := http.MaxBytesReader(w, r.Body, s.maxBodyBytes)
		r.Body = raw
		if r.ContentLength < 0 || r.ContentLength > compactAbove {
			r.Body = struct {
				io.Reader
				io.Closer
			}{compactJSON(raw), raw}
		}
		next.ServeHTTP(w, r)
	})
}

// compactJSON drops the white space between JSON tokens as the body is
// read, so that the decoder, which keeps a whole value in memory before it
// decodes it, never holds padding. Strings pass unchanged, and one space
// stays between two literals (1 2, tr ue) so that malformed input stays
// malformed.
func compactJSON(r io.Reader) io.Reader { return &compactor{r: r, buf: make([]byte, 32<<10)} }

type compactor struct {
	r        io.Reader
	buf      []byte
	pending  []byte // read from r, not yet handed out
	err      error
	inString bool
	escaped  bool
	space    bool // white space seen since the last byte handed out
	last     byte // the last byte handed out outside white space
}

func literal(ch byte) bool {
	return ch >= '0' && ch <= '9' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch == '.' || ch == '-' || ch == '+'
}

func (c *compactor) Read(p []byte) (int, error) {
	k := 0
	for k < len(p) {
		if len(c.pending) == 0 {
			if c.err != nil {
				break
			}
			var n int
			n, c.err = c.r.Read(c.buf)
			c.pending = c.buf[:n]
			continue
		}
		// Runs of bytes that change no state go out at once: inside a
		// string up to its next quote or backslash, outside one up to the
		// next white space or quote. The bytes that remain go one by one,
		// below.
		if n := c.run(len(p) - k); n > 0 {
			copy(p[k:], c.pending[:n])
			if !c.inString {
				c.last = c.pending[n-1]
			}
			k += n
			c.pending = c.pending[n:]
			continue
		}
		ch := c.pending[0]
		if !c.inString && (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
			c.space = true
			c.pending = c.pending[1:]
			continue
		}
		if c.space && !c.inString && literal(c.last) && literal(ch) {
			p[k] = ' '
			k++
			c.space = false
			continue // ch goes out on the next round, if there is room
		}
		c.space = false
		switch {
		case c.inString && c.escaped:
			c.escaped = false
		case c.inString && ch == '\\':
			c.escaped = true
		case c.inString && ch == '"':
			c.inString = false
		case !c.inString && ch == '"':
			c.inString = true
		}
		c.last = ch
		p[k] = ch
		k++
		c.pending = c.pending[1:]
	}
	if k == 0 && len(c.pending) == 0 && c.err != nil {
		return 0, c.err
	}
	return k, nil
}

// run is how many of the pending bytes, at most limit, change no state:
// within a string (not after a backslash) the bytes before a quote or a
// backslash; outside strings, with no white space pending, the bytes
// before white space or a quote.
func (c *compactor) run(limit int) int {
	b := c.pending[:min(len(c.pending), limit)]
	stop := &compactStops
	switch {
	case c.inString && !c.escaped:
		stop = &stringStops
	case c.inString || c.space:
		return 0
	}
	n := 0
	for n < len(b) && !stop[b[n]] {
		n++
	}
	return n
}

var (
	stringStops  = [256]bool{'"': true, '\\': true}
	compactStops = [256]bool{'"': true, ' ': true, '\t': true, '\n': true, '\r': true}
)
