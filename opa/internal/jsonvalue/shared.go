package jsonvalue

import (
	"hash/maphash"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Shared values across documents. The pods of a ReplicaSet, a Job or a
// DaemonSet arrive byte for byte alike but for a few fields (name, uid,
// the token volume's name): their containers' resources, ports, probes,
// security contexts, their tolerations and affinity are the same JSON in
// every pod. Shared remembers the value of an object, an array or a string
// it has read twice and gives the same term again for the same bytes, so
// that a new replica allocates only what is its own: the objects that hold
// its own values (their keys and their other strings are shared terms).
// OPA's values are immutable to their readers (the engine edits a review
// by copying the path it changes), so one term may serve any number of
// documents and goroutines.
//
// A span's value depends on its bytes only: JSON's objects, arrays and
// strings delimit themselves, and a span's bytes equal to those of one
// that was read before are read the same. Spans are compared by two
// 64-bit hashes under seeds drawn per process, so that no document can be
// made to collide with another on purpose; the table is bounded in
// entries and bytes, and starts over past either bound.
type Shared struct {
	mu    sync.RWMutex
	seeds [2]maphash.Seed
	// seen notes the spans read once, in a fixed table of buckets of two
	// slots, the bucket the digest's low bits: a map grew and started
	// over with every replica's own spans (its name, its uid, the
	// containers that mount its token volume), and was a tenth of what a
	// replica's decoding allocated. A bucket keeps the two spans noted
	// last, so that a span every replica repeats is lost only when two
	// others fall in its bucket between two replicas; with one slot, a
	// replica's own span in the same slot kept it from ever being shared.
	seen   []digest
	terms  map[digest]*ast.Term
	bytes  int // JSON bytes of the spans in terms
	limits SharedLimits
}

// SharedLimits bound a Shared table.
type SharedLimits struct {
	// Entries bounds the spans kept (and, four times over, rounded up to
	// a power of two, the slots that note those seen once).
	Entries int
	// Bytes bounds the JSON bytes of the spans kept.
	Bytes int
	// MinSpan is the shortest span worth a lookup.
	MinSpan int
}

type digest [2]uint64

// NewShared makes a table with limits (zero fields take defaults: 8192
// entries, 1 MiB, spans of 32 bytes and more).
func NewShared(limits SharedLimits) *Shared {
	if limits.Entries <= 0 {
		limits.Entries = 8192
	}
	if limits.Bytes <= 0 {
		limits.Bytes = 1 << 20
	}
	if limits.MinSpan <= 0 {
		limits.MinSpan = 32
	}
	return &Shared{seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		seen: make([]digest, seenSlots(limits.Entries)), terms: map[digest]*ast.Term{}, limits: limits}
}

// Parse is Parse, with the values of s for the spans s holds.
func (s *Shared) Parse(b []byte) (ast.Value, error) {
	buf := endsPool.Get().(*[]int32)
	defer endsPool.Put(buf)
	return parse(parser{b: b, shared: s, ends: spans(b, buf)}, &keepAll)
}

var endsPool = sync.Pool{New: func() any { return new([]int32) }}

// spans gives, for each byte of b that opens an object or array, the
// offset past its closing byte (0 elsewhere), in *buf; nil when the
// brackets do not balance or nest deeper than MaxDepth, which the parse
// then reports.
func spans(b []byte, buf *[]int32) []int32 {
	if len(b) > 1<<30 {
		return nil
	}
	ends := *buf
	if cap(ends) < len(b) {
		ends = make([]int32, len(b))
	} else {
		ends = ends[:len(b)]
		clear(ends)
	}
	*buf = ends
	var st [32]int32
	stack := st[:0]
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			if len(stack) == MaxDepth {
				return nil
			}
			stack = append(stack, int32(i))
		case '}', ']':
			if len(stack) == 0 {
				return nil
			}
			ends[stack[len(stack)-1]] = int32(i + 1)
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) != 0 {
		return nil
	}
	return ends
}

// composite reads the object or array at p.i, through p.shared when
// there is one: the term kept for its bytes, or read and offered to the
// table. The document itself (depth 0) is its own.
func (p *parser) composite(depth int) (*ast.Term, error) {
	read := func() (*ast.Term, error) {
		if p.b[p.i] == '{' {
			return p.object(depth + 1)
		}
		return p.array(depth + 1)
	}
	s := p.shared
	if s == nil || p.ends == nil || depth == 0 {
		return read()
	}
	end := int(p.ends[p.i])
	if end-p.i < s.limits.MinSpan {
		return read()
	}
	span := p.b[p.i:end]
	d := digest{maphash.Bytes(s.seeds[0], span), maphash.Bytes(s.seeds[1], span)}
	if t := s.get(d); t != nil {
		p.i = end
		return t, nil
	}
	t, err := read()
	if err == nil && p.i == end {
		s.offer(d, t, len(span))
	}
	return t, err
}

// sharedString reads the string value at p.i through p.shared: the term
// kept for its bytes, or a new one offered to the table; nil (nothing
// read) without a table, or for a string that needs unquoting, which str
// reads. A replica's own objects (those that hold its name, uid or token
// volume) are read anew, and their strings were read with them: the
// namespace, the images, the values Kubernetes' defaults set, a fifth of
// what a replica's decoding allocated. A string and an object or array
// never share a digest but by a collision of both hashes: their first
// bytes differ.
func (p *parser) sharedString() *ast.Term {
	s := p.shared
	if s == nil || p.ends == nil {
		return nil
	}
	end, plain := p.plainString()
	if !plain {
		return nil
	}
	span := p.b[p.i : end+1]
	d := digest{maphash.Bytes(s.seeds[0], span), maphash.Bytes(s.seeds[1], span)}
	t := s.get(d)
	if t == nil {
		t = ast.StringTerm(string(span[1 : len(span)-1]))
		s.offer(d, t, len(span))
	}
	p.i = end + 1
	return t
}

func (s *Shared) get(d digest) *ast.Term {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.terms[d]
}

// offer keeps t for d if d was seen before (a span seen once is likely
// the document's own: a name, a uid), else notes d.
func (s *Shared) offer(d digest, t *ast.Term, size int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.seenBefore(d) {
		return
	}
	if len(s.terms) >= s.limits.Entries || s.bytes+size > s.limits.Bytes {
		s.terms, s.bytes = map[digest]*ast.Term{}, 0
	}
	if _, ok := s.terms[d]; !ok {
		s.terms[d] = t
		s.bytes += size
	}
}

// seenBefore reports whether d is noted in its bucket, and notes it there
// first, ahead of the span noted before it (the bucket's other is
// dropped).
func (s *Shared) seenBefore(d digest) bool {
	b := int(d[0]&uint64(len(s.seen)/2-1)) * 2
	first, second := s.seen[b], s.seen[b+1]
	switch d {
	case first:
		return true
	case second:
		s.seen[b], s.seen[b+1] = d, first
		return true
	}
	s.seen[b], s.seen[b+1] = d, first
	return false
}

// seenSlots is the size of the seen table for a table of entries: four
// slots an entry, a power of two (buckets of two).
func seenSlots(entries int) int {
	n := 1
	for n < 4*entries {
		n <<= 1
	}
	return n
}

// Len is the number of spans s keeps.
func (s *Shared) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.terms)
}
