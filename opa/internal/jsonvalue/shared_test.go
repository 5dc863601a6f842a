package jsonvalue

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// checkShared fails t unless s.Parse and Parse agree on doc: the same
// value, or the same error.
func checkShared(t *testing.T, s *Shared, doc []byte) ast.Value {
	t.Helper()
	want, werr := Parse(doc)
	got, gerr := s.Parse(doc)
	switch {
	case (werr == nil) != (gerr == nil):
		t.Errorf("Shared.Parse(%q): error %v, Parse: %v", doc, gerr, werr)
	case werr != nil && werr.Error() != gerr.Error():
		t.Errorf("Shared.Parse(%q): error %q, Parse: %q", doc, gerr, werr)
	case werr == nil && want.Compare(got) != 0:
		t.Errorf("Shared.Parse(%q) = %v, want %v", doc, got, want)
	}
	return got
}

// replicas are the fixture pod renamed n times, as a ReplicaSet's pods
// differ: name, uid, and the token volume's name where it is mounted.
func replicas(t testing.TB, n int) [][]byte {
	doc, err := os.ReadFile("testdata/pod.json")
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]byte, n)
	for i := range out {
		d := bytes.ReplaceAll(doc, []byte("web-6f9c7d-x7k2q"), fmt.Appendf(nil, "web-6f9c7d-%05d", i))
		out[i] = bytes.ReplaceAll(d, []byte(`"kube-api-access`), fmt.Appendf(nil, `"kube-api-access-%05d`, i))
	}
	return out
}

// TestSharedAgreesWithParse: documents read through a table are the
// documents Parse reads, whatever the table holds from others; a span
// read twice is kept, so a third replica shares its parts with the second.
func TestSharedAgreesWithParse(t *testing.T) {
	s := NewShared(SharedLimits{})
	docs := replicas(t, 4)
	var vals []ast.Value
	for _, d := range docs {
		vals = append(vals, checkShared(t, s, d))
	}
	if s.Len() == 0 {
		t.Fatal("four replicas left the table empty")
	}
	spec := func(v ast.Value) *ast.Term {
		return v.(ast.Object).Get(ast.StringTerm("spec")).Value.(ast.Object).Get(ast.StringTerm("tolerations"))
	}
	if spec(vals[2]) != spec(vals[3]) {
		t.Error("the third and fourth replicas' tolerations are not one term")
	}
	// The container mounts the replica's token volume, so it is read anew;
	// its image, a string seen before, is the term read before. The name
	// is the replica's own.
	at := func(v ast.Value, path ...any) *ast.Term {
		term := ast.NewTerm(v)
		for _, k := range path {
			switch k := k.(type) {
			case string:
				term = term.Value.(ast.Object).Get(ast.StringTerm(k))
			case int:
				term = term.Value.(*ast.Array).Elem(k)
			}
		}
		return term
	}
	if at(vals[2], "spec", "containers", 0) == at(vals[3], "spec", "containers", 0) {
		t.Fatal("two replicas share the container that mounts their own token volume")
	}
	if at(vals[2], "spec", "containers", 0, "image") != at(vals[3], "spec", "containers", 0, "image") {
		t.Error("the third and fourth replicas' images are not one term")
	}
	if a, b := at(vals[2], "metadata", "name"), at(vals[3], "metadata", "name"); a == b || a.Equal(b) {
		t.Errorf("two replicas' names are %v and %v", a, b)
	}
	// Odd and malformed documents, after the table has learnt the pod's
	// spans: the same values and errors as Parse.
	for _, doc := range []string{
		`{"a":[1,2,3,4,5,6,7,8,9,10,11,12,13,14],"b":[1,2,3,4,5,6,7,8,9,10,11,12,13,14]}`,
		`{"a":[1,2,3,4,5,6,7,8,9,10,11,12,13,14],"b":[1,2,3,4,5,6,7,8,9,10,11,12,13,14]}`,
		`[{"k":"a string of some length to share"},{"k":"a string of some length to share"}]`,
		`[{"k":"a string of some length to share"},{"k":"a string of some length to share"]`,
		`{"x": "]}", "y": [{"q":"\"]}"}, {"q":"\"]}"}, {"q":"\"]}"}]}`,
		`{"s":"ab","t":"ab","u":["ab","a\u0062","ab"],"v":"\"ab\"","w":"ab"}`, `["", "", "", "ab", "ab", "\"", "\""]`,
		`{"s":"unterminated, "t":"ab"}`, `["ab", "ab`,
		`{"a":{"b":1},"a":{"b":2, "c": [1, 2, 3, 4, 5, 6, 7, 8, 9]}}`, `[1,]`, `{"a": [1, 2,, 3]}`, `]`, `[[`, `{"a":1}}`,
	} {
		checkShared(t, s, []byte(doc))
		checkShared(t, s, []byte(doc))
	}
	deep := strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)
	checkShared(t, s, []byte(deep))
}

