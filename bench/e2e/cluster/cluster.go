package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Options configures Start. The zero value is a sensible default.
type Options struct {
	// BinDir is where etcd, kube-apiserver and kube-scheduler are built;
	// default $E2E_BIN_DIR, else $TMPDIR/opa-scheduler-extender-e2e-bin.
	BinDir string
	// LogDir receives the processes' logs; default $E2E_LOG_DIR/<test name>
	// when E2E_LOG_DIR is set, else the cluster's temporary directory (which
	// is removed after the test; the tail of every log is printed when the
	// test fails).
	LogDir string
	// APIServerArgs are appended to the kube-apiserver flags (a later flag
	// wins for single-valued flags).
	APIServerArgs []string
	// EtcdArgs are appended to the etcd flags.
	EtcdArgs []string
	// Verbosity is the klog -v level of kube-apiserver (default 0).
	Verbosity int
	// StartTimeout bounds each wait for a server to become ready (default 90s).
	StartTimeout time.Duration
}

// Cluster is a running etcd + kube-apiserver on 127.0.0.1 (plus any number
// of kube-schedulers started by StartScheduler).
type Cluster struct {
	// Dir is the cluster's private temporary directory (certificates, keys,
	// token file, kubeconfigs, etcd data, scheduler configs).
	Dir string
	// LogDir holds etcd.log, kube-apiserver.log and kube-scheduler-N.log.
	LogDir string
	// Kubeconfig is the path of a kubeconfig for the admin user (group
	// system:masters, bearer token).
	Kubeconfig string
	// SchedulerKubeconfig is the path of a kubeconfig for the user
	// system:kube-scheduler (bearer token), bound by the bootstrap RBAC policy.
	SchedulerKubeconfig string
	// Host is the API server URL, https://127.0.0.1:<port>.
	Host string
	// CAFile is the PEM file of the CA that signed the API server's serving
	// certificate; CAData is its content.
	CAFile string
	CAData []byte
	// AdminToken is the bearer token of the admin user.
	AdminToken string
	// EtcdURL is the etcd client URL, http://127.0.0.1:<port>.
	EtcdURL string
	// BinDir holds the control-plane binaries.
	BinDir string

	t              testing.TB
	opts           Options
	ca             *ca
	schedulerToken string
	apiPort        int
	apiArgs        []string

	mu         sync.Mutex
	etcd       *process
	apiserver  *process
	apiStarts  int
	schedulers []*Scheduler
	schedSeq   int
	procSeq    int

	clientOnce sync.Once
	client     kubernetes.Interface
	dynamic    dynamic.Interface
	apiext     apiextensionsclient.Interface
	clientErr  error
}

