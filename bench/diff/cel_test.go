package diff

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/peer"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// celEngine is the engine name of CEL code in a ConstraintTemplate.
const celEngine = "K8sNativeValidation"

// celDualTemplates is how many library templates carry both engines.
const celDualTemplates = 16

// celMode is one configuration both sides run in: Gatekeeper's flags for
// celpeer and the matching engine options.
type celMode struct {
	name      string
	peerFlags []string
	opts      opa.Options
	// cel: the CEL engine is on, so dual templates run on CEL and CEL-only
	// templates are accepted; otherwise dual templates run on Rego and
	// CEL-only templates are refused by both sides.
	cel bool
	// failDefault: templates without failurePolicy fail closed.
	failDefault bool
}

var celModes = []celMode{
	{name: "cel-default-fail", cel: true, failDefault: true},
	{
		name:      "cel-default-ignore",
		peerFlags: []string{"-default-k8s-native-validation-failure-policy=Ignore"},
		opts:      opa.Options{DefaultK8sNativeValidationFailurePolicy: "Ignore"},
		cel:       true,
	},
	{
		name:        "cel-disabled",
		peerFlags:   []string{"-enable-k8s-native-validation=false"},
		opts:        opa.Options{DisableK8sNativeValidation: true},
		failDefault: true,
	},
}

// templateEngines lists the engines a template's code is written for.
func templateEngines(tmpl *unstructured.Unstructured) map[string]bool {
	out := map[string]bool{}
	targets, _, _ := unstructured.NestedSlice(tmpl.Object, "spec", "targets")
	for _, tg := range targets {
		m, _ := tg.(map[string]any)
		if r, _ := m["rego"].(string); r != "" {
			out["Rego"] = true
		}
		code, _ := m["code"].([]any)
		for _, c := range code {
			cm, _ := c.(map[string]any)
			if e, _ := cm["engine"].(string); e != "" {
				out[e] = true
			}
		}
	}
	return out
}

// celTestdata is the CEL-only policies written for this test.
func celTestdata(tb testing.TB) []policy {
	tb.Helper()
	dirs, err := filepath.Glob(filepath.Join("testdata", "cel", "*", "template.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	var out []policy
	for _, tf := range dirs {
		dir := filepath.Dir(tf)
		p := policy{dir: "testdata/cel/" + filepath.Base(dir), template: readOne(tb, tf)}
		if e := templateEngines(p.template); !e[celEngine] || len(e) != 1 {
			tb.Fatalf("%s: want a CEL-only template, engines %v", p.dir, e)
		}
		p.constraints = readAll(tb, filepath.Join(dir, "constraint.yaml"))
		out = append(out, p)
	}
	if len(out) != 6 {
		tb.Fatalf("want the 6 CEL-only policies of testdata/cel, found %d", len(out))
	}
	return out
}

// buildCELPeer builds bench/celpeer (its own module) into a temporary
// directory.
func buildCELPeer(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "celpeer"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "celpeer")
	cmd := exec.Command("go", "build", "-buildvcs=false", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", dir, err, out)
	}
	t.Logf("built bench/celpeer in %v", time.Since(start).Round(time.Millisecond))
	return bin
}

// celCorpus is celpeer's input (see bench/celpeer/main.go).
type celCorpus struct {
	Templates   []map[string]any `json:"templates"`
	Constraints []map[string]any `json:"constraints"`
	Data        []map[string]any `json:"data"`
	Reviews     []celReview      `json:"reviews"`
}

type celReview struct {
	ID        string         `json:"id"`
	Object    map[string]any `json:"object"`
	Namespace map[string]any `json:"namespace"`
	Operation string         `json:"operation"`
	UserInfo  map[string]any `json:"userInfo"`
}

// celOutput is celpeer's output.
type celOutput struct {
	TemplateErrors   map[string]string `json:"templateErrors"`
	ConstraintErrors map[string]string `json:"constraintErrors"`
	DataErrors       map[string]string `json:"dataErrors"`
	Reviews          []celReviewOutput `json:"reviews"`
}

// celReviewOutput is celpeer's answer for one review.
type celReviewOutput struct {
	ID      string `json:"id"`
	Error   string `json:"error"`
	Results []struct {
		Kind                     string          `json:"kind"`
		Name                     string          `json:"name"`
		EnforcementAction        string          `json:"enforcementAction"`
		Msg                      string          `json:"msg"`
		Details                  json.RawMessage `json:"details"`
		ScopedEnforcementActions []string        `json:"scopedEnforcementActions"`
	} `json:"results"`
}

// outcome is rv as the peer's results and error, details decoded as the
// framework peer's are (numbers kept as written).
func (rv *celReviewOutput) outcome(t *testing.T) ([]peer.Result, error) {
	t.Helper()
	var res []peer.Result
	for _, r := range rv.Results {
		var details any
		if len(r.Details) > 0 {
			dec := json.NewDecoder(bytes.NewReader(r.Details))
			dec.UseNumber()
			if err := dec.Decode(&details); err != nil {
				t.Fatalf("review %s: details: %v", rv.ID, err)
			}
		}
		res = append(res, peer.Result{
			ConstraintKind: r.Kind, ConstraintName: r.Name, Msg: r.Msg, Details: details,
			EnforcementAction: r.EnforcementAction, ScopedEnforcementActions: r.ScopedEnforcementActions,
		})
	}
	if rv.Error != "" {
		return res, fmt.Errorf("%s", rv.Error)
	}
	return res, nil
}

// newCELCorpus is celpeer's input holding these objects, without reviews.
func newCELCorpus(templates, constraints, data []*unstructured.Unstructured) *celCorpus {
	in := &celCorpus{}
	for _, u := range templates {
		in.Templates = append(in.Templates, u.Object)
	}
	for _, u := range constraints {
		in.Constraints = append(in.Constraints, u.Object)
	}
	for _, u := range data {
		in.Data = append(in.Data, u.Object)
	}
	return in
}

func runCELPeer(t *testing.T, bin string, flags []string, in *celCorpus) *celOutput {
	t.Helper()
	raw, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, flags...)
	cmd.Stdin = bytes.NewReader(raw)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("celpeer %v: %v\n%s", flags, err, stderr.Bytes())
	}
	var out celOutput
	dec := json.NewDecoder(&stdout)
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("celpeer output: %v", err)
	}
	if len(out.Reviews) != len(in.Reviews) {
		t.Fatalf("celpeer answered %d reviews, want %d", len(out.Reviews), len(in.Reviews))
	}
	return &out
}

