package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	configv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"
)

// SchedulerOptions configures one run of the stock kube-scheduler.
type SchedulerOptions struct {
	// Extenders is the `extenders:` list (kube-scheduler's own v1 type).
	Extenders []configv1.Extender
	// ExtendersYAML, if not empty, is the raw YAML sequence used as the
	// `extenders:` list instead of Extenders.
	ExtendersYAML string
	// QPS and Burst set clientConnection.qps/burst; zero keeps the
	// scheduler's defaults (50/100).
	QPS   float32
	Burst int32
	// Profiles is the `profiles:` list; ProfilesYAML, if not empty, is a raw
	// YAML sequence used instead. Neither set: the default profile.
	Profiles     []configv1.KubeSchedulerProfile
	ProfilesYAML string
	// PercentageOfNodesToScore and Parallelism set the top-level fields when
	// not nil.
	PercentageOfNodesToScore *int32
	Parallelism              *int32
	// ExtraConfig is merged into the top level of the configuration last
	// (it can override anything, e.g. "podInitialBackoffSeconds": 1).
	ExtraConfig map[string]any
	// RawConfig, if not empty, is written as the configuration file verbatim
	// (all fields above are ignored); the string {{KUBECONFIG}} is replaced
	// by the path of the scheduler's kubeconfig.
	RawConfig string
	// AsAdmin runs the scheduler with the admin (system:masters) identity
	// instead of the user system:kube-scheduler.
	AsAdmin bool
	// Args are extra kube-scheduler flags; Verbosity is its -v level.
	Args      []string
	Verbosity int
	// NoWait returns as soon as the process started instead of waiting for
	// its /readyz (informers synced).
	NoWait bool
	// Binary is the scheduler to run instead of the stock kube-scheduler
	// (BuildPluginScheduler's plugin build); it takes the same flags.
	Binary string
}

// Scheduler is one kube-scheduler process.
type Scheduler struct {
	// ConfigPath is the KubeSchedulerConfiguration file; LogPath its log.
	ConfigPath string
	LogPath    string
	// URL is https://127.0.0.1:<secure port> (self-signed certificate).
	URL string

	c    *Cluster
	p    *process
	once sync.Once
}

// SchedulerConfigYAML renders the KubeSchedulerConfiguration for opts with
// the given kubeconfig path.
func SchedulerConfigYAML(opts SchedulerOptions, kubeconfig string) ([]byte, error) {
	if opts.RawConfig != "" {
		return []byte(strings.ReplaceAll(opts.RawConfig, "{{KUBECONFIG}}", kubeconfig)), nil
	}
	conn := map[string]any{"kubeconfig": kubeconfig}
	if opts.QPS != 0 {
		conn["qps"] = opts.QPS
	}
	if opts.Burst != 0 {
		conn["burst"] = opts.Burst
	}
	cfg := map[string]any{
		"apiVersion":       "kubescheduler.config.k8s.io/v1",
		"kind":             "KubeSchedulerConfiguration",
		"leaderElection":   map[string]any{"leaderElect": false},
		"clientConnection": conn,
	}
	switch {
	case opts.ExtendersYAML != "":
		var v []any
		if err := yaml.Unmarshal([]byte(opts.ExtendersYAML), &v); err != nil {
			return nil, fmt.Errorf("cluster: ExtendersYAML: %w", err)
		}
		cfg["extenders"] = v
	case len(opts.Extenders) > 0:
		cfg["extenders"] = opts.Extenders
	}
	switch {
	case opts.ProfilesYAML != "":
		var v []any
		if err := yaml.Unmarshal([]byte(opts.ProfilesYAML), &v); err != nil {
			return nil, fmt.Errorf("cluster: ProfilesYAML: %w", err)
		}
		cfg["profiles"] = v
	case len(opts.Profiles) > 0:
		cfg["profiles"] = opts.Profiles
	}
	if opts.PercentageOfNodesToScore != nil {
		cfg["percentageOfNodesToScore"] = *opts.PercentageOfNodesToScore
	}
	if opts.Parallelism != nil {
		cfg["parallelism"] = *opts.Parallelism
	}
	for k, v := range opts.ExtraConfig {
		cfg[k] = v
	}
	return yaml.Marshal(cfg)
}