// Start builds the binaries if needed, starts etcd and kube-apiserver, waits
// until /readyz answers 200 and the default namespace exists, and registers a
// cleanup that kills every process it started. It fails the test on error.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c, err := start(t, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func start(t testing.TB, opts Options) (*Cluster, error) {
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 90 * time.Second
	}
	c := &Cluster{t: t, opts: opts, BinDir: BinDir(opts)}
	if err := EnsureBinaries(t, c.BinDir); err != nil {
		return nil, err
	}
	c.Dir = t.TempDir()
	c.LogDir = opts.LogDir
	if c.LogDir == "" {
		if d := os.Getenv("E2E_LOG_DIR"); d != "" {
			c.LogDir = filepath.Join(d, sanitize(t.Name()))
		} else {
			c.LogDir = c.Dir
		}
	}
	if err := os.MkdirAll(c.LogDir, 0o755); err != nil {
		return nil, err
	}
	t.Cleanup(c.cleanup)

	phase := time.Now()
	if err := c.writeCredentials(); err != nil {
		return nil, err
	}

	ports := freePorts(3)
	c.EtcdURL = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	etcdArgs := []string{
		"--name", "default",
		"--data-dir", filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls", c.EtcdURL,
		"--advertise-client-urls", c.EtcdURL,
		"--listen-peer-urls", peerURL,
		"--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "default=" + peerURL,
		"--initial-cluster-state", "new",
		"--unsafe-no-fsync",
		"--quota-backend-bytes", strconv.Itoa(8 << 30),
		"--log-level", "warn",
	}
	etcdArgs = append(etcdArgs, opts.EtcdArgs...)
	var err error
	c.etcd, err = startProcess("etcd", filepath.Join(c.BinDir, "etcd"), etcdArgs, filepath.Join(c.LogDir, "etcd.log"))
	if err != nil {
		return nil, err
	}
	if err := c.waitEtcd(); err != nil {
		return nil, err
	}
	t.Logf("cluster: etcd ready at %s (pid %d) in %s", c.EtcdURL, c.etcd.Pid(), time.Since(phase).Round(time.Millisecond))

	c.apiPort = ports[2]
	c.Host = fmt.Sprintf("https://127.0.0.1:%d", c.apiPort)
	c.apiArgs = []string{
		"--etcd-servers", c.EtcdURL,
		"--bind-address", "127.0.0.1",
		"--advertise-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(c.apiPort),
		"--cert-dir", filepath.Join(c.Dir, "apiserver-certs"),
		"--tls-cert-file", filepath.Join(c.Dir, "apiserver.crt"),
		"--tls-private-key-file", filepath.Join(c.Dir, "apiserver.key"),
		"--client-ca-file", c.CAFile,
		"--token-auth-file", filepath.Join(c.Dir, "tokens.csv"),
		"--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", filepath.Join(c.Dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(c.Dir, "sa.key"),
		"--service-cluster-ip-range", "10.0.0.0/24",
		"--disable-admission-plugins", "ServiceAccount,TaintNodesByCondition",
		"--endpoint-reconciler-type", "none",
		"--allow-privileged=true",
		"--v", strconv.Itoa(opts.Verbosity),
	}
	c.apiArgs = append(c.apiArgs, opts.APIServerArgs...)
	if err := c.StartAPIServer(); err != nil {
		return nil, err
	}
	if err := c.waitBootstrap(); err != nil {
		return nil, err
	}
	t.Logf("cluster: kube-apiserver ready at %s (pid %d); etcd+apiserver up in %s", c.Host, c.APIServerPID(), time.Since(phase).Round(time.Millisecond))
	return c, nil
}

// writeCredentials creates the CA, the serving certificate, the
// service-account key pair, the static token file and the kubeconfigs.
func (c *Cluster) writeCredentials() error {
	var err error
	if c.ca, err = newCA(); err != nil {
		return err
	}
	c.CAData = c.ca.certPEM
	c.CAFile = filepath.Join(c.Dir, "ca.crt")
	certPEM, keyPEM, err := c.ca.issue("kube-apiserver", nil, []string{
		"127.0.0.1", "::1", "10.0.0.1", "localhost",
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
	}, false)
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{"ca.crt": c.CAData, "apiserver.crt": certPEM, "apiserver.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(c.Dir, name), data, 0o600); err != nil {
			return err
		}
	}
	if err := writeServiceAccountKeys(filepath.Join(c.Dir, "sa.key"), filepath.Join(c.Dir, "sa.pub")); err != nil {
		return err
	}
	c.AdminToken = randomToken()
	c.schedulerToken = randomToken()
	tokens := fmt.Sprintf("%s,admin,admin-uid,\"system:masters\"\n%s,system:kube-scheduler,kube-scheduler-uid\n", c.AdminToken, c.schedulerToken)
	if err := os.WriteFile(filepath.Join(c.Dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		return err
	}
	return nil
}

// writeKubeconfigs writes Kubeconfig and SchedulerKubeconfig (Host is known).
func (c *Cluster) writeKubeconfigs() error {
	c.Kubeconfig = filepath.Join(c.Dir, "admin.kubeconfig")
	if err := WriteKubeconfig(c.Kubeconfig, c.RESTConfig()); err != nil {
		return err
	}
	sched := c.RESTConfig()
	sched.BearerToken = c.schedulerToken
	c.SchedulerKubeconfig = filepath.Join(c.Dir, "kube-scheduler.kubeconfig")
	return WriteKubeconfig(c.SchedulerKubeconfig, sched)
}

