// Package chart_test checks the Helm chart in deploy/chart against the
// kustomize manifests it stands beside: one source of truth. The chart with
// its default values renders the objects of deploy/base (Helm's own labels
// apart, and the Namespace, which `helm install --create-namespace` makes),
// and each option renders the manifest of deploy/options or deploy/monitoring
// it replaces. The rendered objects are then offered to a real kube-apiserver
// (server-side dry run) as deploy/base is in bench/e2e/extender.
//
//	cd bench/e2e && go test ./chart/
package chart_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/cluster"
)

var repoRoot = filepath.Join("..", "..", "..")

const release = "opa-scheduler-extender" // the name deploy/ uses

// render renders the chart with values (YAML) as release in its namespace.
func render(t *testing.T, values string) ([]*unstructured.Unstructured, error) {
	t.Helper()
	ch, err := loader.Load(filepath.Join(repoRoot, "deploy", "chart", "opa-scheduler-extender"))
	if err != nil {
		t.Fatal(err)
	}
	var vals map[string]any
	if err := yaml.Unmarshal([]byte(values), &vals); err != nil {
		t.Fatal(err)
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: release, Namespace: release, Revision: 1, IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []*unstructured.Unstructured
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		out = append(out, decode(t, files[name])...)
	}
	return out, nil
}

func decode(t *testing.T, text string) []*unstructured.Unstructured {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(text)))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("%v:\n%s", err, doc)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

// kustomized builds a kustomization folder of the repository.
func kustomized(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(repoRoot, dir))
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, r := range rm.Resources() {
		m, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out
}

func file(t *testing.T, rel string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, string(b))
}

// helmLabels are what the chart adds to every object's labels.
var helmLabels = []string{"app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "helm.sh/chart"}

// canonical is an object as JSON with Helm's labels dropped (and an empty
// labels map dropped with them), so that both renderings compare equal
// when they mean the same.
func canonical(t *testing.T, u *unstructured.Unstructured) string {
	t.Helper()
	b, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	_ = json.Unmarshal(b, &obj) // numbers and key order made uniform
	if md, ok := obj["metadata"].(map[string]any); ok {
		labels, _ := md["labels"].(map[string]any)
		for _, l := range helmLabels {
			delete(labels, l)
		}
		if labels != nil && len(labels) == 0 {
			delete(md, "labels")
		}
	}
	b, _ = json.MarshalIndent(obj, "", "  ")
	return string(b)
}

func byKey(t *testing.T, objs []*unstructured.Unstructured) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, o := range objs {
		out[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = canonical(t, o)
	}
	return out
}

func sameObjects(t *testing.T, what string, got, want []*unstructured.Unstructured) {
	t.Helper()
	g, w := byKey(t, got), byKey(t, want)
	for k, wv := range w {
		gv, ok := g[k]
		switch {
		case !ok:
			t.Errorf("%s: the chart does not render %s", what, k)
		case gv != wv:
			t.Errorf("%s: %s differs: %s", what, k, firstDifference(gv, wv))
		}
	}
	for k := range g {
		if _, ok := w[k]; !ok {
			t.Errorf("%s: the chart renders %s, which the manifests do not have", what, k)
		}
	}
}

// firstDifference shows where two renderings part, with some context.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	i := 0
	for i < len(g) && i < len(w) && g[i] == w[i] {
		i++
	}
	from := max(0, i-3)
	return fmt.Sprintf("at line %d\nchart:\n%s\nmanifest:\n%s", i+1,
		strings.Join(g[from:min(len(g), i+3)], "\n"), strings.Join(w[from:min(len(w), i+3)], "\n"))
}

func without(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() != kind {
			out = append(out, o)
		}
	}
	return out
}

func only(objs []*unstructured.Unstructured, kinds ...string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		for _, k := range kinds {
			if o.GetKind() == k {
				out = append(out, o)
			}
		}
	}
	return out
}

