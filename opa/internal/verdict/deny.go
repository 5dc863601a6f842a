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
// pod into pieces, leaving the holes pod does not fill to each node.
func DenyPieces(constraint string, t *Text, pod Bindings) []DenyPiece {
	var out []DenyPiece
	var cur strings.Builder
	plain := true
	add := func(s string, p bool) {
		cur.WriteString(s)
		plain = plain && p
	}
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
		out = append(out, DenyPiece{text: cur.String(), plain: plain, hole: h})
		cur.Reset()
		plain = true
	}
	return append(out, DenyPiece{text: cur.String(), plain: plain, hole: -1})
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
