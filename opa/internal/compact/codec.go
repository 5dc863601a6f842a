package compact

import (
	"bytes"
	"compress/flate"
	"fmt"
	"io"
	"sync"
)

// dictionaryBytes is deflate's window: a dictionary longer than that is
// never reached back into.
const dictionaryBytes = 32 << 10

// Codec encodes and decodes documents against one dictionary. It is safe
// for concurrent use.
type Codec struct {
	dict    []byte
	writers sync.Pool // *writer, each about a megabyte of state
	readers sync.Pool // io.ReadCloser that implements flate.Resetter
}

type writer struct {
	out bytes.Buffer
	w   *flate.Writer
}

// NewCodec makes a codec whose dictionary is the samples, concatenated
// (the last 32 KiB of them when they are longer): typically a few
// documents of the kind to be kept. No samples: plain deflate.
func NewCodec(samples ...[]byte) *Codec {
	var dict []byte
	for _, s := range samples {
		dict = append(dict, s...)
	}
	if len(dict) > dictionaryBytes {
		dict = dict[len(dict)-dictionaryBytes:]
	}
	c := &Codec{dict: bytes.Clone(dict)}
	c.writers.New = func() any {
		z := &writer{}
		// Level 1 (BestSpeed) ignores dictionaries; the default level
		// uses it best.
		z.w, _ = flate.NewWriterDict(&z.out, flate.DefaultCompression, c.dict)
		return z
	}
	return c
}

// DictionaryBytes is the size of the codec's dictionary.
func (c *Codec) DictionaryBytes() int { return len(c.dict) }

// Encode compresses doc into a new slice.
func (c *Codec) Encode(doc []byte) []byte {
	z := c.writers.Get().(*writer)
	defer c.writers.Put(z)
	z.out.Reset()
	z.w.Reset(&z.out)     // keeps the dictionary
	_, _ = z.w.Write(doc) // writes to a bytes.Buffer do not fail
	_ = z.w.Close()
	return bytes.Clone(z.out.Bytes())
}

// Decode returns the document blob was encoded from.
func (c *Codec) Decode(blob []byte) ([]byte, error) {
	r, _ := c.readers.Get().(io.ReadCloser)
	if r == nil {
		r = flate.NewReaderDict(bytes.NewReader(blob), c.dict)
	} else if err := r.(flate.Resetter).Reset(bytes.NewReader(blob), c.dict); err != nil {
		return nil, fmt.Errorf("decode document: %w", err)
	}
	defer c.readers.Put(r)
	var out bytes.Buffer
	out.Grow(4 * len(blob))
	if _, err := out.ReadFrom(r); err != nil {
		return nil, fmt.Errorf("decode document: %w", err)
	}
	return out.Bytes(), nil
}
