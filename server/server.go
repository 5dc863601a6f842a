package server

import (
	"k8s.io/apimachinery/pkg/types"
	"strconv"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"runtime/debug"
	"runtime/trace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// Server answers the scheduler's extender calls. Create it with New; it is
// safe for concurrent use.
type Server struct {
	policy Policy
	// pods decodes the requests' pods, remembering the last ones.
	pods             *opa.PodDecoder
	binder           Binder
	log              *slog.Logger
	registry         *prometheus.Registry
	requestTimeout   time.Duration
	maxBodyBytes     int64
	bodies           *bodyBudget
	bodyWait         time.Duration
	debug            bool
	pprof            bool
	enforcementPoint string
	onRejected       func(namespace, name string, uid types.UID)
	debugSources     []func() any

	metrics *metrics
	handler http.Handler

	// clientCertRequired is set when serving with a client CA.
	clientCertRequired atomic.Bool

	checksMu sync.RWMutex
	// policyHealth reports templates and constraints not in force.
	policyHealth  func() (bool, string)
	decisionLevel DecisionLevel // the highest of the outputs'
	decisions     []DecisionOutput
	checks        []ReadinessCheck
}

// New checks the options, registers the metrics and builds the router.
func New(opts Options) (*Server, error) {
	if opts.Policy == nil {
		return nil, errors.New("server: Options.Policy is required")
	}
	if opts.RequestTimeout < 0 {
		return nil, fmt.Errorf("server: Options.RequestTimeout is negative (%v)", opts.RequestTimeout)
	}
	if opts.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("server: Options.MaxBodyBytes is negative (%d)", opts.MaxBodyBytes)
	}
	if opts.MaxInFlightBodyBytes < 0 || opts.BodyWait < 0 {
		return nil, fmt.Errorf("server: Options.MaxInFlightBodyBytes (%d) and BodyWait (%v) must not be negative", opts.MaxInFlightBodyBytes, opts.BodyWait)
	}
	s := &Server{
		policy:           opts.Policy,
		pods:             opa.NewPodDecoder(),
		binder:           opts.Binder,
		log:              opts.Logger,
		registry:         opts.Registry,
		requestTimeout:   opts.RequestTimeout,
		maxBodyBytes:     opts.MaxBodyBytes,
		bodyWait:         opts.BodyWait,
		debug:            !opts.DisableDebug,
		pprof:            opts.EnablePprof,
		enforcementPoint: opts.EnforcementPoint,
		onRejected:       opts.OnRejected,
		debugSources:     opts.DebugSources,
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.registry == nil {
		s.registry = prometheus.NewRegistry()
	}
	if s.requestTimeout == 0 {
		s.requestTimeout = DefaultRequestTimeout
	}
	if s.maxBodyBytes == 0 {
		s.maxBodyBytes = DefaultMaxBodyBytes
	}
	budget := opts.MaxInFlightBodyBytes
	if budget == 0 {
		budget = defaultBodyBudget(s.maxBodyBytes)
	}
	if budget < s.maxBodyBytes {
		return nil, fmt.Errorf("server: Options.MaxInFlightBodyBytes (%d) is below MaxBodyBytes (%d): the largest request could never be served", budget, s.maxBodyBytes)
	}
	s.bodies = newBodyBudget(budget)
	if s.bodyWait == 0 {
		s.bodyWait = DefaultBodyWait
	}
	if s.enforcementPoint == "" {
		s.enforcementPoint = opa.DefaultEnforcementPoint
	}
	for _, c := range opts.ReadinessChecks {
		if err := c.valid(); err != nil {
			return nil, err
		}
		s.checks = append(s.checks, c)
	}
	s.policyHealth = policyHealth(s.policy)
	for _, out := range opts.Decisions {
		if out.Sink == nil {
			return nil, errors.New("server: a decision output has no sink")
		}
		if out.Level > DecisionsOff {
			s.decisions = append(s.decisions, out)
			s.decisionLevel = max(s.decisionLevel, out.Level)
		}
	}
	m, err := newMetrics(s.registry, s.policy, s.enforcementPoint, opts.Build)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	s.handler = s.routes()
	return s, nil
}

// Handler returns the service's HTTP handler (a chi router). The extender
// verbs are at the root (/filter, ...): set the scheduler's urlPrefix to
// this server's base URL, or mount the handler under a prefix with
// http.StripPrefix.
func (s *Server) Handler() http.Handler { return s.handler }

// AddReadinessCheck registers one more check for /readyz.
func (s *Server) AddReadinessCheck(c ReadinessCheck) error {
	if err := c.valid(); err != nil {
		return err
	}
	s.checksMu.Lock()
	s.checks = append(s.checks, c)
	s.checksMu.Unlock()
	return nil
}

func (s *Server) routes() http.Handler {
	r := chi.NewRouter()
	r.Use(s.recoverer)

	// Probes and metrics are open: the kubelet and Prometheus present no
	// client certificate. Everything else needs one when a client CA is
	// configured.
	r.Get("/livez", s.handleLivez)
	r.Get("/healthz", s.handleLivez)
	r.Get("/readyz", s.handleReadyz)
	r.Method(http.MethodGet, "/metrics", promhttp.InstrumentMetricHandler(
		s.registry,
		promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{
			ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelError),
			ErrorHandling: promhttp.ContinueOnError,
		}),
	))

	r.Group(func(r chi.Router) {
		r.Use(s.requireClientCert, s.limitBodies)
		s.protectedRoutes(r)
	})
	return r
}

