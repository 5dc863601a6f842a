package opa_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// testPods decodes the tests' pods as a server's decoder does.
var testPods = opa.NewPodDecoder()

// decoded is p as the server gives it to the engine: decoded from its
// JSON.
func decoded(t testing.TB, p map[string]any) *opa.Pod {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	d, err := testPods.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// answer is what the extender's verbs read of a placement: per node, its
// violations, whether it is denied, its deny message and score.
func answer(p *opa.Placement) []string {
	out := make([]string, len(p.Nodes))
	for i, n := range p.Nodes {
		out[i] = fmt.Sprintf("%s unknown=%v denied=%v score=%d msg=%q %v", n.Name, n.Unknown, p.Denied(i), p.Score(i), p.DenyMessage(i), p.Violations(i))
	}
	return out
}

// everyOther is cands[1], cands[3], ...: prioritize's share of filter's.
func everyOther(cands []opa.Candidate) []opa.Candidate {
	var out []opa.Candidate
	for i := 1; i < len(cands); i += 2 {
		out = append(out, cands[i])
	}
	return out
}

// TestAnswerReusedForTheNextVerb: a second request for the same pod JSON,
// on a subset of the candidates, with nothing changed, is the first
// answer restricted (no evaluation, AnswersReused counts it) and says what
// a fresh evaluation says; a change of the inventory or of the policies, a
// pod that is not the same JSON, explain, or a nondeterministic template
// make it evaluate again.
func TestAnswerReusedForTheNextVerb(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, opa.Options{}, examples)
	var cands []opa.Candidate
	for i, tenant := range []string{"alpha", "beta", "", "alpha", "beta", ""} {
		name := fmt.Sprintf("n%d", i)
		apply(t, e, node(name, map[string]string{"tenant": tenant}))
		cands = append(cands, opa.Candidate{Name: name})
	}
	cands = append(cands, opa.Candidate{Name: "not-in-inventory"})
	sub := everyOther(cands)
	fresh := func(p *opa.Pod, cs []opa.Candidate) []string {
		t.Helper()
		got, err := e.Evaluate(ctx, opa.PlacementRequest{Decoded: p, Candidates: cs, Explain: true}) // explain: never reused
		if err != nil {
			t.Fatal(err)
		}
		return answer(got)
	}
	// ask is filter's request (the whole list: keep) or prioritize's
	// (fewer: take), as the server sends them.
	ask := func(p *opa.Pod, cs []opa.Candidate) (*opa.Placement, bool) {
		t.Helper()
		before := e.Stats().AnswersReused
		mode := opa.ReuseTake
		if len(cs) == len(cands) {
			mode = opa.ReuseKeep
		}
		got, err := e.Evaluate(ctx, opa.PlacementRequest{Decoded: p, Candidates: cs, Reuse: mode})
		if err != nil {
			t.Fatal(err)
		}
		return got, e.Stats().AnswersReused > before
	}

	for _, ns := range []string{"alpha", "default"} {
		pm := pod(ns, "web-1")
		if _, reused := ask(decoded(t, pm), cands); reused {
			t.Fatalf("%s: the first request was answered from a kept answer", ns)
		}
		got, reused := ask(decoded(t, pm), sub)
		if !reused || got.Evaluations != 0 {
			t.Errorf("%s: the next verb's request was not reused (reused %v, %d evaluations)", ns, reused, got.Evaluations)
		}
		if g, w := answer(got), fresh(decoded(t, pm), sub); !reflect.DeepEqual(g, w) {
			t.Errorf("%s: reused answer\n got  %q\n want %q", ns, g, w)
		}
		// In another order than filter's (found through the index).
		rev := slices.Clone(sub)
		slices.Reverse(rev)
		got, reused = ask(decoded(t, pm), rev)
		if g, w := answer(got), fresh(decoded(t, pm), rev); !reused || !reflect.DeepEqual(g, w) {
			t.Errorf("%s: reused answer in reverse order (reused %v)\n got  %q\n want %q", ns, reused, g, w)
		}
	}

	pm := pod("alpha", "web-2")
	ask(decoded(t, pm), cands)
	other := pod("alpha", "web-3")
	if _, reused := ask(decoded(t, other), sub); reused {
		t.Error("another pod's request was answered from web-2's answer")
	}
	if _, reused := ask(decoded(t, pm), []opa.Candidate{{Name: "n0"}, {Name: "n-new"}}); reused {
		t.Error("a candidate the kept answer did not judge was answered from it")
	}
	// Without Reuse (the plugin build's requests, explain, tools) nothing
	// is kept or taken.
	if _, err := e.Evaluate(ctx, opa.PlacementRequest{Decoded: decoded(t, pm), Candidates: sub}); err != nil {
		t.Fatal(err)
	}
	if _, reused := ask(decoded(t, pod("alpha", "web-4")), sub); reused {
		t.Error("a pod never kept was answered from a kept answer")
	}
	before := e.Stats().AnswersReused
	if _, err := e.Evaluate(ctx, opa.PlacementRequest{Decoded: decoded(t, pm), Candidates: sub}); err != nil {
		t.Fatal(err)
	}
	if e.Stats().AnswersReused != before {
		t.Error("a request without Reuse was answered from a kept answer")
	}
	ask(decoded(t, pm), cands)
	apply(t, e, node("n1", map[string]string{"tenant": "alpha"})) // the inventory changes
	got, reused := ask(decoded(t, pm), sub)
	if reused {
		t.Error("answered from a kept answer after the inventory changed")
	}
	if g, w := answer(got), fresh(decoded(t, pm), sub); !reflect.DeepEqual(g, w) {
		t.Errorf("after the inventory changed\n got  %q\n want %q", g, w)
	}
	ask(decoded(t, pm), cands)
	apply(t, e, regoTemplate(t, "K8sNodeLabel", nodeLabelRego), constraintObj(t, "K8sNodeLabel", "disk", map[string]any{"key": "disk", "value": "ssd"}))
	got, reused = ask(decoded(t, pm), sub)
	if reused {
		t.Error("answered from a kept answer after the policies changed")
	}
	if g, w := answer(got), fresh(decoded(t, pm), sub); !reflect.DeepEqual(g, w) {
		t.Errorf("after the policies changed\n got  %q\n want %q", g, w)
	}

	// Content given as a map is converted anew by every request: a new
	// pod each time, never answered from a kept answer.
	if _, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: pm, Candidates: cands, Reuse: opa.ReuseKeep}); err != nil {
		t.Fatal(err)
	}
	before = e.Stats().AnswersReused
	if _, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: pm, Candidates: sub, Reuse: opa.ReuseTake}); err != nil {
		t.Fatal(err)
	}
	if e.Stats().AnswersReused != before {
		t.Error("a pod given as content was answered from a kept answer")
	}

	// A nondeterministic template's verdicts are judged again every time.
	apply(t, e, regoTemplate(t, "K8sClock", "package clock\nviolation[{\"msg\": \"odd second\"}] { time.now_ns() % 2 == 1 }"),
		constraintObj(t, "K8sClock", "clock", nil))
	ask(decoded(t, pm), cands)
	if _, reused := ask(decoded(t, pm), sub); reused {
		t.Error("an answer with a nondeterministic template was reused")
	}
}