// StartAPIServer starts kube-apiserver (again) with the same flags, port,
// etcd and certificates, and waits for /readyz. It is an error to call it
// while the API server runs.
func (c *Cluster) StartAPIServer() error {
	c.mu.Lock()
	if c.apiserver != nil {
		if done, _ := c.apiserver.exited(); !done {
			c.mu.Unlock()
			return errors.New("cluster: kube-apiserver is already running")
		}
	}
	c.apiStarts++
	logPath := filepath.Join(c.LogDir, "kube-apiserver.log")
	p, err := startProcess("kube-apiserver", filepath.Join(c.BinDir, "kube-apiserver"), c.apiArgs, logPath)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	c.apiserver = p
	c.mu.Unlock()
	if c.Kubeconfig == "" {
		if err := c.writeKubeconfigs(); err != nil {
			return err
		}
	}
	start := time.Now()
	if err := c.waitAPIServerReady(p); err != nil {
		return err
	}
	c.t.Logf("cluster: kube-apiserver start #%d (pid %d) ready in %s", c.apiStarts, p.Pid(), time.Since(start).Round(time.Millisecond))
	return nil
}

// StopAPIServer stops kube-apiserver with SIGTERM, SIGKILL after 5s, and
// waits for it to exit; etcd keeps running. kube-apiserver's graceful
// shutdown waits for open watch connections (the scheduler's informers, for
// instance) and does not end by itself within 30s while any is open, so
// with clients watching this is in effect a 5-second SIGTERM-then-kill.
func (c *Cluster) StopAPIServer() error { return c.stopAPIServer(5 * time.Second) }

// KillAPIServer SIGKILLs kube-apiserver and waits for it to exit.
func (c *Cluster) KillAPIServer() error { return c.stopAPIServer(0) }

func (c *Cluster) stopAPIServer(grace time.Duration) error {
	c.mu.Lock()
	p := c.apiserver
	c.mu.Unlock()
	if p == nil {
		return errors.New("cluster: kube-apiserver was never started")
	}
	if done, _ := p.exited(); done {
		return errors.New("cluster: kube-apiserver is not running")
	}
	start := time.Now()
	p.stop(grace)
	c.t.Logf("cluster: kube-apiserver (pid %d) stopped in %s", p.Pid(), time.Since(start).Round(time.Millisecond))
	return nil
}

// APIServerPID returns the PID of the current kube-apiserver process (0 if none).
func (c *Cluster) APIServerPID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.apiserver == nil {
		return 0
	}
	return c.apiserver.Pid()
}

// APIServerRunning reports whether the kube-apiserver process is alive.
func (c *Cluster) APIServerRunning() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.apiserver == nil {
		return false
	}
	done, _ := c.apiserver.exited()
	return !done
}

// RESTConfig returns a new admin *rest.Config (bearer token, CA-verified
// TLS, QPS 1000, burst 2000).
func (c *Cluster) RESTConfig() *rest.Config {
	return &rest.Config{
		Host:            c.Host,
		BearerToken:     c.AdminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: append([]byte(nil), c.CAData...)},
		QPS:             1000,
		Burst:           2000,
		Timeout:         60 * time.Second,
	}
}

func (c *Cluster) initClients() {
	c.clientOnce.Do(func() {
		cfg := c.RESTConfig()
		if c.client, c.clientErr = kubernetes.NewForConfig(cfg); c.clientErr != nil {
			return
		}
		if c.dynamic, c.clientErr = dynamic.NewForConfig(cfg); c.clientErr != nil {
			return
		}
		c.apiext, c.clientErr = apiextensionsclient.NewForConfig(cfg)
	})
	if c.clientErr != nil {
		panic(fmt.Sprintf("cluster: building clients: %v", c.clientErr))
	}
}

