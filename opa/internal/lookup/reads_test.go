package lookup

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/jsonvalue"
)

// readPlans are plans of every kind the analysis makes, over a pod's
// review, numbered by their place.
func readPlans() []*InputPlan {
	s := ast.StringTerm
	review := func(elems ...*ast.Term) []*ast.Term { return append([]*ast.Term{ReviewKey}, elems...) }
	spec := func(elems ...*ast.Term) []*ast.Term {
		return review(append([]*ast.Term{s("object"), s("spec")}, elems...)...)
	}
	each, keys, length := analysis.Each, ast.VarTerm("$keys"), ast.VarTerm("$len")
	privileged := []*ast.Term{s("securityContext"), s("privileged")}
	when := func(w *ast.Term, path []*ast.Term) []*ast.Term { return append([]*ast.Term{w}, path...) }
	paths := [][]*ast.Term{
		spec(s("containers"), each, s("image")),
		spec(s("containers"), each),
		spec(s("containers"), each, s("securityContext"), s("privileged")),
		spec(s("containers"), each, s("ports"), each, s("hostPort")),
		spec(s("containers"), analysis.EachWhere([][]*ast.Term{privileged}), s("name")),
		spec(s("containers"), analysis.EachWhere([][]*ast.Term{privileged}), length),
		spec(s("containers"), each, length),
		spec(s("containers"), ast.InternedTerm(0), s("name")),
		spec(s("containers"), ast.InternedTerm(1)),
		spec(s("containers"), analysis.Shape),
		spec(s("volumes"), each, s("hostPath"), analysis.Shape),
		spec(s("volumes"), each, s("name")),
		spec(s("hostNetwork")),
		spec(s("tolerations"), each, s("key")),
		spec(s("tolerations"), analysis.EachWhere([][]*ast.Term{{s("effect")}}), length),
		spec(s("nodeSelector"), keys),
		review(s("object"), s("metadata"), s("labels"), keys),
		review(s("object"), s("metadata"), s("labels"), s("app")),
		review(s("object"), s("metadata"), s("name")),
		review(s("object"), s("metadata")),
		review(s("namespaceObject"), s("metadata"), s("labels"), s("team")),
		review(s("operation")),
		review(),
		{s("parameters"), s("x")},
		when(analysis.When(spec(s("containers")), [][]*ast.Term{privileged}), spec(s("containers"), each, s("image"))),
		when(analysis.When(spec(s("initContainers")), nil), spec(s("hostNetwork"))),
		when(analysis.WhenAny([]analysis.Member{{List: spec(s("initContainers"))}, {List: spec(s("volumes")), Filter: [][]*ast.Term{{s("hostPath"), analysis.Shape}}}}), review(s("object"), s("metadata"), s("name"))),
		when(analysis.When([]*ast.Term{s("parameters"), s("x")}, nil), spec(s("hostNetwork"))),
	}
	plans := make([]*InputPlan, len(paths))
	for i, p := range paths {
		plans[i] = testTables.CompileInput(p)
	}
	return plans
}

const testReview = `{"review": {"operation": "CREATE", "namespaceObject": {"metadata": {"labels": {"team": "a"}}},
	"object": {"metadata": {"name": "web-1", "uid": "u1", "labels": {"app": "web", "tier": "front"}},
	"spec": {"nodeSelector": {"pool": "general", "off": false}, "tolerations": {"not": "a list", "key": {"k": "v"}},
		"volumes": [{"name": "token-x"}, {"name": "data", "hostPath": {"path": "/d"}}],
		"containers": [
			{"name": "a", "image": "x", "ports": [{"hostPort": 80}, {"containerPort": 1}], "securityContext": {"privileged": true}, "volumeMounts": [{"name": "token-x"}]},
			{"name": "b", "image": "y", "securityContext": {"privileged": false}, "volumeMounts": [{"name": "token-x"}]}
		]}}}}`

