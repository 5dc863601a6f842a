package diff

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/peer"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const (
	// randSeed fixes the generated pods and their candidate nodes.
	randSeed = 20260916
	// mutatedPods are generated on top of one unmodified copy of every seed.
	mutatedPods      = 220
	mutatedPodsShort = 40
	// maxReported bounds the differences printed in full.
	maxReported = 25
)

// userInfo is what the engine puts in review.userInfo by default
// (opa.Options.UserInfo); it is passed to both sides explicitly.
var userInfo = map[string]any{"username": "system:kube-scheduler", "groups": []any{"system:authenticated"}}

// Intended differences between the engine and the framework. Anything else
// fails the test.
const (
	// The framework fails the whole Review when it cannot read a violation
	// (a non-string msg): Gatekeeper's webhook then answers with an error
	// for every constraint at once. The engine fails closed per
	// constraint: that constraint gets one violation with Error set, the
	// other constraints are judged normally. Checked: when the peer errors,
	// the engine reports at least one Error violation on that node. (No
	// library template does this; TestIntendedDifferences pins it.)
	diffPeerReviewError = "peer-review-error"
	// Evaluation errors (eval_conflict_error, ...) are violations on both
	// sides, carrying err.Error(); the framework evaluates each template in
	// its own compiler with the entry module named "template" (package
	// data.template) and libs named libs["lib_N"] (packages data.libs.lib.*),
	// while the engine compiles all templates together with modules
	// <template>/template.rego and <template>/lib_N.rego under
	// data.templates.<Kind>. So the locations and rule paths in the text
	// differ. Error violations of the engine are compared after rewriting
	// its names to the framework's (errorText); the rest of the text, the
	// constraint and the details (null) must agree.
	diffEvalErrorText = "eval-error-text"
	// The annotation opa-scheduler-extender/enforcement-action overrides the
	// action at this enforcement point only (docs/policies.md, "The action at this enforcement point"); Gatekeeper
	// ignores it and reports spec.enforcementAction. Messages and details are
	// compared as usual; only the action differs.
	diffActionAnnotation = "action-annotation"
	// A CEL comprehension over a map iterates in Go's map order, random on
	// both sides, and its error names the element it failed on first: for
	// templates that iterate a map, an evaluation error's text after
	// "resulted in error: " is not compared (the expression and the fact
	// of the error are).
	diffCELMapOrder = "cel-map-order-error"
	// In Gatekeeper's Rego driver a template runs under `with input as
	// inp`, inp's parameters read from data.constraints; with OPA v1.22 a
	// `with input.parameters.x as v` on one expression of a rule's body
	// then also holds for the expressions after it (the constraint
	// framework's hook module run by OPA alone shows it: see
	// TestRegoWithLeak). The engine evaluates `with` as OPA documents it,
	// on that expression only. Differences on templates that write `with`
	// on a path below input are counted under this name, not failed.
	diffRegoWithLeak = "rego-with-leak"
)

// mapOrderText is msg with the text of its evaluation error dropped (see
// diffCELMapOrder), and whether it changed.
func mapOrderText(msg string) (string, bool) {
	const mark = "resulted in error: "
	i := strings.Index(msg, mark)
	if i < 0 || msg[i+len(mark):] == "" {
		return msg, false
	}
	return msg[:i+len(mark)] + "(not compared: map order)", true
}

// violationKey is what must agree: constraint, message and details.
type violationKey struct {
	Kind, Name, Msg, Details string
}

func (k violationKey) String() string {
	return fmt.Sprintf("%s/%s %q details=%s", k.Kind, k.Name, k.Msg, k.Details)
}

// canonicalJSON re-encodes a JSON value with sorted keys and numbers as
// written; nil is "null".
func canonicalJSON(v any) (string, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return canonicalRaw(raw)
}

func canonicalRaw(raw []byte) (string, error) {
	if len(raw) == 0 {
		return "null", nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return "", err
	}
	out, err := json.Marshal(x)
	return string(out), err
}

