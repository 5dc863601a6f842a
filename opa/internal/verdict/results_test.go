package verdict

import (
	"strings"
	"testing"
)

func TestSortResults(t *testing.T) {
	res := []Result{
		{Msg: "b", Details: []byte(`{"a":1}`)},
		{Msg: "a", Details: []byte(`{"b":1}`)},
		{Msg: "a", Details: []byte(`{"a":2}`)},
		{Msg: "a"},
	}
	SortResults(res)
	var got []string
	for _, r := range res {
		got = append(got, r.Msg+" "+string(r.Details))
	}
	want := []string{"a ", `a {"a":2}`, `a {"b":1}`, `b {"a":1}`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("sorted %q, want %q", got, want)
	}
	if n := testing.AllocsPerRun(100, func() { SortResults(res) }); n != 0 {
		t.Errorf("%v allocations per sort, want 0", n)
	}
}