// TestCELDifferential compares the engine's CEL engine with Gatekeeper's
// (bench/celpeer, run as a program): the 16 library templates that carry
// both engines and the CEL-only policies of testdata/cel, on the pods and
// candidate nodes TestDifferential generates, in three modes (CEL on with
// the Fail and the Ignore default failure policy, CEL off). Verdicts,
// messages, details and enforcement actions must agree; no difference is
// intended.
func TestCELDifferential(t *testing.T) {
	start := time.Now()
	c := loadCorpus(t)
	var pols []policy
	for _, p := range c.policies {
		if templateEngines(p.template)[celEngine] {
			pols = append(pols, p)
		}
	}
	if len(pols) != celDualTemplates {
		t.Fatalf("want %d library templates with both engines, found %d", celDualTemplates, len(pols))
	}
	celOnly := celTestdata(t)
	pols = append(pols, celOnly...)
	bin := buildCELPeer(t)

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
	}
	n := mutatedPods
	if testing.Short() {
		n = mutatedPodsShort
	}
	// The same pods and candidate nodes as TestDifferential.
	pods := generatePods(randSeed, len(c.seeds)+n, c.seeds, nodes)
	t.Logf("%d templates (%d with both engines, %d CEL-only), %d pods x %d candidate nodes", len(pols), celDualTemplates, len(celOnly), len(pods), candidatesPerPod)

	for _, m := range celModes {
		t.Run(m.name, func(t *testing.T) {
			runCELMode(t, m, bin, pols, pods, inv, nodeObj, nsObj)
		})
	}
	t.Logf("took %v", time.Since(start).Round(time.Millisecond))
}

