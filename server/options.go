package server

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// Policy is what the handlers need from the policy engine. *opa.Engine
// satisfies it; tests use fakes.
type Policy interface {
	// Evaluate judges the request's candidates for its pod. ctx carries the
	// request deadline (Options.RequestTimeout). It keeps nothing of
	// req.Candidates once it returns: the server reuses the list.
	Evaluate(ctx context.Context, req opa.PlacementRequest) (*opa.Placement, error)
	// Status describes the loaded policy set (/debug/policies, metrics).
	Status() opa.Status
	// Stats returns the engine's counters (metrics, read at scrape time).
	Stats() opa.Stats
}

// Binder binds pods to nodes in a cluster. NewKubeBinder is the
// implementation backed by a Kubernetes client.
type Binder interface {
	// Bind creates the pods/binding subresource of namespace/name with the
	// given UID as precondition. It returns nil when the pod is already
	// bound to node with that UID (a retried bind is not an error).
	Bind(ctx context.Context, namespace, name string, uid types.UID, node string) error
	// GetPod returns the pod, which /bind needs to re-check the chosen node
	// against the current policy (the binding arguments carry only the
	// pod's name, namespace and UID).
	GetPod(ctx context.Context, namespace, name string) (*v1.Pod, error)
}

// ReadinessCheck is one dependency of the service that /readyz waits for,
// by name (shown by /readyz?verbose as "[+]NAME ok").
type ReadinessCheck struct {
	// Name is short and stable, such as "policy-dir" or "cluster-sync".
	Name string
	// Ready reports whether the dependency is ready and, when it is not,
	// what it is waiting for. A ready check may return a note (for
	// example that it answers from a stale state); /readyz shows it as a
	// warning and still answers 200. It is called on every /readyz
	// request and must be cheap and safe for concurrent use.
	Ready func() (ready bool, waitingFor string)
}

func (c ReadinessCheck) valid() error {
	switch {
	case c.Name == "" || strings.ContainsAny(c.Name, " \t\n"):
		return fmt.Errorf("server: readiness check name %q: want a short name without spaces", c.Name)
	case c.Ready == nil:
		return fmt.Errorf("server: readiness check %s has no Ready function", c.Name)
	}
	return nil
}

const (
	// DefaultRequestTimeout is the default Options.RequestTimeout.
	DefaultRequestTimeout = 4 * time.Second

	// DefaultMaxBodyBytes is the default Options.MaxBodyBytes: 64 MiB.
	//
	// A request body is largest when the extender is not nodeCacheCapable
	// and the scheduler sends full Node objects. A Node serialises to 3 to
	// 16 KiB (bench/perf: kubelet-sized Nodes are 9 to 13 KiB), so a cluster
	// of 5000 nodes whose every node is feasible and scored (the worst
	// case: percentageOfNodesToScore 100) sends 5000 nodes of up to about
	// 13 KiB each, plus the pod: 64 MiB. Anything larger is not a
	// scheduler request. Names-only requests are about 45 bytes a node.
	DefaultMaxBodyBytes int64 = 64 << 20

	// DefaultShutdownTimeout is the default ListenConfig.ShutdownTimeout.
	DefaultShutdownTimeout = 10 * time.Second
)

// Options configure a Server. Only Policy is required; zero values of the
// other fields mean their documented defaults.
type Options struct {
	// Policy decides placements. Required.
	Policy Policy

	// Binder binds pods for the /bind verb. Nil means no cluster: /bind
	// answers an ExtenderBindingResult whose Error says "binding is not
	// available: no cluster configured (--kubeconfig)".
	Binder Binder

	// Logger receives the service's logs. Nil means slog.Default().
	Logger *slog.Logger

	// Registry receives the service's metrics (plus the Go and process
	// collectors, unless already registered) and is what /metrics serves.
	// Nil means a new registry.
	Registry *prometheus.Registry

	// RequestTimeout bounds the work done for one scheduler request; the
	// deadline is passed into Policy.Evaluate (and the Binder). It must be
	// below the scheduler's extender httpTimeout (default 5s), or the
	// scheduler gives up before the answer arrives. Zero means
	// DefaultRequestTimeout (4s).
	RequestTimeout time.Duration

	// MaxBodyBytes caps a request body; larger bodies are answered with
	// HTTP 400. Zero means DefaultMaxBodyBytes (64 MiB, sized for 5000 full
	// Node objects; see there).
	MaxBodyBytes int64

	// MaxInFlightBodyBytes is the budget of request-body bytes being
	// handled at once: a request that does not fit waits up to BodyWait,
	// then gets HTTP 429 with Retry-After (the scheduler retries the pod).
	// Zero means a quarter of the process's memory limit (GOMEMLIMIT), at
	// least MaxBodyBytes, or 4 x MaxBodyBytes without a limit. It may not be
	// below MaxBodyBytes.
	MaxInFlightBodyBytes int64
	// BodyWait is how long a request waits for room in that budget. Zero
	// means DefaultBodyWait (1s).
	BodyWait time.Duration

	// DisableDebug turns off /debug/policies and /debug/explain, which are
	// on by default. (A bool whose zero value means "on" cannot be named
	// EnableDebug in an options struct whose zero value is the default.)
	DisableDebug bool

	// EnablePprof mounts net/http/pprof under /debug/pprof/. Off by
	// default; independent of DisableDebug.
	EnablePprof bool

	// ReadinessChecks must all be ready for /readyz to answer 200. More can
	// be added later with Server.AddReadinessCheck.
	ReadinessChecks []ReadinessCheck

	// OnRejected, if set, is told of every pod that filter denied on at
	// least one node (the requeue nudge uses it). It must not block.
	OnRejected func(namespace, name string, uid types.UID)

	// DebugSources add the status of policy sources to /debug/policies.
	DebugSources []func() any

	// EnforcementPoint is the name the engine answers to in scoped
	// enforcement actions; the server reports it (explain answers, the
	// opa_scheduler_extender_info metric, the startup log) and does not
	// otherwise use it: the engine is configured with it separately.
	// Empty means opa.DefaultEnforcementPoint.
	EnforcementPoint string

	// Decisions are where decision records go, each output with its own
	// level (default: none recorded).
	Decisions []DecisionOutput

	// Build names the binary serving, for the opa_scheduler_extender_build_info
	// metric (empty fields are reported as "unknown").
	Build BuildInfo
}

// BuildInfo is what the build_info metric says of the binary.
type BuildInfo struct {
	Version, Revision, GoVersion string
}