// expectedAction is a constraint's action at this enforcement point: the
// annotation, else spec.enforcementAction, else deny. (No constraint of the
// corpus is scoped.)
func expectedAction(u *unstructured.Unstructured) (engine, framework string) {
	framework, _, _ = unstructured.NestedString(u.Object, "spec", "enforcementAction")
	if framework == "" {
		framework = "deny"
	}
	engine = framework
	if a := u.GetAnnotations()[opa.ActionAnnotation]; a != "" {
		engine = a
	}
	return engine, framework
}

// nodeOutcome is one side's answer for one (pod, node).
type nodeOutcome struct {
	keys    []violationKey
	actions map[violationKey]string
	errs    int   // Error violations (engine)
	err     error // the review failed (peer)
	// detailsErr: details that do not encode as JSON (peer).
	detailsErr error
}

func peerOutcome(res []peer.Result, err error) nodeOutcome {
	o := nodeOutcome{err: err, actions: map[violationKey]string{}}
	for _, r := range res {
		d, cerr := canonicalJSON(r.Details)
		if cerr != nil {
			o.detailsErr = cerr
			continue
		}
		k := violationKey{r.ConstraintKind, r.ConstraintName, r.Msg, d}
		o.keys = append(o.keys, k)
		o.actions[k] = r.EnforcementAction
	}
	sortKeys(o.keys)
	return o
}

// errorText rewrites the module names and rule paths of the engine's
// evaluation error text to the framework's (see diffEvalErrorText).
func errorText(msg, kind, template string) string {
	msg = strings.ReplaceAll(msg, template+"/template.rego:", "template:")
	msg = libFile.ReplaceAllString(msg, `libs["$1"]:`)
	msg = strings.ReplaceAll(msg, "data.templates."+kind+".template.", "data.template.")
	msg = strings.ReplaceAll(msg, "data.templates."+kind+".lib.", "data.libs.lib.")
	return msg
}

var libFile = regexp.MustCompile(`[a-z0-9.-]+/(lib_[0-9]+)\.rego:`)

// engineOutcome reads one node verdict; templates maps constraint kinds to
// template names (for errorText). rewritten counts the Error violations
// whose text errorText changed.
func engineOutcome(v nodeVerdict, templates map[string]string) (o nodeOutcome, rewritten int, err error) {
	o = nodeOutcome{actions: map[violationKey]string{}}
	for _, x := range v.Violations {
		d, err := canonicalRaw(x.Details)
		if err != nil {
			return o, 0, err
		}
		msg := x.Message
		if x.Error {
			o.errs++
			msg = errorText(msg, x.Constraint.Kind, templates[x.Constraint.Kind])
			if msg != x.Message {
				rewritten++
			}
		}
		k := violationKey{x.Constraint.Kind, x.Constraint.Name, msg, d}
		o.keys = append(o.keys, k)
		o.actions[k] = string(x.Action)
	}
	sortKeys(o.keys)
	return o, rewritten, nil
}

