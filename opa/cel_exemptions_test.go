package opa_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// exemptionsEngine is an engine holding testdata/cel/exemptions.yaml and
// celNodes' Nodes.
func exemptionsEngine(t testing.TB, opts opa.Options) *opa.Engine {
	t.Helper()
	return celEngineOf(t, opts, "testdata/cel/exemptions.yaml")
}

// exemptPod is a pod whose containers run images with securityContext
// privileged as given; image may be any JSON value.
func exemptPod(name string, images []any, privileged []bool, init bool) map[string]any {
	p := pod("default", name)
	var containers []any
	for i, img := range images {
		containers = append(containers, map[string]any{"name": []string{"main", "debug", "third"}[i%3], "image": img,
			"securityContext": map[string]any{"privileged": privileged[i%len(privileged)]}})
	}
	spec(p)["containers"] = containers
	if init {
		spec(p)["initContainers"] = []any{map[string]any{"name": "init", "image": images[len(images)-1], "securityContext": map[string]any{"privileged": true}}}
	}
	return p
}

// TestCELExemptions: `container.image in variables.exemptImages` is keyed
// on the exemption test's answer for the image, so a pod with an image no
// pod had costs the test, once for the constraints that exempt the same
// images, not the template; an image the test fails on, or one that is
// not a string, is keyed whole; and the verdicts are those of an engine
// without memo.
func TestCELExemptions(t *testing.T) {
	e, exact := exemptionsEngine(t, opa.Options{}), exemptionsEngine(t, opa.Options{DisableMemo: true})
	evaluated := func(p map[string]any) (constraints []string, helpers uint64) {
		t.Helper()
		before := e.Stats().HelperEvaluations
		pl, err := e.Evaluate(t.Context(), opa.PlacementRequest{Pod: p, Candidates: celNodes[:1], Explain: true})
		if err != nil {
			t.Fatal(err)
		}
		helpers = e.Stats().HelperEvaluations - before
		for _, tr := range pl.Trace(0) {
			if !tr.Memoised && tr.NotEvaluated == "" {
				constraints = append(constraints, tr.Constraint.Name)
			}
		}
		slices.Sort(constraints)
		sameAsWithoutMemo(t, e, exact, p, celNodes)
		return constraints, helpers
	}
	priv := []bool{true, false}
	evaluated(exemptPod("a", []any{"app:1", "safe:1"}, priv, false))
	if got, _ := evaluated(exemptPod("a", []any{"app:1", "safe:1"}, priv, false)); len(got) != 0 {
		t.Errorf("the second look at a pod evaluated %v", got)
	}
	lines := violationLines(t, e, exemptPod("a", []any{"app:1", "safe:1"}, priv, false), celNodes[:1])
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "exempt-a") && strings.Contains(l, "privileged: main") }) {
		t.Errorf("a privileged container with an image not exempt is not reported: %q", lines)
	}
	tests := []struct {
		name    string
		images  []any
		init    bool
		want    []string // the constraints evaluated, not memoised
		helpers uint64   // the exemption tests evaluated
	}{{
		// exempt-a, exempt-b and exempt-escalation share the answer for
		// app:2; exempt-none (no parameters: variables.params is null)
		// and exempt-all have their own. numbered's test fails on both
		// images (int() of a name): they are keyed whole, and a failed
		// answer is not kept, so it is asked again. exempt-escalation
		// prints app:2: a placeholder, as the test answers alike for it.
		name: "a new image not exempt", images: []any{"app:2", "safe:1"},
		want: []string{"numbered"}, helpers: 5,
	}, {
		name: "another, with the same answers", images: []any{"app:3", "safe:1"},
		want: []string{"numbered"}, helpers: 5,
	}, {
		// exempt-escalation keys an exempt image whole: the test answers
		// otherwise for a placeholder.
		name: "a new image exempt by prefix: a new answer", images: []any{"registry.example/app:1", "safe:1"},
		want: []string{"exempt-a", "exempt-b", "exempt-escalation", "numbered"}, helpers: 5,
	}, {
		name: "another exempt by prefix", images: []any{"registry.example/app:2", "safe:1"},
		want: []string{"exempt-escalation", "numbered"}, helpers: 5,
	}, {
		// Neither is exempt (safe:1 was): new answers for exempt-a, -b and
		// -escalation, the same (none exempt; all exempt) for exempt-none
		// and exempt-all; numbered's test holds on 12 only.
		name: "numbered images", images: []any{"12", "3"},
		want: []string{"exempt-a", "exempt-b", "exempt-escalation", "numbered"}, helpers: 8,
	}, {
		name: "other numbers, the same answers", images: []any{"13", "4"},
		want: nil, helpers: 8,
	}, {
		// 14 is asked about by each constraint's helper (a refusal is not
		// kept) and keyed whole.
		name: "an image that is not a string is keyed whole", images: []any{14, "4"},
		want: []string{"exempt-a", "exempt-all", "exempt-b", "exempt-escalation", "exempt-none", "numbered"}, helpers: 6,
	}, {
		// Besides the two images, the placeholder of the init container's
		// image is asked about once per helper identity.
		name: "the list's range reaches init containers too", images: []any{"app:4", "debug:1"}, init: true,
		want: []string{"exempt-a", "exempt-all", "exempt-b", "exempt-escalation", "exempt-none", "numbered"}, helpers: 10,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, helpers := evaluated(exemptPod("p", tc.images, priv, tc.init))
			if !slices.Equal(got, tc.want) {
				t.Errorf("evaluated %v, want %v", got, tc.want)
			}
			if helpers != tc.helpers {
				t.Errorf("%d helper evaluations, want %d", helpers, tc.helpers)
			}
		})
	}
}

