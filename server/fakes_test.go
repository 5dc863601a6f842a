package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// fakePolicy decides by node name, like a tiny policy set:
//   - "bad-*": denied by K8sNoBadNodes/no-bad-nodes;
//   - "worse-*": denied by two constraints (and warned by one);
//   - "meh-*": violates one of the two warn constraints matching every pod
//     (score 5);
//   - "ghost-*" given by name only: unknown (not in the inventory);
//   - a full Node object labelled policy=deny: denied by K8sLabelPolicy/label-policy;
//   - a dryrun violation on "dry-*" (passes).
type fakePolicy struct {
	mu        sync.Mutex
	err       error
	panicWith any
	delay     time.Duration
	// misbehave: "short" returns one verdict too few; "rename" returns
	// verdicts named differently from the candidates.
	misbehave string

	calls       int
	last        opa.PlacementRequest
	hadDeadline bool
}

func (f *fakePolicy) Evaluate(ctx context.Context, req opa.PlacementRequest) (*opa.Placement, error) {
	f.mu.Lock()
	f.calls++
	f.last = req
	f.last.Candidates = slices.Clone(req.Candidates) // the server reuses its list (Policy's contract)
	_, f.hadDeadline = ctx.Deadline()
	err, panicWith, delay, misbehave := f.err, f.panicWith, f.delay, f.misbehave
	f.mu.Unlock()

	if panicWith != nil {
		panic(panicWith)
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, fmt.Errorf("evaluating: %w", ctx.Err())
		}
	}
	if err != nil {
		return nil, err
	}
	var nodes []opa.NodeVerdict
	var all [][]opa.Violation
	for _, c := range req.Candidates {
		if c.Object == nil && c.JSON != nil {
			if err := json.Unmarshal(c.JSON, &c.Object); err != nil {
				return nil, err
			}
		}
		v := opa.NodeVerdict{Name: c.Name}
		var own []opa.Violation
		deny := func(kind, name, msg string) {
			own = append(own, opa.Violation{
				Constraint: opa.ConstraintKey{Kind: kind, Name: name}, Action: opa.Deny, Message: msg})
		}
		switch {
		case strings.HasPrefix(c.Name, "ghost-") && c.Object == nil:
			v.Unknown = true
		case strings.HasPrefix(c.Name, "bad-"):
			deny("K8sNoBadNodes", "no-bad-nodes", "node "+c.Name+" is bad")
			// The same constraint twice: counted once in metrics.
			deny("K8sNoBadNodes", "no-bad-nodes", "node "+c.Name+" is really bad")
		case strings.HasPrefix(c.Name, "worse-"):
			deny("K8sNoBadNodes", "no-bad-nodes", "node "+c.Name+" is bad")
			deny("K8sZones", "zones", "wrong zone")
			own = append(own, opa.Violation{
				Constraint: opa.ConstraintKey{Kind: "K8sPrefer", Name: "prefer-a"}, Action: opa.Warn, Message: "meh"})
		case strings.HasPrefix(c.Name, "meh-"):
			own = append(own, opa.Violation{
				Constraint: opa.ConstraintKey{Kind: "K8sPrefer", Name: "prefer-a"}, Action: opa.Warn, Message: "meh"})
		case strings.HasPrefix(c.Name, "dry-"):
			own = append(own, opa.Violation{
				Constraint: opa.ConstraintKey{Kind: "K8sAudit", Name: "audit-only"}, Action: opa.DryRun, Message: "noted"})
		}
		if c.Object != nil {
			md, _ := c.Object["metadata"].(map[string]any)
			labels, _ := md["labels"].(map[string]any)
			if labels["policy"] == "deny" {
				deny("K8sLabelPolicy", "label-policy", "label says no")
			}
		}
		nodes = append(nodes, v)
		all = append(all, own)
	}
	p := opa.NewPlacement(nodes, all, 2, 7)
	for i, v := range nodes {
		if req.Explain && !v.Unknown {
			p.AddTrace(i, opa.ConstraintTrace{
				Constraint: opa.ConstraintKey{Kind: "K8sNoBadNodes", Name: "no-bad-nodes"},
				Action:     opa.Deny,
				Violations: messages(all[i]),
				Duration:   1500 * time.Nanosecond,
			})
		}
	}
	switch misbehave {
	case "short":
		if len(p.Nodes) > 0 {
			p.Nodes = p.Nodes[:len(p.Nodes)-1]
		}
	case "rename":
		for i := range p.Nodes {
			p.Nodes[i].Name = "evil-" + p.Nodes[i].Name
		}
	}
	return p, nil
}