// StartScheduler writes a configuration and starts the stock kube-scheduler
// on a fresh port, waits until its /readyz answers 200 (unless
// opts.NoWait), and registers t.Cleanup(s.Stop). Any number of schedulers
// can be started and stopped in one test. It fails the test on error.
func (c *Cluster) StartScheduler(t testing.TB, opts SchedulerOptions) *Scheduler {
	t.Helper()
	s, err := c.startScheduler(t, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func (c *Cluster) startScheduler(t testing.TB, opts SchedulerOptions) (*Scheduler, error) {
	kubeconfig := c.SchedulerKubeconfig
	if opts.AsAdmin {
		kubeconfig = c.Kubeconfig
	}
	c.mu.Lock()
	c.schedSeq++
	seq := c.schedSeq
	c.mu.Unlock()

	data, err := SchedulerConfigYAML(opts, kubeconfig)
	if err != nil {
		return nil, err
	}
	s := &Scheduler{
		c:          c,
		ConfigPath: filepath.Join(c.Dir, fmt.Sprintf("kube-scheduler-%d.yaml", seq)),
		LogPath:    filepath.Join(c.LogDir, fmt.Sprintf("kube-scheduler-%d.log", seq)),
	}
	if err := os.WriteFile(s.ConfigPath, data, 0o644); err != nil {
		return nil, err
	}
	port := freePorts(1)[0]
	s.URL = fmt.Sprintf("https://127.0.0.1:%d", port)
	args := []string{
		"--config", s.ConfigPath,
		"--bind-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(port),
		"--cert-dir", filepath.Join(c.Dir, fmt.Sprintf("kube-scheduler-%d-certs", seq)),
		"--authentication-kubeconfig", kubeconfig,
		"--authorization-kubeconfig", kubeconfig,
		"--v", strconv.Itoa(opts.Verbosity),
	}
	args = append(args, opts.Args...)
	start := time.Now()
	bin := filepath.Join(c.BinDir, "kube-scheduler")
	if opts.Binary != "" {
		bin = opts.Binary
	}
	s.p, err = startProcess(fmt.Sprintf("kube-scheduler-%d", seq), bin, args, s.LogPath)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.schedulers = append(c.schedulers, s)
	c.mu.Unlock()
	if !opts.NoWait {
		hc := insecureClient()
		defer hc.CloseIdleConnections()
		err := poll(c.opts.StartTimeout, 100*time.Millisecond, s.p, func() (bool, error) {
			resp, err := hc.Get(s.URL + "/readyz")
			if err != nil {
				return false, nil
			}
			resp.Body.Close()
			return resp.StatusCode == 200, nil
		})
		if err != nil {
			s.Stop()
			return nil, err
		}
	}
	t.Logf("cluster: kube-scheduler #%d (pid %d) ready in %s, config %s", seq, s.p.Pid(), time.Since(start).Round(time.Millisecond), s.ConfigPath)
	return s, nil
}

// Stop kills the scheduler (SIGTERM, SIGKILL after 10s) and waits for it to
// exit. It is idempotent.
func (s *Scheduler) Stop() {
	s.once.Do(func() { s.p.stop(10 * time.Second) })
}

// PID returns the scheduler's process id.
func (s *Scheduler) PID() int { return s.p.Pid() }

// Running reports whether the scheduler process is alive.
func (s *Scheduler) Running() bool { done, _ := s.p.exited(); return !done }

// Metrics returns the scheduler's Prometheus /metrics text, fetched with the
// admin token (the scheduler authorizes it through the API server).
func (s *Scheduler) Metrics(ctx context.Context) ([]byte, error) { return s.Get(ctx, "/metrics") }

// Get fetches a path of the scheduler's secure port as admin (for
// example /debug/pprof/profile?seconds=5).
func (s *Scheduler) Get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", s.URL+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.c.AdminToken)
	hc := insecureClient()
	hc.Timeout = 0 // profiles take their time; ctx bounds the call
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("cluster: scheduler %s: %d %s", path, resp.StatusCode, b)
	}
	return b, nil
}

func insecureClient() *http.Client {
	return &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
	}
}
