package server

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/source"
)

// .ci/run passes -args -soak=60s; a plain `go test` runs a short version.
var soakDuration = flag.Duration("soak", 4*time.Second, "how long TestSoakWithPolicyChurn runs")

// TestSoakWithPolicyChurn: concurrent filter and prioritize through HTTP
// against the real engine, fed by the real folder source, while templates,
// constraints and nodes change every 100ms. Every answer must be a
// success whose denials the policy explains (a message naming a
// constraint); no goroutine may leak; the heap must not grow without
// bound.
func TestSoakWithPolicyChurn(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	goroutinesBefore := runtime.NumGoroutine()
	dir := t.TempDir()
	examples := filepath.Join("..", "deploy", "examples")
	for _, sub := range []string{"tenant-isolation", "spot-toleration", "privileged-nodes", "node-preference"} {
		for _, f := range []string{"template.yaml", "constraint.yaml"} {
			b, err := os.ReadFile(filepath.Join(examples, sub, f))
			if err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(dir, sub, f), b)
		}
	}
	write(t, filepath.Join(dir, "namespaces.yaml"), mustRead(t, filepath.Join(examples, "inventory", "namespaces.yaml")))
	writeNodes(t, dir, 0)

	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	engine, err := opa.New(ctx, opa.Options{})
	if err != nil {
		t.Fatal(err)
	}
	folder := source.NewDir(dir, engine, source.DirOptions{Interval: 50 * time.Millisecond})
	if err := folder.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	var bg sync.WaitGroup
	bg.Add(1)
	go func() { defer bg.Done(); folder.Run(ctx) }()
	srv, err := New(Options{Policy: engine, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())

	deadline := time.Now().Add(*soakDuration)
	var requests, denials atomic.Int64
	errc := make(chan error, 16)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			if err := soakWorker(ts, w, deadline, &requests, &denials); err != nil {
				errc <- err
			}
		}(w)
	}
	heap := churnPolicies(t, dir, examples, deadline)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if requests.Load() == 0 || denials.Load() == 0 {
		t.Errorf("requests %d, denials %d: the soak did not exercise the policy", requests.Load(), denials.Load())
	}
	st := engine.Status()
	if st.Generation < 3 {
		t.Errorf("policy generation %d: the churn did not reach the engine", st.Generation)
	}
	reused := engine.Stats().AnswersReused
	t.Logf("%d requests, %d denials, %d policy generations, %d answers reused in %v; heap samples (bytes) %v", requests.Load(), denials.Load(), st.Generation, reused, *soakDuration, heap)
	if reused == 0 {
		t.Error("no prioritize call took filter's answer: the soak did not exercise reuse and release")
	}
	if len(heap) >= 3 && heap[len(heap)-1] > 3*heap[1]+64<<20 {
		t.Errorf("heap grew from %d to %d bytes", heap[1], heap[len(heap)-1])
	}

	ts.Close()
	cancel()
	bg.Wait()
	engine.Close(context.Background())
	// Goroutines wind down (HTTP keep-alives, the SDK's plugin manager).
	var after int
	for i := 0; i < 50; i++ {
		after = runtime.NumGoroutine()
		if after <= goroutinesBefore+2 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if after > goroutinesBefore+2 {
		buf := make([]byte, 1<<16)
		n := runtime.Stack(buf, true)
		t.Errorf("goroutines: %d before, %d after\n%s", goroutinesBefore, after, buf[:n])
	}
}

func writeNodes(t *testing.T, dir string, round int) {
	t.Helper()
	var b strings.Builder
	for i := 0; i < 40; i++ {
		labels := map[int]string{0: "tenant: alpha", 1: "tenant: beta", 2: "node.kubernetes.io/lifecycle: spot", 3: "topology.kubernetes.io/zone: zone-a"}[(i+round)%5]
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Node\nmetadata:\n  name: node-%d\n  labels:\n    kubernetes.io/hostname: node-%d\n", i, i)
		if labels != "" {
			fmt.Fprintf(&b, "    %s\n", labels)
		}
	}
	write(t, filepath.Join(dir, "nodes.yaml"), []byte(b.String()))
}

