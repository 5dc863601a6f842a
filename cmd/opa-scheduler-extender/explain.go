package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/source"
)

const explainHelp = `Usage: opa-scheduler-extender explain --pod NAMESPACE/NAME [flags]

Explains where the cluster's policies let a pod go: it syncs the cluster's
ConstraintTemplates, Constraints, Nodes and Namespaces into an engine of
its own (as the service does), reads the pod from the API server and
judges it on every node (or on --node), as the extender's filter and
prioritize would. The cluster is found as kubectl finds it: --kubeconfig,
else $KUBECONFIG, else ~/.kube/config, else the in-cluster configuration.

Prints one row per node: the verdict, the score, and each violated
constraint with its action and message (-o json: the same as JSON).
--input NODE prints instead input.review exactly as every template sees it
on that node, ready for opa eval (add the constraint's spec.parameters as
input.parameters).

For the plugin build (cmd/opa-kube-scheduler), give the profile's
enforcementPoint with --enforcement-point, and its policyDir with
--policy-dir.

Needs get/list/watch on what the service reads (deploy/base/rbac.yaml).

Flags:
`

type explainFlags struct {
	pod, kubeconfig, output, input, enforcementPoint, policyDir string
	nodes, syncKinds                                            []string
	timeout                                                     time.Duration
	engines                                                     engineFlags
}

func runExplain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f explainFlags
	fs := pflag.NewFlagSet("explain", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.pod, "pod", "", "the pod to explain, as NAMESPACE/NAME")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (default: as kubectl finds it)")
	fs.StringSliceVar(&f.nodes, "node", nil, "judge on these nodes only (repeatable; default: every node)")
	fs.StringVarP(&f.output, "output", "o", "table", "table or json")
	fs.StringVar(&f.input, "input", "", "print input.review as templates see it on this node, and nothing else")
	fs.StringVar(&f.enforcementPoint, "enforcement-point", opa.DefaultEnforcementPoint, "the service's name in scopedEnforcementActions")
	fs.StringSliceVar(&f.syncKinds, "sync-kind", nil, "further inventory kinds, as the service's --sync-kind")
	fs.StringVar(&f.policyDir, "policy-dir", "", "judge with the templates and constraints of this folder instead of the cluster's (inventory still from the cluster), as a plugin profile with policyDir does")
	fs.DurationVar(&f.timeout, "timeout", time.Minute, "how long to wait for the cluster's policies and inventory")
	f.engines.register(fs)
	fs.Usage = flagUsage(stderr, explainHelp, fs)
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	ns, name, ok := splitPodRef(f.pod)
	if !ok || fs.NArg() > 0 || (f.output != "table" && f.output != "json") {
		fmt.Fprintln(stderr, "explain: --pod NAMESPACE/NAME is required; -o is table or json")
		fs.Usage()
		return 2
	}
	if err := explain(ctx, f, ns, name, stdout); err != nil {
		fmt.Fprintf(stderr, "explain: %v\n", err)
		return 1
	}
	return 0
}

func splitPodRef(s string) (namespace, name string, ok bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			return s[:i], s[i+1:], i > 0 && i < len(s)-1
		}
	}
	return "", "", false
}

// loadKubeconfig finds the cluster as kubectl does: explicit path, else
// $KUBECONFIG, else ~/.kube/config, else the in-cluster configuration.
func loadKubeconfig(explicit string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = explicit
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("cluster configuration: %w", err)
	}
	return cfg, nil
}

func explain(ctx context.Context, f explainFlags, namespace, name string, stdout io.Writer) error {
	cfg, err := loadKubeconfig(f.kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = "opa-scheduler-extender-explain"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	pod, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get pod %s/%s: %w", namespace, name, err)
	}
	podContent, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pod)
	if err != nil {
		return fmt.Errorf("pod %s/%s: %w", namespace, name, err)
	}
	e, err := syncedEngine(ctx, cfg, f)
	if err != nil {
		return err
	}
	defer e.Close(context.Background())
	if f.input != "" {
		review, err := e.ReviewInput(ctx, podContent, f.input)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"review": review})
	}
	nodes := f.nodes
	if len(nodes) == 0 {
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list nodes: %w", err)
		}
		for _, n := range list.Items {
			nodes = append(nodes, n.Name)
		}
	}
	rows, err := judge(ctx, e, podContent, nodes)
	if err != nil {
		return err
	}
	return writeRows(stdout, f.output, rows)
}

// syncedEngine is an engine kept in sync with the cluster, once the first
// sync is applied.
func syncedEngine(ctx context.Context, cfg *rest.Config, f explainFlags) (*opa.Engine, error) {
	extra, err := source.ParseKinds(f.syncKinds)
	if err != nil {
		return nil, fmt.Errorf("--sync-kind: %w", err)
	}
	quiet := slog.New(slog.DiscardHandler)
	eopts := opa.Options{EnforcementPoint: f.enforcementPoint, Logger: quiet}
	if err := f.engines.apply(&eopts); err != nil {
		return nil, err
	}
	e, err := opa.New(ctx, eopts)
	if err != nil {
		return nil, err
	}
	if f.policyDir != "" {
		if err := source.NewDir(f.policyDir, e, source.DirOptions{Logger: quiet}).Sync(ctx); err != nil {
			e.Close(ctx)
			return nil, fmt.Errorf("--policy-dir: %w", err)
		}
	}
	src, err := source.NewCluster(e, source.ClusterOptions{Config: cfg, ExtraKinds: extra, Logger: quiet, ConstraintGrace: 5 * time.Second,
		InventoryOnly: f.policyDir != ""})
	if err != nil {
		e.Close(ctx)
		return nil, err
	}
	go src.Run(ctx)
	deadline := time.Now().Add(f.timeout)
	for {
		ready, what := src.Ready()
		if ready {
			return e, nil
		}
		if time.Now().After(deadline) {
			e.Close(ctx)
			return nil, fmt.Errorf("not synced after %s: %s", f.timeout, what)
		}
		select {
		case <-ctx.Done():
			e.Close(ctx)
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
