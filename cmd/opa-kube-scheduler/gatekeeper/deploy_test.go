package gatekeeper

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	"sigs.k8s.io/yaml"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/source"
)

// deployDir is the plugin build's manifests.
const deployDir = "../../../deploy/plugin"

func readConfigMap(t *testing.T, file string) *corev1.ConfigMap {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, file))
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(b, &cm); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return &cm
}

// TestDeployedConfiguration loads deploy/plugin's KubeSchedulerConfiguration
// as kube-scheduler does, validates it, decodes every profile's
// OPAGatekeeper args, and loads tenant b's policy folder (the ConfigMap's
// files) into an engine: what `kubectl apply -k deploy/plugin` starts must
// start.
func TestDeployedConfiguration(t *testing.T) {
	dir := t.TempDir()
	policies := filepath.Join(dir, "tenant-b")
	if err := os.Mkdir(policies, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range readConfigMap(t, "tenant-b-policies.yaml").Data {
		if err := os.WriteFile(filepath.Join(policies, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	config := readConfigMap(t, "config.yaml").Data["config.yaml"]
	config = strings.ReplaceAll(config, "/policies/tenant-b", policies)
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := options.LoadConfigFromFile(klog.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if errs := validation.ValidateKubeSchedulerConfiguration(cfg); errs != nil {
		t.Fatalf("kube-scheduler refuses the configuration: %v", errs)
	}
	points := map[string]string{}
	folders := 0
	for _, p := range cfg.Profiles {
		enabled := 0
		for _, set := range [][]string{names(p.Plugins.PreFilter.Enabled), names(p.Plugins.Filter.Enabled), names(p.Plugins.PreScore.Enabled), names(p.Plugins.Score.Enabled)} {
			for _, n := range set {
				if n == Name {
					enabled++
				}
			}
		}
		if enabled != 4 {
			t.Errorf("profile %s enables %s at %d of its 4 extension points", p.SchedulerName, Name, enabled)
		}
		var args Args
		found := false
		for _, pc := range p.PluginConfig {
			if pc.Name == Name {
				found = true
				if args, err = decodeArgs(pc.Args); err != nil {
					t.Errorf("profile %s: %v", p.SchedulerName, err)
				}
			}
		}
		if !found {
			args, _ = decodeArgs(nil)
		}
		points[p.SchedulerName] = args.EnforcementPoint
		if args.PolicyDir != "" {
			folders++
			e, err := opa.New(context.Background(), opa.Options{EnforcementPoint: args.EnforcementPoint})
			if err != nil {
				t.Fatal(err)
			}
			if err := source.NewDir(args.PolicyDir, e, source.DirOptions{}).Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			st := e.Status()
			if len(st.Templates) != 1 || !st.Templates[0].Active || len(st.Constraints) != 1 || !st.Constraints[0].Active || st.Constraints[0].Action != opa.Deny {
				t.Errorf("profile %s: its folder's policy is not in force: %+v", p.SchedulerName, st)
			}
			e.Close(context.Background())
		}
	}
	if folders != 1 {
		t.Errorf("%d profiles with a policy folder, want tenant-b-scheduler's", folders)
	}
	if points["opa-scheduler"] != opa.DefaultEnforcementPoint || points["tenant-a-scheduler"] != "tenant-a-scheduler" {
		t.Errorf("enforcement points by profile %v", points)
	}
}

func names(ps []config.Plugin) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}
