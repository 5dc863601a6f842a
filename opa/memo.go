package opa

import (
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
)

// memo remembers a constraint's verdicts by the values its template can
// read (see analysis.go). Keys are compared exactly, never by hash alone.
// It is bounded: when full it starts over, which costs a few evaluations
// and never a wrong answer.
type memo struct {
	mu      sync.RWMutex
	entries map[int][]memoEntry
	n, max  int
}

type memoEntry struct {
	key *ast.Array
	res []result
}

func newMemo(max int) *memo { return &memo{entries: map[int][]memoEntry{}, max: max} }

func (m *memo) get(key *ast.Array) ([]result, bool) {
	h := key.Hash()
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, e := range m.entries[h] {
		if e.key.Compare(key) == 0 {
			return e.res, true
		}
	}
	return nil, false
}

func (m *memo) put(key *ast.Array, res []result) {
	h := key.Hash()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.entries[h] {
		if e.key.Compare(key) == 0 {
			return
		}
	}
	if m.n >= m.max {
		m.entries = map[int][]memoEntry{}
		m.n = 0
	}
	m.entries[h] = append(m.entries[h], memoEntry{key: key, res: res})
	m.n++
}