func sortKeys(ks []violationKey) {
	sort.Slice(ks, func(i, j int) bool {
		a, b := ks[i], ks[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		if a.Msg != b.Msg {
			return a.Msg < b.Msg
		}
		return a.Details < b.Details
	})
}

// multisetDiff returns the keys only in a and only in b.
func multisetDiff(a, b []violationKey) (onlyA, onlyB []violationKey) {
	count := map[violationKey]int{}
	for _, k := range a {
		count[k]++
	}
	for _, k := range b {
		count[k]--
	}
	for _, k := range a {
		if count[k] > 0 {
			onlyA = append(onlyA, k)
			count[k]--
		}
	}
	for _, k := range b {
		if count[k] < 0 {
			onlyB = append(onlyB, k)
			count[k]++
		}
	}
	return onlyA, onlyB
}

// difference is one unexplained disagreement.
type difference struct {
	node, variant string
	text          string
	kinds         []string // constraint kinds involved
}

// podReport is what compare found for one pod.
// tally sums the pods' reports, counts the differences by constraint kind
// and prints the first maxReported in full.
type tally struct {
	sum      podReport
	byKind   map[string]int
	reported int
}

func newTally() *tally {
	return &tally{sum: podReport{intended: map[string]int{}}, byKind: map[string]int{}}
}

// add takes g's report; before is g's JSON before the reviews, which must
// leave the pod as it was.
func (ta *tally) add(t *testing.T, g *generatedPod, r podReport, before []byte) {
	t.Helper()
	if after, _ := json.Marshal(g.obj); !bytes.Equal(before, after) {
		r.diffs = append(r.diffs, difference{node: "*", variant: "*", text: "the pod object was modified by the reviews"})
	}
	ta.sum.comparisons += r.comparisons
	ta.sum.reviews += r.reviews
	ta.sum.peerViol += r.peerViol
	for k, v := range r.intended {
		ta.sum.intended[k] += v
	}
	for _, d := range r.diffs {
		for _, k := range d.kinds {
			ta.byKind[k]++
		}
		if ta.reported++; ta.reported <= maxReported {
			name, _, _ := unstructured.NestedString(g.obj, "metadata", "name")
			ns, _, _ := unstructured.NestedString(g.obj, "metadata", "namespace")
			b, _ := json.Marshal(g.obj)
			t.Errorf("pod %s/%s (seed %s, mutations %v) on node %s [%s]:\n%s\npod: %s", ns, name, g.seed, g.applied, d.node, d.variant, d.text, b)
		}
	}
}

type podReport struct {
	diffs       []difference
	comparisons int // (node, matched constraint) pairs, batch variant
	reviews     int // peer reviews (one per node)
	intended    map[string]int
	peerViol    int
}

// engineVariant is one way of asking the engine.
type engineVariant struct {
	name string
	eval func(ctx context.Context, g *generatedPod) (map[string]nodeVerdict, error)
}

// TestDifferential reviews generated pods on candidate nodes with the
// framework and with the engine (three ways of asking it) and fails on any
// difference not listed above. See bench/README.md, "Differential test".
func TestDifferential(t *testing.T) {
	start := time.Now()
	ctx := context.Background()
	c := loadCorpus(t)
	t.Logf("corpus: %d templates, %d constraints, %d seed pods: %s", len(c.policies), c.constraintCount(), len(c.seeds), c.describe())

	p, err := peer.New()
	if err != nil {
		t.Fatal(err)
	}
	// Two engines as the service runs them (memo on): one answers requests
	// with every candidate at once, the other one candidate per request, so
	// that each fills and hits its memo in its own pattern.
	var engines []*opa.Engine
	for range 2 {
		// The peer runs Rego: so do the dual templates here (TestCELDifferential
		// compares the CEL driver with Gatekeeper's).
		e, err := opa.New(ctx, opa.Options{DisableK8sNativeValidation: true})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close(ctx)
		engines = append(engines, e)
	}
	eng, engSingle := engines[0], engines[1]

	apply := func(objs []*unstructured.Unstructured) map[string]error { return applyAll(ctx, engines, objs) }

	// Templates and constraints: both sides must accept or reject the same.
	var templates, constraints []*unstructured.Unstructured
	wantAction := map[opa.ConstraintKey]string{}
	frameworkAction := map[opa.ConstraintKey]string{}
	templateOf := map[string]string{}
	for _, pol := range c.policies {
		templates = append(templates, pol.template)
		kind, _, _ := unstructured.NestedString(pol.template.Object, "spec", "crd", "spec", "names", "kind")
		templateOf[kind] = pol.template.GetName()
		constraints = append(constraints, pol.constraints...)
	}
	peerTemplateErr := map[string]error{}
	for _, u := range templates {
		if err := p.AddTemplate(u); err != nil {
			peerTemplateErr["ConstraintTemplate/"+u.GetName()] = err
		}
	}
	engTemplateErr := apply(templates)
	for _, u := range templates {
		k := "ConstraintTemplate/" + u.GetName()
		if (peerTemplateErr[k] == nil) != (engTemplateErr[k] == nil) {
			t.Errorf("template %s: peer error %v, engine error %v", u.GetName(), peerTemplateErr[k], engTemplateErr[k])
		}
	}
	peerConstraintErr := map[string]error{}
	for _, u := range constraints {
		if err := p.AddConstraint(u); err != nil {
			peerConstraintErr[u.GetKind()+"/"+u.GetName()] = err
		}
		key := opa.ConstraintKey{Kind: u.GetKind(), Name: u.GetName()}
		wantAction[key], frameworkAction[key] = expectedAction(u)
	}
	engConstraintErr := apply(constraints)
	for _, u := range constraints {
		k := u.GetKind() + "/" + u.GetName()
		if (peerConstraintErr[k] == nil) != (engConstraintErr[k] == nil) {
			t.Errorf("constraint %s: peer error %v, engine error %v", k, peerConstraintErr[k], engConstraintErr[k])
		}
	}
	if len(peerTemplateErr)+len(engTemplateErr)+len(peerConstraintErr)+len(engConstraintErr) > 0 {
		t.Errorf("rejected: peer templates %v, engine templates %v, peer constraints %v, engine constraints %v",
			peerTemplateErr, engTemplateErr, peerConstraintErr, engConstraintErr)
	}

	// The assumption behind comparing Evaluate with a framework Review: every
	// constraint applies at this enforcement point (Evaluate skips the ones
	// that do not; the framework reviews them all).
	annotated := 0
	for _, e := range engines {
		st := e.Status()
		if len(st.Constraints) != len(constraints) {
			t.Errorf("engine holds %d constraints, want %d", len(st.Constraints), len(constraints))
		}
		annotated = 0
		for _, cs := range st.Constraints {
			key := opa.ConstraintKey{Kind: cs.Kind, Name: cs.Name}
			if !cs.Active || cs.Error != "" {
				t.Errorf("constraint %s not active: %s", key, cs.Error)
			}
			if string(cs.Action) != wantAction[key] {
				t.Errorf("constraint %s: engine action %q, want %q", key, cs.Action, wantAction[key])
			}
			if wantAction[key] != frameworkAction[key] {
				annotated++
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// Inventory: Nodes and Namespaces, in both.
	nodes := makeNodes()
	nodeObj := map[string]map[string]any{}
	var inv []*unstructured.Unstructured
	for _, n := range nodes {
		inv = append(inv, n.obj)
		nodeObj[n.name] = n.obj.Object
	}
	nsObj := map[string]map[string]any{}
	for i, ns := range namespaces {
		if ns.name == unsyncedNamespace {
			continue
		}
		u := makeNamespace(i, ns)
		inv = append(inv, u)
		nsObj[ns.name] = u.Object
		// The peer hands templates the Namespace converted to a typed
		// corev1.Namespace and back; the engine hands them the inventory
		// object. They must be the same for the comparison to be fair.
		_, typed, err := peer.PodOnNodeReview(map[string]any{"metadata": map[string]any{"name": "x"}}, "n", u.Object, nil)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := canonicalJSON(typed)
		b, _ := canonicalJSON(u.Object)
		if a != b {
			t.Fatalf("namespace %s does not survive the corev1 round trip:\n typed %s\n given %s", ns.name, a, b)
		}
	}
	for _, u := range inv {
		if err := p.AddData(u); err != nil {
			t.Fatalf("peer AddData %s: %v", u.GetName(), err)
		}
	}
	if errs := apply(inv); len(errs) > 0 {
		t.Fatalf("engine inventory: %v", errs)
	}
	for _, e := range engines {
		if got := e.Status().Inventory; got["v1/Node"] != len(nodes) || got["v1/Namespace"] != len(nsObj) {
			t.Fatalf("engine inventory counts %v, want %d nodes and %d namespaces", got, len(nodes), len(nsObj))
		}
	}

	n := mutatedPods
	if testing.Short() {
		n = mutatedPodsShort
	}
	pods := generatePods(randSeed, len(c.seeds)+n, c.seeds, nodes)
	before := make([][]byte, len(pods))
	for i := range pods {
		before[i], _ = json.Marshal(pods[i].obj)
	}

	variants := engineVariants(engSingle, eng, nodeObj)

	// The peer, the slow side, reviews in parallel in the background; the
	// engines answer in pod order on this goroutine, so that their memos
	// see the same sequence on every run.
	peerOut := make([][]nodeOutcome, len(pods))
	var peerBusy atomic.Int64
	var wg sync.WaitGroup
	work := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				s := time.Now()
				g := &pods[i]
				ns, _, _ := unstructured.NestedString(g.obj, "metadata", "namespace")
				for _, nn := range g.nodes {
					res, err := p.ReviewPodOnNode(ctx, g.obj, nn, nsObj[ns], userInfo)
					peerOut[i] = append(peerOut[i], peerOutcome(res, err))
				}
				peerBusy.Add(int64(time.Since(s)))
			}
		}()
	}
	go func() {
		for i := range pods {
			work <- i
		}
		close(work)
	}()
	engOut := make([][]map[string]nodeVerdict, len(pods))
	engErr := make([][]error, len(pods))
	engBusy := make([]time.Duration, len(variants))
	for i := range pods {
		for vi, v := range variants {
			s := time.Now()
			m, err := v.eval(ctx, &pods[i])
			engBusy[vi] += time.Since(s)
			engOut[i] = append(engOut[i], m)
			engErr[i] = append(engErr[i], err)
		}
	}
	engDone := time.Since(start)
	wg.Wait()

	env := &compareEnv{variants: variants, wantAction: wantAction, frameworkAction: frameworkAction, templateOf: templateOf}
	tally := newTally()
	for i := range pods {
		g := &pods[i]
		tally.add(t, g, env.compare(g, peerOut[i], engOut[i], engErr[i]), before[i])
	}
	// Coverage: how often each constraint was violated (peer, per node).
	never := logCoverage(t, peerOut, wantAction)
	t.Logf("constraints never violated: %v", never)
	sum := tally.sum
	if tally.reported > 0 {
		t.Errorf("%d differences (first %d shown); by constraint kind: %v", tally.reported, min(tally.reported, maxReported), tally.byKind)
	}
	t.Logf("%d pods (%d seeds unmodified, %d mutated) x %d candidate nodes = %d peer reviews; %d (pod, node, matched constraint) comparisons per engine variant, %d variants %v; %d violations from the peer",
		len(pods), len(c.seeds), n, len(pods[0].nodes), sum.reviews, sum.comparisons, len(variants), variantNames(variants), sum.peerViol)
	t.Logf("intended differences seen: %v (constraints with the action annotation: %d)", sum.intended, annotated)
	for i, e := range engines {
		s := e.Stats()
		t.Logf("engine %d: %d evaluations, %d memo hits, %d misses, %d evaluation errors", i, s.Evaluations, s.MemoHits, s.MemoMisses, s.EvalErrors)
	}
	var vt []string
	for i, v := range variants {
		vt = append(vt, fmt.Sprintf("%s %v", v.name, engBusy[i].Round(time.Millisecond)))
	}
	t.Logf("busy time: peer %v over %d workers; engine %s (done at %v)", time.Duration(peerBusy.Load()).Round(time.Millisecond), runtime.GOMAXPROCS(0), strings.Join(vt, ", "), engDone.Round(time.Millisecond))
	t.Logf("took %v", time.Since(start).Round(time.Millisecond))
}

func variantNames(vs []engineVariant) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.name)
	}
	return out
}