func messages(vs []opa.Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Message)
	}
	return out
}

func (f *fakePolicy) Status() opa.Status {
	return opa.Status{
		Generation: 7,
		Templates:  []opa.TemplateStatus{{Name: "k8snobadnodes", Kind: "K8sNoBadNodes", Active: true, Memoised: true}},
		Constraints: []opa.ConstraintStatus{
			{Kind: "K8sNoBadNodes", Name: "no-bad-nodes", Active: true, Action: opa.Deny},
		},
		Inventory: map[string]int{"v1/Node": 3, "v1/Namespace": 2, "apps/v1/Deployment": 1},
	}
}

func (f *fakePolicy) Stats() opa.Stats {
	return opa.Stats{
		Evaluations: 42, HelperEvaluations: 9, MemoHits: 30, MemoMisses: 12, EvalErrors: 1,
		CompileErrors: 2, ConstraintErrors: 3, PolicyGeneration: 7, KeysReused: 468,
		LastApply: time.Unix(1700000000, 0),
	}
}

func (f *fakePolicy) set(fn func(f *fakePolicy)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakePolicy) snapshot() (calls int, last opa.PlacementRequest, hadDeadline bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls, f.last, f.hadDeadline
}

// fakeBinder holds pods by "namespace/name" and records binds.
type fakeBinder struct {
	mu      sync.Mutex
	pods    map[string]*v1.Pod
	getErr  error
	bindErr error
	bound   []string // "ns/name uid node"
}

func (b *fakeBinder) GetPod(_ context.Context, ns, name string) (*v1.Pod, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.getErr != nil {
		return nil, b.getErr
	}
	p, ok := b.pods[ns+"/"+name]
	if !ok {
		return nil, fmt.Errorf("pods %q not found", name)
	}
	return p.DeepCopy(), nil
}

func (b *fakeBinder) Bind(_ context.Context, ns, name string, uid types.UID, node string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bindErr != nil {
		return b.bindErr
	}
	b.bound = append(b.bound, fmt.Sprintf("%s/%s %s %s", ns, name, uid, node))
	return nil
}

func (b *fakeBinder) binds() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.bound...)
}

var errBoom = errors.New("boom")

// --- helpers ---

func testLogger(t *testing.T) *slog.Logger {
	t.Helper()
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func newTestServer(t *testing.T, opts Options) (*Server, *fakePolicy) {
	t.Helper()
	fp, ok := opts.Policy.(*fakePolicy)
	if opts.Policy == nil {
		fp = &fakePolicy{}
		opts.Policy = fp
	} else if !ok {
		t.Fatalf("test server needs a *fakePolicy")
	}
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	s, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s, fp
}

func do(t *testing.T, h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func decodeInto[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decoding answer %q: %v", rec.Body.String(), err)
	}
	return v
}

func errorField(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		t.Fatalf("answer is not a JSON object: %q: %v", rec.Body.String(), err)
	}
	s, _ := m["Error"].(string)
	return s
}

func testPod(ns, name string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, UID: types.UID("uid-" + name),
			Labels: map[string]string{"app": name},
		},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "nginx"}}},
	}
}

func testNode(name string, labels map[string]string) v1.Node {
	return v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: v1.NodeStatus{Capacity: v1.ResourceList{
			v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("16Gi"),
		}},
	}
}
