package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestServeReportsDecisions runs serve on the example policies with
// --log-decisions and an OPA configuration pointing at a local control
// plane: a filter call shows up in both.
func TestServeReportsDecisions(t *testing.T) {
	var mu sync.Mutex
	var events []map[string]any
	cp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/logs" {
			z, err := gzip.NewReader(r.Body)
			if err == nil {
				var batch []map[string]any
				if json.NewDecoder(z).Decode(&batch) == nil {
					mu.Lock()
					events = append(events, batch...)
					mu.Unlock()
				}
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer cp.Close()
	config := filepath.Join(t.TempDir(), "opa.yaml")
	if err := os.WriteFile(config, []byte("services: {cp: {url: "+cp.URL+"}}\ndecision_logs: {service: cp, reporting: {min_delay_seconds: 1, max_delay_seconds: 1}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	ctx, cancel := context.WithCancel(context.Background())
	var logs syncBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"serve", "--no-cluster", "--policy-dir", filepath.Join("..", "..", "deploy", "examples"), "--listen", addr,
			"--log-decisions", "deny", "--log-format", "json", "--opa-config", config}, &bytes.Buffer{}, &logs)
	}()
	defer func() { cancel(); <-done }()

	body := `{"Pod":{"metadata":{"name":"web-1","namespace":"alpha","uid":"u1"},"spec":{"containers":[{"name":"web","image":"nginx"}]}},"NodeNames":["alpha-1","beta-1"]}`
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Post("http://"+addr+"/filter", "application/json", strings.NewReader(body))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service did not answer: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for {
		mu.Lock()
		n := len(events)
		mu.Unlock()
		if n > 0 && strings.Contains(logs.String(), `"msg":"decision"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s: %d decision-log events; log:\n%s", n, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	ev, _ := json.Marshal(events[0])
	mu.Unlock()
	for _, want := range []string{`"path":"opa_scheduler_extender/filter"`, `"pod":"alpha/web-1"`, `K8sTenantNodeIsolation`} {
		if !strings.Contains(string(ev), want) {
			t.Errorf("decision-log event lacks %s: %s", want, ev)
		}
	}
	if !strings.Contains(logs.String(), `"sampleNode":"beta-1"`) {
		t.Errorf("the log's decision record lacks the denied node:\n%s", logs.String())
	}
}

// syncBuffer is a bytes.Buffer safe for the logger and the test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