// nodeVerdict is one node's whole verdict, pod-wide violations included.
type nodeVerdict struct {
	Name       string
	Violations []opa.Violation
	Explain    []opa.ConstraintTrace
}

func evaluate(ctx context.Context, e *opa.Engine, req opa.PlacementRequest) (map[string]nodeVerdict, error) {
	pl, err := e.Evaluate(ctx, req)
	if err != nil {
		return nil, err
	}
	if len(pl.Nodes) != len(req.Candidates) {
		return nil, fmt.Errorf("%d verdicts for %d candidates", len(pl.Nodes), len(req.Candidates))
	}
	out := map[string]nodeVerdict{}
	for i, v := range pl.Nodes {
		if v.Name != req.Candidates[i].Name {
			return nil, fmt.Errorf("verdict %d is for %s, want %s", i, v.Name, req.Candidates[i].Name)
		}
		if v.Unknown {
			return nil, fmt.Errorf("node %s unknown to the engine", v.Name)
		}
		out[v.Name] = nodeVerdict{Name: v.Name, Violations: pl.Violations(i), Explain: pl.Trace(i)}
	}
	return out, nil
}

// compareEnv is what compare needs.
type compareEnv struct {
	variants []engineVariant
	// wantAction and frameworkAction are each constraint's action at this
	// enforcement point and its spec.enforcementAction.
	wantAction, frameworkAction map[opa.ConstraintKey]string
	// templateOf maps constraint kinds to template names.
	templateOf map[string]string
}