// requireClientCert refuses requests without a verified client
// certificate when the server runs with a client CA.
func (s *Server) requireClientCert(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.clientCertRequired.Load() && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
			s.log.WarnContext(r.Context(), "request without a verified client certificate refused", "path", r.URL.Path, "remote", r.RemoteAddr)
			writeJSON(w, http.StatusUnauthorized, errorBody{Error: "a client certificate signed by the configured client CA is required"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) protectedRoutes(r chi.Router) {
	// Extender verbs. They check the method themselves so that a wrong
	// method gets a 405 with Allow: POST and a JSON Error body.
	r.HandleFunc("/filter", s.handleFilter)
	r.HandleFunc("/prioritize", s.handlePrioritize)
	r.HandleFunc("/preempt", s.handlePreempt)
	r.HandleFunc("/bind", s.handleBind)

	if s.debug {
		r.Get("/debug/policies", s.handlePolicies)
		r.HandleFunc("/debug/explain", s.handleExplain)
	}
	if s.pprof {
		r.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		r.HandleFunc("/debug/pprof/profile", pprof.Profile)
		r.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		r.HandleFunc("/debug/pprof/trace", pprof.Trace)
		r.HandleFunc("/debug/pprof/*", pprof.Index) // index and named profiles
	}
}

// errorBody is the answer shape for failures of verbs whose result type has
// no Error field (prioritize), of the 405 answers and of recovered panics.
type errorBody struct {
	Error string
}

// recoverer turns a handler panic into a 500 with a JSON Error body and a
// log line with the stack. http.ErrAbortHandler is re-panicked, as net/http
// expects (it aborts the response and the server recovers it silently).
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if p == http.ErrAbortHandler { //nolint:errorlint // sentinel compared as net/http does
				panic(p)
			}
			s.metrics.panics.Inc()
			s.log.ErrorContext(r.Context(), "panic in handler",
				"method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			writeJSON(w, http.StatusInternalServerError, errorBody{Error: fmt.Sprintf("internal error: panic: %v", p)})
		}()
		next.ServeHTTP(w, r)
	})
}

// jsonAppender is an answer that writes its own JSON (see filterAnswer),
// handing what it has appended to s between entries (answerSpill).
type jsonAppender interface {
	appendJSON(b []byte, s *answerSpill) ([]byte, error)
}

// pooledAnswer is a jsonAppender with buffers of its own kind: a filter
// answer at 5000 candidates is several times a prioritize answer, and
// sharing one pool grew the buffers again and again.
type pooledAnswer interface {
	buffers() *answerPool
}

// maxPooledAnswer keeps full-node answers (megabytes) out of the pool.
const maxPooledAnswer = 4 << 20

