package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/cmd/opa-scheduler-extender/heapfloor"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/source"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/server"
)

const serveHelp = `Usage: opa-scheduler-extender [serve] [flags]

Runs the scheduler extender. Policies (ConstraintTemplates, Constraints) and
inventory (Nodes, Namespaces, ...) come from a cluster (--kubeconfig, or the
in-cluster configuration when running in a pod), from a folder of YAML files
(--policy-dir), or both.

Flags:
`

type serveFlags struct {
	listen, policyDir, kubeconfig string
	noCluster                     bool
	tlsCert, tlsKey, clientCA     string
	enforcementPoint              string
	requestTimeout, bindTimeout   time.Duration
	maxBodyBytes                  int64
	maxInFlightBodyBytes          int64
	bodyWait                      time.Duration
	disableDebug, enablePprof     bool
	syncKinds                     []string
	ignoreGatekeeperConfig        bool
	kubeQPS                       float32
	kubeBurst                     int
	requeueNudge                  bool
	allowNetworkBuiltins          bool
	engines                       engineFlags
	logLevel, logFormat           string
	policyPollInterval            time.Duration
	logDecisions, opaConfig       string
	memoResults                   int
	memoBytes                     int64
	gcHeapFloor                   int64
	gcHeapMaxGrowth               int64
	evalParallelism               int
}

func (f *serveFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.listen, "listen", ":8888", "address to serve the extender verbs, health, metrics and debug endpoints on")
	fs.StringVar(&f.policyDir, "policy-dir", "", "folder of YAML files (templates, constraints, inventory) to load and watch; testdata folders and Suites are skipped")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster to sync from and bind through; empty: the in-cluster configuration in a pod, else (without --policy-dir) as kubectl finds it, else no cluster")
	fs.BoolVar(&f.noCluster, "no-cluster", false, "do not connect to any cluster, even in a pod (policies and inventory come from --policy-dir only)")
	fs.StringVar(&f.tlsCert, "tls-cert-file", "", "serve HTTPS with this certificate (PEM); reloaded when the file changes")
	fs.StringVar(&f.tlsKey, "tls-private-key-file", "", "private key of --tls-cert-file (PEM)")
	fs.StringVar(&f.clientCA, "client-ca-file", "", "require client certificates signed by this CA (PEM); reloaded when the file changes")
	fs.StringVar(&f.enforcementPoint, "enforcement-point", opa.DefaultEnforcementPoint, "this service's name in constraints' scopedEnforcementActions")
	fs.DurationVar(&f.requestTimeout, "request-timeout", server.DefaultRequestTimeout, "deadline for one scheduler request; keep it below the extender's httpTimeout in KubeSchedulerConfiguration")
	fs.DurationVar(&f.bindTimeout, "bind-timeout", 5*time.Second, "timeout of each API call made to bind a pod")
	fs.Int64Var(&f.maxBodyBytes, "max-body-bytes", server.DefaultMaxBodyBytes, "largest request body accepted")
	fs.Int64Var(&f.maxInFlightBodyBytes, "max-inflight-body-bytes", 0, "request-body bytes handled at once; more waits --body-wait, then gets 429 (0: derived from GOMEMLIMIT and --max-body-bytes)")
	fs.DurationVar(&f.bodyWait, "body-wait", server.DefaultBodyWait, "how long a request waits for room in --max-inflight-body-bytes before it gets 429")
	fs.BoolVar(&f.disableDebug, "disable-debug-endpoints", false, "turn off /debug/policies and /debug/explain")
	fs.BoolVar(&f.enablePprof, "enable-pprof", false, "serve net/http/pprof under /debug/pprof/")
	fs.StringSliceVar(&f.syncKinds, "sync-kind", nil, "further inventory kind to sync, as group/version/Kind (core: v1/Kind), repeatable; Nodes and Namespaces always are")
	fs.BoolVar(&f.ignoreGatekeeperConfig, "ignore-gatekeeper-config", false, "do not read Gatekeeper's Config (spec.sync.syncOnly) for further inventory kinds")
	fs.Float32Var(&f.kubeQPS, "kube-api-qps", 100, "queries per second to the API server (binds, nudges)")
	fs.IntVar(&f.kubeBurst, "kube-api-burst", 200, "burst of queries to the API server")
	fs.BoolVar(&f.requeueNudge, "requeue-nudge", true, "after a policy change, annotate the pending pods this service rejected, so that the scheduler retries them now")
	f.engines.register(fs)
	fs.BoolVar(&f.allowNetworkBuiltins, "allow-network-builtins", false, "let templates call http.send and net.lookup_ip_addr (off, as in Gatekeeper)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "text or json")
	fs.StringVar(&f.logDecisions, "log-decisions", "off", "log one record per scheduling call: off, deny (calls where a node was denied), warn (also scored down) or all")
	fs.StringVar(&f.opaConfig, "opa-config", "", "OPA configuration file (YAML or JSON) for the embedded SDK: status and decision logs to an OPA control plane; bundles and discovery are refused")
	fs.IntVar(&f.memoResults, "memo-max-results", 1<<18, "verdicts the engine remembers, for all constraints together")
	fs.Int64Var(&f.memoBytes, "memo-max-bytes", opa.DefaultMemoBytes, "estimated size of the verdicts the engine remembers; a full memo takes about that much heap")
	fs.IntVar(&f.evalParallelism, "eval-parallelism", 0, "goroutines one request evaluates a new pod's memo misses on (0: GOMAXPROCS minus one, at least one)")
	fs.Int64Var(&f.gcHeapFloor, "gc-heap-floor-bytes", heapfloor.Default, "let the heap grow to this many bytes before a collection when GOGC (75 unless set) would run one sooner; 0: no floor")
	fs.Int64Var(&f.gcHeapMaxGrowth, "gc-heap-max-growth-bytes", heapfloor.DefaultMaxGrowth, "let the heap grow at most this many bytes past the live heap before a collection, never below --gc-heap-floor-bytes; 0: no bound")
	fs.DurationVar(&f.policyPollInterval, "policy-dir-interval", 250*time.Millisecond, "how often --policy-dir is scanned where no file-system watch covers it; with one, it paces the content check")
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f serveFlags
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	f.register(fs)
	fs.Usage = flagUsage(stderr, serveHelp, fs)
	showVersion := fs.Bool("version", false, "print the version and exit")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if *showVersion {
		printVersion(stdout)
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "serve: unexpected arguments %v\n", fs.Args())
		return 2
	}
	log, err := newLogger(stderr, f.logLevel, f.logFormat)
	if err != nil {
		fmt.Fprintf(stderr, "serve: %v\n", err)
		return 2
	}
	if err := serve(ctx, f, log); err != nil {
		log.Error("serve failed", "err", err)
		return 1
	}
	return 0
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: l}
	var h slog.Handler
	switch format {
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
	log := slog.New(h)
	// client-go logs through klog: send it to the same place.
	klog.SetSlogLogger(log)
	return log, nil
}

