package diff

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/gen"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

var (
	genTemplates = flag.Int("gen-templates", 120, "generated templates per round (TestGeneratedCEL)")
	genPods      = flag.Int("gen-pods", 40, "generated pods per round, each judged on 3 candidate nodes")
	genRounds    = flag.Int("gen-rounds", 1, "rounds, each with its own seed")
	genSeed      = flag.Uint64("gen-seed", 1, "the first round's seed")
	genReport    = flag.String("gen-report", "", "write the run's summary here (JSON)")
	genShrinkDir = flag.String("gen-shrunk", "", "write each difference, shrunk, here as a YAML case (default: the test log only)")
)

// genCandidates is how many candidate nodes each generated pod is judged on.
const genCandidates = 3

// genSummary is what a run of TestGeneratedCEL publishes.
type genSummary struct {
	Seed        uint64 `json:"seed"`
	Rounds      int    `json:"rounds"`
	Templates   int    `json:"templates"`
	Refused     int    `json:"templatesRefusedByBoth"`
	Reviews     int    `json:"reviews"`
	Comparisons int    `json:"comparisons"`
	Violations  int    `json:"violations"`
	// Errors are the violations that carry an evaluation error; Deciding
	// are the templates that allow some reviews and deny others, and
	// PerNode those that deny a pod on some of its candidates only.
	Errors      int            `json:"errors"`
	Deciding    int            `json:"deciding"`
	PerNode     int            `json:"perNode"`
	Differences int            `json:"differences"`
	Intended    map[string]int `json:"intendedDifferences"`
	Forms       map[string]int `json:"forms"`
}

// TestGeneratedCEL judges generated CEL templates (bench/gen) on generated
// pods and candidate nodes with Gatekeeper's CEL driver (bench/celpeer) and
// three engines: two with the memo (one asked with every candidate at
// once, pods in order; one asked a candidate at a time, pods in reverse)
// and one without. Violations, messages and errors must be identical. A
// difference is shrunk (gen's Simpler steps on the template and the pods)
// and reported as a minimal case. A comparison is one (template, pod,
// node); Forms counts, per expression form, the comparisons of templates
// that use it. Run longer with
//
//	cd bench && go test -run TestGeneratedCEL -timeout 0 ./diff/ -args -gen-rounds 80 -gen-report R.json
func TestGeneratedCEL(t *testing.T) {
	runGenerated(t, func(seed uint64) func(int) gen.Policy {
		g := gen.NewCEL(seed)
		return func(i int) gen.Policy { return g.Template(i) }
	})
}

// TestGeneratedRego is TestGeneratedCEL for generated Rego templates
// (violation rules over the review, input.parameters and data.inventory's
// Nodes and Namespaces), judged by the constraint framework's Rego driver
// as celpeer registers it (data.inventory an extern, as in Gatekeeper).
func TestGeneratedRego(t *testing.T) {
	runGenerated(t, func(seed uint64) func(int) gen.Policy {
		g := gen.NewRego(seed)
		return func(i int) gen.Policy { return g.Template(i) }
	})
}