// TestSharedBounds: past its bounds the table starts over, and what it
// gives stays right.
func TestSharedBounds(t *testing.T) {
	s := NewShared(SharedLimits{Entries: 4, Bytes: 512, MinSpan: 8})
	for i := range 200 {
		doc := fmt.Appendf(nil, `{"a":{"n":%d,"pad":"xxxxxxxx"},"b":{"n":%d,"pad":"yyyyyyyy"},"c":[%d,%d,%d]}`, i%7, i%5, i%3, i, i%2)
		checkShared(t, s, doc)
		if n := s.Len(); n > 4 {
			t.Fatalf("the table holds %d spans, bound 4", n)
		}
	}
}

// TestSharedConcurrently: goroutines reading replicas through one table
// under -race while it fills and starts over.
func TestSharedConcurrently(t *testing.T) {
	s := NewShared(SharedLimits{Entries: 16})
	docs := replicas(t, 32)
	want := make([]ast.Value, len(docs))
	for i, d := range docs {
		v, err := Parse(d)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = v
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 200 {
				i := (g*7 + k) % len(docs)
				got, err := s.Parse(docs[i])
				if err != nil || got.Compare(want[i]) != 0 {
					t.Errorf("replica %d read %v (%v)", i, got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func FuzzShared(f *testing.F) {
	for _, s := range []string{`{"a":[1,"x",null,true]}`, `[{"k":"some span long enough"},{"k":"some span long enough"}]`, `{"a":1,"a":2}`} {
		f.Add([]byte(s))
	}
	s := NewShared(SharedLimits{Entries: 64, MinSpan: 4}) // across inputs: spans of one are found in the next
	f.Fuzz(func(t *testing.T, doc []byte) {
		if bytes.Count(doc, []byte("["))+bytes.Count(doc, []byte("{")) > 1000 {
			return
		}
		checkShared(t, s, doc)
		checkShared(t, s, doc)
		checkShared(t, s, doc)
	})
}

func BenchmarkSharedReplica(b *testing.B) {
	s := NewShared(SharedLimits{})
	docs := replicas(b, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := s.Parse(docs[i%len(docs)]); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSeenKeepsTwoPerBucket: a span every replica repeats is kept though
// one of each replica's own spans falls in its bucket between two
// replicas (with one slot a bucket, that span was never shared).
func TestSeenKeepsTwoPerBucket(t *testing.T) {
	s := NewShared(SharedLimits{Entries: 4})
	n := uint64(len(s.seen)) // a multiple of it falls in the same bucket
	repeated := digest{3, 1}
	term := ast.StringTerm("tolerations")
	for replica := range uint64(5) {
		own := digest{3 + n*(replica+1), 100 + replica} // the same bucket
		s.offer(repeated, term, 40)
		s.offer(own, ast.StringTerm("own"), 40)
	}
	if s.get(repeated) != term {
		t.Error("the repeated span was not kept")
	}
	for replica := range uint64(5) {
		if s.get(digest{3 + n*(replica+1), 100 + replica}) != nil {
			t.Errorf("replica %d's own span was kept", replica)
		}
	}
	// Two others between two replicas drop it from the bucket.
	s = NewShared(SharedLimits{Entries: 4})
	for replica := range uint64(3) {
		s.offer(repeated, term, 40)
		s.offer(digest{3 + n, 200 + replica}, ast.StringTerm("a"), 40)
		s.offer(digest{3 + 2*n, 300 + replica}, ast.StringTerm("b"), 40)
	}
	if s.get(repeated) != nil {
		t.Error("a span dropped from its bucket between every two replicas was kept")
	}
}
