package verdict

import "strings"

// WriteText writes s, as plain text when it is and w takes it so.
func WriteText(w MessageWriter, pw PlainWriter, s string, plain bool) {
	if plain && pw != nil {
		pw.WritePlain(s)
		return
	}
	_, _ = w.WriteString(s)
}

// denyPiece is a part of a column's deny message for one of its results
// ("[<constraint>] " and the message), joined for the whole column: the
// literal parts and the pod's printed values, which are the same on every
// node, as one text; then, when hole >= 0, the node's printed value there.
// Written per denied node, a message of ten parts is two or three pieces.
type DenyPiece struct {
	text  string
	plain bool
	hole  int // -1: none
}

// DenyPieces joins "[<constraint>] " and t filled with the pod's values
// pod into pieces, leaving the holes pod does not fill to each node. The
// pieces' texts are parts of one string, sized before it is written: a
// new replica joins its pieces for every denying column, and a builder
// grown part by part, with a string per piece, was a twentieth of what a
// cycle allocated.
func DenyPieces(constraint string, t *Text, pod Bindings) []DenyPiece {
	size, pieces := 0, 1
	t.denyParts(constraint, pod, func(s string, _ bool) { size += len(s) }, func(int) { pieces++ })
	var b strings.Builder
	b.Grow(size)
	out := make([]DenyPiece, 0, pieces)
	var endsBuf [8]int
	ends := endsBuf[:0]
	plain := true
	t.denyParts(constraint, pod, func(s string, p bool) {
		b.WriteString(s)
		plain = plain && p
	}, func(hole int) {
		out = append(out, DenyPiece{plain: plain, hole: hole})
		ends = append(ends, b.Len())
		plain = true
	})
	out = append(out, DenyPiece{plain: plain, hole: -1})
	ends = append(ends, b.Len())
	all, from := b.String(), 0
	for i := range out {
		out[i].text, from = all[from:ends[i]], ends[i]
	}
	return out
}

// denyParts walks the parts of DenyPieces' text in order: add for each
// text part (and whether it is plain), cut where a piece ends at a hole
// pod does not fill.
func (t *Text) denyParts(constraint string, pod Bindings, add func(s string, plain bool), cut func(hole int)) {
	add("[", true)
	add(constraint, isPlain(constraint))
	add("] ", true)
	for k, l := range t.lits {
		add(l, t.plain[k])
		if k == len(t.holes) {
			break
		}
		h := t.holes[k]
		if h < 0 {
			continue
		}
		if x, ok := pod.lookup(h); ok {
			add(x.value, x.plain)
			continue
		}
		cut(h)
	}
}

// WriteDenyPieces writes pieces with node's printed values in their holes
// (a value node lacks is written as its placeholder, as FillTo does).
func (ph *Placeholders) WriteDenyPieces(w MessageWriter, pw PlainWriter, pieces []DenyPiece, node Bindings) {
	for i := range pieces {
		pc := &pieces[i]
		WriteText(w, pw, pc.text, pc.plain)
		if pc.hole < 0 {
			continue
		}
		if x, ok := node.lookup(pc.hole); ok {
			WriteText(w, pw, x.value, x.plain)
		} else {
			_, _ = w.WriteString(ph.Text(pc.hole))
		}
	}
}

// MessageWriter receives a message piece by piece; strings.Builder is
// one. A front end that escapes what it writes (a JSON answer) passes its
// own, so that no message is built as a string first.
type MessageWriter interface {
	WriteString(s string) (int, error)
}

// PlainWriter is a MessageWriter that also takes text known to be plain:
// printable ASCII without quote or backslash, which a JSON string holds as
// it is. WriteDenyMessage gives it the constant parts of messages found
// plain once when they were evaluated, so that an answer escaping each
// node's message into JSON looks only at what may need it.
type PlainWriter interface {
	MessageWriter
	WritePlain(s string)
}
