package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// stdJSON is what writeJSON's encoding/json path writes for v.
func stdJSON(t testing.TB, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// checkJSONString fails t unless appendJSONString writes s as encoding/json does.
func checkJSONString(t *testing.T, s string) {
	t.Helper()
	got := append(appendJSONString(nil, s), '\n')
	if want := stdJSON(t, s); !bytes.Equal(got, want) {
		t.Errorf("appendJSONString(%q) = %s, encoding/json writes %s", s, got, want)
	}
}

func TestAppendJSONStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{
		"", "plain", `quote " and \ backslash`, "new\nline\r\ttab\b\f", "\x00\x01\x1f\x7f",
		"<html> & 'single'", "ünïcødé 日本", "line\u2028sep\u2029para", "bad \xff utf8 \xc3",
		"[tenant] pod in namespace a may not run on node n-1",
	} {
		checkJSONString(t, s)
	}
}

// TestAppendJSONStringEveryPosition puts each byte that needs care at every
// position of a plain run, so that the eight-byte skip is tested on every
// lane and across lane boundaries.
func TestAppendJSONStringEveryPosition(t *testing.T) {
	const plain = "node pool-a/n-0001 lacks the label [zone]: ~!"
	for _, special := range []string{`"`, `\`, "\n", "\x00", "\x1f", "\x7f", "\xff", "é", "\u2028", " "} {
		for i := 0; i <= len(plain); i++ {
			checkJSONString(t, plain[:i]+special+plain[i:])
		}
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "a\"b", "\xff", "\u2028", "\x00", "é"} {
		f.Add(s)
	}
	f.Fuzz(checkJSONString)
}

func TestScoreAnswerIsEncodingJSON(t *testing.T) {
	warn := func(name string) opa.Violation {
		return opa.Violation{Constraint: opa.ConstraintKey{Kind: "W", Name: name}, Action: opa.Warn, Message: "prefer"}
	}
	deny := opa.Violation{Constraint: opa.ConstraintKey{Kind: "D", Name: "d"}, Action: opa.Deny, Message: "no"}
	names := []string{"n-1", `q"uote\`, "ünï 日本\u2028", "", "ghost", "denied"}
	nodes := make([]opa.NodeVerdict, len(names))
	for i, n := range names {
		nodes[i] = opa.NodeVerdict{Name: n, Unknown: n == "ghost"}
	}
	violations := [][]opa.Violation{nil, {warn("a")}, {warn("a"), warn("b")}, {warn("b"), warn("c")}, nil, {deny, warn("a")}}
	// Three warn constraints match: 10, 7, 3, 3; the unknown and the
	// denied node score 0.
	want := extenderv1.HostPriorityList{{Host: "n-1", Score: 10}, {Host: names[1], Score: 7}, {Host: names[2], Score: 3}, {Host: "", Score: 3}, {Host: "ghost", Score: 0}, {Host: "denied", Score: 0}}
	for _, n := range []int{0, 1, len(names)} {
		p := opa.NewPlacement(nodes[:n], violations[:n], 3, 0)
		got, err := scoreAnswer{names: names[:n], p: p}.appendJSON(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if w := stdJSON(t, want[:n]); !bytes.Equal(got, w) {
			t.Errorf("scoreAnswer for %d nodes = %s, encoding/json writes %s", n, got, w)
		}
	}
}

func TestFilterAnswerDecodesAsExtenderFilterResult(t *testing.T) {
	deny := func(msgs ...string) *opa.Placement {
		var own []opa.Violation
		for i, m := range msgs {
			own = append(own, opa.Violation{
				Constraint: opa.ConstraintKey{Kind: "K", Name: []string{"one", "two\"q"}[i%2]}, Action: opa.Deny, Message: m,
			})
		}
		// warn violations are not part of the deny message
		own = append(own, opa.Violation{Constraint: opa.ConstraintKey{Kind: "W", Name: "w"}, Action: opa.Warn, Message: "prefer"})
		return opa.NewPlacement([]opa.NodeVerdict{{}}, [][]opa.Violation{own}, 0, 0)
	}
	names := []string{"a", "b"}
	empty := []string{}
	nodes := &v1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "7"}, Items: []v1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"x": "y"}}}}}
	typed := &v1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"}, Items: []v1.Node{{}, {ObjectMeta: metav1.ObjectMeta{Name: "b"}}}}
	noItems := &v1.NodeList{Items: []v1.Node{}}
	cases := []struct {
		name   string
		answer filterAnswer
		want   extenderv1.ExtenderFilterResult
	}{
		{"empty", filterAnswer{}, extenderv1.ExtenderFilterResult{}},
		{"names", filterAnswer{nodeNames: &names}, extenderv1.ExtenderFilterResult{NodeNames: &names}},
		{"no names passed", filterAnswer{nodeNames: &empty}, extenderv1.ExtenderFilterResult{NodeNames: &empty}},
		{"full nodes", filterAnswer{nodes: wireNodes(t, nodes)}, extenderv1.ExtenderFilterResult{Nodes: nodes}},
		{"typed list", filterAnswer{nodes: wireNodes(t, typed)}, extenderv1.ExtenderFilterResult{Nodes: typed}},
		{"no node passed", filterAnswer{nodes: wireNodes(t, noItems)}, extenderv1.ExtenderFilterResult{Nodes: noItems}},
		{"names asked", filterAnswer{nodes: &nodeListWire{}}, extenderv1.ExtenderFilterResult{Nodes: &v1.NodeList{}}},
		{
			"failed and denied",
			filterAnswer{
				nodeNames:    &names,
				failed:       []failedNode{{name: "ghost", reason: unknownNodeReason}, {name: "g\u2028", reason: "r\n"}},
				unresolvable: []failedNode{{name: "z", placement: deny("m1")}, {name: "c", placement: deny("m1", "m2 <é>")}},
			},
			extenderv1.ExtenderFilterResult{
				NodeNames:                  &names,
				FailedNodes:                extenderv1.FailedNodesMap{"ghost": unknownNodeReason, "g\u2028": "r\n"},
				FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{"z": "[one] m1", "c": "[one] m1; [two\"q] m2 <é>"},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.answer.appendJSON(nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			var got, want extenderv1.ExtenderFilterResult
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("answer %s does not decode: %v", b, err)
			}
			if err := json.Unmarshal(stdJSON(t, &tc.want), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("answer %s decodes to %+v, want %+v", b, got, want)
			}
			// Same fields, same null-ness as encoding/json: compare generic decodings.
			var gotAny, wantAny any
			_ = json.Unmarshal(b, &gotAny)
			_ = json.Unmarshal(stdJSON(t, &tc.want), &wantAny)
			if !reflect.DeepEqual(gotAny, wantAny) {
				t.Errorf("answer %s, encoding/json writes %s", b, stdJSON(t, &tc.want))
			}
		})
	}
	// The message written in place, escaped as it is written, is
	// DenyMessage's.
	p := deny("m1", "m2 \"quoted\" \\ \n\u2028 <tag>")
	w := &jsonStringWriter{b: []byte{'"'}}
	p.WriteDenyMessage(w, 0)
	b := append(w.b, '"')
	var s string
	if err := json.Unmarshal(b, &s); err != nil || s != p.DenyMessage(0) {
		t.Errorf("WriteDenyMessage wrote %s (%v), DenyMessage is %q", b, err, p.DenyMessage(0))
	}
}