// clusterConfig finds the cluster to use: --kubeconfig, else the
// in-cluster configuration inside a pod, else, when there is no
// --policy-dir, $KUBECONFIG or ~/.kube/config as kubectl finds them (a
// folder given alone outside a pod is a try-out without a cluster: the
// developer's current context is not used behind their back), else none.
func clusterConfig(f serveFlags) (*rest.Config, error) {
	if f.noCluster {
		if f.kubeconfig != "" {
			return nil, errors.New("--no-cluster and --kubeconfig exclude each other")
		}
		return nil, nil
	}
	var cfg *rest.Config
	var err error
	switch {
	case f.kubeconfig != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	case os.Getenv("KUBERNETES_SERVICE_HOST") != "":
		cfg, err = rest.InClusterConfig()
	case f.policyDir == "" && (os.Getenv(clientcmd.RecommendedConfigPathEnvVar) != "" || fileExists(clientcmd.RecommendedHomeFile)):
		cfg, err = loadKubeconfig("")
	default:
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cluster configuration: %w", err)
	}
	cfg.QPS, cfg.Burst = f.kubeQPS, f.kubeBurst
	cfg.UserAgent = "opa-scheduler-extender"
	return cfg, nil
}

// decisionOutputs sends decisions to the log at --log-decisions' level and,
// when the OPA configuration enables decision logs, every decision to them.
func decisionOutputs(engine *opa.Engine, level server.DecisionLevel, log *slog.Logger) []server.DecisionOutput {
	outs := []server.DecisionOutput{{Level: level, Sink: server.LogDecisions(log.With("component", "decisions"))}}
	if engine.DecisionLogging() {
		outs = append(outs, server.DecisionOutput{Level: server.DecisionsAll, Sink: func(ctx context.Context, d server.Decision) {
			input := map[string]any{"verb": d.Verb, "pod": d.Pod, "uid": d.UID, "nodes": d.Nodes}
			if err := engine.LogDecision(ctx, "opa_scheduler_extender/"+d.Verb, input, d); err != nil {
				log.Warn("decision log refused a decision", "err", err)
			}
		}})
	}
	return outs
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// startHeapFloorWhenReady starts the heap floor and growth bound
// (--gc-heap-floor-bytes, --gc-heap-max-growth-bytes)
// once every source has loaded: loading 5000 Nodes makes garbage many
// times the live heap, and with the floor in place from the start that
// garbage raised the process's peak RSS by about 40 MiB. Before it starts,
// the memory the load freed goes back to the operating system
// (releaseLoad), so that RSS starts from the live heap rather than from
// the load's peak: the folder does so after each bulk read itself
// (opa/source/dir.go), but nothing else did after the informers' first
// list. It returns the function that stops the floor (or its wait).
func startHeapFloorWhenReady(ctx context.Context, floor, maxGrowth int64, checks []server.ReadinessCheck) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan *heapfloor.Floor, 1)
	go func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for !allReady(checks) {
			select {
			case <-ctx.Done():
				done <- nil
				return
			case <-tick.C:
			}
		}
		releaseLoad()
		done <- heapfloor.Start(floor, maxGrowth)
	}()
	return func() {
		cancel()
		(<-done).Stop()
	}
}