// FuzzCELExemptions judges fuzzed pods against the exemption templates
// (images as strings or numbers, privileged or not, init containers) on
// an engine with memo and one without: the same violations, whatever the
// images the exemption tests' answers stand for.
func FuzzCELExemptions(f *testing.F) {
	f.Add("app:1", "safe:1", false, true, false, false)
	f.Add("registry.example/x", "debug:1", false, true, true, true)
	f.Add("12", "9", true, false, true, false)
	f.Add("", "registry.example/", false, true, true, true)
	f.Add("debug", "safe:1*", true, true, true, true)
	memo, exact := exemptionsEngine(f, opa.Options{}), exemptionsEngine(f, opa.Options{DisableMemo: true})
	f.Fuzz(func(t *testing.T, image1, image2 string, numeric, priv1, priv2, init bool) {
		var first any = image1
		if numeric {
			first = len(image1)
		}
		sameAsWithoutMemo(t, memo, exact, exemptPod("p", []any{first, image2}, []bool{priv1, priv2}, init), celNodes)
	})
}

// TestCELExemptionsUnderChurn: while exempt-a's exempt images change
// (its helpers are prepared anew, its answers kept under a new identity),
// pods with new images judged concurrently get the verdicts of one of its
// versions, and the other constraints' verdicts are an engine without
// memo's. Run with -race: helpers are compiled while others evaluate.
func TestCELExemptionsUnderChurn(t *testing.T) {
	e := exemptionsEngine(t, opa.Options{Parallelism: 2})
	ref := exemptionsEngine(t, opa.Options{DisableMemo: true})
	var exemptA *unstructured.Unstructured
	for _, o := range load(t, "testdata/cel/exemptions.yaml") {
		if o.GetName() == "exempt-a" {
			exemptA = o
		}
	}
	work := func(w, i int) error {
		p := exemptPod("p", []any{fmt.Sprintf("registry.example/app:%d", i%7), "safe:1"}, []bool{true, true}, i%3 == 0)
		got, err := agreeingBut(t, e, ref, p, func(v opa.Violation) bool { return v.Constraint.Name == "exempt-a" })
		if err != nil {
			return err
		}
		for n := range got.Nodes {
			// Either version: with registry.example/* exempt every
			// container is (debug and init run safe:1); without, main is
			// not.
			var fromA []string
			for _, v := range got.Violations(n) {
				if v.Constraint.Name == "exempt-a" {
					fromA = append(fromA, v.Message)
				}
			}
			if len(fromA) > 1 || (len(fromA) == 1 && fromA[0] != "privileged: main") {
				return fmt.Errorf("exempt-a: %q is no version's verdict", fromA)
			}
		}
		return nil
	}
	change := func(i int) error {
		c := exemptA.DeepCopy()
		images := [][]any{{"safe:1", "registry.example/*"}, {"safe:1"}}[i%2]
		unstructured.SetNestedSlice(c.Object, images, "spec", "parameters", "exemptImages")
		if errs := e.Apply(t.Context(), []opa.Change{{Object: c}}); len(errs) > 0 {
			return fmt.Errorf("apply: %v", errs)
		}
		return nil
	}
	churn(t, time.Second, 5*time.Millisecond, 3, work, change)
}
