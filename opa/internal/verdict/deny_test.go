package verdict

import (
	"strings"
	"testing"
)

// TestDenyPieces: the pieces, written with a node's values in their holes,
// are the message Fill gives with the pod's and the node's values, and
// each piece's text and plainness are its parts'.
func TestDenyPieces(t *testing.T) {
	ph := NewPlaceholders()
	hole := ph.Text
	pod := Bindings{NewBinding(0, "web-1"), NewBinding(2, `say "hi"`)}
	node := Bindings{NewBinding(1, "node-a"), NewBinding(3, "zone-b")}
	cases := []struct {
		name   string
		msg    string
		pieces int
	}{
		{"no holes", "plain message", 1},
		{"pod values only", "pod " + hole(0) + " says " + hole(2), 1},
		{"a node hole", "pod " + hole(0) + " on " + hole(1) + ".", 2},
		{"node holes side by side", hole(1) + hole(3), 3},
		{"a hole nobody fills", "x " + hole(7) + " y", 2},
		{"not a placeholder", "x " + ph.Prefix + "nope y " + hole(1), 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			text := ph.Cut(tc.msg)
			if text == nil {
				text = &Text{lits: []string{tc.msg}, plain: []bool{isPlain(tc.msg)}}
			}
			pieces := DenyPieces("my-constraint", text, pod)
			if len(pieces) != tc.pieces {
				t.Fatalf("%d pieces, want %d: %+v", len(pieces), tc.pieces, pieces)
			}
			var got strings.Builder
			ph.WriteDenyPieces(&got, nil, pieces, node)
			want := "[my-constraint] " + ph.Fill(text, pod, node, false)
			if got.String() != want {
				t.Errorf("written %q, want %q", got.String(), want)
			}
			for _, pc := range pieces {
				if pc.plain != isPlain(pc.text) {
					t.Errorf("piece %q: plain %v", pc.text, pc.plain)
				}
			}
		})
	}
}

func TestDenyPiecesAllocations(t *testing.T) {
	ph := NewPlaceholders()
	text := ph.Cut("pod " + ph.Text(0) + " cannot run on " + ph.Text(1) + " in zone " + ph.Text(3) + ": " + ph.Text(2))
	pod := Bindings{NewBinding(0, "web-1"), NewBinding(2, "reason")}
	// The pieces and their one string.
	if n := testing.AllocsPerRun(100, func() { DenyPieces("c", text, pod) }); n > 2 {
		t.Errorf("%v allocations per call, want at most 2", n)
	}
}