// TestReusedAnswersConcurrently: answers kept and reused by several
// goroutines at once, each reading its answer's messages and scores while
// the others do (-race checks that a kept answer is only read), and
// releasing its answers as the extender does: filter's at once (the kept
// reference holds it), prioritize's once read. An answer recycled while
// one still reads it would read as another's, or as nothing.
func TestReusedAnswersConcurrently(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, opa.Options{}, examples)
	var cands []opa.Candidate
	for i := 0; i < 40; i++ {
		name := fmt.Sprintf("n%d", i)
		apply(t, e, node(name, map[string]string{"tenant": []string{"alpha", "beta", ""}[i%3]}))
		cands = append(cands, opa.Candidate{Name: name})
	}
	want := map[string][]string{}
	for _, name := range []string{"a", "b", "c"} {
		got, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: pod("alpha", name), Candidates: everyOther(cands), Explain: true})
		if err != nil {
			t.Fatal(err)
		}
		want[name] = answer(got)
	}
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				name := []string{"a", "b", "c"}[(i+w)%3]
				p := decoded(t, pod("alpha", name))
				kept, err := e.Evaluate(ctx, opa.PlacementRequest{Decoded: p, Candidates: cands, Reuse: opa.ReuseKeep})
				if err != nil {
					errc <- err
					return
				}
				kept.Release()
				got, err := e.Evaluate(ctx, opa.PlacementRequest{Decoded: p, Candidates: everyOther(cands), Reuse: opa.ReuseTake})
				if err != nil {
					errc <- err
					return
				}
				if g := answer(got); !reflect.DeepEqual(g, want[name]) {
					errc <- fmt.Errorf("pod %s: got %q, want %q", name, g, want[name])
					return
				}
				got.Release()
			}
		}(w)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if e.Stats().AnswersReused == 0 {
		t.Error("no answer was reused")
	}
}

