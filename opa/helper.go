package opa

import (
	"slices"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/drivers"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/lookup"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/memo"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/policyset"
)

// Keys made of a helper's answer (analysis.Helper). A memo key path that
// ends in a Helper holds, where the path finds a value, whether the
// template's function holds on it (`is_exempt(container)`), not the
// value: the function is evaluated alone, with the constraint's
// parameters as input.parameters, and its answer is remembered in the
// engine's helper memo under what the function reads of the value (the
// container's image), so a pod whose values the helper memo has seen
// costs a lookup, and one it has not costs one small evaluation rather
// than the template's. The answers are kept per helper identity
// (helperIdentity: the code the function runs, its template's namespace
// left out, its constant arguments, its reads and the values of the
// parameters it reads), not per constraint: each PSP template of the
// library ships its own copy of is_exempt, and a new image costs one
// evaluation for all the constraints that exempt the same images.
//
// A helper whose evaluation fails (a conflict between its definitions, a
// builtin error, the request's deadline) keys the verdict on what it
// reads instead, as if it were read as it is: the template's own
// evaluation then meets the same error, as Gatekeeper would.

// helperMemoOptions bound the helper memo: its answers are booleans
// under short keys (an image), far smaller than the verdicts'. By
// memo.Size's accounting an answer on a 40-byte image is about 420 bytes
// (the entry and its key, the result and what it read), so the half of 4
// MiB that a working set may fill holds the answers on about 5000 images.
var helperMemoOptions = memo.Options{MaxResults: 1 << 16, MaxBytes: 4 << 20}

// helperKey is the key value of a path ending in h's Helper in review:
// the lookup of the path before it, each value found replaced by the
// helper's answer on it.
func (r *helperCalls) helperKey(h *policyset.KeyHelper, review *ast.Term) *ast.Term {
	if h.RawIDs != nil && review == r.podReview {
		b := r.buffers()
		raw := b.helperRaw[:0]
		for i, id := range h.RawIDs {
			raw = append(raw, r.keys.keyValue(id, review, h.RawPlans[i]))
		}
		b.helperRaw = raw
		if t, ok := r.helpers.knownAnswers(h, raw, h.EachDepth); ok {
			return t
		}
	}
	return h.ArgPlan.Then(review, func(v ast.Value) *ast.Term { return r.helpers.callHelper(h, v) })
}

// knownAnswers is helperKey's value made from the values at h's raw
// paths, depth Each deep, when the helper memo holds every answer it
// needs: the same value as the lookup that calls the helper makes, since
// an element's value at a read is the element's entry in the raw path's
// array, a list that is absent or not an array is so in every raw path
// (undefined, or the same lookup.Whole, as the lookup gives), and an
// argument that is absent (h.argLast) is not called. ok is false at the
// first answer the memo lacks: helperKey then looks the path up and calls
// the helper.
func (r *helperCalls) knownAnswers(h *policyset.KeyHelper, raw []*ast.Term, depth int) (*ast.Term, bool) {
	if depth == 0 {
		read := raw
		if h.ArgLast {
			if raw[len(raw)-1] == lookup.Undefined {
				return lookup.Undefined, true // no argument: the helper is not called
			}
			read = raw[:len(raw)-1]
		}
		holds, ok := r.e.helpers.Find(h.Owner, read).Get(0)
		if !ok {
			return nil, false
		}
		return ast.InternedTerm(holds), true
	}
	arr, isArray := raw[0].Value.(*ast.Array)
	if raw[0] == lookup.Undefined || !isArray {
		return raw[0], true // the list is absent, or keyed whole
	}
	for _, t := range raw[1:] {
		if other, ok := t.Value.(*ast.Array); !ok || other.Len() != arr.Len() {
			return nil, false // not one list's arrays: looked up as it is
		}
	}
	var small, elemBuf [maxInternedAnswers]*ast.Term
	answers := small[:0]
	if arr.Len() > maxInternedAnswers {
		answers = make([]*ast.Term, 0, arr.Len())
	}
	elem := elemBuf[:0]
	if len(raw) > maxInternedAnswers {
		elem = make([]*ast.Term, 0, len(raw))
	}
	for i := range arr.Len() {
		elem = elem[:0]
		for _, t := range raw {
			elem = append(elem, t.Value.(*ast.Array).Elem(i))
		}
		a, ok := r.helpers.knownAnswers(h, elem, depth-1)
		if !ok {
			return nil, false
		}
		answers = append(answers, a)
	}
	if t := internedAnswers(answers); t != nil {
		return t, true
	}
	return ast.ArrayTerm(slices.Clone(answers)...), true
}

