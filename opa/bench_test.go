package opa_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// libraryDir is Gatekeeper's policy library, beside the repository.
const libraryDir = "../../shared/gatekeeper-library/library"

// mixTemplates are ten library templates that judge the pod alone, each
// with one of its sample constraints: the admission policies a cluster
// already runs, which the extender evaluates once per pod.
var mixTemplates = []struct{ dir, sample string }{
	{"general/allowedrepos", "repo-must-be-openpolicyagent"},
	{"general/containerlimits", "container-must-have-limits"},
	{"general/disallowedtags", "container-image-must-not-have-latest-tag"},
	{"pod-security-policy/privileged-containers", "psp-privileged-container"},
	{"pod-security-policy/host-namespaces", "psp-host-namespace"},
	{"pod-security-policy/host-network-ports", "psp-host-network-ports"},
	{"pod-security-policy/capabilities", "psp-capabilities-baseline"},
	{"pod-security-policy/allow-privilege-escalation", "psp-allow-privilege-escalation-container"},
	{"pod-security-policy/read-only-root-filesystem", "psp-readonlyrootfilesystem"},
	{"general/requiredprobes", "must-have-probes"},
}

// mixEngine loads the ten library templates and the three deny placement
// examples, and n nodes in 10 pools that differ in tenant, lifecycle and
// privileged-pool labels; every node has its own hostname label, as in a
// real cluster.
func mixEngine(tb testing.TB, n int) *opa.Engine {
	tb.Helper()
	if _, err := os.Stat(libraryDir); err != nil {
		tb.Skipf("Gatekeeper library not found at %s: %v", libraryDir, err)
	}
	e := newEngine(tb, opa.Options{},
		filepath.Join(examples, "tenant-isolation"),
		filepath.Join(examples, "spot-toleration"),
		filepath.Join(examples, "privileged-nodes"))
	for _, m := range mixTemplates {
		dir := filepath.Join(libraryDir, m.dir)
		apply(tb, e, load(tb, filepath.Join(dir, "template.yaml"))...)
		cons := load(tb, filepath.Join(dir, "samples", m.sample, "constraint.yaml"))
		for _, c := range cons {
			// The samples target Pods; keep them as they are but make sure
			// they do not exclude our namespaces.
			unstructured.RemoveNestedField(c.Object, "spec", "match", "namespaces")
		}
		apply(tb, e, cons...)
	}
	var objs []*unstructured.Unstructured
	objs = append(objs, namespace("team-a", map[string]string{"tenant": "team-a"}), namespace("shared", nil))
	for i := 0; i < n; i++ {
		pool := i % 10
		labels := map[string]string{"pool": fmt.Sprintf("pool-%d", pool), "topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", pool%3)}
		switch {
		case pool < 2:
			labels["tenant"] = "team-a"
		case pool < 4:
			labels["node.kubernetes.io/lifecycle"] = "spot"
		case pool == 4:
			labels["node.example.com/privileged-pods"] = "allowed"
		}
		objs = append(objs, node(fmt.Sprintf("node-%d", i), labels))
	}
	apply(tb, e, objs...)
	if got := len(e.Status().Constraints); got != 13 {
		tb.Fatalf("loaded %d constraints, want 13", got)
	}
	return e
}

