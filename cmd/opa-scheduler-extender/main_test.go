package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommandLine: every way of starting the binary wrong says so on
// stderr (a pod's logs), with the usage, and exits 2.
func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string // substring expected on stdout
		stderr []string
	}{
		{name: "mistyped flag", args: []string{"--polcy-dir", "x"}, code: 2, stderr: []string{"serve: unknown flag: --polcy-dir", "Usage: opa-scheduler-extender [serve]", "--policy-dir string"}},
		{name: "mistyped flag of serve", args: []string{"serve", "--listen"}, code: 2, stderr: []string{"serve: flag needs an argument: --listen", "Flags:"}},
		{name: "bad value", args: []string{"serve", "--request-timeout", "soon"}, code: 2, stderr: []string{"invalid argument \"soon\"", "--request-timeout"}},
		{name: "mistyped flag of verify", args: []string{"verify", "--rnu", "x"}, code: 2, stderr: []string{"verify: unknown flag: --rnu", "Usage: opa-scheduler-extender verify"}},
		{name: "unknown command", args: []string{"sreve"}, code: 2, stderr: []string{`unknown command "sreve"`, "Usage:"}},
		{name: "stray argument", args: []string{"serve", "extra"}, code: 2, stderr: []string{"unexpected arguments [extra]"}},
		{name: "version flag", args: []string{"--version"}, code: 0, stdout: "opa-scheduler-extender "},
		{name: "version command", args: []string{"version"}, code: 0, stdout: "(revision "},
		{name: "version of serve", args: []string{"serve", "--version"}, code: 0, stdout: "opa-scheduler-extender "},
		{name: "help", args: []string{"--help"}, code: 0, stderr: []string{"Usage:", "verify PATH"}},
		{name: "help of serve", args: []string{"serve", "--help"}, code: 0, stderr: []string{"--policy-dir string"}},
		{name: "nothing to enforce", args: []string{"serve", "--no-cluster"}, code: 1, stderr: []string{"nothing to enforce"}},
		{name: "negative heap floor", args: []string{"serve", "--no-cluster", "--policy-dir", "x", "--gc-heap-floor-bytes", "-1"}, code: 1, stderr: []string{"--gc-heap-floor-bytes -1: want 0 or more"}},
		{name: "negative heap growth", args: []string{"serve", "--no-cluster", "--policy-dir", "x", "--gc-heap-max-growth-bytes", "-1"}, code: 1, stderr: []string{"--gc-heap-max-growth-bytes -1: want 0 or more"}},
		{name: "unknown failure policy", args: []string{"serve", "--no-cluster", "--policy-dir", "x", "--default-k8s-native-validation-failure-policy", "Sometimes"}, code: 1, stderr: []string{`Sometimes`, `want Fail or Ignore`}},
		{name: "unknown failure policy in verify", args: []string{"verify", "--default-k8s-native-validation-failure-policy", "Sometimes", "x"}, code: 2, stderr: []string{"want Fail or Ignore"}},
		{name: "negative parallelism", args: []string{"serve", "--no-cluster", "--policy-dir", "x", "--eval-parallelism", "-2"}, code: 1, stderr: []string{"--eval-parallelism -2: want 0 or more"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tc.args, &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit code %d, want %d (stderr: %s)", code, tc.code, stderr.String())
			}
			if !strings.Contains(stdout.String(), tc.stdout) {
				t.Errorf("stdout %q, want it to contain %q", stdout.String(), tc.stdout)
			}
			for _, want := range tc.stderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr does not say %q:\n%s", want, stderr.String())
				}
			}
			if tc.code == 2 && stdout.Len() > 0 {
				t.Errorf("a usage error wrote to stdout: %s", stdout.String())
			}
		})
	}
}

func TestBuildInfo(t *testing.T) {
	old := version
	defer func() { version = old }()
	version = "v9.9.9"
	if b := buildInfo(); b.Version != "v9.9.9" || !strings.HasPrefix(b.GoVersion, "go") {
		t.Errorf("build info %+v, want the version set at build time and the Go version", b)
	}
}