func runCELMode(t *testing.T, m celMode, bin string, pols []policy, pods []generatedPod, inv []*unstructured.Unstructured, nodeObj, nsObj map[string]map[string]any) {
	ctx := context.Background()

	// Templates: all of them; constraints: those of the templates this mode
	// runs (the others must be refused by both sides).
	var templates, constraints []*unstructured.Unstructured
	refused := map[string]bool{} // template names
	templateOf := map[string]string{}
	for _, p := range pols {
		templates = append(templates, p.template)
		kind, _, _ := unstructured.NestedString(p.template.Object, "spec", "crd", "spec", "names", "kind")
		templateOf[kind] = p.template.GetName()
		e := templateEngines(p.template)
		if !e["Rego"] && !m.cel {
			refused[p.template.GetName()] = true
			continue
		}
		constraints = append(constraints, p.constraints...)
	}

	in := newCELCorpus(templates, constraints, inv)
	type reviewRef struct{ pod, node int }
	var refs []reviewRef
	for i := range pods {
		g := &pods[i]
		ns, _, _ := unstructured.NestedString(g.obj, "metadata", "namespace")
		for j, nn := range g.nodes {
			obj := deepCopy(g.obj).(map[string]any)
			spec(obj)["nodeName"] = nn
			in.Reviews = append(in.Reviews, celReview{
				ID:        fmt.Sprintf("%d/%s", i, nn),
				Object:    obj,
				Namespace: nsObj[ns],
				Operation: "CREATE",
				UserInfo:  userInfo,
			})
			refs = append(refs, reviewRef{i, j})
		}
	}
	before := make([][]byte, len(pods))
	for i := range pods {
		before[i], _ = json.Marshal(pods[i].obj)
	}

	peerStart := time.Now()
	out := runCELPeer(t, bin, m.peerFlags, in)
	peerTook := time.Since(peerStart)
	if len(out.DataErrors) > 0 {
		t.Fatalf("celpeer refused inventory objects: %v", out.DataErrors)
	}

	// The engines, as in TestDifferential: one asked with every candidate at
	// once, one with one candidate per request.
	var engs []*opa.Engine
	for range 2 {
		e, err := opa.New(ctx, m.opts)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close(ctx)
		engs = append(engs, e)
	}
	eng, engSingle := engs[0], engs[1]

	engTemplateErr := applyAll(ctx, engs, templates)
	for _, u := range templates {
		k := "ConstraintTemplate/" + u.GetName()
		pe, ee := out.TemplateErrors[k], engTemplateErr[k]
		if (pe == "") != (ee == nil) {
			t.Errorf("template %s: Gatekeeper error %q, engine error %v", u.GetName(), pe, ee)
		}
		if want := refused[u.GetName()]; (pe != "") != want {
			t.Errorf("template %s: Gatekeeper error %q, want refused=%v", u.GetName(), pe, want)
		}
	}
	wantAction := map[opa.ConstraintKey]string{}
	frameworkAction := map[opa.ConstraintKey]string{}
	engConstraintErr := applyAll(ctx, engs, constraints)
	for _, u := range constraints {
		k := u.GetKind() + "/" + u.GetName()
		if pe, ee := out.ConstraintErrors[k], engConstraintErr[k]; pe != "" || ee != nil {
			t.Errorf("constraint %s: Gatekeeper error %q, engine error %v", k, pe, ee)
		}
		key := opa.ConstraintKey{Kind: u.GetKind(), Name: u.GetName()}
		wantAction[key], frameworkAction[key] = expectedAction(u)
	}
	if errs := applyAll(ctx, engs, inv); len(errs) > 0 {
		t.Fatalf("engine inventory: %v", errs)
	}
	for _, e := range engs {
		st := e.Status()
		if len(st.Constraints) != len(constraints) {
			t.Errorf("engine holds %d constraints, want %d", len(st.Constraints), len(constraints))
		}
		for _, cs := range st.Constraints {
			key := opa.ConstraintKey{Kind: cs.Kind, Name: cs.Name}
			if !cs.Active || cs.Error != "" {
				t.Errorf("constraint %s not active: %s", key, cs.Error)
			}
			if string(cs.Action) != wantAction[key] {
				t.Errorf("constraint %s: engine action %q, want %q", key, cs.Action, wantAction[key])
			}
		}
	}

	// Gatekeeper's answers, per pod and candidate node.
	peerOut := make([][]nodeOutcome, len(pods))
	for i := range pods {
		peerOut[i] = make([]nodeOutcome, len(pods[i].nodes))
	}
	for ri := range out.Reviews {
		rv := &out.Reviews[ri]
		ref := refs[ri]
		if want := in.Reviews[ri].ID; rv.ID != want {
			t.Fatalf("celpeer review %d is %q, want %q", ri, rv.ID, want)
		}
		res, err := rv.outcome(t)
		peerOut[ref.pod][ref.node] = peerOutcome(res, err)
	}

	variants := engineVariants(engSingle, eng, nodeObj)
	engStart := time.Now()
	env := &compareEnv{variants: variants, wantAction: wantAction, frameworkAction: frameworkAction, templateOf: templateOf}
	tally := newTally()
	for i := range pods {
		g := &pods[i]
		var engOut []map[string]nodeVerdict
		var engErr []error
		for _, v := range variants {
			res, err := v.eval(ctx, g)
			engOut = append(engOut, res)
			engErr = append(engErr, err)
		}
		tally.add(t, g, env.compare(g, peerOut[i], engOut, engErr), before[i])
	}
	engTook := time.Since(engStart)

	t.Logf("constraints never violated: %v", logCoverage(t, peerOut, wantAction))
	checkCELCoverage(t, m, pols, peerOut)
	sum := tally.sum
	if tally.reported > 0 {
		t.Errorf("%d differences (first %d shown); by constraint kind: %v", tally.reported, min(tally.reported, maxReported), tally.byKind)
	}
	t.Logf("%d reviews (pod, node) compared with each of %d engine variants %v, %d (pod, node, matched constraint) comparisons per variant, %d violations from Gatekeeper, %d differences; intended differences seen: %v",
		sum.reviews, len(variants), variantNames(variants), sum.comparisons, sum.peerViol, tally.reported, sum.intended)
	t.Logf("celpeer %v (%d reviews), engine %v (3 variants)", peerTook.Round(time.Millisecond), len(in.Reviews), engTook.Round(time.Millisecond))
}

