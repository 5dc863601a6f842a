package verdict

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Result is one element of a violation set, as the engine keeps it.
type Result struct {
	Msg     string
	Details json.RawMessage
	Err     bool
	// MsgText and DetailsText are Msg and Details cut at their
	// placeholders, nil when they hold none.
	MsgText, DetailsText *Text
	// MsgPlain: msg is plain text (IsPlain; for MsgText, see its lits).
	MsgPlain bool
	// Transient: the request's deadline stopped the evaluation; such a
	// verdict is never remembered.
	Transient bool
	// Listed: the result belongs to a list of violations (CEL's), whose
	// order and duplicates stand; Validation is the validation it failed
	// (1 for the first; 0: an error denied).
	Listed     bool
	Validation uint16
}

// ResultBytes is what res costs the memo, roughly.
func ResultBytes(res []Result) int {
	n := 24
	for _, x := range res {
		n += 64 + len(x.Msg) + len(x.Details)
	}
	return n
}

// AnyHoles says whether some result holds placeholders.
func AnyHoles(res []Result) bool {
	for i := range res {
		if res[i].MsgText != nil || res[i].DetailsText != nil {
			return true
		}
	}
	return false
}

// HasError says whether some result stands for an error.
func HasError(res []Result) bool {
	for _, x := range res {
		if x.Err {
			return true
		}
	}
	return false
}

// memorable reports whether res may be remembered: evaluation errors of a
// deterministic template are verdicts like any other (Gatekeeper fails
// closed on them every time), a deadline is not.
func Memorable(res []Result) bool {
	for _, x := range res {
		if x.Transient {
			return false
		}
	}
	return true
}

// Results reads a violation set the way Gatekeeper's hook does: elements
// without msg are dropped, a non-string msg is an error, details default to
// {}, duplicates collapse, and results come sorted. A list (CEL's one
// violation per failed validation) keeps its order and its duplicates, and
// has no details.
// holes marks results that hold placeholder text.
func Results(items []any, ph *Placeholders, list bool) []Result {
	var out []Result
	seen := map[string]bool{}
	for _, it := range items {
		m, ok := it.(map[string]any)
		if !ok {
			continue
		}
		raw, has := m["msg"]
		if !has {
			continue
		}
		msg, ok := raw.(string)
		if !ok {
			out = append(out, Result{Msg: fmt.Sprintf("invalid violation: msg is %T, want string", raw), Err: true})
			continue
		}
		// A list's violations (CEL's) carry no details, as Gatekeeper's
		// k8scel driver reports none; a set's default to {}.
		var b []byte
		if details, has := m["details"]; has || !list {
			if !has {
				details = map[string]any{}
			}
			var err error
			if b, err = json.Marshal(details); err != nil {
				out = append(out, Result{Msg: fmt.Sprintf("invalid violation details: %v", err), Err: true})
				continue
			}
		}
		k := msg + "\x00" + string(b)
		if seen[k] && !list {
			continue
		}
		seen[k] = true
		var validation uint16
		if list {
			if v, ok := m["validation"].(int); ok && v > 0 && v <= math.MaxUint16 {
				validation = uint16(v)
			}
		}
		out = append(out, Result{Msg: msg, Details: b, MsgText: ph.Cut(msg), DetailsText: ph.Cut(string(b)), MsgPlain: isPlain(msg), Listed: list, Validation: validation})
	}
	if !list {
		SortResults(out)
	}
	return out
}

// SortResults orders results by message, then details (results equal in
// both are equal: their texts are cut from them). slices.SortFunc, not
// sort.Slice, whose swapper is an allocation per call, and a new
// replica's answer sorts each column's results.
func SortResults(out []Result) {
	slices.SortFunc(out, func(a, b Result) int {
		if c := strings.Compare(a.Msg, b.Msg); c != 0 {
			return c
		}
		return bytes.Compare(a.Details, b.Details)
	})
}
