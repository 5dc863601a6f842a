// Package cluster runs a real Kubernetes control plane for end-to-end tests
// of the scheduler extender: etcd, kube-apiserver and the stock
// kube-scheduler (Kubernetes v1.37.2), each a subprocess listening on
// 127.0.0.1 on free ports. No kubelet, controller-manager or Gatekeeper runs.
//
// The binaries come from the tiny mains in bench/e2e/cmd and are built once
// per test process with
//
//	go build -o $BIN/ ./cmd/etcd ./cmd/kube-apiserver ./cmd/kube-scheduler
//
// in the bench/e2e module, where $BIN is Options.BinDir, else $E2E_BIN_DIR,
// else $TMPDIR/opa-scheduler-extender-e2e-bin (a file lock serialises the
// test binaries of one `go test ./...`). The flags never change, so only the
// first build is cold; E2E_SKIP_BUILD=1 uses whatever is in $BIN. Processes
// are stopped by their own PID, and get SIGKILL if the test binary dies.
//
// # Cluster
//
//	func Start(t testing.TB, opts Options) *Cluster
//
// starts etcd (--unsafe-no-fsync) and kube-apiserver with: a CA generated in
// the test that signs the serving certificate (CAFile/CAData) and is the
// --client-ca-file; static tokens for "admin" (group system:masters,
// AdminToken) and "system:kube-scheduler"; RBAC; an RSA service-account key
// pair generated in the test; the ServiceAccount and TaintNodesByCondition
// admission plugins disabled; --endpoint-reconciler-type none. It waits for
// /readyz, the default namespace and the
// kube-system/extension-apiserver-authentication ConfigMap, and registers a
// t.Cleanup that kills every process (and prints the last log lines of each
// if the test failed). Logs go to Cluster.LogDir ($E2E_LOG_DIR/<test> when
// set, to keep them).
//
//	c.Kubeconfig, c.SchedulerKubeconfig   // admin / system:kube-scheduler kubeconfig files
//	func (c *Cluster) RESTConfig() *rest.Config               // new admin config, QPS 1000 burst 2000
//	func (c *Cluster) Client() kubernetes.Interface            // shared; survives API server restarts
//	func (c *Cluster) Dynamic() dynamic.Interface
//	func (c *Cluster) APIExtensions() apiextensionsclient.Interface
//	func (c *Cluster) StopAPIServer() error                    // SIGTERM, SIGKILL after 5s (open watches keep it from exiting sooner)
//	func (c *Cluster) KillAPIServer() error                    // SIGKILL
//	func (c *Cluster) StartAPIServer() error                   // same port, etcd, certs, tokens
//	func (c *Cluster) APIServerRunning() bool
//	func (c *Cluster) APIServerPID() int
//	func (c *Cluster) EnsureNamespace(ctx context.Context, name string) error
//
// # Scheduler
//
//	func (c *Cluster) StartScheduler(t testing.TB, opts SchedulerOptions) *Scheduler
//
// writes a kubescheduler.config.k8s.io/v1 KubeSchedulerConfiguration
// (leaderElection.leaderElect false, clientConnection.kubeconfig, optional
// qps/burst, extenders, profiles, percentageOfNodesToScore, parallelism,
// ExtraConfig merged at the top level; or RawConfig verbatim) and starts
// kube-scheduler on a fresh port as user system:kube-scheduler (bootstrap
// RBAC; AsAdmin for system:masters), waits for its /readyz, and registers
// t.Cleanup(s.Stop). Start and stop as many as needed in one test.
//
//	func (s *Scheduler) Stop()                                  // idempotent
//	func (s *Scheduler) Running() bool
//	func (s *Scheduler) PID() int
//	func (s *Scheduler) Metrics(ctx context.Context) ([]byte, error)  // Prometheus text
//	func SchedulerConfigYAML(opts SchedulerOptions, kubeconfig string) ([]byte, error)
//
// # Nodes and pods
//
//	func FakeNode(name string, labels map[string]string, taints []corev1.Taint) *corev1.Node
//	func KubeletNode(i int) *corev1.Node          // about 10 KB, as a kubelet on a cloud VM reports it (kubelet.go)
//	func KubeletNodeName(i int) string            // <pool>-<%05d i>
//	func KubeletNodePool(i int) string            // one of ten pools: general-a..d, alpha, beta, spot-a, spot-b, alpha-spot, system
//	func KubeletNodeUnderMaintenance(i int) bool  // every 23rd node: MaintenanceLabel, MaintenanceReasonAnnotation
//	func (c *Cluster) CreateNodes(ctx context.Context, n int, mk func(i int) *corev1.Node) ([]*corev1.Node, error)
//	func PausePod(namespace, name string, labels map[string]string) *corev1.Pod
//	func (c *Cluster) WaitForPod(ctx context.Context, namespace, name string, timeout time.Duration, cond func(*corev1.Pod) bool) (*corev1.Pod, error)
//	func (c *Cluster) WaitForPodBound(ctx context.Context, namespace, name string, timeout time.Duration) (*corev1.Pod, error)
//
// # The service as a process
//
//	func BuildExtender(t testing.TB, dir string) (string, error)  // go build -o dir/opa-scheduler-extender ./cmd/opa-scheduler-extender in the main module
//	func (c *Cluster) StartProcess(t testing.TB, name, bin string, args ...string) (*Process, error)
//	func (p *Process) Pid() int
//	func (p *Process) Exited() (bool, error)
//	func (p *Process) Stop()                                      // SIGTERM, SIGKILL after 5s; idempotent, also a t.Cleanup
//	func (p *Process) LogTail(n int) string
//
// StartProcess runs any binary like the control plane's processes: log in
// LogDir/<name>-<n>.log (its tail printed if the test fails), SIGKILL if
// the test binary dies, stopped through its own PID. BuildExtender always
// builds (E2E_SKIP_BUILD only concerns the control plane).
//
//	func BuildPluginScheduler(t testing.TB, dir string) (string, error) // go build -o dir/opa-kube-scheduler . in cmd/opa-kube-scheduler (its own module), once per process
//	SchedulerOptions{Binary: bin, ...}                                   // run that binary instead of the stock kube-scheduler
//
// # Gatekeeper CRDs
//
// Gatekeeper does not run; the harness installs what it would.
//
//	func (c *Cluster) InstallGatekeeperCRDs(ctx context.Context) error
//	func (c *Cluster) CreateConstraintCRD(ctx context.Context, kind string) error
//	func (c *Cluster) CreateConstraintCRDWithParameters(ctx context.Context, kind string, parameters *apiextensionsv1.JSONSchemaProps) error
//	func (c *Cluster) CreateConstraintCRDForTemplate(ctx context.Context, tmpl *unstructured.Unstructured) error
//	func (c *Cluster) ApplyCRD(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error
//	func (c *Cluster) WaitForCRDEstablished(ctx context.Context, name string) error
//	func ConstraintTemplateCRD() (*apiextensionsv1.CustomResourceDefinition, error)
//	func ConstraintCRD(kind string, parameters *apiextensionsv1.JSONSchemaProps) (*apiextensionsv1.CustomResourceDefinition, error)
//	func ConstraintCRDForTemplate(tmpl *unstructured.Unstructured) (*apiextensionsv1.CustomResourceDefinition, error)
//	func GatekeeperMatchSchema() (*apiextensionsv1.JSONSchemaProps, error)
//	var ConstraintTemplateGVR                      // templates.gatekeeper.sh/v1 constrainttemplates
//	func ConstraintGVR(kind string) schema.GroupVersionResource  // constraints.gatekeeper.sh/v1beta1 <lower(kind)>
//
// The ConstraintTemplate CRD (crds/templates.gatekeeper.sh_constrainttemplates.yaml;
// v1 storage, v1beta1 and v1alpha1 served) is a verbatim copy from
// github.com/open-policy-agent/frameworks/constraint
// v0.0.0-20260616163050-e1eaa1bf6d62, the version gatekeeper v3.23.1
// requires. Constraint CRDs are built as that Gatekeeper builds them
// (frameworks pkg/client/crds): versions v1beta1 (storage) and v1alpha1 —
// Gatekeeper v3.23.1 serves no v1 for constraints —, cluster-scoped, status
// subresource, spec.match with Gatekeeper's match schema
// (crds/gatekeeper-match.yaml, copied from gatekeeper pkg/target),
// spec.enforcementAction defaulting to "deny", and spec.parameters from the
// template (legacySchema adds x-kubernetes-preserve-unknown-fields).
//
// kube-apiserver sleeps 2s in the first creates of custom resources made
// less than 2s after their CRD became Established (an upstream HA guard), so
// create CRDs early in a test.
//
// # Identities for least-privilege tests
//
//	func (c *Cluster) ServiceAccountToken(ctx context.Context, namespace, name string, ttl time.Duration) (string, error)
//	func (c *Cluster) ServiceAccountConfig(ctx context.Context, namespace, name string) (*rest.Config, error)
//	func (c *Cluster) ClientCertConfig(user string, groups ...string) (*rest.Config, error)
//	func (c *Cluster) ImpersonatedConfig(user string, groups ...string) *rest.Config
//	func (c *Cluster) ImpersonatedClient(user string, groups ...string) (kubernetes.Interface, error)
//	func ClientFor(cfg *rest.Config) (kubernetes.Interface, error)
//	func WriteKubeconfig(path string, cfg *rest.Config) error
//
// None of these identities has any permission beyond the bootstrap RBAC
// defaults; grant what the service needs with Roles/ClusterRoles and
// bindings.
package cluster
