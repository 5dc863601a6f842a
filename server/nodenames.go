package server

import (
	"sync"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/freelist"
)

// Node names. A names-only request carries every candidate's name: at
// 5000 candidates, 80 KB of strings, a list of 5000 to hold them and a set
// of 5000 to find duplicates, per call, which was half of what a
// scheduling cycle (filter, then prioritize) allocated once the engine's
// own answers were recycled. The names are the cluster's nodes, the same
// from call to call, so the scanner interns them (internedNames): each
// name's string is made once, and gets a number that the duplicate check
// marks in a bitset instead of hashing into a set. The lists are recycled
// (nameBuffers), given back once the answer is written.

// maxInternedNames bounds the table: past it, the table starts over (the
// strings handed out stay valid; only their numbers are forgotten). A
// cluster has far fewer nodes; names that come and go (nodes replaced
// under new names) fill it slowly.
const maxInternedNames = 1 << 17

// nameTable interns node names and numbers them densely.
type nameTable struct {
	mu    sync.RWMutex
	ids   map[string]int32
	names []string
	max   int
}

func newNameTable(max int) *nameTable { return &nameTable{ids: map[string]int32{}, max: max} }

var internedNames = newNameTable(maxInternedNames)

// nameSpan is a name's place in a request body (its content, between the
// quotes).
type nameSpan struct{ start, end int }

// intern sets names[i] and ids[i] to the interned string and number of the
// name b holds at spans[i]. The numbers of one call come from one state of
// the table, so that equal numbers are equal names.
func (t *nameTable) intern(b []byte, spans []nameSpan, names []string, ids []int32) {
	t.mu.RLock()
	all := t.lookup(b, spans, names, ids)
	t.mu.RUnlock()
	if all {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.ids)+len(spans) > t.max {
		t.ids, t.names = make(map[string]int32, len(spans)), nil
	}
	for i, s := range spans {
		key := b[s.start:s.end]
		id, ok := t.ids[string(key)] // no allocation: the key is only looked up
		if !ok {
			name := string(key)
			id = int32(len(t.names))
			t.names = append(t.names, name)
			t.ids[name] = id
		}
		names[i], ids[i] = t.names[id], id
	}
}

// lookup is intern for names the table holds; false when one is missing
// (then names and ids are to be filled again under the write lock).
func (t *nameTable) lookup(b []byte, spans []nameSpan, names []string, ids []int32) bool {
	for i, s := range spans {
		id, ok := t.ids[string(b[s.start:s.end])]
		if !ok {
			return false
		}
		names[i], ids[i] = t.names[id], id
	}
	return true
}

// nameBuffers are one request's name lists, recycled.
type nameBuffers struct {
	spans []nameSpan
	names []string
	ids   []int32
	seen  []uint64 // bitset over ids, all zero between uses
}

var nameBuffersPool = freelist.List[*nameBuffers]{New: func() *nameBuffers { return new(nameBuffers) }}

// release gives b back for a later request: nothing may read the lists
// after (the interned strings themselves stay valid).
func (b *nameBuffers) release() {
	if b == nil {
		return
	}
	clear(b.names)
	nameBuffersPool.Put(b)
}

// repeats reports whether a number repeats in ids (one table state's: a
// name given twice); the bitset is left zeroed.
func (b *nameBuffers) repeats(ids []int32) bool {
	maxID := int32(0)
	for _, id := range ids {
		maxID = max(maxID, id)
	}
	words := int(maxID)/64 + 1
	if cap(b.seen) < words {
		b.seen = make([]uint64, words)
	}
	seen := b.seen[:words]
	dup := false
	for _, id := range ids {
		w, bit := id/64, uint64(1)<<(id%64)
		if seen[w]&bit != 0 {
			dup = true
			break
		}
		seen[w] |= bit
	}
	for _, id := range ids { // clear what was set, not the whole set
		seen[id/64] = 0
	}
	return dup
}