// compare checks one pod: the peer's outcome per candidate node against
// each engine variant's verdicts.
func (env *compareEnv) compare(g *generatedPod, peerOut []nodeOutcome, engOut []map[string]nodeVerdict, engErr []error) podReport {
	rep := podReport{intended: map[string]int{}}
	fail := func(node, variant, text string, kinds ...string) {
		rep.diffs = append(rep.diffs, difference{node: node, variant: variant, text: text, kinds: kinds})
	}
	for j, nn := range g.nodes {
		po := peerOut[j]
		rep.reviews++
		rep.peerViol += len(po.keys)
		if po.detailsErr != nil {
			fail(nn, "peer", "details: "+po.detailsErr.Error())
			continue
		}
		for _, k := range po.keys {
			key := opa.ConstraintKey{Kind: k.Kind, Name: k.Name}
			if po.actions[k] != env.frameworkAction[key] {
				fail(nn, "peer", fmt.Sprintf("peer action %q for %s, want %q", po.actions[k], k, env.frameworkAction[key]), k.Kind)
			}
		}
		for vi, v := range env.variants {
			if engErr[vi] != nil {
				if j == 0 {
					fail("*", v.name, "engine Evaluate: "+engErr[vi].Error())
				}
				continue
			}
			vd := engOut[vi][nn]
			if v.name == "batch" {
				rep.comparisons += len(vd.Explain)
			}
			eo, rewritten, err := engineOutcome(vd, env.templateOf)
			if err != nil {
				fail(nn, v.name, "engine details: "+err.Error())
				continue
			}
			for _, k := range eo.keys {
				key := opa.ConstraintKey{Kind: k.Kind, Name: k.Name}
				if eo.actions[k] != env.wantAction[key] {
					fail(nn, v.name, fmt.Sprintf("engine action %q for %s, want %q", eo.actions[k], k, env.wantAction[key]), k.Kind)
				} else if v.name == "batch" && env.wantAction[key] != env.frameworkAction[key] {
					rep.intended[diffActionAnnotation]++
				}
			}
			if po.err != nil {
				// Intended: see diffPeerReviewError.
				if eo.errs == 0 {
					fail(nn, v.name, fmt.Sprintf("peer review failed (%v) but the engine reports no evaluation error; engine: %v", po.err, eo.keys))
				} else if v.name == "batch" {
					rep.intended[diffPeerReviewError]++
				}
				continue
			}
			onlyPeer, onlyEngine := multisetDiff(po.keys, eo.keys)
			if len(onlyPeer)+len(onlyEngine) == 0 {
				if v.name == "batch" {
					rep.intended[diffEvalErrorText] += rewritten
				}
				continue
			}
			var b strings.Builder
			kinds := map[string]bool{}
			for _, k := range onlyPeer {
				fmt.Fprintf(&b, "  only peer:   %s\n", k)
				kinds[k.Kind] = true
			}
			for _, k := range onlyEngine {
				fmt.Fprintf(&b, "  only engine: %s\n", k)
				kinds[k.Kind] = true
			}
			var ks []string
			for k := range kinds {
				ks = append(ks, k)
			}
			sort.Strings(ks)
			fail(nn, v.name, strings.TrimRight(b.String(), "\n"), ks...)
		}
	}
	return rep
}

