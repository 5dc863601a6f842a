package source

import (
	"bytes"
	"strconv"
	"unicode/utf8"
)

// decodeBlockYAML decodes the YAML that kubectl and sigs.k8s.io/yaml write
// (`kubectl get -o yaml`, what the folder mostly holds) without
// sigs.k8s.io/yaml, which reads a document through yaml.v2 into generic
// maps, writes it out as JSON and reads that again: about three quarters
// of the time the folder takes to apply a rewritten file of Nodes.
//
// It reads a subset only: a block mapping at the root, block mappings and
// sequences nested by indentation, `{}` and `[]`, and one-line scalars:
// plain ones whose meaning yaml.v2 cannot read otherwise than as a string
// (or a decimal integer, true, false, null), and quoted ones with the
// common escapes. ok is false for anything else (block scalars, multi-line
// or commented scalars, anchors, tags, flow collections with content, keys
// that are not plain strings, duplicate keys, tabs, bytes outside printable
// ASCII, plain scalars that could be numbers, timestamps or other booleans):
// the caller then decodes the document with sigs.k8s.io/yaml, so that the
// subset is a shortcut to the same values, never a dialect of its own.
// FuzzBlockYAML and TestBlockYAMLAgrees hold it to sigs.k8s.io/yaml's
// values: maps, slices, strings, float64 numbers, booleans, nil.
func decodeBlockYAML(b []byte) (map[string]any, bool) {
	d := blockDecoder{}
	if !d.split(b) || len(d.lines) == 0 {
		return nil, false
	}
	m, ok := d.mapping(d.lines[0].indent)
	if !ok || d.pos != len(d.lines) {
		return nil, false
	}
	return m, true
}

// blockLine is a line of content: its indentation and what follows it.
type blockLine struct {
	indent int
	text   []byte
}

type blockDecoder struct {
	lines []blockLine
	pos   int
	depth int
}

// maxBlockDepth bounds the nesting the fast path reads (Kubernetes
// objects nest about a dozen deep); deeper documents are left to yaml.v2
// and its own limits.
const maxBlockDepth = 64

// enter counts a level of nesting; false past maxBlockDepth.
func (d *blockDecoder) enter() bool {
	d.depth++
	return d.depth <= maxBlockDepth
}

// split cuts b into lines of content, leaving out blank and comment
// lines; false for what the subset leaves to yaml.v2 at the line level.
func (d *blockDecoder) split(b []byte) bool {
	for _, c := range b {
		if (c < 0x20 && c != '\n') || c >= 0x7f {
			return false // tabs, CRs, controls, non-ASCII (and so a BOM)
		}
	}
	for len(b) > 0 {
		var l []byte
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			l, b = b[:i], b[i+1:]
		} else {
			l, b = b, nil
		}
		n := 0
		for n < len(l) && l[n] == ' ' {
			n++
		}
		rest := l[n:]
		if len(rest) == 0 || rest[0] == '#' {
			continue
		}
		if rest[len(rest)-1] == ' ' || rest[0] == '%' ||
			(n == 0 && (bytes.HasPrefix(rest, []byte("---")) || bytes.HasPrefix(rest, []byte("...")))) {
			return false
		}
		d.lines = append(d.lines, blockLine{indent: n, text: rest})
	}
	return true
}

// mapping reads the entries of a block mapping whose keys sit at indent.
func (d *blockDecoder) mapping(indent int) (map[string]any, bool) {
	if !d.enter() {
		return nil, false
	}
	defer func() { d.depth-- }()
	m := map[string]any{}
	for d.pos < len(d.lines) {
		l := d.lines[d.pos]
		if l.indent < indent {
			break
		}
		key, rest, ok := splitKey(l.text)
		if l.indent > indent || !ok {
			return nil, false
		}
		if _, dup := m[key]; dup {
			return nil, false
		}
		d.pos++
		v, ok := d.value(indent, rest)
		if !ok {
			return nil, false
		}
		m[key] = v
	}
	return m, true
}

// value reads the value of an entry at indent: rest, what follows the
// key on its line, or else the block below it (a sequence may sit at the
// key's own indentation, as yaml.v2 writes it), or null.
func (d *blockDecoder) value(indent int, rest []byte) (any, bool) {
	if len(rest) > 0 {
		return d.inline(indent, rest)
	}
	if d.pos == len(d.lines) {
		return nil, true
	}
	next := d.lines[d.pos]
	switch {
	case next.indent > indent:
		return d.nested()
	case next.indent == indent && isSeqEntry(next.text):
		return d.sequence(indent)
	}
	return nil, true
}

