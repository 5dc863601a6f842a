package memo

import (
	"fmt"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

func key(i int) []*ast.Term { return []*ast.Term{ast.StringTerm(fmt.Sprint("pod-", i))} }

func TestMemoBoundedAndKeepsWorkingSet(t *testing.T) {
	m := New[string](Options{MaxResults: 1000, MaxBytes: 1 << 30})
	// A working set of 300 results (under half of what probation leaves)
	// is never lost once found twice, however many one-off entries pass
	// through.
	for round := range 20 {
		for i := range 300 {
			e := m.Find(1, key(i))
			if v, ok := e.Get(0); ok {
				if v != fmt.Sprint(i) {
					t.Fatalf("entry %d holds %q", i, v)
				}
				continue
			}
			if round > 1 {
				t.Fatalf("round %d: working-set entry %d was dropped", round, i)
			}
			m.Put(e, 0, fmt.Sprint(i), 8)
		}
		for j := range 100 {
			e := m.Find(1, key(100000+round*1000+j))
			m.Put(e, 0, "one-off", 8)
		}
	}
	if s := m.Stats(); s.Results > 1000 || s.Rotations == 0 {
		t.Errorf("stats %+v: want at most 1000 results and some rotations", s)
	}
}

func TestMemoBoundedByBytes(t *testing.T) {
	m := New[string](Options{MaxResults: 1 << 20, MaxBytes: 64 << 10})
	for i := range 5000 {
		e := m.Find(1, key(i))
		m.Put(e, 0, "x", 200)
	}
	if s := m.Stats(); s.Bytes > 64<<10 {
		t.Errorf("%d bytes held, budget 64 KiB", s.Bytes)
	}
}

// TestEntryClasses: class 0 is held in the entry, the others in its map;
// each class counts once, however often it is put, and a class's absence
// is told from a zero result.
func TestEntryClasses(t *testing.T) {
	m := New[int](Options{})
	e := m.Find(1, key(1))
	steps := []struct {
		put, class, value int // put: 1 to put value in class first
		want              int
		found             bool
		results           int
	}{
		{class: 0, found: false},
		{put: 1, class: 0, value: 0, want: 0, found: true, results: 1},
		{class: 3, found: false, results: 1},
		{put: 1, class: 3, value: 30, want: 30, found: true, results: 2},
		{put: 1, class: 0, value: 7, want: 7, found: true, results: 2},
		{put: 1, class: 5, value: 50, want: 50, found: true, results: 3},
		{class: 3, want: 30, found: true, results: 3},
	}
	for i, s := range steps {
		if s.put == 1 {
			m.Put(e, s.class, s.value, 8)
		}
		got, found := e.Get(s.class)
		if found != s.found || got != s.want {
			t.Errorf("step %d: class %d = %d, %v; want %d, %v", i, s.class, got, found, s.want, s.found)
		}
		if n := m.Stats().Results; n != s.results {
			t.Errorf("step %d: %d results counted, want %d", i, n, s.results)
		}
	}
}

func TestMemoOwnersAreApart(t *testing.T) {
	m := New[string](Options{})
	a := m.Find(1, key(1))
	m.Put(a, 0, "a", 1)
	if _, ok := m.Find(2, key(1)).Get(0); ok {
		t.Error("owner 2 sees owner 1's result")
	}
	if v, _ := m.Find(1, key(1)).Get(0); v != "a" {
		t.Errorf("owner 1 lost its result: %q", v)
	}
}

func TestClassesKeepOneValuePerName(t *testing.T) {
	names := NewNames(1 << 10)
	nums := make([]int32, 2)
	gen := names.IDs([]string{"n1", "n2"}, nums)
	c := NewClasses(1 << 10)
	proj := func(s string) func() (*ast.Array, any) {
		return func() (*ast.Array, any) { return ast.NewArray(ast.StringTerm(s)), s }
	}
	first := ast.NewObject(ast.Item(ast.StringTerm("v"), ast.IntNumberTerm(1)))
	id, _ := c.Of(gen, nums[0], first, true, proj("pool-a"))
	for i := range 100 {
		// Each status update is a new value: the table holds the newest.
		v := ast.NewObject(ast.Item(ast.StringTerm("v"), ast.IntNumberTerm(i+2)))
		if got, aux := c.Of(gen, nums[0], v, true, proj("pool-a")); got != id || aux != "pool-a" {
			t.Fatalf("update %d changed the class %d -> %d", i, id, got)
		}
	}
	if c.Len() != 1 {
		t.Errorf("%d nodes remembered, want 1", c.Len())
	}
	if got, _ := c.Of(gen, nums[1], first, false, proj("pool-b")); got == id {
		t.Error("another projection got the same class")
	}
	if c.Len() != 1 {
		t.Error("a request node was remembered")
	}
	ids := make([]int, 1)
	c.Known(gen, nums[:1], []ast.Value{first}, func(int) bool { return true }, ids, make([]any, 1))
	if ids[0] != 0 {
		t.Error("a replaced value is still known")
	}
}

func TestNamesStartOver(t *testing.T) {
	n := NewNames(4)
	out := make([]int32, 3)
	g1 := n.IDs([]string{"a", "b", "c"}, out)
	if out[0] == out[1] || out[1] == out[2] {
		t.Fatalf("numbers %v are not distinct", out)
	}
	g2 := n.IDs([]string{"d", "e", "f"}, out)
	if g2 == g1 {
		t.Error("a numbering past its bound kept its generation")
	}
	c := NewClasses(16)
	v := ast.NewObject()
	c.Of(g1, 0, v, true, func() (*ast.Array, any) { return ast.NewArray(), nil })
	ids := []int{0}
	c.Known(g2, []int32{0}, []ast.Value{v}, func(int) bool { return true }, ids, make([]any, 1))
	if ids[0] != 0 {
		t.Error("a class remembered under the old numbering was found under the new one")
	}
}

// TestFindCopiesTheKey: Find takes the caller's buffer; the entry keeps a
// copy, so reusing the buffer for the next key changes neither entry.
func TestFindCopiesTheKey(t *testing.T) {
	m := New[int](Options{})
	buf := []*ast.Term{ast.StringTerm("a"), ast.IntNumberTerm(1)}
	first := m.Find(7, buf)
	m.Put(first, 0, 1, 8)
	buf[0], buf[1] = ast.StringTerm("b"), ast.IntNumberTerm(2)
	second := m.Find(7, buf)
	if second == first {
		t.Fatal("a different key found the first entry")
	}
	again := m.Find(7, []*ast.Term{ast.StringTerm("a"), ast.IntNumberTerm(1)})
	if again != first {
		t.Fatal("the first key no longer finds its entry after its buffer was reused")
	}
	if r, ok := again.Get(0); !ok || r != 1 {
		t.Fatalf("the first entry holds %v, %v", r, ok)
	}
	if m.Find(8, []*ast.Term{ast.StringTerm("a"), ast.IntNumberTerm(1)}) == first {
		t.Fatal("another owner found the first entry")
	}
}

// TestFindEqualKeys: a key finds its entry whether its terms are the
// entry's own (interned) or equal copies, and a key that differs in one
// element of an array does not.
func TestFindEqualKeys(t *testing.T) {
	m := New[int](Options{})
	interned := replicaKey()
	e := m.Find(1, interned)
	if m.Find(1, interned) != e {
		t.Error("the entry's own terms do not find it")
	}
	if m.Find(1, replicaKey()) != e {
		t.Error("equal copies of the terms do not find the entry")
	}
	other := replicaKey()
	other[1] = ast.ArrayTerm(ast.StringTerm("registry.example/app:1"), ast.StringTerm("registry.example/sidecar:3"))
	if m.Find(1, other) == e {
		t.Error("a key whose array differs found the entry")
	}
}

// replicaKey is a key as a replica's constraint makes it: a few values
// and arrays read element by element.
func replicaKey() []*ast.Term {
	var arrays []*ast.Term
	for i := range 8 {
		arrays = append(arrays, ast.ArrayTerm(ast.StringTerm("registry.example/app:1"), ast.StringTerm(fmt.Sprint("registry.example/sidecar:", i)),
			ast.ObjectTerm(ast.Item(ast.StringTerm("privileged"), ast.BooleanTerm(false)))))
	}
	return append([]*ast.Term{ast.StringTerm("default"), ast.StringTerm("web")}, arrays...)
}

// BenchmarkFindHit finds an entry with a key of interned arrays (the
// entry's own terms, as a replica's key holds) and with equal copies.
func BenchmarkFindHit(b *testing.B) {
	m := New[int](Options{})
	interned := replicaKey()
	m.Find(1, interned)
	for _, bc := range []struct {
		name string
		key  []*ast.Term
	}{{"interned", interned}, {"copies", replicaKey()}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				m.Find(1, bc.key)
			}
		})
	}
}