func TestTestCommand(t *testing.T) {
	examples := filepath.Join("..", "..", "deploy", "examples")
	pods := filepath.Join("testdata", "pods.yaml")
	broken := filepath.Join(t.TempDir(), "broken.yaml")
	if err := os.WriteFile(broken, []byte("apiVersion: templates.gatekeeper.sh/v1\nkind: ConstraintTemplate\nmetadata: {name: k8sbroken}\nspec:\n  crd: {spec: {names: {kind: K8sBroken}}}\n  targets: [{target: admission.k8s.gatekeeper.sh, rego: 'package k8sbroken\n\n    violation[{\"msg\": m}] { m := nope(input) }'}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Three mistakes that once passed in silence: a constraint kind no
	// template defines, a Node and a Pod in one YAML document, a --node
	// that is not there.
	typo := filepath.Join(t.TempDir(), "typo.yaml")
	if err := os.WriteFile(typo, []byte("apiVersion: constraints.gatekeeper.sh/v1beta1\nkind: K8sTenantNodeIsolatio\nmetadata: {name: typo}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	merged := filepath.Join(t.TempDir(), "merged.yaml")
	if err := os.WriteFile(merged, []byte("apiVersion: v1\nkind: Node\nmetadata: {name: extra}\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout []string
		stderr string
	}{
		{name: "a constraint of a kind no template defines", args: []string{"test", examples, pods, typo}, code: 2,
			stderr: "constraint K8sTenantNodeIsolatio/typo is not in force: no ConstraintTemplate in force defines kind K8sTenantNodeIsolatio"},
		{name: "two objects in one document", args: []string{"test", examples, pods, merged}, code: 2, stderr: "merged.yaml: document 1: a key twice in one mapping"},
		{name: "a node that is not there", args: []string{"test", examples, pods, "--node", "ghost"}, code: 2, stderr: "--node ghost: no Node of that name"},
		{name: "denied somewhere", args: []string{"test", examples, pods, "--node", "alpha-1", "--node", "beta-1"}, code: 1, stdout: []string{
			"alpha/web-1    alpha-1  allowed  10",
			"alpha/web-1    beta-1   denied   0      K8sTenantNodeIsolation/tenant-nodes  deny    this node is reserved for tenant <beta>, the pod belongs to tenant <alpha>",
		}},
		{name: "allowed and scored", args: []string{"test", examples, pods, "--node", "general-a-1", "--node", "general-b-1", "-o", "json"}, code: 1, stdout: []string{
			`"pod": "default/api-1"`, `"node": "general-b-1"`, `"verdict": "allowed"`, `"score": 0`, `"action": "warn"`,
		}},
		{name: "no pods", args: []string{"test", examples}, code: 2, stderr: "found 0 pods and 7 nodes"},
		{name: "a template that does not compile", args: []string{"test", examples, pods, broken}, code: 2, stderr: "k8sbroken"},
		{name: "no path", args: []string{"test"}, code: 2, stderr: "Usage: opa-scheduler-extender test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), tc.args, &stdout, &stderr); code != tc.code {
				t.Errorf("exit code %d, want %d (stderr: %s)", code, tc.code, stderr.String())
			}
			for _, want := range tc.stdout {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
				}
			}
			if !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.stderr, stderr.String())
			}
		})
	}
}

// TestClusterConfigLookup: a policy folder alone never picks up the
// developer's kubeconfig; without one, $KUBECONFIG is used as kubectl
// would.
func TestClusterConfigLookup(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://example.invalid:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kc)
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	for _, tc := range []struct {
		name string
		f    serveFlags
		host string // "" = no cluster
	}{
		{"folder alone", serveFlags{policyDir: "deploy/examples"}, ""},
		{"no folder: $KUBECONFIG", serveFlags{}, "https://example.invalid:6443"},
		{"explicit", serveFlags{policyDir: "x", kubeconfig: kc}, "https://example.invalid:6443"},
		{"no cluster", serveFlags{noCluster: true}, ""},
	} {
		cfg, err := clusterConfig(tc.f)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		host := ""
		if cfg != nil {
			host = cfg.Host
		}
		if host != tc.host {
			t.Errorf("%s: cluster %q, want %q", tc.name, host, tc.host)
		}
	}
}