// nested reads the block that starts at the current line, deeper than
// its parent.
func (d *blockDecoder) nested() (any, bool) {
	l := d.lines[d.pos]
	if isSeqEntry(l.text) {
		return d.sequence(l.indent)
	}
	return d.mapping(l.indent)
}

// inline is the scalar text of a line whose node sits at indent; a deeper
// line after it would continue it (a scalar folded over lines).
func (d *blockDecoder) inline(indent int, text []byte) (any, bool) {
	v, ok := blockScalar(text)
	if !ok || (d.pos < len(d.lines) && d.lines[d.pos].indent > indent) {
		return nil, false
	}
	return v, true
}

// sequence reads the entries of a block sequence whose dashes sit at
// indent. An entry that starts a mapping ("- key: value") is read as a
// mapping whose keys sit where that first key does.
func (d *blockDecoder) sequence(indent int) ([]any, bool) {
	if !d.enter() {
		return nil, false
	}
	defer func() { d.depth-- }()
	s := []any{}
	for d.pos < len(d.lines) {
		l := d.lines[d.pos]
		if l.indent < indent || (l.indent == indent && !isSeqEntry(l.text)) {
			break
		}
		if l.indent > indent {
			return nil, false
		}
		sp := 1
		for sp < len(l.text) && l.text[sp] == ' ' {
			sp++
		}
		item := l.text[sp:]
		switch _, _, isKey := splitKey(item); {
		case len(item) == 0:
			// "-" alone: the item is the block below, or null (the next
			// entry at this indentation is the sequence's own).
			d.pos++
			var v any
			if d.pos < len(d.lines) && d.lines[d.pos].indent > indent {
				var ok bool
				if v, ok = d.nested(); !ok {
					return nil, false
				}
			}
			s = append(s, v)
		case isSeqEntry(item):
			return nil, false // "- - x": left to yaml.v2
		case isKey:
			d.lines[d.pos] = blockLine{indent: indent + sp, text: item}
			m, ok := d.mapping(indent + sp)
			if !ok {
				return nil, false
			}
			s = append(s, m)
		default:
			d.pos++
			v, ok := d.inline(indent, item)
			if !ok {
				return nil, false
			}
			s = append(s, v)
		}
	}
	return s, true
}

func isSeqEntry(t []byte) bool {
	return len(t) > 0 && t[0] == '-' && (len(t) == 1 || t[1] == ' ')
}

// splitKey splits "key: rest" or "key:" where key is a plain scalar that
// yaml.v2 reads as a string.
func splitKey(t []byte) (key string, rest []byte, ok bool) {
	var k []byte
	if i := bytes.Index(t, []byte(": ")); i >= 0 {
		k, rest = t[:i], bytes.TrimLeft(t[i+2:], " ")
	} else if len(t) > 0 && t[len(t)-1] == ':' {
		k = t[:len(t)-1]
	} else {
		return "", nil, false
	}
	if len(k) > maxKeyBytes {
		return "", nil, false
	}
	if v, ok := plainScalar(k); ok {
		if s, isString := v.(string); isString {
			return s, rest, true
		}
	}
	return "", nil, false
}

// maxKeyBytes bounds a key: YAML reads a key only within 1024 characters
// of its ":".
const maxKeyBytes = 1000

// blockScalar is a one-line scalar or empty collection.
func blockScalar(t []byte) (any, bool) {
	switch t[0] {
	case '"':
		return doubleQuoted(t)
	case '\'':
		return singleQuoted(t)
	case '{':
		return map[string]any{}, string(t) == "{}"
	case '[':
		return []any{}, string(t) == "[]"
	}
	return plainScalar(t)
}

// plainScalar reads a plain scalar as yaml.v2 resolves it, where that is
// sure: a string, a decimal integer (as float64, which is what the JSON
// in between makes of it), true, false or null.
func plainScalar(t []byte) (any, bool) {
	if len(t) == 0 || t[0] == ' ' || t[len(t)-1] == ' ' || t[len(t)-1] == ':' || isSeqEntry(t) ||
		bytes.IndexByte([]byte("?:,[]{}#&*!|>'\"%@`"), t[0]) >= 0 ||
		bytes.Contains(t, []byte(": ")) || bytes.Contains(t, []byte(" #")) {
		return nil, false
	}
	s := string(t)
	switch s {
	case "true":
		return true, true
	case "false":
		return false, true
	case "null", "Null", "NULL", "~":
		return nil, true
	}
	if _, special := yamlWords[s]; special {
		return nil, false
	}
	if c := t[0]; c != '-' && c != '+' && c != '.' && (c < '0' || c > '9') {
		return s, true
	}
	switch {
	case isDecimalInt(t):
		f, err := strconv.ParseFloat(s, 64)
		return f, err == nil
	case s == ".", dottedDigits(t), !couldBeNumberOrTime(t):
		// "." (managed fields' key) is no float to Go's ParseFloat either.
		return s, true
	}
	return nil, false
}

