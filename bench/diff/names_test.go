package diff

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/peer"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestNameDifferential is the oracle for messages and details that carry
// the pod's and the node's names: templates under testdata/names print the
// names in every way sprintf, aliases, helpers, concat and details allow,
// and also test them in conditions (which must stay in any memo key); the
// pods share a few specs under many odd names, and the nodes share a few
// pools under odd names. Every (pod, node, constraint) is compared with the
// framework (bench/peer) as TestDifferential compares, in the same three
// ways of asking the engine with the memo on, and the same three with
// opa.Options{DisableMemo: true}; the memo-on answers must also be
// byte-identical (msg, raw details, action, error flag) to the memo-off
// engine's.
//
// The subtest nonstring-msg holds templates whose msg is the raw value at
// a name path, which is not a string in some pods: the framework fails the
// whole review there (diffPeerReviewError), so they are kept apart from the
// others.
func TestNameDifferential(t *testing.T) {
	t.Run("names", func(t *testing.T) {
		runNameSuite(t, filepath.Join("testdata", "names"), false)
	})
	t.Run("nonstring-msg", func(t *testing.T) {
		runNameSuite(t, filepath.Join("testdata", "names", "nonstring"), true)
	})
}

// nameNodePools are the node pools: nodes of one pool differ only in name
// and uid, so a template that reads the name only in its message sees the
// same node class in every node of a pool.
var nameNodePools = []struct {
	pool  string
	names []string
}{
	{"pool-a", []string{"pool-a-1", "pool-a-2", `pool-a-"q"`}},
	{"pool-b", []string{"pool-b-1", `pool-b\b`, "pool-b-%v", "pool-b-ü"}},
	// x and shared-name are also pod names.
	{"pool-c", []string{"x", "shared-name", "日本", "node-🚀-%!", "<n&de>\u2028"}},
}

func nameNodes() (names []string, objs []*unstructured.Unstructured) {
	i := 0
	for _, p := range nameNodePools {
		for _, n := range p.names {
			names = append(names, n)
			objs = append(objs, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "v1",
				"kind":       "Node",
				"metadata": map[string]any{
					"name":              n,
					"uid":               fmt.Sprintf("33333333-0000-4000-8000-%012d", i),
					"resourceVersion":   fmt.Sprintf("%d", 2000+i),
					"creationTimestamp": "2025-03-01T10:00:00Z",
					"labels": map[string]any{
						"pool":                          p.pool,
						"kubernetes.io/os":              "linux",
						"kubernetes.io/arch":            "amd64",
						"topology.kubernetes.io/zone":   "zone-a",
						"topology.kubernetes.io/region": "eu-west-1",
					},
				},
				"spec": map[string]any{},
				"status": map[string]any{
					"capacity":    map[string]any{"cpu": "4", "memory": "16246044Ki", "pods": "110"},
					"allocatable": map[string]any{"cpu": "3920m", "memory": "15324444Ki", "pods": "110"},
				},
			}})
			i++
		}
	}
	return names, objs
}

// missingName stands for a pod without a metadata.name key; numericName
// for one whose metadata.name is the number 42.
const (
	missingName = "\x00missing"
	numericName = "\x00numeric"
)

// oddPodNames are given to the pods of a ReplicaSet's spec besides the
// replicas' own names. The API server rejects most of them; the engine and
// the framework must still agree.
var oddPodNames = []string{
	`pod-"quoted"`,
	`back\slash`,
	"web-%v",
	"pct-%v-%s-%d-%[1]v",
	"bang-%!",
	"%%double",
	"%",
	"grüße-ü",
	"日本-pod",
	"emoji-🚀-pod",
	"",
	missingName,
	"x",                                   // a node name, and the one name == "x" tests
	"shared-name",                         // a node name
	"pool-b-%v",                           // an odd node name
	strings.Repeat("long-", 39) + "names", // 200 characters
	"<script>&amp;</script>",
	"line\u2028sep\u2029end",
	"tab\tnew\nline",
	"web",
}

// oddPodNamesShort are the odd names of the smaller groups.
var oddPodNamesShort = []string{`pod-"quoted"`, "web-%v", "", missingName, "shared-name", "日本-pod", "x"}

// nameGroup is a ReplicaSet: one pod spec, many names.
type nameGroup struct {
	rs, namespace, app, image string
	// instance is the value of the instance label: a string, or a value a
	// real pod cannot have (number, bool, null), printed by templates
	// through the same path pattern as a name.
	instance any
	replicas []string
	odd      []string
	numeric  bool // also a pod whose metadata.name is 42
}

