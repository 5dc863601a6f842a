package footprint

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/cluster"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/policyset"
)

var (
	numNodes     = flag.Int("footprint-nodes", 500, "kubelet-sized nodes in the cluster (by hand: 1000, 5000, 10000)")
	trafficFor   = flag.Duration("footprint-duration", 20*time.Second, "how long to send filter+prioritize traffic (ignored when -footprint-requests > 0)")
	trafficCount = flag.Int("footprint-requests", 0, "send this many filter+prioritize pairs instead of -footprint-duration of traffic")
	workers      = flag.Int("footprint-workers", 1, "concurrent traffic clients (kube-scheduler calls an extender from one scheduling loop)")
	staleRounds  = flag.Int("stale-updates", 5, "times every node's status is updated (by hand: 30 with 5000 nodes)")
	outFile      = flag.String("footprint-out", "", "write the figures as JSON to this file")
	library      = flag.String("library", policyset.DefaultLibraryDir(), "the gatekeeper-library's library/ folder")
	binary       = flag.String("footprint-binary", "", "measure this opa-scheduler-extender binary (an earlier build, for a before/after) instead of one built from the working tree")
)

// namespaces hold the traffic's pods, labelled as the realistic set wants.
var namespaces = []string{"shop-frontend", "shop-backend"}

// env is the cluster every subtest shares: control plane, policies,
// namespaces and nodes; each subtest starts its own service process.
type env struct {
	c   *cluster.Cluster
	bin string
	ps  []policyset.Policy
	// nodes are the latest versions of the nodes, index i is KubeletNode(i).
	nodes []*corev1.Node
	names []string
	// updater is an admin client that talks protobuf (cheaper than JSON
	// for the API server and this process, for thousands of updates).
	updater kubernetes.Interface
}

// report is what -footprint-out receives.
type report struct {
	Nodes            int            `json:"nodes"`
	NodeJSONBytes    int            `json:"nodeJSONBytesAverage"`
	NodeAPIBytes     int            `json:"nodeJSONBytesAverageAsServed"`
	Templates        int            `json:"templates"`
	Constraints      int            `json:"constraints"`
	SetupSeconds     float64        `json:"setupSeconds"`
	Traffic          *trafficReport `json:"traffic,omitempty"`
	Updates          *updatesReport `json:"updates,omitempty"`
	TotalTestSeconds float64        `json:"totalTestSeconds"`
}

func TestClusterFootprint(t *testing.T) {
	testStart := time.Now()
	e := newEnv(t)
	rep := &report{Nodes: *numNodes, NodeJSONBytes: averageNodeJSON(generatedNodes(100)), NodeAPIBytes: averageNodeJSON(e.nodes), Templates: len(e.ps), Constraints: policyset.CountConstraints(e.ps),
		SetupSeconds: time.Since(testStart).Seconds()}
	t.Run("SyncAndTraffic", func(t *testing.T) { rep.Traffic = runTraffic(t, e) })
	t.Run("NodeUpdatesKeepNoStaleCopiesAPIServer", func(t *testing.T) { rep.Updates = runNodeUpdates(t, e) })
	rep.TotalTestSeconds = time.Since(testStart).Seconds()
	t.Logf("footprint: %d nodes (%d bytes of JSON each on average, %d as the API server serves them), %d templates, %d constraints; setup %.1fs, test %.1fs",
		rep.Nodes, rep.NodeJSONBytes, rep.NodeAPIBytes, rep.Templates, rep.Constraints, rep.SetupSeconds, rep.TotalTestSeconds)
	if *outFile != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(*outFile, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("footprint: figures written to %s", *outFile)
	}
}

// newEnv checks the prerequisites, builds the service, starts the control
// plane and creates the policy set, the namespaces and the nodes.
func newEnv(t *testing.T) *env {
	t.Helper()
	mustEnv(t)
	ps, err := policyset.Load(policyset.Realistic, *library)
	if err != nil {
		t.Fatal(err)
	}
	bin := *binary
	if bin == "" {
		var err error
		if bin, err = cluster.BuildExtender(t, t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	c := cluster.Start(t, cluster.Options{})
	ctx := context.Background()
	if err := c.InstallGatekeeperCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := policyset.Install(ctx, c, ps); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d templates and %d constraints created in %v", len(ps), policyset.CountConstraints(ps), time.Since(start).Round(time.Millisecond))
	for _, ns := range namespaces {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: policyset.RealisticNamespaceLabels}}
		if _, err := c.Client().CoreV1().Namespaces().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	start = time.Now()
	nodes, err := c.CreateNodes(ctx, *numNodes, cluster.KubeletNode)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d kubelet-sized nodes created in %v", *numNodes, time.Since(start).Round(time.Millisecond))
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Name
	}
	cfg := c.RESTConfig()
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	updater, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &env{c: c, bin: bin, ps: ps, nodes: nodes, names: names, updater: updater}
}

// mustEnv fails the test, with what is missing, when the environment
// cannot run it (as the other e2e tests do: nothing is skipped).
func mustEnv(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Fatalf("the footprint test reads /proc/<pid>/status: Linux only (GOOS %s)", runtime.GOOS)
	}
	root := policyset.RepoRoot()
	for _, p := range []string{filepath.Join(root, "go.mod"), filepath.Join(root, "cmd", "opa-scheduler-extender"), filepath.Join(root, "bench", "testdata", "realistic")} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("the repository is incomplete: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(*library, "pod-security-policy")); err != nil {
		t.Fatalf("the Gatekeeper library is needed for the realistic policy set (set -library): %v", err)
	}
	if *numNodes <= markerNodeIndex {
		t.Fatalf("-footprint-nodes %d: at least %d nodes are needed (node %d is under maintenance and carries the update marker)", *numNodes, markerNodeIndex+1, markerNodeIndex)
	}
}

// generatedNodes are the first n nodes as cluster.KubeletNode makes them.
func generatedNodes(n int) []*corev1.Node {
	out := make([]*corev1.Node, min(n, *numNodes))
	for i := range out {
		out[i] = cluster.KubeletNode(i)
	}
	return out
}

// averageNodeJSON is the average JSON size of the first 100 nodes.
func averageNodeJSON(nodes []*corev1.Node) int {
	if len(nodes) == 0 {
		return 0
	}
	n := min(len(nodes), 100)
	total := 0
	for _, node := range nodes[:n] {
		b, _ := json.Marshal(node)
		total += len(b)
	}
	return total / n
}