// TestMemoOneOffsStayInProbation: keys found once (one-off pods) hold at
// most probation's share of the budget however many pass, and do not
// push out what was found twice; a key found again while in probation
// keeps its results.
func TestMemoOneOffsStayInProbation(t *testing.T) {
	const maxResults = 800
	m := New[string](Options{MaxResults: maxResults, MaxBytes: 1 << 30})
	for i := range 50 {
		m.Put(m.Find(1, key(i)), 0, fmt.Sprint(i), 8)
		if v, ok := m.Find(1, key(i)).Get(0); !ok || v != fmt.Sprint(i) {
			t.Fatalf("key %d found again in probation: %q, %v", i, v, ok)
		}
	}
	for j := range 20000 {
		m.Put(m.Find(1, key(100000+j)), 0, "one-off", 8)
		if s := m.Stats(); s.Results > 50+maxResults/probationShare {
			t.Fatalf("after %d one-offs: %d results held", j+1, s.Results)
		}
	}
	for i := range 50 {
		if v, ok := m.Find(1, key(i)).Get(0); !ok || v != fmt.Sprint(i) {
			t.Errorf("key %d found twice was dropped by one-offs: %q, %v", i, v, ok)
		}
	}
}

// TestMemoSecondSightingAfterProbation: a key whose entry was dropped
// with probation before it recurred goes straight to the generations
// when it does, and then outlives any number of one-offs.
func TestMemoSecondSightingAfterProbation(t *testing.T) {
	m := New[string](Options{MaxResults: 800, MaxBytes: 1 << 30})
	m.Put(m.Find(1, key(1)), 0, "first", 8)
	oneOffs := func(from int) {
		for j := range 1000 {
			m.Put(m.Find(1, key(from+j)), 0, "one-off", 8)
		}
	}
	oneOffs(100000)
	e := m.Find(1, key(1))
	if _, ok := e.Get(0); ok {
		t.Fatal("key 1 still held after probation was dropped: the test does not drop it")
	}
	m.Put(e, 0, "second", 8)
	oneOffs(200000)
	if v, ok := m.Find(1, key(1)).Get(0); !ok || v != "second" {
		t.Errorf("key 1, seen before, then put: %q, %v; want it kept", v, ok)
	}
}