// replica is pod i of one of four ReplicaSets: replicas differ only in
// name and uid, as real ones do.
func replica(rs, i int) map[string]any {
	ns := []string{"team-a", "shared", "shared", "team-a"}[rs]
	p := pod(ns, fmt.Sprintf("rs%d-%d", rs, i), func(p map[string]any) {
		p["metadata"].(map[string]any)["labels"] = map[string]any{"app": fmt.Sprintf("rs%d", rs)}
		c := map[string]any{
			"name":  "app",
			"image": fmt.Sprintf("openpolicyagent/app-%d:1.%d", rs, rs),
			"resources": map[string]any{
				"limits": map[string]any{"cpu": "100m", "memory": "1Gi"},
			},
			"securityContext": map[string]any{"readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false},
			"readinessProbe":  map[string]any{"tcpSocket": map[string]any{"port": 80}},
			"livenessProbe":   map[string]any{"tcpSocket": map[string]any{"port": 80}},
		}
		spec(p)["containers"] = []any{c}
		if rs == 2 {
			spec(p)["tolerations"] = []any{map[string]any{"key": "spot", "operator": "Exists"}}
		}
	})
	return p
}

// BenchmarkEvaluateWarm is the steady state: replicas of known
// ReplicaSets, whose verdicts the memo already holds.
func BenchmarkEvaluateWarm(b *testing.B) {
	for _, n := range []int{1, 100, 500, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			e := mixEngine(b, n)
			cands := names("node", n)
			ctx := context.Background()
			for rs := 0; rs < 4; rs++ { // warm up
				if _, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: replica(rs, 0), Candidates: cands}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: replica(i%4, i+1), Candidates: cands}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEvaluateCold is a workload shape seen for the first time: every
// pod has a new image and labels, so nothing it reads is in the memo; the
// nodes of one pool still share their verdicts within the request.
func BenchmarkEvaluateCold(b *testing.B) {
	for _, n := range []int{1, 100, 500, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			e := mixEngine(b, n)
			cands := names("node", n)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p := replica(i%4, i)
				c := spec(p)["containers"].([]any)[0].(map[string]any)
				c["image"] = fmt.Sprintf("openpolicyagent/new-%d:1.0", i)
				spec(p)["tolerations"] = []any{map[string]any{"key": fmt.Sprintf("t%d", i), "operator": "Exists"}}
				if _, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: p, Candidates: cands}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEvaluateNoMemo is the engine without its memo, for comparison:
// every (pod, node) pair of a node-reading template is evaluated.
func BenchmarkEvaluateNoMemo(b *testing.B) {
	for _, n := range []int{100, 500} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			e := mixEngine(b, n)
			// Rebuild with memo off, same objects.
			off := newEngine(b, opa.Options{DisableMemo: true})
			_ = e
			for _, m := range mixTemplates {
				dir := filepath.Join(libraryDir, m.dir)
				apply(b, off, load(b, filepath.Join(dir, "template.yaml"))...)
				apply(b, off, load(b, filepath.Join(dir, "samples", m.sample, "constraint.yaml"))...)
			}
			for _, ex := range []string{"tenant-isolation", "spot-toleration", "privileged-nodes"} {
				apply(b, off, load(b, filepath.Join(examples, ex))...)
			}
			var objs []*unstructured.Unstructured
			for i := 0; i < n; i++ {
				objs = append(objs, node(fmt.Sprintf("node-%d", i), map[string]string{"pool": fmt.Sprint(i % 10)}))
			}
			apply(b, off, objs...)
			cands := names("node", n)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := off.Evaluate(ctx, opa.PlacementRequest{Pod: replica(i%4, i), Candidates: cands}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

var _ = ast.String("")

// BenchmarkLibraryTemplatesHeap reports the live heap an engine keeps for
// the library's templates, compiled on each engine (MiB-kept: after a
// collection, less the empty engine's). Each iteration builds an engine;
// run with -benchtime 3x.
func BenchmarkLibraryTemplatesHeap(b *testing.B) {
	if _, err := os.Stat(libraryDir); err != nil {
		b.Skipf("Gatekeeper library not found at %s: %v", libraryDir, err)
	}
	tmpls, _ := filepath.Glob(filepath.Join(libraryDir, "*", "*", "template.yaml"))
	for _, engine := range libraryEngineChoices {
		b.Run(engine.name, func(b *testing.B) {
			var kept float64
			for range b.N {
				e := newEngine(b, engine.opts)
				before := liveHeap()
				for _, tf := range tmpls {
					apply(b, e, load(b, tf)...)
				}
				kept += float64(liveHeap()-before) / (1 << 20)
				runtime.KeepAlive(e)
			}
			b.ReportMetric(kept/float64(b.N), "MiB-kept")
		})
	}
}