// TestReadIndexHoldsEveryRead: a plan that no difference between two
// reviews touches reads the same value in both. The second review is the
// first changed at a few random places (a scalar replaced, a key added or
// removed, an element added or removed, a value of another kind), sharing
// the rest as a replica's decoding does.
func TestReadIndexHoldsEveryRead(t *testing.T) {
	for seed := range uint64(3000) {
		checkReads(t, seed)
	}
}

func FuzzReadIndex(f *testing.F) {
	for seed := range uint64(8) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) { checkReads(t, seed) })
}

func checkReads(t *testing.T, seed uint64) {
	t.Helper()
	plans := readPlans()
	index := NewReadIndex()
	for id, p := range plans {
		index.Add(id, p)
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	a := ast.MustParseTerm(testReview).Value.(ast.Object).Get(ReviewKey)
	b := a.Value
	for range 1 + rng.IntN(3) {
		b = mutate(rng, b, 0)
	}
	paths, ok := new(Differ).Diff(a.Value, b, 64)
	if !ok {
		t.Fatalf("seed %d: more than 64 differences", seed)
	}
	if len(paths) == 0 && a.Value.Compare(b) != 0 {
		t.Fatalf("seed %d: no difference found between %v and %v", seed, a.Value, b)
	}
	touched := map[int]bool{}
	for _, p := range paths {
		for _, id := range index.Touched(p, nil) {
			touched[id] = true
		}
	}
	bt := ast.NewTerm(b)
	for id, p := range plans {
		if touched[id] {
			continue
		}
		if va, vb := p.Then(a, nil), p.Then(bt, nil); va.Value.Compare(vb.Value) != 0 {
			t.Fatalf("seed %d: plan %d reads %v then %v, untouched by the differences %v\nbefore: %v\nafter: %v", seed, id, va, vb, paths, a.Value, b)
		}
	}
}

// mutate changes v at one random place below it, copying the values on
// the way there and sharing the rest.
func mutate(rng *rand.Rand, v ast.Value, depth int) ast.Value {
	descend := depth < 6 && rng.IntN(4) != 0
	switch x := v.(type) {
	case ast.Object:
		keys := x.Keys()
		if descend && len(keys) > 0 {
			k := keys[rng.IntN(len(keys))]
			out := x.Copy()
			out.Insert(k, ast.NewTerm(mutate(rng, x.Get(k).Value, depth+1)))
			return out
		}
		out := x.Copy()
		switch op := rng.IntN(3); {
		case op == 0 && len(keys) > 0:
			return removeKey(x, keys[rng.IntN(len(keys))])
		case op == 1:
			out.Insert(ast.StringTerm(fmt.Sprintf("k%d", rng.IntN(4))), ast.NewTerm(scalar(rng)))
			return out
		}
		return scalar(rng)
	case *ast.Array:
		if descend && x.Len() > 0 {
			i := rng.IntN(x.Len())
			elems := make([]*ast.Term, x.Len())
			for j := range elems {
				elems[j] = x.Elem(j)
			}
			elems[i] = ast.NewTerm(mutate(rng, elems[i].Value, depth+1))
			return ast.NewArray(elems...)
		}
		switch rng.IntN(3) {
		case 0:
			return x.Append(ast.NewTerm(scalar(rng)))
		case 1:
			if x.Len() > 0 {
				return x.Slice(0, x.Len()-1)
			}
		}
		return ast.NewObject()
	}
	if rng.IntN(5) == 0 {
		return ast.NewArray(ast.StringTerm("x"))
	}
	return scalar(rng)
}

func removeKey(x ast.Object, k *ast.Term) ast.Value {
	out := ast.NewObject()
	x.Foreach(func(kk, vv *ast.Term) {
		if !kk.Equal(k) {
			out.Insert(kk, vv)
		}
	})
	return out
}

func scalar(rng *rand.Rand) ast.Value {
	switch rng.IntN(5) {
	case 0:
		return ast.Boolean(rng.IntN(2) == 0)
	case 1:
		return ast.Null{}
	case 2:
		return ast.Number(fmt.Sprint(rng.IntN(3)))
	}
	return ast.String([]string{"x", "y", "token-x", "web"}[rng.IntN(4)])
}

// TestDiffFindsPlaces: Diff's paths, where two reviews differ, and its
// bound; one Differ serves every case, as a request's buffers' does.
func TestDiffFindsPlaces(t *testing.T) {
	var d Differ
	for _, tc := range []struct {
		a, b  string
		want  string
		limit int
		ok    bool
	}{
		{`{"a": 1}`, `{"a": 1}`, `none`, 8, true},
		{`{"a": 1, "b": [1, 2]}`, `{"a": 2, "b": [1, 3]}`, `[a] [b #1]`, 8, true},
		{`{"a": {"x": 1}}`, `{"a": {"y": 1}}`, `[a]`, 8, true},
		{`{"a": [1]}`, `{"a": [1, 2]}`, `[a]`, 8, true},
		{`{"a": [1]}`, `{"a": {"0": 1}}`, `[a]`, 8, true},
		{`{"a": 1}`, `{"a": 1, "b": 2}`, `[]`, 8, true},
		{`{"a": 1, "b": 2, "c": 3}`, `{"a": 0, "b": 0, "c": 0}`, ``, 2, false},
	} {
		a, b := ast.MustParseTerm(tc.a).Value, ast.MustParseTerm(tc.b).Value
		paths, ok := d.Diff(a, b, tc.limit)
		if ok != tc.ok {
			t.Errorf("%s / %s: ok %v, want %v", tc.a, tc.b, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		got := ""
		for i, p := range paths {
			if i > 0 {
				got += " "
			}
			got += "["
			for j, s := range p {
				if j > 0 {
					got += " "
				}
				if s.Index >= 0 {
					got += fmt.Sprintf("#%d", s.Index)
				} else {
					got += string(s.Key.Value.(ast.String))
				}
			}
			got += "]"
		}
		if len(paths) == 0 {
			got = "none"
		}
		if got != tc.want {
			t.Errorf("%s / %s: %s, want %s", tc.a, tc.b, got, tc.want)
		}
	}
}

// BenchmarkDiffReplicas times Diff on the reviews of two replicas of a
// ReplicaSet (testdata: as the scheduler sends them; their name, uid and
// token volume differ), decoded as the engine decodes pods, sharing what
// their JSON shares.
func BenchmarkDiffReplicas(b *testing.B) {
	shared := jsonvalue.NewShared(jsonvalue.SharedLimits{})
	var reviews [2]ast.Value
	for i, name := range []string{"replica-a.json", "replica-b.json"} {
		raw, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			b.Fatal(err)
		}
		var pod ast.Value
		for range 2 { // the second reading shares what the first saw
			if pod, err = shared.Parse(raw); err != nil {
				b.Fatal(err)
			}
		}
		reviews[i] = ast.NewObject(
			[2]*ast.Term{ast.StringTerm("object"), ast.NewTerm(pod)},
			[2]*ast.Term{ast.StringTerm("operation"), ast.StringTerm("CREATE")},
			[2]*ast.Term{ast.StringTerm("name"), ast.NewTerm(pod.(ast.Object).Get(ast.StringTerm("metadata")).Value.(ast.Object).Get(ast.StringTerm("name")).Value)},
		)
	}
	var d Differ
	paths, ok := d.Diff(reviews[0], reviews[1], 32)
	if !ok || len(paths) == 0 || len(paths) > 8 {
		b.Fatalf("%d differences (ok %v): %v", len(paths), ok, paths)
	}
	b.ReportAllocs()
	for b.Loop() {
		d.Diff(reviews[0], reviews[1], 32)
	}
}

// TestReadIndexHas: the index knows the numbers it was given, and no
// other.
func TestReadIndexHas(t *testing.T) {
	x := NewReadIndex()
	plan := testTables.CompileInput([]*ast.Term{ReviewKey, ast.StringTerm("x")})
	x.Add(3, plan)
	x.Add(0, plan)
	x.Add(3, plan)
	for id, want := range map[int]bool{-1: false, 0: true, 1: false, 3: true, 4: false} {
		if got := x.Has(id); got != want {
			t.Errorf("Has(%d) = %v, want %v", id, got, want)
		}
	}
}
