package freelist_test

import (
	"runtime"
	"sync"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/freelist"
)

func TestList(t *testing.T) {
	made := 0
	l := &freelist.List[*[]byte]{New: func() *[]byte { made++; b := make([]byte, 0, 8); return &b }, Max: 2}
	a, b, c := l.Get(), l.Get(), l.Get()
	if made != 3 {
		t.Fatalf("made %d values for three Gets on an empty list, want 3", made)
	}
	l.Put(a)
	l.Put(b)
	l.Put(c) // past Max: left to the collector
	if n := l.Len(); n != 2 {
		t.Fatalf("kept %d values with Max 2, want 2", n)
	}
	if got := l.Get(); got != b {
		t.Errorf("Get gave %p, want the last value put back %p", got, b)
	}
	if got := l.Get(); got != a {
		t.Errorf("Get gave %p, want %p", got, a)
	}
	if made != 3 {
		t.Errorf("made %d values, want the kept ones given back", made)
	}
}

func TestListDefaultMax(t *testing.T) {
	l := &freelist.List[int]{New: func() int { return 0 }}
	for i := range freelist.DefaultMax + 3 {
		l.Put(i)
	}
	if n := l.Len(); n != freelist.DefaultMax {
		t.Errorf("kept %d values with Max 0, want DefaultMax %d", n, freelist.DefaultMax)
	}
}

func TestListWithoutNew(t *testing.T) {
	var l freelist.List[*[]byte]
	if got := l.Get(); got != nil {
		t.Fatalf("Get on an empty list without New gave %p, want nil", got)
	}
	b := new([]byte)
	l.Put(b)
	if got := l.Get(); got != b {
		t.Errorf("Get gave %p, want the value put back %p", got, b)
	}
}

// TestListSurvivesCollections is why the list exists: what sync.Pool
// drops after two collections is still there, whichever processor asks.
func TestListSurvivesCollections(t *testing.T) {
	made := 0
	l := &freelist.List[*[]byte]{New: func() *[]byte { made++; b := make([]byte, 1<<20); return &b }}
	l.Put(l.Get())
	runtime.GC()
	runtime.GC()
	done := make(chan *[]byte)
	go func() { done <- l.Get() }() // perhaps on another processor
	l.Put(<-done)
	if made != 1 {
		t.Errorf("made %d buffers, want the one kept through two collections", made)
	}
}

// TestListConcurrent: values are handed to one user at a time (run with
// -race).
func TestListConcurrent(t *testing.T) {
	l := &freelist.List[*int]{New: func() *int { return new(int) }, Max: 4}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				x := l.Get()
				*x++ // a race if two users held x
				l.Put(x)
			}
		})
	}
	wg.Wait()
	if n := l.Len(); n > 4 {
		t.Errorf("kept %d values with Max 4", n)
	}
}