// releaseLoad is debug.FreeOSMemory (a collection, then every free page
// returned), once the sources are ready: a variable for the tests.
var releaseLoad = debug.FreeOSMemory

func allReady(checks []server.ReadinessCheck) bool {
	for _, c := range checks {
		if ok, _ := c.Ready(); !ok {
			return false
		}
	}
	return true
}

func serve(ctx context.Context, f serveFlags, log *slog.Logger) error {
	if f.gcHeapFloor < 0 {
		return fmt.Errorf("--gc-heap-floor-bytes %d: want 0 or more", f.gcHeapFloor)
	}
	if f.gcHeapMaxGrowth < 0 {
		return fmt.Errorf("--gc-heap-max-growth-bytes %d: want 0 or more", f.gcHeapMaxGrowth)
	}
	if f.evalParallelism < 0 {
		return fmt.Errorf("--eval-parallelism %d: want 0 or more", f.evalParallelism)
	}
	gogc := heapfloor.SetDefaultPercent()
	cfg, err := clusterConfig(f)
	if err != nil {
		return err
	}
	if cfg == nil && f.policyDir == "" {
		return errors.New("nothing to enforce: give --policy-dir, --kubeconfig, or run in a cluster")
	}
	extra, err := source.ParseKinds(f.syncKinds)
	if err != nil {
		return fmt.Errorf("--sync-kind: %w", err)
	}
	decisions, err := server.ParseDecisionLevel(f.logDecisions)
	if err != nil {
		return fmt.Errorf("--log-decisions: %w", err)
	}
	var opaConfig []byte
	if f.opaConfig != "" {
		if opaConfig, err = os.ReadFile(f.opaConfig); err != nil {
			return fmt.Errorf("--opa-config: %w", err)
		}
	}
	eopts := opa.Options{EnforcementPoint: f.enforcementPoint, Logger: log.With("component", "engine"), AllowNetworkBuiltins: f.allowNetworkBuiltins,
		MemoEntries: f.memoResults, MemoBytes: f.memoBytes, OPAConfig: opaConfig, Parallelism: f.evalParallelism}
	if err := f.engines.apply(&eopts); err != nil {
		return err
	}
	engine, err := opa.New(ctx, eopts)
	if err != nil {
		return err
	}
	defer engine.Close(context.Background())

	sopts := server.Options{
		Policy:               engine,
		Logger:               log.With("component", "server"),
		RequestTimeout:       f.requestTimeout,
		MaxBodyBytes:         f.maxBodyBytes,
		MaxInFlightBodyBytes: f.maxInFlightBodyBytes,
		BodyWait:             f.bodyWait,
		DisableDebug:         f.disableDebug,
		EnablePprof:          f.enablePprof,
		EnforcementPoint:     f.enforcementPoint,
		Build:                buildInfo(),
		Decisions:            decisionOutputs(engine, decisions, log),
	}
	var debugSources []func() any
	if f.policyDir != "" {
		dir, err := startFolder(ctx, f, engine, &sopts, log)
		if err != nil {
			return err
		}
		debugSources = append(debugSources, func() any { return dir.Status() })
	}
	var nudger *source.Nudger
	if cfg != nil {
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("kubernetes client: %w", err)
		}
		events := record.NewBroadcaster(record.WithContext(ctx))
		events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
		defer events.Shutdown()
		recorder := events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "opa-scheduler-extender"})
		cluster, err := source.NewCluster(engine, source.ClusterOptions{Config: cfg, ExtraKinds: extra, IgnoreGatekeeperConfig: f.ignoreGatekeeperConfig,
			Events: recorder, Logger: log.With("component", "cluster")})
		if err != nil {
			return err
		}
		go cluster.Run(ctx)
		sopts.Binder = server.NewKubeBinder(client, f.bindTimeout)
		sopts.ReadinessChecks = append(sopts.ReadinessChecks, server.ReadinessCheck{Name: "cluster-sync", Ready: cluster.Ready})
		debugSources = append(debugSources, func() any { return cluster.Status() })
		if f.requeueNudge {
			nudger = source.NewNudger(client, engine, log.With("component", "requeue-nudge"))
			sopts.OnRejected = nudger.Rejected
			go nudger.Run(ctx)
		}
		log.Info("syncing from the cluster", "host", cfg.Host)
	}
	sopts.DebugSources = debugSources
	defer startHeapFloorWhenReady(ctx, f.gcHeapFloor, f.gcHeapMaxGrowth, sopts.ReadinessChecks)()
	srv, err := server.New(sopts)
	if err != nil {
		return err
	}
	log.Info("serving", "version", sopts.Build.Version, "revision", sopts.Build.Revision, "listen", f.listen, "tls", f.tlsCert != "", "clientCA", f.clientCA != "", "policyDir", f.policyDir, "enforcementPoint", f.enforcementPoint,
		"gogc", gogc, "gcHeapFloorBytes", f.gcHeapFloor, "gcHeapMaxGrowthBytes", f.gcHeapMaxGrowth)
	return srv.Serve(ctx, server.ListenConfig{Addr: f.listen, TLSCertFile: f.tlsCert, TLSKeyFile: f.tlsKey, ClientCAFile: f.clientCA})
}

