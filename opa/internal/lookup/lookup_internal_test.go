package lookup

import (
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
)

// TestFindTerm: findTerm finds what ast.Value.Find finds, and nothing
// where it finds nothing.
// testTables are the tests' plans' tables.
var testTables = NewTables()

func TestFindTerm(t *testing.T) {
	v := ast.MustParseTerm(`{"a": {"b": [10, {"c": "x"}, null], "s": {"k", 1}}, "n": 1, "e": {}}`).Value
	paths := []string{
		`["a"]`, `["a", "b"]`, `["a", "b", 0]`, `["a", "b", 1, "c"]`, `["a", "b", 2]`, `["a", "b", 3]`,
		`["a", "b", -1]`, `["a", "b", 1.5]`, `["a", "b", "0"]`, `["a", "s", "k"]`, `["a", "s", 1]`, `["a", "s", "z"]`,
		`["n"]`, `["n", "x"]`, `["e"]`, `["e", "x"]`, `["missing"]`, `["a", "b", 1, "c", "d"]`, `[1]`,
	}
	for _, ps := range paths {
		arr := ast.MustParseTerm(ps).Value.(*ast.Array)
		path := make([]*ast.Term, arr.Len())
		for i := range path {
			path[i] = arr.Elem(i)
		}
		want, err := v.Find(ast.Ref(path))
		got := findTerm(v, path)
		switch {
		case err != nil && got != nil:
			t.Errorf("%s: found %v, Find finds nothing (%v)", ps, got, err)
		case err == nil && (got == nil || got.Value.Compare(want) != 0):
			t.Errorf("%s: found %v, Find finds %v", ps, got, want)
		}
	}
}

// TestLookupPlans reads a review through each kind of path the analysis
// makes, with a plan compiled once and read twice (plans keep no state),
// with a leaf that marks what it was called on, and through one Lists
// that every case shares (one review, many plans reading its lists).
func TestLookupPlans(t *testing.T) {
	review := ast.MustParseTerm(`{"review": {"object": {"spec": {
		"containers": [
			{"name": "a", "image": "x", "ports": [{"hostPort": 80}, {"containerPort": 1}], "securityContext": {"privileged": true}},
			{"name": "b", "image": "y", "securityContext": {"privileged": false}},
			{"name": "c"}
		],
		"volumes": {"not": "a list"},
		"labels": {"on": true, "off": false, "s": "v"}
	}}}}`).Value.(ast.Object).Get(ReviewKey)
	path := func(elems ...*ast.Term) []*ast.Term {
		return append([]*ast.Term{ReviewKey, ast.StringTerm("object"), ast.StringTerm("spec")}, elems...)
	}
	s := ast.StringTerm
	each, keys, length := analysis.Each, ast.VarTerm("$keys"), ast.VarTerm("$len")
	privileged := []*ast.Term{s("securityContext"), s("privileged")}
	mark := func(v ast.Value) *ast.Term { return ast.ArrayTerm(ast.StringTerm("leaf"), ast.NewTerm(v)) }
	lists := &Lists{}
	for _, tc := range []struct {
		name string
		path []*ast.Term
		leaf bool
		want string
		// wantTerm, when set, is compared instead of want (markers print
		// as "_").
		wantTerm *ast.Term
	}{
		{"plain value", path(s("containers"), ast.InternedTerm(0), s("name")), false, `"a"`, nil},
		{"absent", path(s("nodeName")), false, `set()`, nil},
		{"not below review", []*ast.Term{ast.StringTerm("parameters"), s("x")}, false, `set()`, nil},
		{"each element's value", path(s("containers"), each, s("image")), false, `["x", "y", set()]`, nil},
		{"each element whole", path(s("containers"), each, s("name")), false, `["a", "b", "c"]`, nil},
		{"nested each", path(s("containers"), each, s("ports"), each, s("hostPort")), false, `[[80, set()], set(), set()]`, nil},
		{"each where the guard holds", path(s("containers"), analysis.EachWhere([][]*ast.Term{privileged}), s("name")), false, `["a"]`, nil},
		{"each counted", path(s("containers"), each, length), false, `[true, true, true]`, nil},
		{"each of a value that is not a list", path(s("volumes"), each, s("x")), false, "", Whole(ast.MustParseTerm(`{"not": "a list"}`))},
		{"each of nothing", path(s("initContainers"), each, s("image")), false, `set()`, nil},
		{"keys that hold", path(s("labels"), keys), false, `["on", "s"]`, nil},
		{"keys of a value that is not an object", path(s("containers"), ast.InternedTerm(0), s("name"), keys), false, "", Whole(s("a"))},
		{"leaf on each value", path(s("containers"), each, s("image")), true, `[["leaf", "x"], ["leaf", "y"], set()]`, nil},
		{"leaf on each element", path(s("containers"), each), true, `[["leaf", {"image": "x", "name": "a", "ports": [{"hostPort": 80}, {"containerPort": 1}], "securityContext": {"privileged": true}}], ["leaf", {"image": "y", "name": "b", "securityContext": {"privileged": false}}], ["leaf", {"name": "c"}]]`, nil},
		{"when that holds", append([]*ast.Term{analysis.When(path(s("containers")), [][]*ast.Term{privileged})}, path(s("containers"), each, s("image"))...), false, `["x", "y", set()]`, nil},
		{"when that does not hold", append([]*ast.Term{analysis.When(path(s("containers")), [][]*ast.Term{{s("missing")}})}, path(s("containers"), each, s("image"))...), false, "", notReadKey},
		{"when on another root holds", append([]*ast.Term{analysis.When([]*ast.Term{ast.StringTerm("parameters"), s("x")}, nil)}, path(s("labels"), s("s"))...), false, `"v"`, nil},
		{"when with a member that holds", append([]*ast.Term{analysis.WhenAny([]analysis.Member{{List: path(s("initContainers"))}, {List: path(s("containers")), Filter: [][]*ast.Term{{s("securityContext"), analysis.Shape}}}})}, path(s("labels"), s("s"))...), false, `"v"`, nil},
		{"when with no member that holds", append([]*ast.Term{analysis.WhenAny([]analysis.Member{{List: path(s("initContainers"))}, {List: path(s("containers")), Filter: [][]*ast.Term{{s("hostPath"), analysis.Shape}}}})}, path(s("labels"), s("s"))...), false, "", notReadKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var leaf func(ast.Value) *ast.Term
			if tc.leaf {
				leaf = mark
			}
			check := func(how string, got *ast.Term) {
				t.Helper()
				if tc.wantTerm != nil && !got.Equal(tc.wantTerm) || tc.wantTerm == nil && got.String() != tc.want {
					t.Errorf("%s %s: %v, want %s%v", how, analysis.PathString(tc.path), got, tc.want, tc.wantTerm)
				}
			}
			plan := testTables.CompileInput(tc.path)
			for range 2 {
				check("plan", plan.Then(review, leaf))
				check("plan with lists", plan.ThenWith(review, leaf, lists))
			}
			check("inputThen", testTables.inputThen(review, tc.path, leaf))
		})
	}
}