// logCoverage logs how often the peer found each constraint violated (per
// node) and returns the constraints it never found violated.
func logCoverage(t *testing.T, peerOut [][]nodeOutcome, wantAction map[opa.ConstraintKey]string) []string {
	t.Helper()
	violated := map[opa.ConstraintKey]int{}
	for _, po := range peerOut {
		for _, o := range po {
			for _, k := range o.keys {
				violated[opa.ConstraintKey{Kind: k.Kind, Name: k.Name}]++
			}
		}
	}
	var never, counts []string
	for key := range wantAction {
		if violated[key] == 0 {
			never = append(never, key.String())
		} else {
			counts = append(counts, fmt.Sprintf("%s=%d", key, violated[key]))
		}
	}
	sort.Strings(never)
	sort.Strings(counts)
	t.Logf("violations per constraint (peer, all nodes): %s", strings.Join(counts, " "))
	return never
}

// applyAll applies copies of objs to every engine and returns the first
// engine's refusals by "Kind/name" (the others get the same objects; what
// they answer is compared afterwards).
func applyAll(ctx context.Context, engines []*opa.Engine, objs []*unstructured.Unstructured) map[string]error {
	changes := make([]opa.Change, len(objs))
	for i, o := range objs {
		changes[i] = opa.Change{Object: o.DeepCopy()}
	}
	var out map[string]error
	for i, e := range engines {
		errs := map[string]error{}
		for _, ae := range e.Apply(ctx, changes) {
			errs[ae.Ref.GroupVersionKind.Kind+"/"+ae.Ref.Name] = ae.Err
		}
		if i == 0 {
			out = errs
		}
	}
	return out
}