func write(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	// Write then rename: the folder source never sees a half-written file
	// here (that case has its own test).
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// soakCall sends one verb and checks its answer: 200, filter's denials
// with a policy's reason, prioritize's scores one per node within 0..10.
func soakCall(client *http.Client, url string, body []byte, nodes int, denials *atomic.Int64) error {
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: %d %s", url, resp.StatusCode, out)
	}
	if strings.HasSuffix(url, "/prioritize") {
		var list extenderv1.HostPriorityList
		if err := json.Unmarshal(out, &list); err != nil || len(list) != nodes {
			return fmt.Errorf("prioritize: %v, %d hosts for %d nodes: %s", err, len(list), nodes, out)
		}
		for _, h := range list {
			if h.Score < extenderv1.MinExtenderPriority || h.Score > extenderv1.MaxExtenderPriority {
				return fmt.Errorf("prioritize: host %s scored %d", h.Host, h.Score)
			}
		}
		return nil
	}
	var res extenderv1.ExtenderFilterResult
	if err := json.Unmarshal(out, &res); err != nil || res.Error != "" {
		return fmt.Errorf("filter: %v %s", err, res.Error)
	}
	for node, msg := range res.FailedAndUnresolvableNodes {
		denials.Add(1)
		if !strings.HasPrefix(msg, "[") || strings.Contains(msg, "eval_") || strings.Contains(msg, "error") {
			return fmt.Errorf("node %s denied for a reason no policy gives: %q", node, msg)
		}
	}
	return nil
}

// churnPolicies changes the policy folder every 100ms until deadline: a
// template, a constraint or the nodes. It returns the live heap sampled
// every 5s.
func churnPolicies(t *testing.T, dir, examples string, deadline time.Time) []uint64 {
	t.Helper()
	var heap []uint64
	for i := 0; time.Now().Before(deadline); i++ {
		switch i % 3 {
		case 0:
			writeNodes(t, dir, i)
		case 1:
			b := mustRead(t, filepath.Join(examples, "tenant-isolation", "template.yaml"))
			write(t, filepath.Join(dir, "tenant-isolation", "template.yaml"), append(b, []byte(fmt.Sprintf("# revision %d\n", i))...))
		case 2:
			b := mustRead(t, filepath.Join(examples, "spot-toleration", "constraint.yaml"))
			b = bytes.Replace(b, []byte("tolerationKey: spot"), []byte(fmt.Sprintf("tolerationKey: spot-%d", i%4)), 1)
			write(t, filepath.Join(dir, "spot-toleration", "constraint.yaml"), b)
		}
		if i%50 == 0 {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			heap = append(heap, ms.HeapAlloc)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return heap
}

// soakWorker sends pods until deadline, each as the scheduler asks:
// filter, then prioritize for the same pod (which takes filter's answer
// while nothing changed, and releases it under the churn).
func soakWorker(ts *httptest.Server, w int, deadline time.Time, requests, denials *atomic.Int64) error {
	client := ts.Client()
	names := make([]string, 40)
	for i := range names {
		names[i] = fmt.Sprintf("node-%d", i)
	}
	for i := 0; time.Now().Before(deadline); i++ {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d-%d", w, i), Namespace: []string{"alpha", "beta", "default"}[i%3], UID: "u", Labels: map[string]string{"prefer-zone": "a"}},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "nginx"}}, HostNetwork: i%5 == 0}}
		body, _ := json.Marshal(extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names})
		for _, verb := range []string{"/filter", "/prioritize"} {
			if err := soakCall(client, ts.URL+verb, body, len(names), denials); err != nil {
				return err
			}
			requests.Add(1)
		}
	}
	return nil
}
