package server

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

// namesArray is names as a NodeNames array, with their spans.
func namesArray(names ...string) ([]byte, []nameSpan) {
	var b strings.Builder
	var spans []nameSpan
	b.WriteByte('[')
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		spans = append(spans, nameSpan{b.Len(), b.Len() + len(n)})
		b.WriteString(n)
		b.WriteByte('"')
	}
	b.WriteByte(']')
	return []byte(b.String()), spans
}

func internAll(t *nameTable, names ...string) ([]string, []int32) {
	b, spans := namesArray(names...)
	out, ids := make([]string, len(names)), make([]int32, len(names))
	t.intern(b, spans, out, ids)
	return out, ids
}

// checkNumbering fails t unless got are names and equal numbers mean
// equal names, within one call.
func checkNumbering(t testing.TB, names, got []string, ids []int32) {
	t.Helper()
	byID := map[int32]string{}
	for i := range names {
		if got[i] != names[i] {
			t.Fatalf("name %d interned as %q, want %q", i, got[i], names[i])
		}
		if prev, ok := byID[ids[i]]; ok && prev != names[i] {
			t.Fatalf("number %d is both %q and %q", ids[i], prev, names[i])
		}
		byID[ids[i]] = names[i]
	}
	if len(byID) != len(distinct(names)) {
		t.Fatalf("%d numbers for %d distinct names", len(byID), len(distinct(names)))
	}
}

func distinct(names []string) map[string]bool {
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}

func TestInternedNames(t *testing.T) {
	tab := newNameTable(8)
	first, ids := internAll(tab, "a", "b", "a", "", "ü")
	checkNumbering(t, []string{"a", "b", "a", "", "ü"}, first, ids)
	again, ids2 := internAll(tab, "b", "a")
	if unsafe.StringData(again[1]) != unsafe.StringData(first[0]) || ids2[0] != ids[1] {
		t.Error("a name given again was not the interned string and number")
	}
	// Past the bound the table starts over; the call is still numbered
	// consistently, and the strings handed out before stay valid.
	names := []string{"c", "d", "e", "f", "g", "h", "a"}
	got, ids3 := internAll(tab, names...)
	checkNumbering(t, names, got, ids3)
	if len(tab.ids) != len(names) {
		t.Errorf("the table holds %d names after starting over, want %d", len(tab.ids), len(names))
	}
	if first[0] != "a" || first[1] != "b" {
		t.Error("strings handed out before the table started over changed")
	}
}

// TestInternedNamesConcurrently: calls on overlapping names while the
// table starts over under them (-race); each call numbered consistently.
func TestInternedNamesConcurrently(t *testing.T) {
	tab := newNameTable(20)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				var names []string
				for k := 0; k < 12; k++ {
					names = append(names, fmt.Sprintf("n-%d", (i*w+k*7)%30))
				}
				got, ids := internAll(tab, names...)
				byID := map[int32]string{}
				for j := range names {
					if got[j] != names[j] || (byID[ids[j]] != "" && byID[ids[j]] != names[j]) {
						errs <- fmt.Sprintf("call %d/%d: %q numbered %d, taken by %q", w, i, names[j], ids[j], byID[ids[j]])
						return
					}
					byID[ids[j]] = names[j]
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestNameRepeats(t *testing.T) {
	var b nameBuffers
	for _, tc := range []struct {
		ids  []int32
		want bool
	}{
		{nil, false},
		{[]int32{0}, false},
		{[]int32{3, 64, 129, 0}, false},
		{[]int32{5, 70, 5}, true},
		{[]int32{200, 1, 200}, true},
		{[]int32{63, 64, 65}, false},
	} {
		if got := b.repeats(tc.ids); got != tc.want {
			t.Errorf("repeats(%v) = %v, want %v", tc.ids, got, tc.want)
		}
		for i, w := range b.seen {
			if w != 0 {
				t.Fatalf("after repeats(%v) word %d of the set is %x, want 0", tc.ids, i, w)
			}
		}
	}
}