// maxInternedAnswers is the longest list of answers kept made: a pod's
// containers are a few, and most answers are the same for all of them.
const maxInternedAnswers = 4

// answerArrays are the arrays of up to maxInternedAnswers booleans, by
// length and by the bits of their true elements.
var answerArrays = func() [maxInternedAnswers + 1][]*ast.Term {
	var out [maxInternedAnswers + 1][]*ast.Term
	for n := range out {
		out[n] = make([]*ast.Term, 1<<n)
		for bits := range out[n] {
			elems := make([]*ast.Term, n)
			for i := range elems {
				elems[i] = ast.InternedTerm(bits&(1<<i) != 0)
			}
			out[n][bits] = ast.ArrayTerm(elems...)
		}
	}
	return out
}()

// internedAnswers is the made array of answers, or nil when they are too
// many or not all booleans (an absent argument, a list inside the
// element). Keys and terms are never written to, so one array serves
// every request.
func internedAnswers(answers []*ast.Term) *ast.Term {
	if len(answers) > maxInternedAnswers {
		return nil
	}
	bits := 0
	for i, a := range answers {
		b, ok := a.Value.(ast.Boolean)
		if !ok || a == lookup.Undefined {
			return nil
		}
		if b {
			bits |= 1 << i
		}
	}
	return answerArrays[len(answers)][bits]
}

// helperEntry is what h reads of v (in the request's scratch buffer) and
// the helper memo's entry for it.
func (r *helperCalls) helperEntry(h *policyset.KeyHelper, v ast.Value) ([]*ast.Term, *memo.Entry[bool]) {
	b := r.buffers()
	read := b.helperRead[:0] // memo.Find copies what it keeps
	for _, p := range h.Reads {
		read = append(read, r.e.reg.Lookup.At(v, p))
	}
	b.helperRead = read
	return read, r.e.helpers.Find(h.Owner, read)
}

// helperAnswer is h's answer on v, from the helper memo or evaluated now
// (never deferred); ok is false when the evaluation failed.
func (r *helperCalls) helperAnswer(h *policyset.KeyHelper, v ast.Value) (holds, ok bool) {
	read, entry := r.helpers.helperEntry(h, v)
	if holds, ok := entry.Get(0); ok {
		return holds, true
	}
	return r.helpers.evalHelper(h, v, entry, read)
}

// callHelper is h's answer on v, from the helper memo or evaluated.
func (r *helperCalls) callHelper(h *policyset.KeyHelper, v ast.Value) *ast.Term {
	read, entry := r.helpers.helperEntry(h, v)
	if holds, ok := entry.Get(0); ok {
		return ast.InternedTerm(holds)
	}
	if r.deferHelpers {
		r.deferred = append(r.deferred, deferredHelper{h: h, v: v, entry: entry, read: slices.Clone(read)})
		return lookup.Undefined // the key is made again once the helper ran
	}
	holds, ok := r.helpers.evalHelper(h, v, entry, read)
	if !ok {
		// Keyed on what it reads: the template's evaluation meets the error.
		return lookup.Whole(ast.ArrayTerm(slices.Clone(read)...))
	}
	return ast.InternedTerm(holds)
}

// evalHelper evaluates h on v and remembers its answer in entry, under
// read; ok is false when the evaluation failed (nothing is remembered).
// It writes nothing of the request, so that prefetch may run it on
// several goroutines.
func (r *helperCalls) evalHelper(h *policyset.KeyHelper, v ast.Value, entry *memo.Entry[bool], read []*ast.Term) (holds, ok bool) {
	holds, err := h.Query.Holds(r.ctx, drivers.HelperInput{Txn: r.txn, Parameters: h.Parameters, Constraint: h.Constraint, Argument: v, Cancel: r.evalCancel()})
	r.e.stats.helperEvaluations.Add(1)
	if err != nil {
		return false, false
	}
	size := 64
	for _, t := range read {
		size += memo.Size(t.Value)
	}
	r.e.helpers.Put(entry, 0, holds, size)
	return holds, true
}

// deferredHelper is a helper answer a key needs and the helper memo
// lacks (request.deferHelpers).
type deferredHelper struct {
	h     *policyset.KeyHelper
	v     ast.Value
	entry *memo.Entry[bool]
	read  []*ast.Term
}

// deferredCalls are the deferred helper answers to evaluate, each once,
// in r.deferred's own storage (the caller clears it after the batch).
func (r *helperCalls) deferredCalls() []deferredHelper {
	calls := r.deferred[:0]
	seen := map[*memo.Entry[bool]]bool{}
	for _, c := range r.deferred {
		if !seen[c.entry] {
			seen[c.entry] = true
			calls = append(calls, c)
		}
	}
	return calls
}
