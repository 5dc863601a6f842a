package source

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// part is one piece of a stream of objects, as a partReader cuts it: one
// item of a document's top-level "items" sequence, or a document (all of
// it, or what is left of it once its items were taken out).
//
// Items are cut out of their document as they are read, so that a
// 50 MB `kubectl get nodes -o yaml` (one document, kind List) is never
// held, or parsed, whole. Whether the document is a list is only known at
// its end (kubectl writes its keys in order: apiVersion, items, kind), so
// the reader cuts the items of any document and its consumer decides,
// with the document part, what they were.
type part struct {
	doc  int // the document's number in the stream, from 1
	item int // the item's number in its document, from 1; 0: the document
	// raw is the item, or the document less the items taken out of it;
	// valid until the next call of next.
	raw  []byte
	json bool // raw is JSON, else YAML
	// items is, on a document part, how many items were taken out of it.
	items int
}

// partReader cuts a stream into parts. next returns io.EOF at the end.
type partReader interface {
	next() (part, error)
}

// newPartReader reads a YAML stream, or a JSON one (a stream whose first
// character other than white space is "{", as kubectl tells them apart).
func newPartReader(br *bufio.Reader) partReader {
	if startsJSON(br) {
		dec := json.NewDecoder(br)
		dec.UseNumber() // values are copied through, not converted
		return &jsonParts{dec: dec}
	}
	return &yamlParts{r: br, indent: -1}
}

func startsJSON(br *bufio.Reader) bool {
	for n := 1; ; n++ {
		b, err := br.Peek(n)
		if len(b) < n || err != nil {
			return false
		}
		switch b[n-1] {
		case ' ', '\t', '\r', '\n':
			continue
		case '{':
			return true
		}
		return false
	}
}

// yamlParts cuts a YAML stream line by line: documents at "---" lines (as
// k8s.io/apimachinery's YAMLReader does), and the entries of a block
// sequence under a top-level "items:" key out of their document. An
// entry's lines are those indented past its "-"; it is handed on as a
// YAML document of its own, its "-" made a space. A document whose items
// are written otherwise ("items: [...]", JSON) is handed on whole. An
// item that refers to an anchor set in another (a YAML alias across
// items, which kubectl never writes) does not parse on its own: its file
// is reported as not parsing.
type yamlParts struct {
	r    *bufio.Reader
	line []byte // the current line
	held bool   // line was read, and is to be read again
	doc  int    // the current document
	any  bool   // the current document has bytes
	env  []byte // the current document, less its items
	// indent is the column of the current document's items' "-"; -1: not
	// in items. pending: after "items:", before its first entry.
	indent  int
	pending []byte
	// inItem: buf holds an item not yet handed on; items counts them.
	inItem bool
	buf    []byte
	items  int
}

func (y *yamlParts) next() (part, error) {
	for {
		line, err := y.readLine()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return part{}, err
			}
			if p, ok := y.flushItem(); ok {
				return p, nil
			}
			if p, ok := y.flushDoc(); ok {
				return p, nil
			}
			return part{}, io.EOF
		}
		if isDocSeparator(line) {
			if p, ok := y.flushItem(); ok {
				y.held = true
				return p, nil
			}
			if p, ok := y.flushDoc(); ok {
				return p, nil
			}
			continue
		}
		y.any = true
		if y.indent >= 0 {
			if p, ok, took := y.itemLine(line); took {
				if ok {
					return p, nil
				}
				continue
			}
		}
		if y.pending != nil {
			if y.itemsStart(line) {
				continue
			}
		}
		if isItemsKey(line) {
			y.pending = append(y.pending[:0], line...)
			continue
		}
		y.env = append(y.env, line...)
	}
}