// TestReleasedAnswers: an answer cut from a kept one reads the same after
// its source was released by its caller and evicted from the kept answers
// (the cut answer's reference holds the source's cells); releasing it
// twice panics; answers whose memory is not counted ignore Release.
func TestReleasedAnswers(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, opa.Options{}, examples)
	var cands []opa.Candidate
	for i := 0; i < 12; i++ {
		name := fmt.Sprintf("n%d", i)
		apply(t, e, node(name, map[string]string{"tenant": []string{"alpha", "beta", ""}[i%3]}))
		cands = append(cands, opa.Candidate{Name: name})
	}
	p := decoded(t, pod("alpha", "cut"))
	want, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: pod("alpha", "cut"), Candidates: everyOther(cands)})
	if err != nil {
		t.Fatal(err)
	}
	filter, err := e.Evaluate(ctx, opa.PlacementRequest{Decoded: p, Candidates: cands, Reuse: opa.ReuseKeep})
	if err != nil {
		t.Fatal(err)
	}
	filter.Release()
	before := e.Stats().AnswersReused
	cut, err := e.Evaluate(ctx, opa.PlacementRequest{Decoded: p, Candidates: everyOther(cands), Reuse: opa.ReuseTake})
	if err != nil {
		t.Fatal(err)
	}
	if e.Stats().AnswersReused != before+1 {
		t.Fatal("the answer was not cut from the kept one")
	}
	// Enough other kept answers to evict it, each released and recycled.
	for i := 0; i < 8; i++ {
		other, err := e.Evaluate(ctx, opa.PlacementRequest{Decoded: decoded(t, pod("beta", fmt.Sprintf("o%d", i))), Candidates: cands, Reuse: opa.ReuseKeep})
		if err != nil {
			t.Fatal(err)
		}
		other.Release()
	}
	if g, w := answer(cut), answer(want); !reflect.DeepEqual(g, w) {
		t.Errorf("the cut answer after its source was evicted:\n got %q\nwant %q", g, w)
	}
	cut.Release()
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a second Release did not panic")
			}
		}()
		cut.Release()
	}()
	built := opa.NewPlacement([]opa.NodeVerdict{{Name: "a"}}, [][]opa.Violation{nil}, 0, 0)
	built.Release()
	built.Release()
	if len(built.Nodes) != 1 {
		t.Error("Release changed an answer whose memory is not counted")
	}
}

// TestPodDecoderGivesTheSamePodForTheSameJSON: the same bytes give the
// pod decoded moments before (what lets prioritize take filter's answer);
// other bytes, even one space apart, decode anew; another decoder, and
// DecodePod, share nothing with it.
func TestPodDecoderGivesTheSamePodForTheSameJSON(t *testing.T) {
	b, err := json.Marshal(pod("default", "same"))
	if err != nil {
		t.Fatal(err)
	}
	pods := opa.NewPodDecoder()
	first, err := pods.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	for name, decode := range map[string]func([]byte) (*opa.Pod, error){"another decoder": opa.NewPodDecoder().Decode, "DecodePod": opa.DecodePod} {
		elsewhere, err := decode(b)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := elsewhere.Content()
		want, _ := first.Content()
		if elsewhere == first || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: gave the decoder's pod, or another one", name)
		}
	}
	again, err := pods.Decode(append([]byte(nil), b...))
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Error("the same JSON decoded to another pod")
	}
	spaced := append(append([]byte(nil), b[:len(b)-1]...), ' ', '}')
	other, err := pods.Decode(spaced)
	if err != nil {
		t.Fatal(err)
	}
	if other == first {
		t.Error("other bytes gave the remembered pod")
	}
	if other.Name() != "same" {
		t.Errorf("decoded %q", other.Name())
	}
}

// TestReleasedAnswersKeepTheirPrintedValues: an answer's printed pod
// values live in memory that goes back to a pool with the answer's; an
// answer cut from a kept one must read its own pod's values after its
// source was released by its caller and other pods' answers were made and
// recycled (each printing other values into pooled memory).
func TestReleasedAnswersKeepTheirPrintedValues(t *testing.T) {
	ctx := context.Background()
	var names []string
	for i := range 9 {
		names = append(names, fmt.Sprintf("n%d", i))
	}
	e := printingEngine(t, opa.Options{}, names)
	var cands []opa.Candidate
	for _, n := range names {
		cands = append(cands, opa.Candidate{Name: n})
	}
	p := decoded(t, pod("default", "first-pod"))
	want, err := e.Evaluate(ctx, opa.PlacementRequest{Decoded: p, Candidates: everyOther(cands), Explain: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(answer(want), "\n"), "first-pod") {
		t.Fatalf("the messages do not print the pod's name: %q", answer(want))
	}
	filter, err := e.Evaluate(ctx, opa.PlacementRequest{Decoded: p, Candidates: cands, Reuse: opa.ReuseKeep})
	if err != nil {
		t.Fatal(err)
	}
	cut, err := e.Evaluate(ctx, opa.PlacementRequest{Decoded: p, Candidates: everyOther(cands), Reuse: opa.ReuseTake})
	if err != nil {
		t.Fatal(err)
	}
	filter.Release() // cut still reads its cells and printed values
	for i := range 2 * 4 {
		other, err := e.Evaluate(ctx, opa.PlacementRequest{Decoded: decoded(t, pod("default", fmt.Sprintf("other-pod-%d", i))), Candidates: cands, Reuse: opa.ReuseKeep})
		if err != nil {
			t.Fatal(err)
		}
		_ = answer(other)
		other.Release()
	}
	if g, w := answer(cut), answer(want); !reflect.DeepEqual(g, w) {
		t.Errorf("the cut answer after its source was released and recycled:\n got %q\nwant %q", g, w)
	}
	cut.Release()
}