// TestAnswerPoolSizesFromLargeAnswers: a buffer the pool cannot give back
// (another call holds it) is made at the size of the larger answers written lately (not grown to
// it from a small one), which decays as smaller answers follow.
func TestAnswerPoolSizesFromLargeAnswers(t *testing.T) {
	var p answerPool
	if b := p.get(); cap(*b) < 64<<10 {
		t.Fatalf("first buffer has %d bytes, want at least 64 KiB", cap(*b))
	}
	big := make([]byte, 900<<10)
	p.put(&big, len(big))
	p.pool.Get() // as when another call holds it: the list holds nothing
	if b := p.get(); cap(*b) < len(big) {
		t.Errorf("after a %d-byte answer, a new buffer has %d bytes", len(big), cap(*b))
	}
	for i := 0; i < 200; i++ {
		small := make([]byte, 10<<10)
		p.put(&small, len(small))
	}
	if l := p.large.Load(); l != 10<<10 {
		t.Errorf("after 200 answers of 10 KiB the pool sizes buffers for %d bytes, want %d", l, 10<<10)
	}
}

// TestLargeAnswersGoOutInPieces: an answer past spillAnswerAt is sent in
// pieces as it is written (chunked, no Content-Length), byte for byte the
// answer built whole, and the buffer it was written into stays about
// spillAnswerAt long; shorter answers carry their length.
func TestLargeAnswersGoOutInPieces(t *testing.T) {
	answer := func(n int) *filterAnswer {
		a := &filterAnswer{unresolvable: make([]failedNode, n)}
		names := make([]string, n)
		for i := range n {
			names[i] = fmt.Sprintf("node-%05d", i)
			a.unresolvable[i] = failedNode{name: names[i], reason: "[every-node] the pod's own violation, the same on every node <\"quoted\">"}
		}
		a.nodeNames = &names
		return a
	}
	for _, tc := range []struct {
		name    string
		nodes   int
		chunked bool
	}{
		{"small", 100, false},
		{"just under", 5000, false},
		{"large", 30000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := answer(tc.nodes)
			whole, err := a.appendJSON(nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if (len(whole) > spillAnswerAt+4096) != tc.chunked {
				t.Fatalf("the case's answer is %d bytes: pick another size", len(whole))
			}
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, http.StatusOK, a)
			}))
			defer ts.Close()
			resp, err := ts.Client().Get(ts.URL)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, whole) {
				t.Fatalf("%d bytes sent, differing from the %d built whole", len(got), len(whole))
			}
			chunked := len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked"
			if chunked != tc.chunked || (!chunked && resp.ContentLength != int64(len(whole))) {
				t.Errorf("Transfer-Encoding %v, Content-Length %d for %d bytes; want chunked %v", resp.TransferEncoding, resp.ContentLength, len(whole), tc.chunked)
			}
			if resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("Content-Type %q", resp.Header.Get("Content-Type"))
			}
			if tc.chunked {
				if large := filterAnswerBuffers.large.Load(); large > 2*spillAnswerAt {
					t.Errorf("the answer's buffer held %d bytes at once, for a %d-byte answer", large, len(whole))
				}
			}
		})
	}
}