// writeJSON writes v as the JSON answer with the given status. An answer
// that writes its own JSON goes out in one piece with its length, or, past
// spillAnswerAt bytes, in pieces of about that size (chunked): a filter
// answer that denies 5000 nodes with the pod's own violations is megabytes
// of the same message, and building it whole cost every such call a new
// buffer of that size. Other values go through encoding/json.
func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	// The values are shared by every answer (Header.Set would make two
	// slices per call); net/http copies a header when it is written and
	// never changes the values it is given.
	h["Content-Type"], h["X-Content-Type-Options"] = jsonContentType, noSniff
	if a, ok := v.(jsonAppender); ok {
		pool := &answerBuffers
		if pa, ok := v.(pooledAnswer); ok {
			pool = pa.buffers()
		}
		bp := pool.get()
		spill := &answerSpill{w: w, status: status, at: spillAnswerAt}
		b, err := a.appendJSON((*bp)[:0], spill)
		if err == nil || spill.started {
			if err == nil {
				if !spill.started {
					// A known length: the answer goes out in one piece, not chunked.
					h.Set("Content-Length", strconv.Itoa(len(b)))
					w.WriteHeader(status)
				}
				_, _ = w.Write(b) // the client went away; nothing to do
			}
			// An error after part of the answer went out (none of the
			// appenders fails past its first bytes) leaves the body cut
			// short, which the client reads as a failed call.
			*bp = b
			pool.put(bp, len(b))
			return
		}
		pool.put(bp, 0)
		status, v = http.StatusInternalServerError, errorBody{Error: fmt.Sprintf("encode answer: %v", err)}
	}
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client went away; nothing to do
}

var (
	jsonContentType = []string{"application/json"}
	noSniff         = []string{"nosniff"}
)

// spillAnswerAt is the answer length past which an answer is sent in
// pieces: a filter answer for 5000 candidates that denies few of them is
// about 700 KB and keeps its Content-Length.
const spillAnswerAt = 1 << 20

// answerSpill sends an answer's bytes as they are appended once they
// pass at: the status and headers first (without Content-Length), then
// each piece. A nil answerSpill never sends (the answer is built whole).
type answerSpill struct {
	w       http.ResponseWriter
	status  int
	at      int
	started bool
}

// check is called between an answer's entries: past s.at, b is sent and
// its buffer given back empty to append the rest to.
func (s *answerSpill) check(b []byte) []byte {
	if s == nil || len(b) < s.at {
		return b
	}
	if !s.started {
		s.started = true
		s.w.WriteHeader(s.status)
	}
	_, _ = s.w.Write(b) // the client went away: the rest is written for nothing, and the call ends
	return b[:0]
}

// requestError is a failure answered to the client: Status 400 for client
// faults, 500 for engine failures, 200 for results the scheduler must see
// verbatim (bind refused).
type requestError struct {
	Status int
	Msg    string
}

func (e *requestError) Error() string { return e.Msg }

func badRequest(format string, args ...any) *requestError {
	return &requestError{Status: http.StatusBadRequest, Msg: fmt.Sprintf(format, args...)}
}

func internalError(format string, args ...any) *requestError {
	return &requestError{Status: http.StatusInternalServerError, Msg: fmt.Sprintf(format, args...)}
}

// decodeBody decodes exactly one JSON value of v's type from the request
// body, capped at maxBodyBytes. Unknown fields are allowed (newer
// schedulers may send more); everything else that is not one well-typed
// JSON value is a client fault.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any, what string) *requestError {
	if r.Body == nil || r.Body == http.NoBody {
		return badRequest("empty request body: expected a JSON %s", what)
	}
	return s.decodeFrom(http.MaxBytesReader(w, r.Body, s.maxBodyBytes), v, what)
}

// decodeFrom is decodeBody's reading of a body.
func (s *Server) decodeFrom(body io.Reader, v any, what string) *requestError {
	dec := json.NewDecoder(body)
	if err := dec.Decode(v); err != nil {
		return s.describeDecodeError(err, what)
	}
	// Only whitespace may follow the value.
	if tok, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return s.describeDecodeError(err, what)
		}
		if err != nil {
			return badRequest("invalid data after the JSON %s: %v", what, err)
		}
		return badRequest("unexpected data after the JSON %s (starting with %v)", what, tok)
	}
	return nil
}

func (s *Server) describeDecodeError(err error, what string) *requestError {
	var (
		mbe *http.MaxBytesError
		se  *json.SyntaxError
		te  *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &mbe):
		return badRequest("request body exceeds %d bytes (MaxBodyBytes)", mbe.Limit)
	case errors.Is(err, io.EOF):
		return badRequest("empty request body: expected a JSON %s", what)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("truncated JSON %s", what)
	case errors.As(err, &se):
		return badRequest("malformed JSON %s at byte %d: %v", what, se.Offset, se)
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "(top level)"
		}
		return badRequest("wrong type in JSON %s: field %s is a JSON %s, want %v", what, field, te.Value, te.Type)
	default:
		return badRequest("cannot decode JSON %s: %v", what, err)
	}
}

