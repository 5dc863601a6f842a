package server

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// FuzzVerbs sends arbitrary bodies to every verb's decoder: the answer is
// always 200, 400 or 500 with a JSON body, never a panic (the recoverer
// would count it) and never a hang.
func FuzzVerbs(f *testing.F) {
	for _, seed := range []string{
		`{"Pod":{"metadata":{"name":"p","namespace":"default","uid":"u"}},"NodeNames":["good-1","bad-1","ghost-1"]}`,
		`{"Pod":{"metadata":{"name":"p","namespace":"default"}},"Nodes":{"items":[{"metadata":{"name":"good-1"}}]}}`,
		`{"Pod":{"metadata":{"name":"p","namespace":"default"}},"NodeNameToMetaVictims":{"good-1":{"Pods":[{"UID":"v"}]}}}`,
		`{"PodName":"p","PodNamespace":"default","PodUID":"u","Node":"good-1"}`,
		`{"Pod":null}`, `[]`, `{"NodeNames":"x"}`, `{`, ``,
	} {
		for _, verb := range []string{"/filter", "/prioritize", "/preempt", "/bind", "/debug/explain"} {
			f.Add(verb, []byte(seed))
		}
	}
	s, err := New(Options{Policy: &fakePolicy{}, Binder: &fakeBinder{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxBodyBytes: 1 << 16})
	if err != nil {
		f.Fatal(err)
	}
	h := s.Handler()
	f.Fuzz(func(t *testing.T, verb string, body []byte) {
		switch verb {
		case "/filter", "/prioritize", "/preempt", "/bind", "/debug/explain":
		default:
			return
		}
		req := httptest.NewRequest(http.MethodPost, verb, strings.NewReader(string(body)))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusInternalServerError:
		default:
			t.Fatalf("%s: status %d", verb, rec.Code)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%s: body is not JSON: %q", verb, rec.Body.String())
		}
		if n := testutil.ToFloat64(s.metrics.panics); n != 0 {
			t.Fatalf("%s: a handler panicked on %q", verb, body)
		}
	})
}