// Client returns a shared admin clientset. It keeps working across
// StopAPIServer/StartAPIServer.
func (c *Cluster) Client() kubernetes.Interface { c.initClients(); return c.client }

// Dynamic returns a shared admin dynamic client.
func (c *Cluster) Dynamic() dynamic.Interface { c.initClients(); return c.dynamic }

// APIExtensions returns a shared admin apiextensions clientset (CRDs).
func (c *Cluster) APIExtensions() apiextensionsclient.Interface { c.initClients(); return c.apiext }

func (c *Cluster) cleanup() {
	c.mu.Lock()
	scheds := append([]*Scheduler(nil), c.schedulers...)
	api, etcd := c.apiserver, c.etcd
	c.mu.Unlock()
	for _, s := range scheds {
		s.Stop()
	}
	if api != nil {
		api.stop(0)
	}
	if etcd != nil {
		etcd.stop(0)
	}
	if c.t.Failed() {
		var paths []string
		if etcd != nil {
			paths = append(paths, etcd.logPath)
		}
		if api != nil {
			paths = append(paths, api.logPath)
		}
		for _, s := range scheds {
			paths = append(paths, s.LogPath)
		}
		for _, p := range paths {
			c.t.Logf("cluster: last lines of %s:\n%s", p, logTail(p, 40))
		}
	}
	if c.LogDir != c.Dir {
		c.t.Logf("cluster: logs kept in %s", c.LogDir)
	}
}

func (c *Cluster) waitEtcd() error {
	hc := &http.Client{Timeout: 2 * time.Second}
	return poll(c.opts.StartTimeout, 50*time.Millisecond, c.etcd, func() (bool, error) {
		resp, err := hc.Get(c.EtcdURL + "/health")
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && strings.Contains(string(b), `"true"`), nil
	})
}

func (c *Cluster) waitAPIServerReady(p *process) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CAData)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer hc.CloseIdleConnections()
	var last string
	err := poll(c.opts.StartTimeout, 100*time.Millisecond, p, func() (bool, error) {
		req, _ := http.NewRequest("GET", c.Host+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+c.AdminToken)
		resp, err := hc.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		last = fmt.Sprintf("%d %s", resp.StatusCode, b)
		return resp.StatusCode == 200, nil
	})
	if err != nil {
		return fmt.Errorf("%w (last /readyz: %s)", err, last)
	}
	return nil
}

// waitBootstrap waits for the objects the bootstrap controllers create and
// the scheduler needs: the default namespace and the
// kube-system/extension-apiserver-authentication ConfigMap.
func (c *Cluster) waitBootstrap() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.StartTimeout)
	defer cancel()
	cs := c.Client()
	return poll(c.opts.StartTimeout, 100*time.Millisecond, c.apiserver, func() (bool, error) {
		if _, err := cs.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{}); err != nil {
			return false, nil
		}
		if _, err := cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{}); err != nil {
			return false, nil
		}
		return true, nil
	})
}

// EnsureNamespace creates a namespace if it does not exist.
func (c *Cluster) EnsureNamespace(ctx context.Context, name string) error {
	_, err := c.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// poll calls cond every interval until it returns true, an error, the
// process p (if not nil) exits, or timeout passes.
func poll(timeout, interval time.Duration, p *process, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if p != nil {
			if done, how := p.exited(); done {
				return fmt.Errorf("cluster: %s exited while waiting for it (%v); last log lines of %s:\n%s", p.name, how, p.logPath, logTail(p.logPath, 30))
			}
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("cluster: timed out after %s", timeout)
			if p != nil {
				msg += fmt.Sprintf(" waiting for %s; last log lines of %s:\n%s", p.name, p.logPath, logTail(p.logPath, 30))
			}
			return errors.New(msg)
		}
		time.Sleep(interval)
	}
}

// freePorts asks the kernel for n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) []int {
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(fmt.Sprintf("cluster: no free port: %v", err))
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func sanitize(s string) string { return unsafeChars.ReplaceAllString(s, "_") }