var nameGroups = []nameGroup{
	{rs: "web-6d4cf56db6", namespace: "default", app: "web", image: "nginx:1.27", instance: "1",
		replicas: []string{"2xkqj", "7fzpl", "b9wmc", "hx4td", "qq8rn"}, odd: oddPodNames, numeric: true},
	{rs: "api-5c9b7f8d4", namespace: "team", app: "api", image: "registry.example.com/api:v2", instance: int64(3),
		replicas: []string{"a1b2c", "zz9yx", "mnbvc", "lkjhg", "poiuy"}, odd: oddPodNames},
	{rs: "batch-77f8c9", namespace: "default", app: "batch", image: "busybox:1.36", instance: 2.5,
		replicas: []string{"q1", "q2", "q3", "q4"}, odd: oddPodNamesShort},
	{rs: "webhook-84b7", namespace: "team", app: "webhook", image: "nginx:1.27", instance: nil,
		replicas: []string{"aaaaa", "bbbbb", "ccccc"}, odd: oddPodNamesShort, numeric: true},
}

// namePods lists the pods in a fixed order: per group, the first replicas
// (which fill the memo), the odd names, then the last replicas. Each pod is
// judged on every node, in an order rotated per pod.
func namePods(nodes []string) []generatedPod {
	var out []generatedPod
	add := func(g nameGroup, name string) {
		i := len(out)
		labels := map[string]any{"app": g.app, "pod-template-hash": g.rs[strings.LastIndex(g.rs, "-")+1:], "instance": g.instance}
		md := map[string]any{
			"namespace":    g.namespace,
			"generateName": g.rs + "-",
			"uid":          fmt.Sprintf("44444444-0000-4000-8000-%012d", i),
			"labels":       labels,
			"ownerReferences": []any{map[string]any{
				"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": g.rs,
				"uid": "55555555-0000-4000-8000-" + fmt.Sprintf("%012d", len(g.rs)), "controller": true, "blockOwnerDeletion": true,
			}},
		}
		shown := name
		switch name {
		case missingName:
			shown = "<no metadata.name>"
		case numericName:
			md["name"] = int64(42)
			shown = "<metadata.name 42>"
		default:
			md["name"] = name
		}
		pod := map[string]any{
			"apiVersion": "v1",
			"kind":       "Pod",
			"metadata":   md,
			"spec": map[string]any{
				"containers": []any{map[string]any{
					"name":  "app",
					"image": g.image,
					"ports": []any{map[string]any{"containerPort": int64(8080), "protocol": "TCP"}},
					"resources": map[string]any{
						"requests": map[string]any{"cpu": "100m", "memory": "128Mi"},
						"limits":   map[string]any{"memory": "256Mi"},
					},
				}},
				"restartPolicy":      "Always",
				"serviceAccountName": "default",
				"tolerations": []any{
					map[string]any{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": int64(300)},
				},
			},
			"status": map[string]any{"phase": "Pending", "qosClass": "Burstable"},
		}
		gp := generatedPod{obj: pod, seed: g.rs, applied: []string{fmt.Sprintf("name %q", shown)}}
		for k := range nodes {
			gp.nodes = append(gp.nodes, nodes[(i+k)%len(nodes)])
		}
		out = append(out, gp)
	}
	for _, g := range nameGroups {
		half := (len(g.replicas) + 1) / 2
		for _, r := range g.replicas[:half] {
			add(g, g.rs+"-"+r)
		}
		for _, n := range g.odd {
			add(g, n)
		}
		if g.numeric {
			add(g, numericName)
		}
		for _, r := range g.replicas[half:] {
			add(g, g.rs+"-"+r)
		}
	}
	return out
}

// rawViolation is an engine violation as the service would send it.
type rawViolation struct {
	Kind, Name, Action, Msg, Details string
	Error                            bool
}

func rawViolations(v nodeVerdict) []rawViolation {
	out := make([]rawViolation, 0, len(v.Violations))
	for _, x := range v.Violations {
		out = append(out, rawViolation{x.Constraint.Kind, x.Constraint.Name, string(x.Action), x.Message, string(x.Details), x.Error})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		if a.Msg != b.Msg {
			return a.Msg < b.Msg
		}
		if a.Details != b.Details {
			return a.Details < b.Details
		}
		return !a.Error && b.Error
	})
	return out
}