// checkCELCoverage checks that the corpus exercises what the comparison
// is meant to prove: every CEL-only constraint both allows and denies
// somewhere, the placement policies deny a pod on one candidate and allow
// it on another, and the failing expression denies with its error under a
// Fail policy and never under Ignore.
func checkCELCoverage(t *testing.T, m celMode, pols []policy, peerOut [][]nodeOutcome) {
	t.Helper()
	if !m.cel {
		return
	}
	celOnly := map[string]bool{}
	for _, p := range pols {
		if e := templateEngines(p.template); !e["Rego"] {
			for _, c := range p.constraints {
				celOnly[c.GetKind()] = true
			}
		}
	}
	viol := map[string]int{}      // kind: reviews with a violation
	placement := map[string]int{} // kind: pods denied on some candidates only
	errMsgs := map[string]int{}   // kind: violations carrying an evaluation error
	reviews := 0
	for _, po := range peerOut {
		perPod := map[string]int{}
		for _, o := range po {
			reviews++
			seen := map[string]bool{}
			for _, k := range o.keys {
				if strings.Contains(k.Msg, "resulted in error") {
					errMsgs[k.Kind]++
				}
				if celOnly[k.Kind] && !seen[k.Kind] {
					seen[k.Kind] = true
					viol[k.Kind]++
					perPod[k.Kind]++
				}
			}
		}
		for k, cnt := range perPod {
			if cnt < len(po) {
				placement[k]++
			}
		}
	}
	var kinds []string
	for k := range celOnly {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		if viol[k] == 0 || viol[k] == reviews {
			t.Errorf("%s: violated in %d of %d reviews; the corpus should both allow and deny", k, viol[k], reviews)
		}
	}
	if placement["K8sCELReservedNodes"] == 0 || placement["K8sCELTenantSelector"] == 0 {
		t.Errorf("no pod denied on some candidates only: %v", placement)
	}
	const failing, ignoring = "K8sCELOwnerAnnotation", "K8sCELOwnerAnnotationIgnore"
	if m.failDefault && errMsgs[failing] == 0 {
		t.Errorf("%s (default policy Fail): no evaluation error denied", failing)
	}
	if !m.failDefault && errMsgs[failing] != 0 {
		t.Errorf("%s (default policy Ignore): %d evaluation errors denied", failing, errMsgs[failing])
	}
	if errMsgs[ignoring] != 0 {
		t.Errorf("%s (failurePolicy Ignore): %d evaluation errors denied", ignoring, errMsgs[ignoring])
	}
	t.Logf("CEL-only constraints violated in reviews (of %d): %v; pods denied on some candidates only: %v; evaluation errors as violations (all templates): %v", reviews, viol, placement, errMsgs)
}
