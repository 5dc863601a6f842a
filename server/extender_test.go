package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

func names(ns ...string) *[]string {
	if ns == nil {
		ns = []string{}
	}
	return &ns
}

func TestFilter(t *testing.T) {
	pod := testPod("team-a", "web-1")
	tests := []struct {
		name string
		args extenderv1.ExtenderArgs
		// want
		names       *[]string // NodeNames out (nil: must be nil)
		nodes       []string  // names of Nodes.Items out (nil: Nodes must be nil)
		failed      extenderv1.FailedNodesMap
		unresolv    extenderv1.FailedNodesMap
		evaluated   []string // candidates the engine saw (nil: no call)
		withObjects bool
	}{
		{
			name:   "names: mixed verdicts",
			args:   extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("good-1", "bad-1", "meh-1", "ghost-1", "worse-1", "dry-1")},
			names:  names("good-1", "meh-1", "dry-1"),
			failed: extenderv1.FailedNodesMap{"ghost-1": unknownNodeReason},
			unresolv: extenderv1.FailedNodesMap{
				"bad-1":   "[no-bad-nodes] node bad-1 is bad; [no-bad-nodes] node bad-1 is really bad",
				"worse-1": "[no-bad-nodes] node worse-1 is bad; [zones] wrong zone",
			},
			evaluated: []string{"good-1", "bad-1", "meh-1", "ghost-1", "worse-1", "dry-1"},
		},
		{
			name:      "names: all pass, order kept",
			args:      extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("z", "a", "m")},
			names:     names("z", "a", "m"),
			evaluated: []string{"z", "a", "m"},
		},
		{
			name:      "names: duplicates evaluated and answered once, first position",
			args:      extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("good-2", "bad-1", "good-1", "good-2", "bad-1", "meh-1")},
			names:     names("good-2", "good-1", "meh-1"),
			unresolv:  extenderv1.FailedNodesMap{"bad-1": "[no-bad-nodes] node bad-1 is bad; [no-bad-nodes] node bad-1 is really bad"},
			evaluated: []string{"good-2", "bad-1", "good-1", "meh-1"},
		},
		{
			name:  "names: empty list is an empty answer",
			args:  extenderv1.ExtenderArgs{Pod: pod, NodeNames: names()},
			names: names(),
		},
		{
			name: "neither list: empty answer",
			args: extenderv1.ExtenderArgs{Pod: pod},
		},
		{
			name: "nodes: mixed verdicts, objects passed, input order",
			args: extenderv1.ExtenderArgs{Pod: pod, Nodes: &v1.NodeList{Items: []v1.Node{
				testNode("n-3", map[string]string{"zone": "a"}),
				testNode("bad-1", nil),
				testNode("ghost-1", nil), // supplied as an object: not unknown
				testNode("n-1", map[string]string{"policy": "deny"}),
				testNode("meh-1", nil),
				testNode("n-3", map[string]string{"zone": "duplicate"}),
			}}},
			nodes: []string{"n-3", "ghost-1", "meh-1"},
			unresolv: extenderv1.FailedNodesMap{
				"bad-1": "[no-bad-nodes] node bad-1 is bad; [no-bad-nodes] node bad-1 is really bad",
				"n-1":   "[label-policy] label says no",
			},
			evaluated:   []string{"n-3", "bad-1", "ghost-1", "n-1", "meh-1"},
			withObjects: true,
		},
		{
			name:  "nodes: empty list is an empty answer in nodes mode",
			args:  extenderv1.ExtenderArgs{Pod: pod, Nodes: &v1.NodeList{}},
			nodes: []string{},
		},
		{
			name:        "nodes: empty NodeNames beside Nodes is fine",
			args:        extenderv1.ExtenderArgs{Pod: pod, NodeNames: names(), Nodes: &v1.NodeList{Items: []v1.Node{testNode("good-1", nil)}}},
			names:       names(),
			nodes:       []string{"good-1"},
			evaluated:   []string{"good-1"},
			withObjects: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, fp := newTestServer(t, Options{})
			rec := do(t, s.Handler(), http.MethodPost, "/filter", mustJSON(t, tc.args))
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			res := decodeInto[extenderv1.ExtenderFilterResult](t, rec)
			if res.Error != "" {
				t.Fatalf("Error %q", res.Error)
			}
			if !reflect.DeepEqual(res.NodeNames, tc.names) {
				t.Errorf("NodeNames = %v, want %v", deref(res.NodeNames), deref(tc.names))
			}
			if tc.nodes == nil {
				if res.Nodes != nil {
					t.Errorf("Nodes = %v, want nil", res.Nodes)
				}
			} else {
				if res.Nodes == nil {
					t.Fatalf("Nodes nil, want %v", tc.nodes)
				}
				got := []string{}
				for _, n := range res.Nodes.Items {
					got = append(got, n.Name)
				}
				if !slices.Equal(got, tc.nodes) {
					t.Errorf("Nodes = %v, want %v", got, tc.nodes)
				}
				// Objects come back as they came in (first occurrence).
				for _, n := range res.Nodes.Items {
					for _, in := range tc.args.Nodes.Items {
						if in.Name == n.Name {
							if !reflect.DeepEqual(in.Labels, n.Labels) || !in.Status.Capacity.Cpu().Equal(*n.Status.Capacity.Cpu()) {
								t.Errorf("node %s changed: %v -> %v", n.Name, in.Labels, n.Labels)
							}
							break
						}
					}
				}
			}
			if !reflect.DeepEqual(res.FailedNodes, tc.failed) {
				t.Errorf("FailedNodes = %v, want %v", res.FailedNodes, tc.failed)
			}
			if !reflect.DeepEqual(res.FailedAndUnresolvableNodes, tc.unresolv) {
				t.Errorf("FailedAndUnresolvableNodes = %v, want %v", res.FailedAndUnresolvableNodes, tc.unresolv)
			}

			calls, last, hadDeadline := fp.snapshot()
			if tc.evaluated == nil {
				if calls != 0 {
					t.Errorf("engine called %d times for an empty request", calls)
				}
				return
			}
			if calls != 1 || !hadDeadline {
				t.Errorf("engine calls %d (want 1), deadline %v (want true)", calls, hadDeadline)
			}
			var seen []string
			for _, c := range last.Candidates {
				seen = append(seen, c.Name)
				if (c.JSON != nil) != tc.withObjects || c.Object != nil {
					t.Errorf("candidate %s: JSON present %v, want %v (object %v, want none)", c.Name, c.JSON != nil, tc.withObjects, c.Object)
				}
				if c.JSON != nil {
					// The Node as the request sent it.
					var n v1.Node
					if err := json.Unmarshal(c.JSON, &n); err != nil || n.Name != c.Name {
						t.Errorf("candidate %s: JSON %s is not its Node (%v)", c.Name, c.JSON, err)
					}
				}
			}
			if !slices.Equal(seen, tc.evaluated) {
				t.Errorf("engine saw %v, want %v", seen, tc.evaluated)
			}
			if last.Decoded == nil {
				t.Fatal("the pod was not given to the engine decoded")
			}
			pod, err := last.Decoded.Content()
			if err != nil {
				t.Fatal(err)
			}
			md := pod["metadata"].(map[string]any)
			if pod["apiVersion"] != "v1" || pod["kind"] != "Pod" ||
				md["name"] != "web-1" || md["namespace"] != "team-a" || last.Explain {
				t.Errorf("pod given to the engine: apiVersion %v kind %v metadata %v explain %v",
					pod["apiVersion"], pod["kind"], md, last.Explain)
			}
		})
	}
}

