package server

import (
	"fmt"
	"io"
	"net/http"
	"strings"
)

func writeText(w http.ResponseWriter, status int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// handleLivez answers /livez and /healthz: the process serves HTTP.
func (s *Server) handleLivez(w http.ResponseWriter, _ *http.Request) {
	writeText(w, http.StatusOK, "ok\n")
}

// handleReadyz answers 200 when every ReadinessCheck is ready, else 503
// naming what it waits for. With ?verbose every check is listed, in
// registration order, as "[+]NAME ok" or "[-]NAME waiting for: ...".
func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	s.checksMu.RLock()
	checks := s.checks[:len(s.checks):len(s.checks)]
	s.checksMu.RUnlock()

	verbose := r.URL.Query().Has("verbose")
	var (
		waiting []string
		notes   []string
		lines   strings.Builder
	)
	for _, check := range checks {
		ready, what := check.Ready()
		if ready {
			// A ready check may still say something worth knowing, such
			// as "answering from a stale cluster state since ...".
			if what != "" {
				notes = append(notes, what)
			}
			if verbose && what != "" {
				fmt.Fprintf(&lines, "[+]%s ok: %s\n", check.Name, what)
			} else if verbose {
				fmt.Fprintf(&lines, "[+]%s ok\n", check.Name)
			}
			continue
		}
		if what == "" {
			what = check.Name
		}
		waiting = append(waiting, what)
		if verbose {
			fmt.Fprintf(&lines, "[-]%s waiting for: %s\n", check.Name, what)
		}
	}
	// The policy set's health is always ready (see policyhealth.go); what
	// it says is a warning.
	if _, what := s.policyHealth(); what != "" {
		notes = append(notes, what)
		if verbose {
			fmt.Fprintf(&lines, "[+]policies ok: %s\n", what)
		}
	} else if verbose {
		lines.WriteString("[+]policies ok\n")
	}
	if len(waiting) == 0 {
		if verbose {
			lines.WriteString("readyz check passed\n")
			writeText(w, http.StatusOK, lines.String())
			return
		}
		body := "ok\n"
		for _, n := range notes {
			body += "warning: " + n + "\n"
		}
		writeText(w, http.StatusOK, body)
		return
	}
	if verbose {
		lines.WriteString("readyz check failed\n")
		writeText(w, http.StatusServiceUnavailable, lines.String())
		return
	}
	writeText(w, http.StatusServiceUnavailable, "not ready: waiting for "+strings.Join(waiting, ", ")+"\n")
}