// TestListsReset: a Lists reset for another review gives that review's
// values and Whens' answers, not the last one's; two plans under one When
// share its answer within a review.
func TestListsReset(t *testing.T) {
	s := ast.StringTerm
	containers := []*ast.Term{ReviewKey, s("containers")}
	plan := testTables.CompileInput(append(slices.Clone(containers), analysis.Each, s("image")))
	privileged := analysis.When(containers, [][]*ast.Term{{s("privileged")}})
	image := testTables.CompileInput(append([]*ast.Term{privileged}, append(slices.Clone(containers), analysis.Each, s("image"))...))
	name := testTables.CompileInput(append([]*ast.Term{privileged}, append(slices.Clone(containers), analysis.Each, s("name"))...))
	if image.condID != name.condID {
		t.Fatalf("one When numbered %d and %d", image.condID, name.condID)
	}
	lists := &Lists{}
	for _, tc := range []struct{ review, want, wantImage, wantName string }{
		{`{"containers": [{"image": "a", "name": "x"}]}`, `["a"]`, `$notread`, `$notread`},
		{`{"containers": [{"image": "b", "name": "y", "privileged": true}, {"image": "c"}]}`, `["b", "c"]`, `["b", "c"]`, `["y", set()]`},
		{`{}`, `set()`, `$notread`, `$notread`},
	} {
		lists.Reset()
		review := ast.MustParseTerm(tc.review)
		for _, c := range []struct {
			plan *InputPlan
			want string
		}{{plan, tc.want}, {image, tc.wantImage}, {name, tc.wantName}} {
			same := func(got *ast.Term) bool {
				if c.want == "$notread" {
					return got == notReadKey
				}
				return got.String() == c.want
			}
			if got := c.plan.ThenWith(review, nil, lists); !same(got) {
				t.Errorf("%s: %v, want %s", tc.review, got, c.want)
			}
			if got := c.plan.Then(review, nil); !same(got) {
				t.Errorf("%s without lists: %v, want %s", tc.review, got, c.want)
			}
		}
	}
}

// TestArrayInterner: arrays whose elements compare equal are one term,
// others are not, the caller's buffer is copied, and the bound holds.
func TestArrayInterner(t *testing.T) {
	in := newArrayInterner(3, 1<<20)
	s := ast.StringTerm
	buf := []*ast.Term{s("a"), s("b")}
	first := in.Array(buf)
	buf[0] = s("z") // the caller reuses its buffer
	if got := first.String(); got != `["a", "b"]` {
		t.Fatalf("interned %s, want the elements as they were", got)
	}
	if again := in.Array([]*ast.Term{s("a"), s("b")}); again != first {
		t.Error("equal elements made a second term")
	}
	for _, other := range [][]*ast.Term{{s("b"), s("a")}, {s("a")}, {s("a"), s("b"), Undefined}, {}} {
		if got := in.Array(other); got == first || !got.Equal(ast.ArrayTerm(other...)) {
			t.Errorf("%v: got %v (first: %v)", other, got, got == first)
		}
	}
	// An array past maxInternedSize is not kept: each call makes its own.
	long := s(strings.Repeat("x", maxInternedSize))
	if a, b := in.Array([]*ast.Term{long}), in.Array([]*ast.Term{long}); a == b || !a.Equal(b) {
		t.Errorf("a large array: kept (%v) or changed", a == b)
	}
	// Objects are kept like any value.
	obj := ast.MustParseTerm(`{"image": "x"}`)
	if a, b := in.Array([]*ast.Term{obj}), in.Array([]*ast.Term{ast.MustParseTerm(`{"image": "x"}`)}); a != b {
		t.Error("equal objects made a second array")
	}
	if in.n > in.maxArrays || in.bytes > in.maxBytes {
		t.Errorf("holds %d arrays, %d bytes; bounds %d, %d", in.n, in.bytes, in.maxArrays, in.maxBytes)
	}
}