func deref(p *[]string) any {
	if p == nil {
		return "<nil>"
	}
	return *p
}

// A misbehaving engine can never make filter name a node the request did
// not carry, and a wrong verdict count is an engine failure.
func TestFilterEngineAnswerShape(t *testing.T) {
	body := func(t *testing.T) string {
		return mustJSON(t, extenderv1.ExtenderArgs{Pod: testPod("ns", "p"), NodeNames: names("good-1", "bad-1")})
	}
	t.Run("renamed verdicts", func(t *testing.T) {
		s, fp := newTestServer(t, Options{})
		fp.set(func(f *fakePolicy) { f.misbehave = "rename" })
		rec := do(t, s.Handler(), http.MethodPost, "/filter", body(t))
		res := decodeInto[extenderv1.ExtenderFilterResult](t, rec)
		if rec.Code != 200 || !reflect.DeepEqual(*res.NodeNames, []string{"good-1"}) {
			t.Fatalf("status %d, NodeNames %v", rec.Code, deref(res.NodeNames))
		}
		if _, ok := res.FailedAndUnresolvableNodes["bad-1"]; !ok || len(res.FailedAndUnresolvableNodes) != 1 {
			t.Errorf("FailedAndUnresolvableNodes %v", res.FailedAndUnresolvableNodes)
		}
	})
	t.Run("too few verdicts", func(t *testing.T) {
		s, fp := newTestServer(t, Options{})
		fp.set(func(f *fakePolicy) { f.misbehave = "short" })
		rec := do(t, s.Handler(), http.MethodPost, "/filter", body(t))
		if rec.Code != 500 || !strings.Contains(errorField(t, rec), "1 verdicts for 2 candidate nodes") {
			t.Fatalf("status %d body %s", rec.Code, rec.Body)
		}
	})
}