// runGenerated runs the rounds of a generated comparison: each round's
// templates from newTemplates(seed), its pods from gen.Objects.
func runGenerated(t *testing.T, newTemplates func(seed uint64) func(int) gen.Policy) {
	bin := buildCELPeer(t)
	sum := genSummary{Seed: *genSeed, Rounds: *genRounds, Forms: map[string]int{}, Intended: map[string]int{}}
	start := time.Now()
	for round := range *genRounds {
		seed := *genSeed + uint64(round)
		next, objs := newTemplates(seed), gen.NewObjects(seed)
		var tmpls []gen.Policy
		for i := range *genTemplates {
			tmpls = append(tmpls, next(i))
		}
		var pods []genPod
		for i := range *genPods {
			pods = append(pods, genPod{obj: objs.Pod(i), nodes: objs.Candidates(genCandidates)})
		}
		res := judge(t, bin, tmpls, pods)
		sum.add(res, tmpls, len(pods)*genCandidates)
		kinds := mapKeys(res.diffs)
		sort.Strings(kinds)
		sum.Differences += len(kinds)
		for i, kind := range kinds {
			t.Errorf("seed %d, %s: %s", seed, kind, res.diffs[kind])
			if i < 3 {
				shrinkAndReport(t, bin, tmplByKind(tmpls, kind), pods)
			}
		}
	}
	if sum.Refused*5 > sum.Templates {
		t.Errorf("%d of %d generated templates refused: the generator should write templates that compile", sum.Refused, sum.Templates)
	}
	var forms []string
	for f, n := range sum.Forms {
		forms = append(forms, fmt.Sprintf("%s=%d", f, n))
	}
	sort.Strings(forms)
	t.Logf("%d rounds: %d templates (%d refused by both; %d both allow and deny, %d deny a pod on some candidates only), %d reviews, %d (template, pod, node) comparisons per engine, %d violations from Gatekeeper (%d evaluation errors), %d differences (intended, per engine answer: %v), in %v",
		sum.Rounds, sum.Templates, sum.Refused, sum.Deciding, sum.PerNode, sum.Reviews, sum.Comparisons, sum.Violations, sum.Errors, sum.Differences, sum.Intended, time.Since(start).Round(time.Second))
	t.Logf("comparisons per form: %s", strings.Join(forms, " "))
	if *genReport != "" {
		raw, _ := json.MarshalIndent(sum, "", "  ")
		if err := os.WriteFile(*genReport, append(raw, '\n'), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// add counts one round's judgement of tmpls on reviews (pod, node) pairs.
func (sum *genSummary) add(res judgement, tmpls []gen.Policy, reviews int) {
	sum.Templates += len(tmpls)
	sum.Refused += len(res.refused)
	sum.Reviews += reviews
	sum.Comparisons += res.comparisons
	sum.Violations += res.violations
	sum.Errors += res.errors
	sum.Deciding += res.deciding
	sum.PerNode += res.perNode
	for k, n := range res.intended {
		sum.Intended[k] += n
	}
	for _, tm := range tmpls {
		if res.refused[tm.TemplateKind()] {
			continue
		}
		forms := map[string]int{}
		tm.Forms(forms)
		for f := range forms {
			sum.Forms[f] += reviews
		}
	}
}

func mapKeys[K comparable, V any](m map[K]V) []K {
	var out []K
	for k := range m {
		out = append(out, k)
	}
	return out
}

func tmplByKind(ts []gen.Policy, kind string) gen.Policy {
	for _, t := range ts {
		if t.TemplateKind() == kind {
			return t
		}
	}
	return nil
}

// genPod is a generated pod and its candidate nodes.
type genPod struct {
	obj   map[string]any
	nodes []string
}

// judgement is what judge found: templates both sides refused, the first
// difference per constraint kind, and the counts.
type judgement struct {
	refused     map[string]bool
	diffs       map[string]string
	comparisons int
	violations  int
	errors      int
	deciding    int
	perNode     int
	// intended counts the engine's texts read as an intended difference.
	intended map[string]int
}

// genEngines are the ways the engine is asked, each its own engine so that
// each fills its memo in its own order.
var genEngines = []struct {
	name    string
	opts    opa.Options
	reverse bool // pods in reverse order
	single  bool // one candidate per request
}{
	{name: "memo", opts: opa.Options{}},
	{name: "memo-reverse-single", opts: opa.Options{}, reverse: true, single: true},
	{name: "no-memo", opts: opa.Options{DisableMemo: true}},
}

// judge runs tmpls on pods with celpeer and the engines and compares.
func judge(t *testing.T, bin string, tmpls []gen.Policy, pods []genPod) judgement {
	t.Helper()
	ctx := context.Background()
	j := judgement{refused: map[string]bool{}, diffs: map[string]string{}, intended: map[string]int{}}
	c := newGenCorpus(tmpls, pods)
	out := runCELPeer(t, bin, nil, c.in)
	engines := make([]*opa.Engine, len(genEngines))
	for i, ge := range genEngines {
		e, err := opa.New(ctx, ge.opts)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close(ctx)
		engines[i] = e
	}
	c.load(t, ctx, engines, out, &j)
	peerOut := make([][]nodeOutcome, len(pods))
	ri := 0
	for i, p := range pods {
		for range p.nodes {
			res, err := out.Reviews[ri].outcome(t)
			ri++
			peerOut[i] = append(peerOut[i], peerOutcome(res, err))
			j.violations += len(res)
			for _, r := range res {
				if strings.Contains(r.Msg, "resulted in error") || strings.Contains(r.Msg, "eval_") {
					j.errors++
				}
			}
		}
	}
	j.deciding, j.perNode = coverage(peerOut)
	// Each engine in its own order.
	engOut := make([][][]nodeOutcome, len(genEngines))
	for ei, ge := range genEngines {
		engOut[ei] = make([][]nodeOutcome, len(pods))
		for k := range pods {
			i := k
			if ge.reverse {
				i = len(pods) - 1 - k
			}
			engOut[ei][i] = askEngine(ctx, engines[ei], pods[i], ge.single, c.templateOf)
		}
	}
	c.compare(&j, pods, peerOut, engOut)
	return j
}

// genCorpus is one judgement's objects: the templates, constraints and
// inventory as objects, celpeer's input, and what the comparison needs to
// know of each constraint kind.
type genCorpus struct {
	tmpls                       []gen.Policy
	templates, constraints, inv []*unstructured.Unstructured
	accepted                    []*unstructured.Unstructured // constraints of templates not refused
	in                          *celCorpus
	mapOrder                    map[string]bool
	templateOf                  map[string]string
	// intendedFor names, per kind, the intended difference any
	// difference of its template is counted under (diffRegoWithLeak).
	intendedFor map[string]string
}

func newGenCorpus(tmpls []gen.Policy, pods []genPod) *genCorpus {
	c := &genCorpus{tmpls: tmpls, mapOrder: map[string]bool{}, templateOf: map[string]string{}, intendedFor: map[string]string{}}
	for _, tm := range tmpls {
		te, ce := tm.Objects()
		c.templates = append(c.templates, &unstructured.Unstructured{Object: te})
		c.constraints = append(c.constraints, &unstructured.Unstructured{Object: ce})
		kind := tm.TemplateKind()
		c.templateOf[kind] = strings.ToLower(kind)
		c.mapOrder[kind] = tm.IteratesMap()
		if tm.WithOnInput() {
			c.intendedFor[kind] = diffRegoWithLeak
		}
	}
	// A Namespace Gatekeeper's cache refuses is not the namespaceObject
	// of its pods' reviews either: they are reviewed as in a namespace
	// not synced.
	nsObj := map[string]map[string]any{}
	for _, ns := range gen.NamespaceObjects() {
		u := &unstructured.Unstructured{Object: ns}
		c.inv = append(c.inv, u)
		if !gen.Malformed(ns) {
			nsObj[u.GetName()] = ns
		}
	}
	for _, n := range gen.NodeObjects() {
		c.inv = append(c.inv, &unstructured.Unstructured{Object: n})
	}
	c.in = newCELCorpus(c.templates, c.constraints, c.inv)
	for i, p := range pods {
		ns, _, _ := unstructured.NestedString(p.obj, "metadata", "namespace")
		for _, nn := range p.nodes {
			obj := deepCopy(p.obj).(map[string]any)
			spec(obj)["nodeName"] = nn
			c.in.Reviews = append(c.in.Reviews, celReview{ID: fmt.Sprintf("%d/%s", i, nn), Object: obj, Namespace: nsObj[ns], Operation: "CREATE", UserInfo: userInfo})
		}
	}
	return c
}

// load applies the corpus to the engines and records, in j, the
// templates both sides refused and any refusal only one side made; the
// inventory both must refuse alike.
func (c *genCorpus) load(t *testing.T, ctx context.Context, engines []*opa.Engine, out *celOutput, j *judgement) {
	t.Helper()
	tmplErr := applyAll(ctx, engines, c.templates)
	for _, u := range c.templates {
		kind, _, _ := unstructured.NestedString(u.Object, "spec", "crd", "spec", "names", "kind")
		pe, ee := out.TemplateErrors["ConstraintTemplate/"+u.GetName()], tmplErr["ConstraintTemplate/"+u.GetName()]
		switch {
		case pe != "" && ee != nil:
			j.refused[kind] = true
			if len(j.refused) <= 6 {
				t.Logf("refused by both: %s: %s", kind, pe)
			}
		case pe != "" || ee != nil:
			j.diffs[kind] = fmt.Sprintf("template: Gatekeeper error %q, engine error %v", pe, ee)
		}
	}
	for _, u := range c.constraints {
		if !j.refused[u.GetKind()] {
			c.accepted = append(c.accepted, u)
		}
	}
	consErr := applyAll(ctx, engines, c.accepted)
	for _, u := range c.accepted {
		k := u.GetKind() + "/" + u.GetName()
		if pe, ee := out.ConstraintErrors[k], consErr[k]; (pe == "") != (ee == nil) {
			j.diffs[u.GetKind()] = fmt.Sprintf("constraint: Gatekeeper error %q, engine error %v", pe, ee)
		}
	}
	// Both refuse the same inventory objects (a Namespace with a label
	// that is not a string).
	invErr := applyAll(ctx, engines, c.inv)
	for _, u := range c.inv {
		k := u.GetKind() + "/" + u.GetName()
		if pe, ee := out.DataErrors[k], invErr[k]; (pe == "") != (ee == nil) {
			t.Fatalf("inventory %s: Gatekeeper error %q, engine error %v", k, pe, ee)
		}
	}
}

// compare records in j each engine's differences from Gatekeeper, per
// (pod, node) and constraint kind, and counts the comparisons.
func (c *genCorpus) compare(j *judgement, pods []genPod, peerOut [][]nodeOutcome, engOut [][][]nodeOutcome) {
	kindsAccepted := len(c.templates) - len(j.refused)
	for i, p := range pods {
		for n, nn := range p.nodes {
			j.comparisons += kindsAccepted
			po := peerOut[i][n]
			if po.err != nil {
				for _, u := range c.accepted {
					j.diffs[u.GetKind()] = fmt.Sprintf("pod %d on %s: Gatekeeper's review failed: %v", i, nn, po.err)
				}
				continue
			}
			for ei, ge := range genEngines {
				eo := engOut[ei][i][n]
				onlyPeer, onlyEng := multisetDiff(po.keys, eo.keys)
				// Each kind that differs is judged on its own keys: an
				// intended difference of one never hides another's.
				for kind := range kindSet(onlyPeer, onlyEng) {
					pk, ek := ofKind(po.keys, kind), ofKind(eo.keys, kind)
					if why := intendedDifference(pk, ek, c.mapOrder); why != "" {
						j.intended[why]++
						continue
					}
					if why := c.intendedFor[kind]; why != "" {
						j.intended[why]++
						continue
					}
					if _, seen := j.diffs[kind]; !seen {
						j.diffs[kind] = fmt.Sprintf("%s, pod %d %s on %s:\n  Gatekeeper: %v\n  engine:     %v", ge.name, i, podJSON(p.obj), nn, keysOf(po.keys, kind), keysOf(eo.keys, kind))
					}
				}
			}
		}
	}
}

// askEngine is e's outcome for p on each of its candidates.
// templateOf maps constraint kinds to template names (for errorText).
func askEngine(ctx context.Context, e *opa.Engine, p genPod, single bool, templateOf map[string]string) []nodeOutcome {
	reqs := [][]string{p.nodes}
	if single {
		reqs = nil
		for _, nn := range p.nodes {
			reqs = append(reqs, []string{nn})
		}
	}
	var out []nodeOutcome
	for _, nodes := range reqs {
		req := opa.PlacementRequest{Pod: p.obj}
		for _, nn := range nodes {
			req.Candidates = append(req.Candidates, opa.Candidate{Name: nn})
		}
		m, err := evaluate(ctx, e, req)
		for _, nn := range nodes {
			if err != nil {
				out = append(out, nodeOutcome{keys: []violationKey{{Kind: "*", Msg: "engine: " + err.Error()}}})
				continue
			}
			o, _, oerr := engineOutcome(m[nn], templateOf)
			if oerr != nil {
				o.keys = append(o.keys, violationKey{Kind: "*", Msg: "engine details: " + oerr.Error()})
			}
			out = append(out, o)
		}
	}
	return out
}

// intendedDifference is the intended difference that peer's and the
// engine's keys differ by alone, or "": they agree once the texts are
// read as diffCELMapOrder says for the kinds in mapOrder (templates that
// iterate a map).
func intendedDifference(peer, engine []violationKey, mapOrder map[string]bool) string {
	p, e := normalized(peer, mapOrder), normalized(engine, mapOrder)
	if a, b := multisetDiff(p, e); len(a)+len(b) == 0 {
		return diffCELMapOrder
	}
	return ""
}

// kindSet are the constraint kinds of the keys in a and b.
func kindSet(a, b []violationKey) map[string]bool {
	out := map[string]bool{}
	for _, k := range append(slices.Clone(a), b...) {
		out[k.Kind] = true
	}
	return out
}

// ofKind are the keys of kind, and the engine's own errors ("*").
func ofKind(keys []violationKey, kind string) []violationKey {
	var out []violationKey
	for _, k := range keys {
		if k.Kind == kind || k.Kind == "*" {
			out = append(out, k)
		}
	}
	return out
}

// normalized is keys with their texts read as diffCELMapOrder says for
// the kinds in kinds.
func normalized(keys []violationKey, kinds map[string]bool) []violationKey {
	out := slices.Clone(keys)
	for i := range out {
		if kinds[out[i].Kind] {
			out[i].Msg, _ = mapOrderText(out[i].Msg)
		}
	}
	sortKeys(out)
	return out
}

// coverage counts the constraint kinds that both allow and deny among
// the reviews, and those that deny a pod on some of its candidates only.
func coverage(peerOut [][]nodeOutcome) (deciding, perNode int) {
	denied := map[string]int{}
	split := map[string]bool{}
	reviews := 0
	for _, po := range peerOut {
		perPod := map[string]int{}
		for _, o := range po {
			reviews++
			seen := map[string]bool{}
			for _, k := range o.keys {
				if !seen[k.Kind] {
					seen[k.Kind] = true
					denied[k.Kind]++
					perPod[k.Kind]++
				}
			}
		}
		for k, n := range perPod {
			if n < len(po) {
				split[k] = true
			}
		}
	}
	for _, n := range denied {
		if n < reviews {
			deciding++
		}
	}
	return deciding, len(split)
}

func keysOf(ks []violationKey, kind string) []string {
	var out []string
	for _, k := range ks {
		if k.Kind == kind || k.Kind == "*" {
			out = append(out, fmt.Sprintf("%q %s", k.Msg, k.Details))
		}
	}
	return out
}

func podJSON(p map[string]any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(p)
	return strings.TrimSpace(b.String())
}

// maxShrinkSteps bounds the checks one shrink makes (each runs celpeer).
const maxShrinkSteps = 150

// shrinkAndReport shrinks a template that differs on pods (the template
// one step simpler, then fewer pods, then pods one field smaller, while
// the difference stays) and logs the minimal case; with -gen-shrunk it
// also writes it as YAML.
func shrinkAndReport(t *testing.T, bin string, tm gen.Policy, pods []genPod) {
	t.Helper()
	steps := 0
	differs := func(tm gen.Policy, pods []genPod) (string, bool) {
		steps++
		j := judge(t, bin, []gen.Policy{tm}, pods)
		d, ok := j.diffs[tm.TemplateKind()]
		return d, ok
	}
	last, _ := differs(tm, pods)
	for changed := true; changed && steps < maxShrinkSteps; {
		changed = false
		for _, s := range tm.SimplerPolicies() {
			if steps >= maxShrinkSteps {
				break
			}
			if d, ok := differs(s, pods); ok {
				tm, last, changed = s, d, true
				break
			}
		}
		for i := 0; i < len(pods) && len(pods) > 1 && steps < maxShrinkSteps; i++ {
			fewer := append(slices.Clone(pods[:i]), pods[i+1:]...)
			if d, ok := differs(tm, fewer); ok {
				pods, last, changed = fewer, d, true
				i--
			}
		}
		for i := range pods {
			for _, sp := range gen.Simpler(pods[i].obj) {
				if steps >= maxShrinkSteps {
					break
				}
				smaller := slices.Clone(pods)
				smaller[i] = genPod{obj: sp, nodes: pods[i].nodes}
				if d, ok := differs(tm, smaller); ok {
					pods, last, changed = smaller, d, true
					break
				}
			}
		}
	}
	te, ce := tm.Objects()
	var b strings.Builder
	for _, o := range []map[string]any{te, ce} {
		y, _ := yaml.Marshal(o)
		b.WriteString("---\n")
		b.Write(y)
	}
	for _, p := range pods {
		y, _ := yaml.Marshal(map[string]any{"pod": p.obj, "candidates": p.nodes})
		b.WriteString("--- # review, in this order\n")
		b.Write(y)
	}
	t.Logf("shrunk in %d steps (%d expression nodes); difference: %s\n%s", steps, tm.Size(), last, b.String())
	if *genShrinkDir != "" {
		if err := os.WriteFile(fmt.Sprintf("%s/%s.yaml", *genShrinkDir, strings.ToLower(tm.TemplateKind())), []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}
