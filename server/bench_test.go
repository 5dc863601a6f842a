package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/source"
)

// passPolicy allows everything at no cost: the benchmarks measure the
// server's own overhead (decode, convert, encode, metrics).
type passPolicy struct{ fakePolicy }

func (*passPolicy) Evaluate(_ context.Context, req opa.PlacementRequest) (*opa.Placement, error) {
	p := &opa.Placement{Nodes: make([]opa.NodeVerdict, len(req.Candidates))}
	for i, c := range req.Candidates {
		p.Nodes[i].Name = c.Name
	}
	return p, nil
}

func benchServer(b *testing.B) http.Handler {
	s, err := New(Options{Policy: &passPolicy{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	return s.Handler()
}

func benchVerb(b *testing.B, path, body string) {
	h := benchServer(b)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatal(rec.Body)
		}
	}
}

func namesBody(b *testing.B, n int) string {
	ns := make([]string, n)
	for i := range ns {
		ns[i] = fmt.Sprintf("node-pool-a-%05d", i)
	}
	return mustJSON(b, extenderv1.ExtenderArgs{Pod: testPod("team-a", "web-1"), NodeNames: &ns})
}

func nodesBody(b *testing.B, n int) string {
	items := make([]v1.Node, n)
	for i := range items {
		items[i] = testNode(fmt.Sprintf("node-pool-a-%05d", i), map[string]string{
			"kubernetes.io/hostname": fmt.Sprintf("node-pool-a-%05d", i), "topology.kubernetes.io/zone": "zone-a",
			"node.kubernetes.io/instance-type": "m5.xlarge",
		})
	}
	return mustJSON(b, extenderv1.ExtenderArgs{Pod: testPod("team-a", "web-1"), Nodes: &v1.NodeList{Items: items}})
}

func BenchmarkFilterNames500(b *testing.B)     { benchVerb(b, "/filter", namesBody(b, 500)) }
func BenchmarkPrioritizeNames500(b *testing.B) { benchVerb(b, "/prioritize", namesBody(b, 500)) }
func BenchmarkFilterNodes100(b *testing.B)     { benchVerb(b, "/filter", nodesBody(b, 100)) }

// BenchmarkFilterNodesEngine420 is the full-nodes mode end to end: the
// example policies on the real engine, 420 full Node objects in the
// request (what a 1000-node cluster's scheduler sends).
func BenchmarkFilterNodesEngine420(b *testing.B) {
	ctx := context.Background()
	e, err := opa.New(ctx, opa.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(ctx)
	var changes []opa.Change
	for _, p := range []string{"tenant-isolation", "spot-toleration", "privileged-nodes", "node-preference"} {
		for _, f := range []string{"template.yaml", "constraint.yaml"} {
			objs, err := source.ReadFile(filepath.Join("..", "deploy", "examples", p, f))
			if err != nil {
				b.Fatal(err)
			}
			changes = append(changes, opa.Change{Object: objs[0]})
		}
	}
	if errs := e.Apply(ctx, changes); len(errs) > 0 {
		b.Fatal(errs)
	}
	s, err := New(Options{Policy: e, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	h := s.Handler()
	body := nodesBody(b, 420)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/filter", strings.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatal(rec.Body)
		}
	}
}

// BenchmarkEscapeDenyPieces escapes a deny message the way the filter
// answer writes it: in the pieces the engine hands out (prefix, constraint
// name, message text, printed values), 100 nodes' worth.
func BenchmarkEscapeDenyPieces(b *testing.B) {
	pieces := []string{"[", "node-affinity-required", "] ", "pod ", "web-7d9c8b-x7k2q", " may not run on node ",
		"node-pool-a-00042", " because it lacks the label topology.kubernetes.io/zone=eu-west-1a", "; "}
	buf := make([]byte, 0, 1<<16)
	for b.Loop() {
		buf = buf[:0]
		for range 100 {
			for _, p := range pieces {
				buf = appendJSONStringBody(buf, p)
			}
		}
	}
}
