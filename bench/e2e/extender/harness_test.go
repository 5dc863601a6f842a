package extender_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	configv1 "k8s.io/kube-scheduler/config/v1"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/cluster"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/harness"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/source"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/server"
)

// service is the extender running in the test process against the test
// cluster, exactly as cmd/opa-scheduler-extender wires it.
type service struct {
	URL     string
	Engine  *opa.Engine
	Cluster *source.Cluster
	Nudger  *source.Nudger
	stop    context.CancelFunc
	done    chan error
	once    sync.Once
}

type serviceOptions struct {
	// Config is the identity the service uses (default: admin).
	Config *rest.Config
	// NoNudge turns the requeue nudge off.
	NoNudge bool
	// Addr to listen on (default: a free loopback port).
	Addr string
}

func startService(t *testing.T, c *cluster.Cluster, opts serviceOptions) *service {
	t.Helper()
	cfg := opts.Config
	if cfg == nil {
		cfg = c.RESTConfig()
	}
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	engine, err := opa.New(ctx, opa.Options{Logger: log.With("component", "engine")})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	src, err := source.NewCluster(engine, source.ClusterOptions{Config: cfg, Logger: log.With("component", "cluster"), ConstraintGrace: 5 * time.Second})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	go src.Run(ctx)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &service{Engine: engine, Cluster: src, stop: cancel, done: make(chan error, 1)}
	sopts := server.Options{
		Policy:          engine,
		Binder:          server.NewKubeBinder(client, 5*time.Second),
		Logger:          log.With("component", "server"),
		ReadinessChecks: []server.ReadinessCheck{{Name: "cluster-sync", Ready: src.Ready}},
	}
	if !opts.NoNudge {
		s.Nudger = source.NewNudger(client, engine, log.With("component", "nudge"))
		sopts.OnRejected = s.Nudger.Rejected
		go s.Nudger.Run(ctx)
	}
	srv, err := server.New(sopts)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s.URL = "http://" + ln.Addr().String()
	go func() { s.done <- srv.ServeListener(ctx, ln, server.ListenConfig{ShutdownTimeout: 2 * time.Second}) }()
	t.Cleanup(s.Stop)
	if err := waitReady(s.URL, 60*time.Second); err != nil {
		t.Fatalf("service not ready: %v", err)
	}
	return s
}

// Stop shuts the service down (idempotent).
func (s *service) Stop() {
	s.once.Do(func() {
		s.stop()
		<-s.done
		s.Engine.Close(context.Background())
	})
}

func waitReady(url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		resp, err := http.Get(url + "/readyz?verbose")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
			last = string(b)
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.New(last)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// extender is the scheduler's configuration of the service.
func extender(url string, nodeCacheCapable, bind bool) configv1.Extender {
	e := configv1.Extender{
		URLPrefix:        url,
		FilterVerb:       "filter",
		PrioritizeVerb:   "prioritize",
		PreemptVerb:      "preempt",
		Weight:           10,
		NodeCacheCapable: nodeCacheCapable,
		HTTPTimeout:      metav1.Duration{Duration: 5 * time.Second},
		Ignorable:        false,
	}
	if bind {
		e.BindVerb = "bind"
	}
	return e
}

// fastRetries makes unschedulable pods come back quickly, so that tests of
// "the pod is scheduled once the policy allows it" do not wait minutes for
// the scheduler's own timer; the nudge test turns this off.
var fastRetries = map[string]any{"podInitialBackoffSeconds": 1, "podMaxBackoffSeconds": 1}

func withLabels(p *corev1.Pod, labels map[string]string) *corev1.Pod {
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	for k, v := range labels {
		p.Labels[k] = v
	}
	return p
}

func gvrOf(u *unstructured.Unstructured, resource string) schema.GroupVersionResource {
	gvk := u.GroupVersionKind()
	return schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: resource}
}

// newCluster starts a control plane with Gatekeeper's CRDs installed.
func newCluster(t *testing.T) *cluster.Cluster {
	t.Helper()
	mustEnv(t)
	c := cluster.Start(t, cluster.Options{})
	if err := c.InstallGatekeeperCRDs(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

// newTenantCluster adds the tenant-isolation example policy, namespace
// alpha (tenant=alpha) and the given nodes.
func newTenantCluster(t *testing.T, nodes map[string]map[string]string) *cluster.Cluster {
	t.Helper()
	c := newCluster(t)
	harness.CreateNamespace(t, c, "alpha", map[string]string{"tenant": "alpha"})
	harness.CreateNodes(t, c, nodes)
	tenantT, tenantC := harness.ExamplePolicy(t, "tenant-isolation")
	harness.InstallPolicy(t, c, tenantT, tenantC)
	return c
}

func mustEnv(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(harness.RepoRoot, "deploy", "examples")); err != nil {
		t.Fatalf("the repository's deploy/examples is missing: %v", err)
	}
}

var _ = fmt.Sprintf
