package server

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// TestRejectionLogLevel: a filter call that denies nodes logs them at
// debug level only (denials are the policies at work); one that meets
// nodes the service does not know logs at info level.
func TestRejectionLogLevel(t *testing.T) {
	cases := []struct {
		name  string
		level slog.Level
		nodes []string
		want  string // the record's level, "" for none
	}{
		{"denied, info", slog.LevelInfo, []string{"good-1", "bad-1"}, ""},
		{"denied, debug", slog.LevelDebug, []string{"good-1", "bad-1"}, "level=DEBUG"},
		{"unknown, info", slog.LevelInfo, []string{"good-1", "bad-1", "ghost-1"}, "level=INFO"},
		{"all pass, debug", slog.LevelDebug, []string{"good-1"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			s, _ := newTestServer(t, Options{Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: tc.level}))})
			body := mustJSON(t, extenderv1.ExtenderArgs{Pod: testPod("ns", "p"), NodeNames: names(tc.nodes...)})
			if rec := do(t, s.Handler(), http.MethodPost, "/filter", body); rec.Code != http.StatusOK {
				t.Fatalf("filter: %d %s", rec.Code, rec.Body)
			}
			var got string
			for _, line := range strings.Split(buf.String(), "\n") {
				if strings.Contains(line, `msg="pod rejected on some nodes"`) {
					got = strings.Fields(line)[1]
					if !strings.Contains(line, "bad-1: ") {
						t.Errorf("the record has no sample denial: %s", line)
					}
				}
			}
			if got != tc.want {
				t.Errorf("record %q, want %q; log:\n%s", got, tc.want, buf.String())
			}
		})
	}
}