// yamlWords are the plain scalars yaml.v2 reads as a boolean, a special
// float or a merge key, other than true, false and the nulls.
var yamlWords = map[string]struct{}{
	"y": {}, "Y": {}, "yes": {}, "Yes": {}, "YES": {}, "n": {}, "N": {}, "no": {}, "No": {}, "NO": {},
	"True": {}, "TRUE": {}, "False": {}, "FALSE": {}, "on": {}, "On": {}, "ON": {}, "off": {}, "Off": {}, "OFF": {},
	".nan": {}, ".NaN": {}, ".NAN": {}, ".inf": {}, ".Inf": {}, ".INF": {}, "+.inf": {}, "+.Inf": {}, "+.INF": {},
	"-.inf": {}, "-.Inf": {}, "-.INF": {}, "<<": {},
}

// isDecimalInt: -?[1-9][0-9]* or 0, at most 18 digits (an int64 that a
// float64 parse of the same digits gives exactly as yaml.v2's integer
// written as JSON and read back). "-0" is not one: yaml.v2 makes it 0.
func isDecimalInt(t []byte) bool {
	if t[0] == '-' {
		t = t[1:]
		if len(t) == 0 || t[0] == '0' {
			return false
		}
	}
	if len(t) == 0 || len(t) > 18 || (t[0] == '0' && len(t) > 1) {
		return false
	}
	for _, c := range t {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// dottedDigits: digits with two dots or more (an IPv4 address, a version),
// which no integer, float or timestamp syntax accepts.
func dottedDigits(t []byte) bool {
	dots := 0
	for _, c := range t {
		switch {
		case c == '.':
			dots++
		case c < '0' || c > '9':
			return false
		}
	}
	return dots >= 2
}

// couldBeNumberOrTime reports whether yaml.v2 might read t as a number or
// a timestamp: t, less its underscores and sign, starts with a base
// prefix (0x, 0o, 0b: Go's integer syntax, which yaml.v2 uses), or has
// only the bytes of decimal floats and timestamps. A plain scalar with
// any other byte (a quantity's unit, a hex digest, a slash) is a string.
func couldBeNumberOrTime(t []byte) bool {
	u := bytes.ReplaceAll(t, []byte("_"), nil)
	if len(u) > 0 && (u[0] == '+' || u[0] == '-') {
		u = u[1:]
	}
	if len(u) >= 2 && u[0] == '0' && bytes.IndexByte([]byte("xXoObB"), u[1]) >= 0 {
		return true
	}
	for _, c := range u {
		if (c < '0' || c > '9') && bytes.IndexByte([]byte(".eE+-:tTZ "), c) < 0 {
			return false
		}
	}
	return true
}

// doubleQuoted reads a one-line double-quoted scalar with the escapes
// JSON shares with YAML.
func doubleQuoted(t []byte) (any, bool) {
	var out []byte
	for i := 1; i < len(t); i++ {
		c := t[i]
		switch c {
		case '"':
			return string(out), i == len(t)-1
		case '\\':
			if i+1 >= len(t) {
				return nil, false
			}
			i++
			switch t[i] {
			case '"', '\\', '/':
				out = append(out, t[i])
			case 'n':
				out = append(out, '\n')
			case 't':
				out = append(out, '\t')
			case 'r':
				out = append(out, '\r')
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'u':
				if i+4 >= len(t) {
					return nil, false
				}
				r, err := strconv.ParseUint(string(t[i+1:i+5]), 16, 32)
				if err != nil || (r >= 0xd800 && r <= 0xdfff) {
					return nil, false
				}
				out = utf8.AppendRune(out, rune(r))
				i += 4
			default:
				return nil, false
			}
		default:
			out = append(out, c)
		}
	}
	return nil, false // not closed on its line
}

// singleQuoted reads a one-line single-quoted scalar (a quote doubled
// stands for one).
func singleQuoted(t []byte) (any, bool) {
	var out []byte
	for i := 1; i < len(t); i++ {
		if t[i] != '\'' {
			out = append(out, t[i])
			continue
		}
		if i+1 < len(t) && t[i+1] == '\'' {
			out = append(out, '\'')
			i++
			continue
		}
		return string(out), i == len(t)-1
	}
	return nil, false
}
