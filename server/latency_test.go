package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/source"
)

// BenchmarkPolicyChangeLatencyFolder measures the time from writing a
// constraint change into the policy folder to the first filter answer
// that reflects it (the folder is scanned every 250ms, the default).
// ns/op is that latency.
func BenchmarkPolicyChangeLatencyFolder(b *testing.B) {
	dir := b.TempDir()
	examples := filepath.Join("..", "deploy", "examples")
	for _, f := range []string{"template.yaml", "constraint.yaml"} {
		write(b, filepath.Join(dir, "tenant", f), mustRead(b, filepath.Join(examples, "tenant-isolation", f)))
	}
	write(b, filepath.Join(dir, "inventory.yaml"), []byte(`apiVersion: v1
kind: Namespace
metadata: {name: alpha, labels: {tenant: alpha}}
---
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {tenant: alpha}}
---
apiVersion: v1
kind: Node
metadata: {name: n2, labels: {team: alpha}}
`))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	engine, err := opa.New(ctx, opa.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer engine.Close(context.Background())
	folder := source.NewDir(dir, engine, source.DirOptions{})
	go folder.Run(ctx)
	srv, err := New(Options{Policy: engine, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	names := []string{"n1", "n2"}
	body, _ := json.Marshal(extenderv1.ExtenderArgs{Pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "alpha"}}, NodeNames: &names})
	passing := func() int {
		resp, err := ts.Client().Post(ts.URL+"/filter", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		var res extenderv1.ExtenderFilterResult
		_ = json.NewDecoder(resp.Body).Decode(&res)
		if res.NodeNames == nil {
			return -1
		}
		return len(*res.NodeNames)
	}
	constraint := mustRead(b, filepath.Join(examples, "tenant-isolation", "constraint.yaml"))
	for passing() != 1 {
		time.Sleep(10 * time.Millisecond)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Alternate the tenant label key. With "tenant", alpha's pods may
		// use n1 only; with "team" (alpha has no team label), n2 is
		// reserved for team alpha and n1 is free: one node passes either
		// way, a different one.
		key := []string{"team", "tenant"}[i%2]
		c := bytes.Replace(constraint, []byte("labelKey: tenant"), []byte("labelKey: "+key), 1)
		gen := engine.Stats().PolicyGeneration
		start := time.Now()
		write(b, filepath.Join(dir, "tenant", "constraint.yaml"), c)
		// The generation moves when the new snapshot is installed; every
		// filter answered after that uses it.
		for engine.Stats().PolicyGeneration == gen || passing() != 1 {
			if time.Since(start) > 5*time.Second {
				b.Fatalf("change %d not visible after 5s", i)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
}