// requireMethod answers 405 unless r uses method.
func requireMethod(w http.ResponseWriter, r *http.Request, method string) bool {
	if r.Method == method {
		return true
	}
	w.Header().Set("Allow", method)
	writeJSON(w, http.StatusMethodNotAllowed,
		errorBody{Error: fmt.Sprintf("method %s not allowed on %s: use %s", r.Method, r.URL.Path, method)})
	return false
}

// verbCall carries what one extender call learned, for logs and metrics.
type verbCall struct {
	verb     string
	start    time.Time
	region   *trace.Region
	pod      string
	nodes    int
	rejected int
	// for the decision record
	uid       string
	names     []string // the candidates, in the placement's order
	placement *opa.Placement
	// nameLists hold the request's node names (nodenames.go), and
	// releaseBody the request's body buffer, given back when the handler
	// returns (releaseRequest).
	nameLists   *nameBuffers
	releaseBody func()
}

// releaseRequest gives back what placeArgs took for the request.
func (c *verbCall) releaseRequest() {
	c.nameLists.release()
	if c.releaseBody != nil {
		c.releaseBody()
	}
}

// finish writes the answer, records the duration and logs. A requestError
// becomes errBody(msg) with its status, unless body is already set (bind
// answers its own result type with Error filled in).
func (s *Server) finish(w http.ResponseWriter, r *http.Request, c *verbCall, body any, rerr *requestError, errBody func(string) any) {
	status := http.StatusOK
	result := resultOK
	msg := ""
	if rerr != nil {
		status, msg = rerr.Status, rerr.Msg
		if body == nil {
			body = errBody(msg)
		}
		if status == http.StatusBadRequest {
			result = resultBadRequest
		} else {
			result = resultError
		}
	}
	writeJSON(w, status, body)
	d := time.Since(c.start)
	s.metrics.observe(c.verb, result, d)
	if rerr == nil || rerr.Status == http.StatusOK { // a refused bind is a decision too
		if rec, ok := s.decisionLevel.decision(c); ok {
			for _, out := range s.decisions {
				if d, ok := out.Level.filter(rec); ok {
					out.Sink(r.Context(), d)
				}
			}
		}
	}

	ctx := r.Context()
	switch {
	case status >= 500:
		s.log.ErrorContext(ctx, "extender request failed",
			"verb", c.verb, "pod", c.pod, "status", status, "error", msg, "duration", d)
	case status >= 400:
		s.log.WarnContext(ctx, "bad extender request",
			"verb", c.verb, "pod", c.pod, "status", status, "error", msg, "remote", r.RemoteAddr, "duration", d)
	case msg != "":
		s.log.WarnContext(ctx, "extender request answered with an error",
			"verb", c.verb, "pod", c.pod, "error", msg, "duration", d)
	default:
		if s.log.Enabled(ctx, slog.LevelDebug) {
			s.log.DebugContext(ctx, "extender request",
				"verb", c.verb, "pod", c.pod, "nodes", c.nodes, "rejected", c.rejected, "duration", d)
		}
	}
}

// withTimeout derives the request's evaluation context (callContext: its
// timer is made only if an evaluation waits on it).
func (s *Server) withTimeout(r *http.Request) (context.Context, context.CancelFunc) {
	return newCallContext(r.Context(), s.requestTimeout)
}

// evaluate calls the policy and checks the answer's shape; errors are
// engine failures (500).
func (s *Server) evaluate(ctx context.Context, req opa.PlacementRequest) (*opa.Placement, *requestError) {
	p, err := s.policy.Evaluate(ctx, req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			return nil, internalError("policy evaluation did not finish within the request timeout (%v): %v", s.requestTimeout, err)
		}
		return nil, internalError("policy evaluation failed: %v", err)
	}
	if p == nil {
		return nil, internalError("policy evaluation failed: the engine returned no placement")
	}
	if len(p.Nodes) != len(req.Candidates) {
		return nil, internalError("policy evaluation failed: the engine returned %d verdicts for %d candidate nodes",
			len(p.Nodes), len(req.Candidates))
	}
	return p, nil
}