// itemLine takes a line of the items: a new entry (handing on the one
// before), a line of the current one, or the end of the items (the line
// is then the document's again: took is false).
func (y *yamlParts) itemLine(line []byte) (p part, ok, took bool) {
	n := y.indent
	spaces := leadingSpaces(line)
	rest := line[spaces:]
	switch {
	case spaces > n:
		y.buf = append(y.buf, line[n:]...)
		return part{}, false, true
	case len(bytes.TrimSpace(rest)) == 0 || rest[0] == '#':
		// A blank line, or a comment (it cannot be a block scalar's
		// content: that is indented past the entry's "-").
		y.buf = append(y.buf, '\n')
		return part{}, false, true
	case spaces == n && isEntry(rest):
		if p, ok := y.flushItem(); ok {
			y.held = true
			return p, true, true
		}
		y.inItem = true
		y.buf = append(y.buf[:0], line[n:]...)
		y.buf[0] = ' '
		return part{}, false, true
	}
	if p, ok := y.flushItem(); ok {
		y.held = true
		return p, true, true
	}
	y.indent = -1
	return part{}, false, false
}

// itemsStart looks at the first line after "items:" other than blanks
// and comments: an entry starts the items; anything else gives the lines
// back to the document (took is false for the line itself then).
func (y *yamlParts) itemsStart(line []byte) (took bool) {
	spaces := leadingSpaces(line)
	rest := line[spaces:]
	if len(bytes.TrimSpace(rest)) == 0 || rest[0] == '#' {
		y.pending = append(y.pending, line...)
		return true
	}
	if isEntry(rest) {
		y.indent = spaces
		y.pending = nil
		y.held = true // read again as the first entry
		return true
	}
	y.env = append(y.env, y.pendingLines()...)
	return false
}

func (y *yamlParts) pendingLines() []byte {
	p := y.pending
	y.pending = nil
	return p
}

func (y *yamlParts) flushItem() (part, bool) {
	if !y.inItem {
		return part{}, false
	}
	y.inItem = false
	y.items++
	return part{doc: y.doc + 1, item: y.items, raw: y.buf}, true
}

// flushDoc hands on the current document, if it had any bytes, and
// starts the next.
func (y *yamlParts) flushDoc() (part, bool) {
	y.env = append(y.env, y.pendingLines()...)
	y.indent = -1
	if !y.any {
		return part{}, false
	}
	y.doc++
	p := part{doc: y.doc, raw: y.env, items: y.items}
	y.env, y.any, y.items = y.env[:0], false, 0
	return p, true
}

// readLine returns the next line, its "\n" included, or the one held.
func (y *yamlParts) readLine() ([]byte, error) {
	if y.held {
		y.held = false
		return y.line, nil
	}
	y.line = y.line[:0]
	for {
		chunk, err := y.r.ReadSlice('\n')
		y.line = append(y.line, chunk...)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(y.line) > 0:
			return y.line, nil // the last line, without "\n"
		}
		return y.line, err
	}
}

// isDocSeparator: "---" alone, or before a comment (YAMLReader's rule).
func isDocSeparator(line []byte) bool {
	if !bytes.HasPrefix(line, []byte("---")) {
		return false
	}
	rest := bytes.TrimSpace(line[3:])
	return len(rest) == 0 || rest[0] == '#'
}

// isItemsKey: a top-level "items:" with its value on the lines after.
func isItemsKey(line []byte) bool {
	if !bytes.HasPrefix(line, []byte("items:")) {
		return false
	}
	rest := bytes.TrimSpace(line[len("items:"):])
	return len(rest) == 0 || rest[0] == '#'
}

// isEntry: a block sequence entry, "-" then a space or the line's end.
func isEntry(rest []byte) bool {
	if len(rest) == 0 || rest[0] != '-' {
		return false
	}
	return len(rest) == 1 || rest[1] == ' ' || rest[1] == '\t' || rest[1] == '\n' || rest[1] == '\r'
}

func leadingSpaces(line []byte) int {
	n := 0
	for n < len(line) && line[n] == ' ' {
		n++
	}
	return n
}

