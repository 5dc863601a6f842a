package plugin_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/cluster"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/harness"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/source"
)

// binDir holds the plugin build for the whole test process
// (BuildPluginScheduler builds once per directory and process).
var binDir string

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "opa-kube-scheduler-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

// pluginBinary is the plugin build (cmd/opa-kube-scheduler).
func pluginBinary(t *testing.T) string {
	t.Helper()
	bin, err := cluster.BuildPluginScheduler(t, binDir)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// profile is one scheduler profile with the OPAGatekeeper plugin enabled
// at all four extension points; args are its pluginConfig args.
type profile struct {
	name string
	args map[string]any
}

// profilesYAML renders the `profiles:` list.
func profilesYAML(t *testing.T, ps ...profile) string {
	t.Helper()
	enabled := func(extra map[string]any) map[string]any {
		p := map[string]any{"name": "OPAGatekeeper"}
		for k, v := range extra {
			p[k] = v
		}
		return map[string]any{"enabled": []any{p}}
	}
	var out []any
	for _, p := range ps {
		args := p.args
		if args == nil {
			args = map[string]any{}
		}
		out = append(out, map[string]any{
			"schedulerName": p.name,
			"plugins": map[string]any{
				"preFilter":  enabled(nil),
				"filter":     enabled(nil),
				"postFilter": enabled(nil),
				"preScore":   enabled(nil),
				"score":      enabled(map[string]any{"weight": 1}),
			},
			"pluginConfig": []any{map[string]any{"name": "OPAGatekeeper", "args": args}},
		})
	}
	b, err := yaml.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// startPlugin starts the plugin build with the given profiles (default:
// one default-scheduler profile with empty args), as admin unless opts
// say otherwise (opts.Binary and opts.ProfilesYAML are filled in).
func startPlugin(t *testing.T, c *cluster.Cluster, opts cluster.SchedulerOptions, ps ...profile) *cluster.Scheduler {
	t.Helper()
	if len(ps) == 0 {
		ps = []profile{{name: "default-scheduler"}}
	}
	opts.Binary = pluginBinary(t)
	opts.ProfilesYAML = profilesYAML(t, ps...)
	return c.StartScheduler(t, opts) // its log tail is printed if the test fails
}

// fastRetries makes the scheduler retry unschedulable pods quickly
// (used only where a test is not about the plugin's own requeueing).
var fastRetries = map[string]any{"podInitialBackoffSeconds": 1, "podMaxBackoffSeconds": 1}

// newCluster starts a control plane with Gatekeeper's CRDs installed.
func newCluster(t *testing.T) *cluster.Cluster {
	t.Helper()
	if _, err := os.Stat(filepath.Join(harness.RepoRoot, "deploy", "examples")); err != nil {
		t.Fatalf("the repository's deploy/examples is missing: %v", err)
	}
	c := cluster.Start(t, cluster.Options{})
	if err := c.InstallGatekeeperCRDs(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

// objectsOf decodes YAML documents.
func objectsOf(t *testing.T, text string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := source.ReadObjects(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// updateConstraint reads a constraint, lets change edit it, and writes it.
func updateConstraint(t *testing.T, c *cluster.Cluster, kind, name string, change func(*unstructured.Unstructured)) {
	t.Helper()
	ctx := context.Background()
	res := c.Dynamic().Resource(cluster.ConstraintGVR(kind))
	u, err := res.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	change(u)
	if _, err := res.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update constraint %s: %v", name, err)
	}
}

// pod is a PausePod with labels, a scheduler name and a node selector
// (each optional).
func pod(ns, name string, labels map[string]string, schedulerName string, nodeSelector map[string]string) *corev1.Pod {
	p := cluster.PausePod(ns, name, labels)
	p.Spec.SchedulerName = schedulerName
	p.Spec.NodeSelector = nodeSelector
	return p
}

func onNode(name string) map[string]string { return map[string]string{"kubernetes.io/hostname": name} }

// metricSum adds up the samples of the metric name (exact) whose labels
// include every label given ("k", "v" pairs), and says whether any sample
// matched.
func metricSum(text []byte, name string, labels ...string) (float64, bool) {
	var sum float64
	found := false
	sc := bufio.NewScanner(strings.NewReader(string(text)))
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		var lbls string
		switch {
		case strings.HasPrefix(rest, "{"):
			end := strings.Index(rest, "}")
			if end < 0 {
				continue
			}
			lbls, rest = rest[1:end], rest[end+1:]
		case strings.HasPrefix(rest, " "):
		default:
			continue // a longer name
		}
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			if !strings.Contains(","+lbls+",", ","+labels[i]+"="+strconv.Quote(labels[i+1])+",") {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	return sum, found
}

// schedulerMetric scrapes the scheduler and returns metricSum's answer.
func schedulerMetric(t *testing.T, s *cluster.Scheduler, name string, labels ...string) (float64, bool) {
	t.Helper()
	return metricSum(scrape(t, s), name, labels...)
}

// scrape is the scheduler's /metrics text.
func scrape(t *testing.T, s *cluster.Scheduler) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	b, err := s.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waitExited waits for the scheduler process to end.
func waitExited(t *testing.T, s *cluster.Scheduler, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for s.Running() {
		if time.Now().After(deadline) {
			t.Fatalf("the scheduler (pid %d) is still running after %s; log:\n%s", s.PID(), timeout, fileTail(s.LogPath, 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fileTail is the last n lines of a file.
func fileTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// writeFiles writes name -> content into dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