// wireNodes is list as the request carried it: its items as JSON.
func wireNodes(t *testing.T, list *v1.NodeList) *nodeListWire {
	t.Helper()
	out := &nodeListWire{TypeMeta: list.TypeMeta, ListMeta: list.ListMeta}
	if list.Items != nil {
		out.Items = []json.RawMessage{}
	}
	for i := range list.Items {
		b, err := json.Marshal(&list.Items[i])
		if err != nil {
			t.Fatal(err)
		}
		out.Items = append(out.Items, b)
	}
	return out
}

// TestBuffersOutliveCollections: the buffers a filter call wrote its
// answer into and read its candidates from are the next call's, after
// two collections and on another goroutine (perhaps another processor):
// a sync.Pool would have let them go, and a call at 5000 candidates would
// make a megabyte anew, paying for it in mark assists when the collector
// runs.
func TestBuffersOutliveCollections(t *testing.T) {
	s, _ := newTestServer(t, Options{})
	h := s.Handler()
	ns := make([]string, 2000)
	for i := range ns {
		ns[i] = fmt.Sprintf("bad-%05d", i) // denied: a long answer
	}
	body := mustJSON(t, extenderv1.ExtenderArgs{Pod: testPod("team-a", "web-1"), NodeNames: &ns})
	call := func() {
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- do(t, h, http.MethodPost, "/filter", body) }()
		if rec := <-done; rec.Code != http.StatusOK {
			t.Fatalf("filter: %d %s", rec.Code, rec.Body)
		}
	}
	peek := func() (*[]byte, *[]opa.Candidate, *bytes.Buffer) {
		a, c, b := filterAnswerBuffers.pool.Get(), candidateBuffers.Get(), bodyBuffers.Get()
		filterAnswerBuffers.pool.Put(a)
		candidateBuffers.Put(c)
		bodyBuffers.Put(b)
		return a, c, b
	}
	call()
	answer, cands, req := peek()
	if answer == nil || cap(*answer) < 2000*len("bad-00000") || cap(*cands) < len(ns) || req.Cap() < len(body) {
		t.Fatalf("after a call of %d candidates the kept buffers are too small for it", len(ns))
	}
	runtime.GC()
	runtime.GC()
	call()
	answer2, cands2, req2 := peek()
	if answer2 != answer || cands2 != cands || req2 != req {
		t.Errorf("after two collections the call made new buffers (answer %v, candidates %v, body %v the same)",
			answer2 == answer, cands2 == cands, req2 == req)
	}
}