// jsonParts cuts a stream of JSON objects: each is a document, and the
// elements of a top-level "items" array are taken out of it one by one.
type jsonParts struct {
	dec     *json.Decoder
	doc     int
	inDoc   bool
	inItems bool
	items   int
	env     bytes.Buffer // the current document, less its items
	fields  int          // fields written to env
	raw     json.RawMessage
}

func (j *jsonParts) next() (part, error) {
	if j.inItems {
		if j.dec.More() {
			j.raw = j.raw[:0]
			if err := j.dec.Decode(&j.raw); err != nil {
				return part{}, fmt.Errorf("document %d, item %d: %w", j.doc, j.items+1, err)
			}
			j.items++
			return part{doc: j.doc, item: j.items, raw: j.raw, json: true}, nil
		}
		if _, err := j.dec.Token(); err != nil { // "]"
			return part{}, fmt.Errorf("document %d: %w", j.doc, err)
		}
		j.inItems = false
	}
	if !j.inDoc {
		tok, err := j.dec.Token()
		if errors.Is(err, io.EOF) {
			return part{}, io.EOF
		}
		if err != nil {
			return part{}, fmt.Errorf("document %d: %w", j.doc+1, err)
		}
		j.doc++
		if tok != json.Delim('{') {
			return part{}, fmt.Errorf("document %d: a JSON object is expected, not %v", j.doc, tok)
		}
		j.inDoc, j.items, j.fields = true, 0, 0
		j.env.Reset()
		j.env.WriteByte('{')
	}
	for j.dec.More() {
		array, err := j.field()
		if err != nil {
			return part{}, fmt.Errorf("document %d: %w", j.doc, err)
		}
		if array {
			j.inItems = true
			return j.next()
		}
	}
	if _, err := j.dec.Token(); err != nil { // "}"
		return part{}, fmt.Errorf("document %d: %w", j.doc, err)
	}
	j.env.WriteByte('}')
	j.inDoc = false
	return part{doc: j.doc, raw: j.env.Bytes(), json: true, items: j.items}, nil
}

// field copies the document's next field into env, but for a non-empty
// "items" array, whose "[" it reads and reports.
func (j *jsonParts) field() (itemsArray bool, err error) {
	tok, err := j.dec.Token()
	if err != nil {
		return false, err
	}
	key, _ := tok.(string)
	if key == "items" && j.items == 0 {
		v, err := j.dec.Token()
		if err != nil {
			return false, err
		}
		if v == json.Delim('[') && j.dec.More() {
			return true, nil
		}
		j.writeKey(key)
		return false, copyJSONValue(j.dec, v, &j.env)
	}
	j.raw = j.raw[:0]
	if err := j.dec.Decode(&j.raw); err != nil {
		return false, err
	}
	j.writeKey(key)
	j.env.Write(j.raw)
	return false, nil
}

func (j *jsonParts) writeKey(key string) {
	if j.fields > 0 {
		j.env.WriteByte(',')
	}
	j.fields++
	writeJSONKey(&j.env, key)
}

func writeJSONKey(w *bytes.Buffer, key string) {
	b, _ := json.Marshal(key)
	w.Write(b)
	w.WriteByte(':')
}

// copyJSONValue writes the value that starts with tok, read token by
// token.
func copyJSONValue(dec *json.Decoder, tok json.Token, w *bytes.Buffer) error {
	d, ok := tok.(json.Delim)
	if !ok {
		b, err := json.Marshal(tok)
		w.Write(b)
		return err
	}
	w.WriteByte(byte(d))
	for first := true; dec.More(); first = false {
		if !first {
			w.WriteByte(',')
		}
		t, err := dec.Token()
		if err != nil {
			return err
		}
		if d == '{' {
			writeJSONKey(w, t.(string))
			if t, err = dec.Token(); err != nil {
				return err
			}
		}
		if err := copyJSONValue(dec, t, w); err != nil {
			return err
		}
	}
	end, err := dec.Token()
	if err != nil {
		return err
	}
	w.WriteByte(byte(end.(json.Delim)))
	return nil
}
