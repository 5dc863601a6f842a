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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	configv1 "k8s.io/kube-scheduler/config/v1"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/cluster"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/source"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/server"
)

// repoRoot is the main module, two levels up.
var repoRoot = filepath.Join("..", "..", "..")

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
		ReadinessChecks: []server.ReadinessCheck{src.Ready},
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

// readObjects reads a YAML file of the repository.
func readObjects(t *testing.T, rel string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := source.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// installPolicy creates a template (and its constraint CRD, as Gatekeeper
// would) and constraints through the API.
func installPolicy(t *testing.T, c *cluster.Cluster, template *unstructured.Unstructured, constraints ...*unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	if err := c.CreateConstraintCRDForTemplate(ctx, template); err != nil {
		t.Fatalf("constraint CRD: %v", err)
	}
	if _, err := c.Dynamic().Resource(cluster.ConstraintTemplateGVR).Create(ctx, template, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create template %s: %v", template.GetName(), err)
	}
	for _, con := range constraints {
		createConstraint(t, c, con)
	}
}

func createConstraint(t *testing.T, c *cluster.Cluster, con *unstructured.Unstructured) {
	t.Helper()
	gvr := cluster.ConstraintGVR(con.GetKind())
	if _, err := c.Dynamic().Resource(gvr).Create(context.Background(), con, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create constraint %s: %v", con.GetName(), err)
	}
}

func deleteConstraint(t *testing.T, c *cluster.Cluster, kind, name string) {
	t.Helper()
	if err := c.Dynamic().Resource(cluster.ConstraintGVR(kind)).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete constraint %s: %v", name, err)
	}
}

func examplePolicy(t *testing.T, name string) (*unstructured.Unstructured, *unstructured.Unstructured) {
	t.Helper()
	return readObjects(t, "deploy/examples/"+name+"/template.yaml")[0], readObjects(t, "deploy/examples/"+name+"/constraint.yaml")[0]
}

func createNamespace(t *testing.T, c *cluster.Cluster, name string, labels map[string]string) {
	t.Helper()
	_, err := c.Client().CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func createNodes(t *testing.T, c *cluster.Cluster, nodes map[string]map[string]string) {
	t.Helper()
	var names []string
	for n := range nodes {
		names = append(names, n)
	}
	if _, err := c.CreateNodes(context.Background(), len(names), func(i int) *corev1.Node {
		return cluster.FakeNode(names[i], nodes[names[i]], nil)
	}); err != nil {
		t.Fatal(err)
	}
}

func createPod(t *testing.T, c *cluster.Cluster, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	out, err := c.Client().CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func boundNode(t *testing.T, c *cluster.Cluster, ns, name string, timeout time.Duration) string {
	t.Helper()
	p, err := c.WaitForPodBound(context.Background(), ns, name, timeout)
	if err != nil {
		t.Fatalf("pod %s/%s not bound: %v", ns, name, err)
	}
	return p.Spec.NodeName
}

// failedSchedulingMessage waits for the pod's FailedScheduling event that
// contains want, and returns its message.
func failedSchedulingMessage(t *testing.T, c *cluster.Cluster, ns, name, want string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		evs, err := c.Client().CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err == nil {
			for _, e := range evs.Items {
				if e.Reason == "FailedScheduling" {
					last = e.Message
					if strings.Contains(e.Message, want) {
						return e.Message
					}
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no FailedScheduling event for %s/%s containing %q; last: %q", ns, name, want, last)
	return ""
}

func stillPending(t *testing.T, c *cluster.Cluster, ns, name string, d time.Duration) {
	t.Helper()
	time.Sleep(d)
	p, err := c.Client().CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" {
		t.Fatalf("pod %s/%s was bound to %s; want it pending", ns, name, p.Spec.NodeName)
	}
}

func withLabels(p *corev1.Pod, labels map[string]string) *corev1.Pod {
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	for k, v := range labels {
		p.Labels[k] = v
	}
	return p
}

func setAnnotation(u *unstructured.Unstructured, k, v string) *unstructured.Unstructured {
	a := u.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[k] = v
	u.SetAnnotations(a)
	return u
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
	createNamespace(t, c, "alpha", map[string]string{"tenant": "alpha"})
	createNodes(t, c, nodes)
	tenantT, tenantC := examplePolicy(t, "tenant-isolation")
	installPolicy(t, c, tenantT, tenantC)
	return c
}

func mustEnv(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(repoRoot, "deploy", "examples")); err != nil {
		t.Fatalf("the repository's deploy/examples is missing: %v", err)
	}
}

var _ = fmt.Sprintf
