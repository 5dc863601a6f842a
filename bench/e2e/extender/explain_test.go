package extender_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/cluster"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/harness"
)

// TestExplainCommand runs `opa-scheduler-extender explain` against the
// real API server, as an operator would from a laptop: the binary syncs
// the cluster's policies, reads the pending pod and judges it on every
// node; --input prints the review a template sees.
func TestExplainCommand(t *testing.T) {
	c := newCluster(t)
	harness.CreateNamespace(t, c, "alpha", map[string]string{"tenant": "alpha"})
	harness.CreateNodes(t, c, map[string]map[string]string{
		"alpha-1": {"tenant": "alpha", "topology.kubernetes.io/zone": "zone-a"},
		"beta-1":  {"tenant": "beta", "topology.kubernetes.io/zone": "zone-a"},
	})
	tmpl, con := harness.ExamplePolicy(t, "tenant-isolation")
	harness.InstallPolicy(t, c, tmpl, con)
	harness.CreatePod(t, c, cluster.PausePod("alpha", "web-1", nil)) // no scheduler runs: it stays pending
	bin, err := cluster.BuildExtender(t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"explain", "--kubeconfig", c.Kubeconfig}, args...)...)
		var out, errs bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errs
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != 0 {
			t.Logf("explain %v: exit %d, stderr: %s", args, code, errs.String())
		}
		return out.String(), code
	}

	table, code := run("--pod", "alpha/web-1")
	if code != 0 {
		t.Fatalf("explain exited %d", code)
	}
	for _, want := range []string{
		"alpha/web-1  alpha-1  allowed  10",
		"alpha/web-1  beta-1   denied   0      K8sTenantNodeIsolation/tenant-nodes  deny    this node is reserved for tenant <beta>, the pod belongs to tenant <alpha>",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}

	out, code := run("--pod", "alpha/web-1", "--node", "beta-1", "-o", "json")
	var rows []struct {
		Node, Verdict string
		Violations    []struct{ Msg string }
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil || code != 0 {
		t.Fatalf("-o json: exit %d, %v: %s", code, err, out)
	}
	if len(rows) != 1 || rows[0].Node != "beta-1" || rows[0].Verdict != "denied" || len(rows[0].Violations) != 1 {
		t.Errorf("-o json --node beta-1: %+v", rows)
	}

	out, code = run("--pod", "alpha/web-1", "--input", "beta-1")
	var input struct {
		Review struct {
			Operation       string
			Object          struct{ Spec struct{ NodeName string } }
			NamespaceObject struct {
				Metadata struct{ Labels map[string]string }
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &input); err != nil || code != 0 {
		t.Fatalf("--input: exit %d, %v: %s", code, err, out)
	}
	if r := input.Review; r.Operation != "CREATE" || r.Object.Spec.NodeName != "beta-1" || r.NamespaceObject.Metadata.Labels["tenant"] != "alpha" {
		t.Errorf("--input beta-1: %+v", r)
	}

	explainWithPolicyDir(t, run)

	if _, code := run("--pod", "alpha/missing"); code != 1 {
		t.Errorf("a missing pod: exit %d, want 1", code)
	}
}

// explainWithPolicyDir: --policy-dir judges with the folder's policies,
// not the cluster's (a plugin profile with policyDir), on the cluster's
// nodes.
func explainWithPolicyDir(t *testing.T, run func(args ...string) (string, int)) {
	t.Helper()
	dir := t.TempDir()
	spot, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "examples", "spot-toleration", "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	folderPolicy := string(spot) + `
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sSpotNodeToleration
metadata:
  name: folder-only
spec:
  enforcementAction: warn
`
	if err := os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(folderPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	table, code := run("--pod", "alpha/web-1", "--policy-dir", dir)
	if code != 0 {
		t.Fatalf("explain --policy-dir exited %d", code)
	}
	if strings.Contains(table, "tenant-nodes") || !strings.Contains(table, "alpha/web-1  beta-1   allowed  10") {
		t.Errorf("with --policy-dir the cluster's tenant-nodes constraint still applies, or beta-1 is not allowed:\n%s", table)
	}

}