func TestChartRendersTheManifests(t *testing.T) {
	defaults, err := render(t, "")
	if err != nil {
		t.Fatal(err)
	}
	sameObjects(t, "defaults vs deploy/base", defaults, without(kustomized(t, "deploy/base"), "Namespace"))

	for _, tc := range []struct {
		name, values, manifest string
		kinds                  []string
	}{
		{"networkPolicy", "networkPolicy: {enabled: true, controlPlaneCIDR: 10.0.0.0/24}", "deploy/options/networkpolicy.yaml", []string{"NetworkPolicy"}},
		{"certManager", "certificates: {mode: certManager}", "deploy/options/cert-manager.yaml", []string{"Issuer", "Certificate"}},
		{"serviceMonitor", "monitoring: {serviceMonitor: {enabled: true}}", "deploy/monitoring/servicemonitor.yaml", []string{"ServiceMonitor"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := render(t, tc.values)
			if err != nil {
				t.Fatal(err)
			}
			sameObjects(t, tc.name, only(objs, tc.kinds...), file(t, tc.manifest))
		})
	}
	t.Run("secondScheduler", func(t *testing.T) {
		objs, err := render(t, "secondScheduler: {enabled: true}")
		if err != nil {
			t.Fatal(err)
		}
		var sched []*unstructured.Unstructured
		for _, o := range objs {
			if o.GetLabels()["app.kubernetes.io/name"] == "opa-scheduler" {
				sched = append(sched, o)
			}
		}
		sameObjects(t, "secondScheduler", sched, kustomized(t, "deploy/second-scheduler"))
	})
}

func TestChartValues(t *testing.T) {
	objs, err := render(t, `
syncKinds: [{group: apps, version: v1, kind: Deployment, resource: deployments}, {version: v1, kind: Service, resource: services}]
logDecisions: deny
replicaCount: 3
pdb: {enabled: false}
image: {repository: registry.example.com/ose, tag: v9}
`)
	if err != nil {
		t.Fatal(err)
	}
	all := ""
	for _, o := range objs {
		all += canonical(t, o)
	}
	for _, want := range []string{`"--sync-kind=apps/v1/Deployment"`, `"--sync-kind=v1/Service"`, `"--log-decisions=deny"`, `"replicas": 3`,
		`"image": "registry.example.com/ose:v9"`, `"deployments"`, `"services"`} {
		if !strings.Contains(all, want) {
			t.Errorf("rendered objects lack %s", want)
		}
	}
	if len(only(objs, "PodDisruptionBudget")) != 0 {
		t.Error("pdb.enabled=false still renders a PodDisruptionBudget")
	}
	for values, want := range map[string]string{
		"certificates: {mode: selfmade}":      `certificates.mode "selfmade": want external or certManager`,
		"logDecisions: everything":            `logDecisions "everything"`,
		"networkPolicy: {enabled: true}":      "networkPolicy.controlPlaneCIDR is required",
		"syncKinds: [{version: v1, kind: X}]": "syncKinds[].resource is required",
	} {
		if _, err := render(t, values); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("values %q: error %v, want %q", values, err, want)
		}
	}
}

// TestChartObjectsAcceptedByTheAPIServer offers the default rendering and
// the NetworkPolicy to a real kube-apiserver (server-side dry run; the
// namespace for real). cert-manager's and the Prometheus Operator's kinds
// need CRDs the test cluster does not have.
func TestChartObjectsAcceptedByTheAPIServer(t *testing.T) {
	objs, err := render(t, "networkPolicy: {enabled: true, controlPlaneCIDR: 10.0.0.0/24}")
	if err != nil {
		t.Fatal(err)
	}
	c := cluster.Start(t, cluster.Options{})
	ctx := context.Background()
	if err := c.EnsureNamespace(ctx, release); err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	for _, u := range objs {
		m, err := mapper.RESTMapping(u.GroupVersionKind().GroupKind(), u.GroupVersionKind().Version)
		if err != nil {
			t.Fatalf("%s: %v", u.GetKind(), err)
		}
		res := c.Dynamic().Resource(m.Resource)
		var rerr error
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			_, rerr = res.Namespace(u.GetNamespace()).Create(ctx, u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		} else {
			_, rerr = res.Create(ctx, u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		}
		if rerr != nil {
			t.Errorf("%s %s refused by the API server: %v", u.GetKind(), u.GetName(), rerr)
		}
	}
}
