// Package freelist keeps the working memory that requests hand on to the
// requests after them: lists that every processor shares and that the
// garbage collector never empties.
//
// It owns the keeping only: what a kept value holds, and clearing it
// before it is put back, is its user's. It is not a cache: a value is
// taken by one user at a time, and Get makes one when none is kept.
//
// sync.Pool, which these lists replace on the request path, gives each
// processor its own last value and empties itself over two collections.
// A call served on the other processor, or after two collections, then
// makes its buffers anew: at 5000 candidates about a megabyte, and when
// the collector is marking, the call pays for that allocation with mark
// assists (one filter call at 5000 candidates spent 10.5 of its 29 ms
// assisting, in the answer buffer's allocation). A list under a mutex
// gives any processor the value the last call put back, at the cost of an
// uncontended lock per Get and Put.
package freelist

import "sync"

// DefaultMax is how many values a List keeps when its Max is 0: about as
// many as requests work at once on a small machine, with a filter answer
// kept for the prioritize call after it.
const DefaultMax = 8

// List keeps up to Max values for reuse, the last put back given first
// (its memory is the likeliest to be in a cache). The zero value is ready
// to use; a List must not be copied after first use.
type List[T any] struct {
	// New makes a value when none is kept; nil: Get then gives T's zero
	// value.
	New func() T
	// Max bounds how many values are kept (0: DefaultMax); more put back
	// are left to the collector. What a List keeps stays in the heap while
	// the process runs, so Max times the largest value is what it may hold
	// when idle.
	Max int

	mu   sync.Mutex
	kept []T
}

// Get takes a kept value, or makes one with New.
func (l *List[T]) Get() T {
	var zero T
	l.mu.Lock()
	if n := len(l.kept); n > 0 {
		x := l.kept[n-1]
		l.kept[n-1] = zero
		l.kept = l.kept[:n-1]
		l.mu.Unlock()
		return x
	}
	l.mu.Unlock()
	if l.New == nil {
		return zero
	}
	return l.New()
}

// Put keeps x for a later Get, unless Max values are kept already. x must
// not be used after.
func (l *List[T]) Put(x T) {
	l.mu.Lock()
	if len(l.kept) < l.max() {
		l.kept = append(l.kept, x)
	}
	l.mu.Unlock()
}

// Len is how many values are kept.
func (l *List[T]) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.kept)
}

func (l *List[T]) max() int {
	if l.Max > 0 {
		return l.Max
	}
	return DefaultMax
}