// engineVariants are the ways the service asks the engine about a pod:
// one request per candidate (by name), one with every candidate (Explain
// on), and one carrying the Node objects (full-nodes mode). engSingle
// answers the first, eng the others, so that each fills and hits its memo
// in its own pattern.
func engineVariants(engSingle, eng *opa.Engine, nodeObj map[string]map[string]any) []engineVariant {
	return []engineVariant{
		{name: "single", eval: func(ctx context.Context, g *generatedPod) (map[string]nodeVerdict, error) {
			// One request per candidate node, by name (nodeCacheCapable).
			out := map[string]nodeVerdict{}
			for _, nn := range g.nodes {
				m, err := evaluate(ctx, engSingle, opa.PlacementRequest{Pod: g.obj, Candidates: []opa.Candidate{{Name: nn}}})
				if err != nil {
					return nil, err
				}
				out[nn] = m[nn]
			}
			return out, nil
		}},
		{name: "batch", eval: func(ctx context.Context, g *generatedPod) (map[string]nodeVerdict, error) {
			// One request with every candidate, as the scheduler asks
			// (node classes at work); Explain lists the matched constraints.
			req := opa.PlacementRequest{Pod: g.obj, Explain: true}
			for _, nn := range g.nodes {
				req.Candidates = append(req.Candidates, opa.Candidate{Name: nn})
			}
			return evaluate(ctx, eng, req)
		}},
		{name: "objects", eval: func(ctx context.Context, g *generatedPod) (map[string]nodeVerdict, error) {
			// The same with the Node objects in the request (an extender
			// that is not nodeCacheCapable): input.nodes replaces the
			// inventory's Nodes.
			req := opa.PlacementRequest{Pod: g.obj}
			for _, nn := range g.nodes {
				req.Candidates = append(req.Candidates, opa.Candidate{Name: nn, Object: nodeObj[nn]})
			}
			return evaluate(ctx, eng, req)
		}},
	}
}