func TestPrioritize(t *testing.T) {
	pod := testPod("team-a", "web-1")
	tests := []struct {
		name string
		args extenderv1.ExtenderArgs
		want extenderv1.HostPriorityList
	}{
		{
			name: "names",
			args: extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("good-1", "meh-1", "bad-1", "ghost-1", "dry-1", "meh-1")},
			want: extenderv1.HostPriorityList{{Host: "good-1", Score: 10}, {Host: "meh-1", Score: 5}, {Host: "bad-1", Score: 0}, {Host: "ghost-1", Score: 0}, {Host: "dry-1", Score: 10}},
		},
		{
			name: "nodes",
			args: extenderv1.ExtenderArgs{Pod: pod, Nodes: &v1.NodeList{Items: []v1.Node{
				testNode("meh-2", nil), testNode("ghost-2", nil), testNode("n-1", map[string]string{"policy": "deny"}),
			}}},
			want: extenderv1.HostPriorityList{{Host: "meh-2", Score: 5}, {Host: "ghost-2", Score: 10}, {Host: "n-1", Score: 0}},
		},
		{
			name: "empty",
			args: extenderv1.ExtenderArgs{Pod: pod, NodeNames: names()},
			want: extenderv1.HostPriorityList{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestServer(t, Options{})
			rec := do(t, s.Handler(), http.MethodPost, "/prioritize", mustJSON(t, tc.args))
			if rec.Code != 200 {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			got := decodeInto[extenderv1.HostPriorityList](t, rec)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPreempt(t *testing.T) {
	pod := testPod("team-a", "web-1")
	victim := func(uid string) *v1.Pod {
		p := testPod("team-b", "victim-"+uid)
		p.UID = types.UID(uid)
		return p
	}
	tests := []struct {
		name      string
		args      extenderv1.ExtenderPreemptionArgs
		want      map[string]*extenderv1.MetaVictims
		evaluated []string // in order; nil: no engine call
	}{
		{
			name: "full victims converted, denied and unknown dropped",
			args: extenderv1.ExtenderPreemptionArgs{Pod: pod, NodeNameToVictims: map[string]*extenderv1.Victims{
				"good-1":  {Pods: []*v1.Pod{victim("u1"), nil, victim("u2")}, NumPDBViolations: 1},
				"bad-1":   {Pods: []*v1.Pod{victim("u3")}},
				"ghost-1": {Pods: []*v1.Pod{victim("u4")}},
				"meh-1":   {Pods: []*v1.Pod{victim("u5")}, NumPDBViolations: 2},
				"empty-1": nil,
			}},
			// empty-1 has no victims: kube-scheduler would reject it.
			want: map[string]*extenderv1.MetaVictims{
				"good-1": {Pods: []*extenderv1.MetaPod{{UID: "u1"}, {UID: "u2"}}, NumPDBViolations: 1},
				"meh-1":  {Pods: []*extenderv1.MetaPod{{UID: "u5"}}, NumPDBViolations: 2},
			},
			evaluated: []string{"bad-1", "ghost-1", "good-1", "meh-1"},
		},
		{
			name: "meta victims kept as given",
			args: extenderv1.ExtenderPreemptionArgs{Pod: pod, NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{
				"good-1":  {Pods: []*extenderv1.MetaPod{{UID: "u1"}}, NumPDBViolations: 3},
				"good-2":  {Pods: []*extenderv1.MetaPod{nil, {UID: "u3"}, nil}, NumPDBViolations: 1},
				"worse-1": {Pods: []*extenderv1.MetaPod{{UID: "u2"}}},
				"nil-1":   nil,
				"good-3":  {Pods: []*extenderv1.MetaPod{nil}},
			}},
			want: map[string]*extenderv1.MetaVictims{
				"good-1": {Pods: []*extenderv1.MetaPod{{UID: "u1"}}, NumPDBViolations: 3},
				"good-2": {Pods: []*extenderv1.MetaPod{{UID: "u3"}}, NumPDBViolations: 1},
			},
			evaluated: []string{"good-1", "good-2", "worse-1"},
		},
		{
			name: "no candidates",
			args: extenderv1.ExtenderPreemptionArgs{Pod: pod},
			want: map[string]*extenderv1.MetaVictims{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, fp := newTestServer(t, Options{})
			rec := do(t, s.Handler(), http.MethodPost, "/preempt", mustJSON(t, tc.args))
			if rec.Code != 200 {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			got := decodeInto[extenderv1.ExtenderPreemptionResult](t, rec)
			if !reflect.DeepEqual(got.NodeNameToMetaVictims, tc.want) {
				t.Errorf("got %s, want %s", mustJSON(t, got.NodeNameToMetaVictims), mustJSON(t, tc.want))
			}
			calls, last, hadDeadline := fp.snapshot()
			if tc.evaluated == nil {
				if calls != 0 {
					t.Errorf("engine called %d times", calls)
				}
				return
			}
			var seen []string
			for _, c := range last.Candidates {
				seen = append(seen, c.Name)
				if c.Object != nil {
					t.Errorf("preempt candidate %s has an object", c.Name)
				}
			}
			if calls != 1 || !hadDeadline || !slices.Equal(seen, tc.evaluated) {
				t.Errorf("engine: %d calls, deadline %v, saw %v, want %v", calls, hadDeadline, seen, tc.evaluated)
			}
		})
	}
}

func TestBind(t *testing.T) {
	pending := testPod("team-a", "web-1")
	boundHere := testPod("team-a", "web-2")
	boundHere.Spec.NodeName = "good-1"
	boundElsewhere := testPod("team-a", "web-3")
	boundElsewhere.Spec.NodeName = "good-9"
	newBinder := func() *fakeBinder {
		return &fakeBinder{pods: map[string]*v1.Pod{
			"team-a/web-1": pending, "team-a/web-2": boundHere, "team-a/web-3": boundElsewhere,
		}}
	}
	args := func(name, node string) extenderv1.ExtenderBindingArgs {
		return extenderv1.ExtenderBindingArgs{PodName: name, PodNamespace: "team-a", PodUID: types.UID("uid-" + name), Node: node}
	}
	tests := []struct {
		name      string
		noBinder  bool
		setup     func(b *fakeBinder)
		args      extenderv1.ExtenderBindingArgs
		wantError string // substring; "" means success
		wantBound []string
	}{
		{name: "success", args: args("web-1", "good-1"), wantBound: []string{"team-a/web-1 uid-web-1 good-1"}},
		{name: "unknown node binds (filter judged it)", args: args("web-1", "ghost-1"), wantBound: []string{"team-a/web-1 uid-web-1 ghost-1"}},
		{name: "warned node binds", args: args("web-1", "meh-1"), wantBound: []string{"team-a/web-1 uid-web-1 meh-1"}},
		{name: "denied node", args: args("web-1", "bad-1"), wantError: "node bad-1 is denied for pod team-a/web-1 by the current policy: [no-bad-nodes] node bad-1 is bad"},
		{name: "bind error", setup: func(b *fakeBinder) { b.bindErr = errBoom }, args: args("web-1", "good-1"), wantError: "cannot bind pod team-a/web-1 to node good-1: boom"},
		{name: "get error", setup: func(b *fakeBinder) { b.getErr = errBoom }, args: args("web-1", "good-1"), wantError: "get pod: boom"},
		{name: "pod not found", args: args("nope", "good-1"), wantError: "not found"},
		{name: "uid mismatch", args: extenderv1.ExtenderBindingArgs{PodName: "web-1", PodNamespace: "team-a", PodUID: "other", Node: "good-1"}, wantError: "pod recreated"},
		{name: "already bound here", args: args("web-2", "good-1")},
		{name: "already bound elsewhere", args: args("web-3", "good-1"), wantError: "already bound to node good-9"},
		{name: "no binder", noBinder: true, args: args("web-1", "good-1"), wantError: "binding is not available: no cluster configured (--kubeconfig)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newBinder()
			if tc.setup != nil {
				tc.setup(b)
			}
			opts := Options{Binder: b}
			if tc.noBinder {
				opts.Binder = nil
			}
			s, _ := newTestServer(t, opts)
			rec := do(t, s.Handler(), http.MethodPost, "/bind", mustJSON(t, tc.args))
			if rec.Code != 200 {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			res := decodeInto[extenderv1.ExtenderBindingResult](t, rec)
			if tc.wantError == "" && res.Error != "" {
				t.Fatalf("Error %q", res.Error)
			}
			if !strings.Contains(res.Error, tc.wantError) {
				t.Errorf("Error %q, want it to contain %q", res.Error, tc.wantError)
			}
			if got := b.binds(); !slices.Equal(got, tc.wantBound) {
				t.Errorf("binds %v, want %v", got, tc.wantBound)
			}
		})
	}
}

func TestEngineFailure(t *testing.T) {
	for _, verb := range []string{"/filter", "/prioritize", "/preempt", "/bind"} {
		t.Run(verb, func(t *testing.T) {
			s, fp := newTestServer(t, Options{Binder: &fakeBinder{pods: map[string]*v1.Pod{"ns/p": testPod("ns", "p")}}})
			fp.set(func(f *fakePolicy) { f.err = errors.New("rego exploded") })
			rec := do(t, s.Handler(), http.MethodPost, verb, validBody(t, verb))
			if rec.Code != http.StatusInternalServerError {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			if got := errorField(t, rec); got != "policy evaluation failed: rego exploded" {
				t.Errorf("Error %q", got)
			}
		})
	}
}

func TestRequestTimeout(t *testing.T) {
	s, fp := newTestServer(t, Options{RequestTimeout: 30 * time.Millisecond})
	fp.set(func(f *fakePolicy) { f.delay = 5 * time.Second })
	start := time.Now()
	rec := do(t, s.Handler(), http.MethodPost, "/filter", validBody(t, "/filter"))
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v: the deadline did not reach the engine", d)
	}
	if rec.Code != 500 || !strings.Contains(errorField(t, rec), "did not finish within the request timeout (30ms)") {
		t.Fatalf("status %d body %s", rec.Code, rec.Body)
	}
}

// validBody is a well-formed request for verb, naming pod ns/p.
func validBody(t *testing.T, verb string) string {
	pod := testPod("ns", "p")
	switch verb {
	case "/filter", "/prioritize":
		return mustJSON(t, extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("good-1")})
	case "/preempt":
		return mustJSON(t, extenderv1.ExtenderPreemptionArgs{Pod: pod, NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{"good-1": {Pods: []*extenderv1.MetaPod{{UID: "v1"}}}}})
	case "/bind":
		return mustJSON(t, extenderv1.ExtenderBindingArgs{PodName: "p", PodNamespace: "ns", PodUID: "uid-p", Node: "good-1"})
	case "/debug/explain":
		return mustJSON(t, ExplainRequest{Pod: pod, NodeNames: []string{"good-1"}})
	}
	t.Fatalf("no body for %s", verb)
	return ""
}

func TestBadInput(t *testing.T) {
	type badCase struct {
		name, body, want string
	}
	common := []badCase{
		{"empty body", "", "empty request body"},
		{"whitespace body", "  \n", "empty request body"},
		{"malformed", `{"Pod": {"metadata": }`, "malformed JSON"},
		{"truncated", `{"Pod": {"metadata": {"name": "x"`, "truncated JSON"},
		{"not an object", `[1,2]`, "wrong type in JSON"},
		{"trailing garbage", `{} xyz`, "invalid data after the JSON"},
		{"second value", `{} {}`, "unexpected data after the JSON"},
	}
	podCases := []badCase{
		{"nil pod", `{"Pod": null}`, "request has no Pod"},
		{"pod without name", `{"Pod": {"metadata": {"namespace": "ns"}}}`, "Pod has no metadata.name"},
		{"pod without namespace", `{"Pod": {"metadata": {"name": "p"}}}`, `Pod "p" has no metadata.namespace`},
		{"pod of wrong type", `{"Pod": "p"}`, "field Pod is a JSON string"},
		{"label of wrong type", `{"Pod": {"metadata": {"name": "p", "namespace": "ns", "labels": {"a": 1}}}}`, "field Pod.metadata.labels"},
	}
	pod := `{"metadata": {"name": "p", "namespace": "ns"}}`
	byVerb := map[string][]badCase{
		"/filter": {
			{"names of wrong type", `{"Pod": ` + pod + `, "NodeNames": "a"}`, "field NodeNames is a JSON string"},
			{"both lists", `{"Pod": ` + pod + `, "NodeNames": ["a"], "Nodes": {"items": [{"metadata": {"name": "b"}}]}}`, "both Nodes and NodeNames"},
			{"empty node name", `{"Pod": ` + pod + `, "NodeNames": ["a", ""]}`, "NodeNames[1] is empty"},
			{"nameless node", `{"Pod": ` + pod + `, "Nodes": {"items": [{"metadata": {}}]}}`, "Nodes.items[0] has no metadata.name"},
			{"node not an object", `{"Pod": ` + pod + `, "Nodes": {"items": [{"metadata": {"name": "a"}}, "b"]}}`, "Nodes.items[1] is not a JSON object"},
			{"node name of wrong type", `{"Pod": ` + pod + `, "Nodes": {"items": [{"metadata": {"name": 5}}]}}`, "Nodes.items[0] has a metadata.name that is not a string"},
			{"node metadata of wrong type", `{"Pod": ` + pod + `, "Nodes": {"items": [{"metadata": []}]}}`, "Nodes.items[0] has a metadata that is not a JSON object"},
			{"list metadata of wrong type", `{"Pod": ` + pod + `, "Nodes": {"metadata": 5, "items": []}}`, "Nodes.metadata"},
		},
		"/prioritize": {
			{"names of wrong type", `{"Pod": ` + pod + `, "NodeNames": [1]}`, "field NodeNames"},
		},
		"/preempt": {
			{"victims of wrong type", `{"Pod": ` + pod + `, "NodeNameToMetaVictims": []}`, "field NodeNameToMetaVictims"},
			{"empty node name", `{"Pod": ` + pod + `, "NodeNameToMetaVictims": {"": {}}}`, "empty node name"},
		},
		"/bind": {
			{"no pod name", `{"PodNamespace": "ns", "Node": "n"}`, "binding has no PodName"},
			{"no namespace", `{"PodName": "p", "Node": "n"}`, `binding of pod "p" has no PodNamespace`},
			{"no node", `{"PodName": "p", "PodNamespace": "ns"}`, "binding of pod ns/p has no Node"},
			{"uid of wrong type", `{"PodName": "p", "PodNamespace": "ns", "Node": "n", "PodUID": 5}`, "field PodUID is a JSON number"},
		},
	}
	for _, verb := range []string{"/filter", "/prioritize", "/preempt", "/bind"} {
		cases := append(slices.Clone(common), byVerb[verb]...)
		if verb != "/bind" {
			cases = append(cases, podCases...)
		}
		for _, tc := range cases {
			t.Run(verb+"/"+tc.name, func(t *testing.T) {
				s, fp := newTestServer(t, Options{Binder: &fakeBinder{}})
				rec := do(t, s.Handler(), http.MethodPost, verb, tc.body)
				if rec.Code != http.StatusBadRequest {
					t.Fatalf("status %d, want 400: %s", rec.Code, rec.Body)
				}
				if got := errorField(t, rec); !strings.Contains(got, tc.want) {
					t.Errorf("Error %q, want it to contain %q", got, tc.want)
				}
				if calls, _, _ := fp.snapshot(); calls != 0 {
					t.Errorf("engine called on bad input")
				}
			})
		}
		t.Run(verb+"/body too large", func(t *testing.T) {
			s, _ := newTestServer(t, Options{MaxBodyBytes: 1024, Binder: &fakeBinder{}})
			body := `{"Pod": {"metadata": {"name": "p", "namespace": "ns", "annotations": {"a": "` + strings.Repeat("x", 4096) + `"}}}}`
			rec := do(t, s.Handler(), http.MethodPost, verb, body)
			if rec.Code != http.StatusBadRequest || !strings.Contains(errorField(t, rec), "request body exceeds 1024 bytes (MaxBodyBytes)") {
				t.Fatalf("status %d body %s", rec.Code, rec.Body)
			}
		})
		t.Run(verb+"/trailing data beyond the limit", func(t *testing.T) {
			s, _ := newTestServer(t, Options{MaxBodyBytes: 1024, Binder: &fakeBinder{}})
			body := validBody(t, verb) + strings.Repeat(" ", 2048) + "x"
			rec := do(t, s.Handler(), http.MethodPost, verb, body)
			if rec.Code != http.StatusBadRequest || !strings.Contains(errorField(t, rec), "exceeds 1024 bytes") {
				t.Fatalf("status %d body %s", rec.Code, rec.Body)
			}
		})
		for _, method := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
			t.Run(verb+"/"+method, func(t *testing.T) {
				s, _ := newTestServer(t, Options{})
				rec := do(t, s.Handler(), method, verb, "")
				if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != http.MethodPost {
					t.Fatalf("status %d Allow %q", rec.Code, rec.Header().Get("Allow"))
				}
				if !strings.Contains(errorField(t, rec), "use POST") {
					t.Errorf("body %s", rec.Body)
				}
			})
		}
	}
	// The answer's shape is the verb's result type where it has an Error field.
	s, _ := newTestServer(t, Options{})
	rec := do(t, s.Handler(), http.MethodPost, "/filter", "")
	res := decodeInto[extenderv1.ExtenderFilterResult](t, rec)
	if res.Error == "" || res.NodeNames != nil || res.Nodes != nil {
		t.Errorf("filter error answer %s", rec.Body)
	}
}

// Unknown fields are ignored so that newer schedulers keep working.
func TestUnknownFieldsIgnored(t *testing.T) {
	s, _ := newTestServer(t, Options{})
	body := `{"Pod": {"metadata": {"name": "p", "namespace": "ns"}, "futureField": 1}, "NodeNames": ["good-1"], "NewThing": true}`
	rec := do(t, s.Handler(), http.MethodPost, "/filter", body)
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
}

// TestAnswersCarryTheirLength: filter and prioritize answers, thousands of
// bytes long, go out with Content-Length, not chunked.
func TestAnswersCarryTheirLength(t *testing.T) {
	s, _ := newTestServer(t, Options{})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	var many []string
	for i := range 400 {
		many = append(many, fmt.Sprintf("bad-%d", i))
	}
	body, err := json.Marshal(extenderv1.ExtenderArgs{Pod: testPod("team-a", "web-1"), NodeNames: &many})
	if err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"/filter", "/prioritize"} {
		resp, err := ts.Client().Post(ts.URL+verb, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		out, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || len(out) < 4096 {
			t.Fatalf("%s: HTTP %d, %d bytes: %.200s", verb, resp.StatusCode, len(out), out)
		}
		if resp.ContentLength != int64(len(out)) || len(resp.TransferEncoding) > 0 {
			t.Errorf("%s: Content-Length %d, Transfer-Encoding %v, for %d bytes", verb, resp.ContentLength, resp.TransferEncoding, len(out))
		}
	}
}