func runNameSuite(t *testing.T, dir string, nonString bool) {
	start := time.Now()
	ctx := context.Background()

	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no templates in %s: %v", dir, err)
	}
	sort.Strings(files)
	var templates, constraints []*unstructured.Unstructured
	for _, f := range files {
		for _, u := range readAll(t, f) {
			if u.GetKind() == "ConstraintTemplate" {
				templates = append(templates, u)
			} else {
				constraints = append(constraints, u)
			}
		}
	}

	p, err := peer.New()
	if err != nil {
		t.Fatal(err)
	}
	// engMemo answers batch and objects requests, engSingle one candidate
	// per request (each fills and hits its memo in its own pattern), and
	// engNoMemo evaluates every review.
	newEngine := func(o opa.Options) *opa.Engine {
		e, err := opa.New(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close(ctx) })
		return e
	}
	engMemo, engSingle, engNoMemo := newEngine(opa.Options{}), newEngine(opa.Options{}), newEngine(opa.Options{DisableMemo: true})
	engines := []*opa.Engine{engMemo, engSingle, engNoMemo}
	apply := func(objs []*unstructured.Unstructured) map[string]error { return applyAll(ctx, engines, objs) }

	// Both sides must accept every template and constraint.
	templateOf := map[string]string{}
	for _, u := range templates {
		kind, _, _ := unstructured.NestedString(u.Object, "spec", "crd", "spec", "names", "kind")
		templateOf[kind] = u.GetName()
		if err := p.AddTemplate(u); err != nil {
			t.Errorf("peer: template %s: %v", u.GetName(), err)
		}
	}
	if errs := apply(templates); len(errs) > 0 {
		t.Errorf("engine: templates: %v", errs)
	}
	wantAction := map[opa.ConstraintKey]string{}
	frameworkAction := map[opa.ConstraintKey]string{}
	for _, u := range constraints {
		if err := p.AddConstraint(u); err != nil {
			t.Errorf("peer: constraint %s/%s: %v", u.GetKind(), u.GetName(), err)
		}
		key := opa.ConstraintKey{Kind: u.GetKind(), Name: u.GetName()}
		wantAction[key], frameworkAction[key] = expectedAction(u)
	}
	if errs := apply(constraints); len(errs) > 0 {
		t.Errorf("engine: constraints: %v", errs)
	}
	if t.Failed() {
		t.FailNow()
	}
	for _, e := range engines {
		st := e.Status()
		if len(st.Constraints) != len(constraints) {
			t.Errorf("engine holds %d constraints, want %d", len(st.Constraints), len(constraints))
		}
		for _, cs := range st.Constraints {
			key := opa.ConstraintKey{Kind: cs.Kind, Name: cs.Name}
			if !cs.Active || cs.Error != "" || string(cs.Action) != wantAction[key] {
				t.Errorf("constraint %s: active %v, error %q, action %q (want %q)", key, cs.Active, cs.Error, cs.Action, wantAction[key])
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	nodeNames, nodeObjs := nameNodes()
	nodeObj := map[string]map[string]any{}
	for _, u := range nodeObjs {
		nodeObj[u.GetName()] = u.Object
		if err := p.AddData(u); err != nil {
			t.Fatalf("peer AddData %q: %v", u.GetName(), err)
		}
	}
	if errs := apply(nodeObjs); len(errs) > 0 {
		t.Fatalf("engine inventory: %v", errs)
	}
	for _, e := range engines {
		if got := e.Status().Inventory["v1/Node"]; got != len(nodeObjs) {
			t.Fatalf("engine holds %d nodes, want %d", got, len(nodeObjs))
		}
	}

	pods := namePods(nodeNames)
	before := make([][]byte, len(pods))
	for i := range pods {
		before[i], _ = json.Marshal(pods[i].obj)
	}

	single := func(e *opa.Engine) func(context.Context, *generatedPod) (map[string]nodeVerdict, error) {
		return func(ctx context.Context, g *generatedPod) (map[string]nodeVerdict, error) {
			out := map[string]nodeVerdict{}
			for _, nn := range g.nodes {
				m, err := evaluate(ctx, e, opa.PlacementRequest{Pod: g.obj, Candidates: []opa.Candidate{{Name: nn}}})
				if err != nil {
					return nil, err
				}
				out[nn] = m[nn]
			}
			return out, nil
		}
	}
	batch := func(e *opa.Engine) func(context.Context, *generatedPod) (map[string]nodeVerdict, error) {
		return func(ctx context.Context, g *generatedPod) (map[string]nodeVerdict, error) {
			req := opa.PlacementRequest{Pod: g.obj, Explain: true}
			for _, nn := range g.nodes {
				req.Candidates = append(req.Candidates, opa.Candidate{Name: nn})
			}
			return evaluate(ctx, e, req)
		}
	}
	objects := func(e *opa.Engine) func(context.Context, *generatedPod) (map[string]nodeVerdict, error) {
		return func(ctx context.Context, g *generatedPod) (map[string]nodeVerdict, error) {
			req := opa.PlacementRequest{Pod: g.obj}
			for _, nn := range g.nodes {
				req.Candidates = append(req.Candidates, opa.Candidate{Name: nn, Object: nodeObj[nn]})
			}
			return evaluate(ctx, e, req)
		}
	}
	variants := []engineVariant{
		{name: "single", eval: single(engSingle)},
		{name: "batch", eval: batch(engMemo)},
		{name: "objects", eval: objects(engMemo)},
		{name: "single-nomemo", eval: single(engNoMemo)},
		{name: "batch-nomemo", eval: batch(engNoMemo)},
		{name: "objects-nomemo", eval: objects(engNoMemo)},
	}
	const reference = "batch-nomemo"
	refIdx := -1
	for i, v := range variants {
		if v.name == reference {
			refIdx = i
		}
	}

	// The peer reviews in parallel in the background; the engines answer
	// in pod order on this goroutine, so that their memos see the same
	// sequence on every run.
	peerOut := make([][]nodeOutcome, len(pods))
	var wg sync.WaitGroup
	work := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				g := &pods[i]
				for _, nn := range g.nodes {
					res, err := p.ReviewPodOnNode(ctx, g.obj, nn, nil, userInfo)
					peerOut[i] = append(peerOut[i], peerOutcome(res, err))
				}
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
	for i := range pods {
		for _, v := range variants {
			m, err := v.eval(ctx, &pods[i])
			engOut[i] = append(engOut[i], m)
			engErr[i] = append(engErr[i], err)
		}
	}
	engDone := time.Since(start)
	wg.Wait()

	env := &compareEnv{variants: variants, wantAction: wantAction, frameworkAction: frameworkAction, templateOf: templateOf}
	var (
		sum        podReport
		reported   int // distinct (pod, difference text)
		diffCount  int // (pod, node, variant) differences
		byKind     = map[string]int{}
		peerErrors int
		rawChecks  int
	)
	sum.intended = map[string]int{}
	for i := range pods {
		g := &pods[i]
		r := env.compare(g, peerOut[i], engOut[i], engErr[i])
		if after, _ := json.Marshal(g.obj); !bytes.Equal(before[i], after) {
			r.diffs = append(r.diffs, difference{node: "*", variant: "*", text: "the pod object was modified by the reviews"})
		}
		sum.comparisons += r.comparisons
		sum.reviews += r.reviews
		sum.peerViol += r.peerViol
		for k, v := range r.intended {
			sum.intended[k] += v
		}
		for _, o := range peerOut[i] {
			if o.err != nil {
				peerErrors++
			}
		}
		// Byte for byte: every variant against the memo-off engine.
		if engErr[i][refIdx] == nil {
			for _, nn := range g.nodes {
				ref := rawViolations(engOut[i][refIdx][nn])
				for vi, v := range variants {
					if vi == refIdx || engErr[i][vi] != nil {
						continue
					}
					rawChecks++
					got := rawViolations(engOut[i][vi][nn])
					if fmt.Sprint(got) == fmt.Sprint(ref) {
						continue
					}
					gb, _ := json.MarshalIndent(got, "    ", "  ")
					rb, _ := json.MarshalIndent(ref, "    ", "  ")
					r.diffs = append(r.diffs, difference{node: nn, variant: v.name + " vs " + reference,
						text: fmt.Sprintf("  raw %s:\n    %s\n  raw %s:\n    %s", v.name, gb, reference, rb)})
				}
			}
		}
		if len(r.diffs) == 0 {
			continue
		}
		// One message per pod: each distinct difference with where it was
		// seen ((node, variant) pairs).
		var texts []string
		where := map[string][]string{}
		for _, d := range r.diffs {
			diffCount++
			for _, k := range d.kinds {
				byKind[k]++
			}
			if _, ok := where[d.text]; !ok {
				texts = append(texts, d.text)
			}
			where[d.text] = append(where[d.text], fmt.Sprintf("%q [%s]", d.node, d.variant))
		}
		var b strings.Builder
		for _, text := range texts {
			if reported++; reported > maxReported {
				continue
			}
			w := where[text]
			if len(w) > 8 {
				w = append(w[:8:8], fmt.Sprintf("and %d more", len(where[text])-8))
			}
			fmt.Fprintf(&b, "on %s:\n%s\n", strings.Join(w, ", "), text)
		}
		if b.Len() > 0 {
			pb, _ := json.Marshal(g.obj)
			t.Errorf("pod %s (ReplicaSet %s):\n%spod: %s", strings.Join(g.applied, " "), g.seed, b.String(), pb)
		}
	}
	if reported > 0 {
		t.Errorf("%d differences over (pod, node, variant), %d distinct per pod (first %d shown); by constraint kind: %v", diffCount, reported, min(reported, maxReported), byKind)
	}

	never := logCoverage(t, peerOut, wantAction)
	if nonString {
		if peerErrors == 0 {
			t.Errorf("no peer review failed: the non-string msg case is not exercised")
		}
	} else {
		if len(never) > 0 {
			t.Errorf("constraints never violated: %v", never)
		}
		if peerErrors > 0 {
			t.Errorf("%d peer reviews failed: a template of this suite gives a non-string msg; move it to nonstring/", peerErrors)
		}
	}
	t.Logf("%d templates, %d constraints; %d pods in %d ReplicaSet specs x %d nodes in %d pools = %d peer reviews (%d failed); %d (pod, node, matched constraint) comparisons per engine variant, %d variants %v = %d comparisons with the peer; %d violations from the peer; %d byte-for-byte checks of a variant's (pod, node) answer against %s",
		len(templates), len(constraints), len(pods), len(nameGroups), len(nodeNames), len(nameNodePools), sum.reviews, peerErrors,
		sum.comparisons, len(variants), variantNames(variants), sum.comparisons*len(variants), sum.peerViol, rawChecks, reference)
	t.Logf("intended (and known) differences seen, batch variant: %v", sum.intended)
	for i, name := range []string{"memo on (batch, objects)", "memo on (single)", "memo off (all three)"} {
		s := engines[i].Stats()
		t.Logf("engine %s: %d evaluations, %d memo hits, %d misses, %d evaluation errors", name, s.Evaluations, s.MemoHits, s.MemoMisses, s.EvalErrors)
	}
	t.Logf("engines done at %v; took %v", engDone.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// TestReviewNameUnset pins a difference this test found and the engine
// fixed: for a pod whose metadata.name (namespace) is empty, missing or not
// a string, the framework's input.review has no "name" ("namespace") key
// (AdmissionRequest.Name is omitempty); the engine used to set it to "".
func TestReviewNameUnset(t *testing.T) {
	t.Run("review-name-unset", func(t *testing.T) {
		s := newSides(t,
			templateYAML("K8sReviewMeta", `package reviewmeta
violation[{"msg": msg}] { msg := sprintf("name=%v", [input.review.name]) }
violation[{"msg": msg}] { msg := sprintf("namespace=%v", [input.review.namespace]) }
`),
			constraintYAML("K8sReviewMeta", "m", ""))
		ctx := context.Background()
		var differs []string
		for _, md := range []map[string]any{
			{"name": "", "namespace": "default"},
			{"namespace": "default"},
			{"name": int64(42), "namespace": "default"},
			{"name": "p"},
			{"name": "p", "namespace": "default"}, // control: the same on both sides
		} {
			pod := map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": md,
				"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "nginx"}}}}
			res, err := s.peer.ReviewPodOnNode(ctx, pod, "n1", nil, userInfo)
			if err != nil {
				t.Fatal(err)
			}
			pl, err := s.eng.Evaluate(ctx, opa.PlacementRequest{Pod: pod, Candidates: []opa.Candidate{{Name: "n1", Object: map[string]any{"metadata": map[string]any{"name": "n1"}}}}})
			if err != nil {
				t.Fatal(err)
			}
			var pm, em []string
			for _, r := range res {
				pm = append(pm, r.Msg)
			}
			for _, v := range pl.Violations(0) {
				em = append(em, v.Message)
			}
			sort.Strings(pm)
			sort.Strings(em)
			if fmt.Sprint(pm) != fmt.Sprint(em) {
				b, _ := json.Marshal(md)
				differs = append(differs, fmt.Sprintf("metadata %s: framework %q, engine %q", b, pm, em))
			}
		}
		if len(differs) > 0 {
			t.Errorf("the framework leaves input.review.name (namespace) out when the pod has no name (namespace); the engine differs:\n%s", strings.Join(differs, "\n"))
		}
	})
}