// startFolder reads --policy-dir once, keeps it in sync in the background,
// and adds its readiness check and gauges to sopts.
func startFolder(ctx context.Context, f serveFlags, engine source.Applier, sopts *server.Options, log *slog.Logger) (*source.Dir, error) {
	if _, err := os.Stat(f.policyDir); err != nil {
		return nil, fmt.Errorf("--policy-dir: %w", err)
	}
	dir := source.NewDir(f.policyDir, engine, source.DirOptions{Interval: f.policyPollInterval, Logger: log.With("component", "policy-dir")})
	if err := dir.Sync(ctx); err != nil {
		return nil, err
	}
	go dir.Run(ctx)
	sopts.ReadinessChecks = append(sopts.ReadinessChecks, server.ReadinessCheck{Name: "policy-dir", Ready: dir.Ready})
	sopts.Registry = prometheus.NewRegistry()
	for _, c := range folderMetrics(dir) {
		if err := sopts.Registry.Register(c); err != nil {
			return nil, fmt.Errorf("policy folder metrics: %w", err)
		}
	}
	return dir, nil
}

// folderMetrics are the policy folder's gauges: what its /readyz notes
// say, for alerts.
func folderMetrics(dir *source.Dir) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: server.MetricsNamespace,
			Name:      "policy_folder_file_errors",
			Help:      "Files of --policy-dir that do not parse; their last good objects stay in force.",
		}, func() float64 { return float64(dir.FileErrors()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: server.MetricsNamespace,
			Name:      "policy_folder_refused_objects",
			Help:      "Objects of --policy-dir not in force because they were refused: by the engine, list items that are not objects (no kind, no name), documents without a name. /readyz?verbose names them.",
		}, func() float64 { return float64(dir.RefusedObjects()) }),
	}
}
