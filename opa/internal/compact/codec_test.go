package compact

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// doc is a Node-like document: shared keys and images, its own name.
func doc(i int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"metadata":{"name":"node-%d","labels":{"pool":"pool-%d"}},"status":{"images":[`, i, i%3)
	for j := 0; j < 40; j++ {
		if j > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"names":["registry.example/app-%d@sha256:%064x"],"sizeBytes":%d}`, j, j*7919, 1000+j)
	}
	b.WriteString(`]}}`)
	return []byte(b.String())
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name    string
		samples [][]byte
		docs    [][]byte
	}{
		{"no samples", nil, [][]byte{doc(1), []byte(`{}`)}},
		{"like the samples", [][]byte{doc(0), doc(1)}, [][]byte{doc(2), doc(500)}},
		{"unlike the samples", [][]byte{doc(0)}, [][]byte{[]byte(`{"kind":"Namespace","metadata":{"name":"x"}}`), bytes.Repeat([]byte("\u00e9\x00"), 70000)}},
		{"empty document", [][]byte{doc(0)}, [][]byte{{}}},
		{"samples past the window", [][]byte{bytes.Repeat([]byte("x"), 3*dictionaryBytes), doc(0)}, [][]byte{doc(3)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCodec(tc.samples...)
			if c.DictionaryBytes() > dictionaryBytes {
				t.Errorf("dictionary of %d bytes, want at most %d", c.DictionaryBytes(), dictionaryBytes)
			}
			for _, d := range tc.docs {
				blob := c.Encode(d)
				got, err := c.Decode(blob)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, d) {
					t.Fatalf("round trip changed a %d-byte document into %d bytes", len(d), len(got))
				}
			}
		})
	}
}

// TestDictionaryShrinks checks what the package is for: documents that
// share content with the samples cost a fraction of plain deflate.
func TestDictionaryShrinks(t *testing.T) {
	plain, shared := NewCodec(), NewCodec(doc(0), doc(1))
	var p, s int
	for i := 2; i < 50; i++ {
		p += len(plain.Encode(doc(i)))
		s += len(shared.Encode(doc(i)))
	}
	if s*3 > p {
		t.Errorf("with a dictionary %d bytes, without %d: want at least 3x smaller", s, p)
	}
}

func TestDecodeRefusesGarbage(t *testing.T) {
	c := NewCodec(doc(0))
	if _, err := c.Decode([]byte("not deflate at all")); err == nil {
		t.Error("garbage decoded without an error")
	}
	// The reader that failed goes back to the pool: the next decode works.
	if got, err := c.Decode(c.Encode(doc(7))); err != nil || !bytes.Equal(got, doc(7)) {
		t.Errorf("decode after a failure: %v", err)
	}
}

func TestConcurrentUse(t *testing.T) {
	c := NewCodec(doc(0))
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				d := doc(g*1000 + i)
				got, err := c.Decode(c.Encode(d))
				if err != nil || !bytes.Equal(got, d) {
					t.Errorf("goroutine %d document %d: %v", g, i, err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
}
