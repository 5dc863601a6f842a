package opa_test

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// receiver is an OPA control plane's two endpoints: decision logs
// (gzip'd JSON arrays) and status reports.
type receiver struct {
	mu     sync.Mutex
	events []map[string]any
	status []map[string]any
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		z, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		body = z
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch req.URL.Path {
	case "/logs":
		var batch []map[string]any
		if err := json.NewDecoder(body).Decode(&batch); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		r.events = append(r.events, batch...)
	case "/status":
		var s map[string]any
		_ = json.NewDecoder(body).Decode(&s)
		r.status = append(r.status, s)
	}
	w.WriteHeader(http.StatusOK)
}

func (r *receiver) counts() (int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events), len(r.status)
}

func TestOPAConfigReportsToAControlPlane(t *testing.T) {
	recv := &receiver{}
	ts := httptest.NewServer(recv)
	defer ts.Close()
	config := `
services:
  control-plane:
    url: ` + ts.URL + `
labels: {cluster: test}
decision_logs:
  service: control-plane
  reporting: {min_delay_seconds: 1, max_delay_seconds: 1}
status:
  service: control-plane
`
	ctx := context.Background()
	e, err := opa.New(ctx, opa.Options{OPAConfig: []byte(config)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	if !e.DecisionLogging() {
		t.Fatal("decision logging is off with a decision_logs section")
	}
	input := map[string]any{"verb": "filter", "pod": map[string]any{"namespace": "ns", "name": "p"}}
	result := map[string]any{"rejected": 2, "constraints": []any{map[string]any{"constraint": "K8sX/x", "action": "deny"}}}
	if err := e.LogDecision(ctx, "opa_scheduler_extender/filter", input, result); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		events, status := recv.counts()
		if events > 0 && status > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 15s the control plane has %d decisions and %d status reports", events, status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	ev, _ := json.Marshal(recv.events[0])
	for _, want := range []string{`"path":"opa_scheduler_extender/filter"`, `"cluster":"test"`, `"decision_id":"`, `"rejected":2`, `"name":"p"`} {
		if !strings.Contains(string(ev), want) {
			t.Errorf("decision event lacks %s: %s", want, ev)
		}
	}
}

func TestOPAConfigRefusals(t *testing.T) {
	ctx := context.Background()
	for config, want := range map[string]string{
		"bundles: {x: {service: s, resource: b.tar.gz}}": `"bundles" is not supported`,
		"discovery: {service: s}":                        `"discovery" is not supported`,
		"services: [":                                    "OPA configuration",
	} {
		if _, err := opa.New(ctx, opa.Options{OPAConfig: []byte(config)}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config %q: error %v, want %q", config, err, want)
		}
	}
	e, err := opa.New(ctx, opa.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	if e.DecisionLogging() || e.LogDecision(ctx, "x", nil, nil) != nil {
		t.Error("without a configuration decisions are neither logged nor refused")
	}
}
