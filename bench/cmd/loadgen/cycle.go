package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// A scheduling cycle as kube-scheduler runs it against an extender
// (pkg/scheduler/schedule_one.go, schedulePod): filter on the candidates,
// then prioritize on the nodes that passed every filter, the extender's
// among them, and no prioritize at all when fewer than two passed (no node:
// the pod is unschedulable; one node: it is chosen without scoring). The
// load generator sends prioritize the filter's passed nodes in the filter
// answer's own form: its NodeNames, or its Nodes (a v1.NodeList).
//
// The answer is read between the two timed calls, so it is read without
// decoding: the passed nodes' JSON is copied as it is and only counted.
// Decoding it (encoding/json) made garbage that ran this process's
// collector beside the service's calls, which showed in the tail.

// passed is what a filter answer let through: the JSON value of its
// NodeNames or Nodes field, whichever is not null, and how many nodes it
// holds.
type passed struct {
	field string // "NodeNames" or "Nodes"; "" when neither holds a node
	value []byte // aliases the answer
	count int
}

// passedNodes reads the nodes a filter answer passed. It stops at the
// first of NodeNames and Nodes that is not null: the denials after them
// (most of a denying answer) are not read.
func passedNodes(answer []byte) (passed, error) {
	var p passed
	err := eachMember(answer, func(key, value []byte) (bool, error) {
		if bytes.Equal(value, []byte("null")) {
			return true, nil
		}
		switch string(key) {
		case "NodeNames":
			n, err := countElements(value)
			p = passed{field: "NodeNames", value: value, count: n}
			return false, err
		case "Nodes":
			var items []byte
			err := eachMember(value, func(k, v []byte) (bool, error) {
				if string(k) == "items" {
					items = v
					return false, nil
				}
				return true, nil
			})
			if err != nil {
				return false, err
			}
			n := 0
			if items != nil && !bytes.Equal(items, []byte("null")) {
				if n, err = countElements(items); err != nil {
					return false, err
				}
			}
			p = passed{field: "Nodes", value: value, count: n}
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return passed{}, fmt.Errorf("filter answer: %w", err)
	}
	return p, nil
}

// scored reports whether the scheduler calls prioritize for these nodes.
func (p passed) scored() bool { return p.count >= 2 }

// prioritizeBody is the ExtenderArgs of the cycle's prioritize call for
// pod (its JSON) on the nodes p, written into buf.
func (p passed) prioritizeBody(buf *bytes.Buffer, pod []byte) []byte {
	buf.Reset()
	buf.WriteString(`{"Pod":`)
	buf.Write(pod)
	buf.WriteString(`,"`)
	buf.WriteString(p.field)
	buf.WriteString(`":`)
	buf.Write(p.value)
	buf.WriteByte('}')
	return buf.Bytes()
}

var errSyntax = errors.New("malformed JSON")

// eachMember calls f with each member of the JSON object obj, its key as
// written (the extender's field names need no escapes) and its value's
// bytes, until f returns false or an error.
func eachMember(obj []byte, f func(key, value []byte) (bool, error)) error {
	i := skipSpace(obj, 0)
	if i == len(obj) || obj[i] != '{' {
		return fmt.Errorf("%w: not an object", errSyntax)
	}
	i = skipSpace(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return nil
	}
	for {
		if i == len(obj) || obj[i] != '"' {
			return fmt.Errorf("%w: a key expected at byte %d", errSyntax, i)
		}
		end, err := skipValue(obj, i)
		if err != nil {
			return err
		}
		key := obj[i+1 : end-1]
		i = skipSpace(obj, end)
		if i == len(obj) || obj[i] != ':' {
			return fmt.Errorf("%w: ':' expected at byte %d", errSyntax, i)
		}
		i = skipSpace(obj, i+1)
		if end, err = skipValue(obj, i); err != nil {
			return err
		}
		more, err := f(key, obj[i:end])
		if err != nil || !more {
			return err
		}
		i = skipSpace(obj, end)
		switch {
		case i < len(obj) && obj[i] == ',':
			i = skipSpace(obj, i+1)
		case i < len(obj) && obj[i] == '}':
			return nil
		default:
			return fmt.Errorf("%w: ',' or '}' expected at byte %d", errSyntax, i)
		}
	}
}

// countElements counts the elements of the JSON array arr.
func countElements(arr []byte) (int, error) {
	i := skipSpace(arr, 0)
	if i == len(arr) || arr[i] != '[' {
		return 0, fmt.Errorf("%w: not an array", errSyntax)
	}
	i = skipSpace(arr, i+1)
	if i < len(arr) && arr[i] == ']' {
		return 0, nil
	}
	for n := 1; ; n++ {
		end, err := skipValue(arr, i)
		if err != nil {
			return 0, err
		}
		i = skipSpace(arr, end)
		switch {
		case i < len(arr) && arr[i] == ',':
			i = skipSpace(arr, i+1)
		case i < len(arr) && arr[i] == ']':
			return n, nil
		default:
			return 0, fmt.Errorf("%w: ',' or ']' expected at byte %d", errSyntax, i)
		}
	}
}

// skipValue is the offset just past the JSON value that starts at b[i]:
// strings end at their unescaped closing quote, objects and arrays at
// their matching bracket, literals and numbers at the next delimiter.
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, fmt.Errorf("%w: a value expected at byte %d", errSyntax, i)
	}
	if c := b[i]; c != '"' && c != '{' && c != '[' { // a literal or a number
		j := i
		for j < len(b) && strings.IndexByte(",}] \t\n\r:", b[j]) < 0 {
			j++
		}
		if j == i {
			return 0, fmt.Errorf("%w: a value expected at byte %d", errSyntax, i)
		}
		return j, nil
	}
	depth := 0
	for j := i; j < len(b); j++ {
		switch c := b[j]; c {
		case '"':
			for j++; j < len(b) && b[j] != '"'; j++ {
				if b[j] == '\\' {
					j++
				}
			}
			if j >= len(b) {
				return 0, fmt.Errorf("%w: unterminated string", errSyntax)
			}
			if depth == 0 {
				return j + 1, nil
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth < 0 {
				return 0, fmt.Errorf("%w: unexpected %q at byte %d", errSyntax, c, j)
			}
			if depth == 0 {
				return j + 1, nil
			}
		}
	}
	return 0, fmt.Errorf("%w: unterminated object or array", errSyntax)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
