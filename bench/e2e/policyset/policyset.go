// Package policyset is what the e2e benchmarks enforce: the policy sets
// (ConstraintTemplates with their constraints, read from the repository
// and the Gatekeeper library), how to install them in a test cluster as
// Gatekeeper would, and the pods and namespaces the realistic set is
// meant for. The realistic set's nodes are cluster.KubeletNode.
//
//   - Examples: the four placement policies of deploy/examples.
//   - Realistic: the whole Gatekeeper library (every template with its
//     first sample constraint, made warn at this enforcement point by the
//     opa.ActionAnnotation annotation) plus the five placement templates of
//     bench/testdata/realistic (three deny, two warn).
package policyset

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/cluster"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/source"
)

// Policy set names (the benchmarks' -policy-set flag).
const (
	// Examples is the four example placement policies of deploy/examples
	// (for fake nodes, cluster.FakeNode, and plain pause pods).
	Examples = "examples"
	// Realistic is the whole Gatekeeper library, warn, plus the five
	// placement templates of bench/testdata/realistic, for kubelet-sized
	// nodes (cluster.KubeletNode) in the pools those templates use and the
	// pods of RealisticPod in namespaces labelled RealisticNamespaceLabels.
	Realistic = "realistic"
)

// RealisticPlacementTemplates is the number of templates in bench/testdata/realistic.
const RealisticPlacementTemplates = 5

// Policy is one ConstraintTemplate and its constraints.
type Policy struct {
	// Source says where it comes from: "deploy/examples/x",
	// "library/general/x" or "realistic/x".
	Source      string
	Template    *unstructured.Unstructured
	Constraints []*unstructured.Unstructured
}

// RepoRoot is the main module's directory (three levels above this
// package's source; ../../.. of the working directory of a test in
// bench/e2e/<package> if the source path is not known).
func RepoRoot() string {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
	}
	return filepath.Join("..", "..", "..")
}

// DefaultLibraryDir is where the Gatekeeper library's library/ folder is
// expected: shared/gatekeeper-library/library next to the repository.
func DefaultLibraryDir() string {
	return filepath.Join(RepoRoot(), "..", "shared", "gatekeeper-library", "library")
}

// Load reads the policies of a set; libraryDir is the Gatekeeper
// library's library/ folder (Realistic only).
func Load(set, libraryDir string) ([]Policy, error) {
	root := RepoRoot()
	switch set {
	case Examples:
		return loadDirs(filepath.Join(root, "deploy", "examples"), "deploy/examples/", 4)
	case Realistic:
		lib, err := loadLibrary(libraryDir)
		if err != nil {
			return nil, err
		}
		pl, err := loadDirs(filepath.Join(root, "bench", "testdata", "realistic"), "realistic/", RealisticPlacementTemplates)
		if err != nil {
			return nil, err
		}
		return append(lib, pl...), nil
	}
	return nil, fmt.Errorf("unknown policy set %q (want %q or %q)", set, Examples, Realistic)
}

// loadDirs reads dir/*/template.yaml and dir/*/constraint.yaml (want of
// them, in name order).
func loadDirs(dir, prefix string, want int) ([]Policy, error) {
	tmpls, err := filepath.Glob(filepath.Join(dir, "*", "template.yaml"))
	if err != nil {
		return nil, err
	}
	if len(tmpls) != want {
		abs, _ := filepath.Abs(dir)
		return nil, fmt.Errorf("want %d templates in %s/*/template.yaml, found %d", want, abs, len(tmpls))
	}
	sort.Strings(tmpls)
	var out []Policy
	for _, tf := range tmpls {
		d := filepath.Dir(tf)
		t, err := readOne(tf)
		if err != nil {
			return nil, err
		}
		cons, err := source.ReadFile(filepath.Join(d, "constraint.yaml"))
		if err != nil {
			return nil, err
		}
		if len(cons) == 0 {
			return nil, fmt.Errorf("%s: no constraint", filepath.Join(d, "constraint.yaml"))
		}
		out = append(out, Policy{Source: prefix + filepath.Base(d), Template: t, Constraints: cons})
	}
	return out, nil
}

// loadLibrary reads every library/*/*/template.yaml with its first
// samples/*/constraint.yaml (sorted by path, as bench/perf LoadAll picks
// them when it has no preference), the constraint annotated warn at this
// enforcement point. Gatekeeper's own enforcementAction is left as shipped.
func loadLibrary(dir string) ([]Policy, error) {
	if fi, err := os.Stat(filepath.Join(dir, "pod-security-policy")); err != nil || !fi.IsDir() {
		abs, _ := filepath.Abs(dir)
		return nil, fmt.Errorf("gatekeeper-library not found at %s (set -library): %v", abs, err)
	}
	tmpls, err := filepath.Glob(filepath.Join(dir, "*", "*", "template.yaml"))
	if err != nil {
		return nil, err
	}
	if len(tmpls) < 40 {
		return nil, fmt.Errorf("only %d templates in %s/*/*/template.yaml", len(tmpls), dir)
	}
	sort.Strings(tmpls)
	var out []Policy
	for _, tf := range tmpls {
		d := filepath.Dir(tf)
		rel, _ := filepath.Rel(dir, d)
		samples, _ := filepath.Glob(filepath.Join(d, "samples", "*", "constraint.yaml"))
		if len(samples) == 0 {
			return nil, fmt.Errorf("%s: no sample constraint", rel)
		}
		sort.Strings(samples)
		t, err := readOne(tf)
		if err != nil {
			return nil, err
		}
		c, err := readOne(samples[0])
		if err != nil {
			return nil, err
		}
		anns := c.GetAnnotations()
		if anns == nil {
			anns = map[string]string{}
		}
		anns[opa.ActionAnnotation] = "warn"
		c.SetAnnotations(anns)
		out = append(out, Policy{Source: "library/" + filepath.ToSlash(rel), Template: t, Constraints: []*unstructured.Unstructured{c}})
	}
	return out, nil
}

func readOne(path string) (*unstructured.Unstructured, error) {
	objs, err := source.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(objs) != 1 {
		return nil, fmt.Errorf("%s: want one object, found %d", path, len(objs))
	}
	return objs[0], nil
}

// CountConstraints is the number of constraints of all policies.
func CountConstraints(ps []Policy) int {
	n := 0
	for _, p := range ps {
		n += len(p.Constraints)
	}
	return n
}

// Install does what Gatekeeper's template controller and a user would:
// every constraint CRD first, then the templates, then (past the API
// server's 2 s delay for custom resources of a newly Established CRD) the
// constraints.
func Install(ctx context.Context, c *cluster.Cluster, ps []Policy) error {
	for _, p := range ps {
		if err := c.CreateConstraintCRDForTemplate(ctx, p.Template); err != nil {
			return fmt.Errorf("%s: %w", p.Source, err)
		}
	}
	established := time.Now()
	for _, p := range ps {
		gv, err := schema.ParseGroupVersion(p.Template.GetAPIVersion())
		if err != nil {
			return fmt.Errorf("%s: %w", p.Source, err)
		}
		if _, err := c.Dynamic().Resource(gv.WithResource("constrainttemplates")).Create(ctx, p.Template, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("%s: template: %w", p.Source, err)
		}
	}
	time.Sleep(time.Until(established.Add(2100 * time.Millisecond)))
	for _, p := range ps {
		for _, con := range p.Constraints {
			gv, err := schema.ParseGroupVersion(con.GetAPIVersion())
			if err != nil {
				return fmt.Errorf("%s: %w", p.Source, err)
			}
			gvr := gv.WithResource(strings.ToLower(con.GetKind()))
			if _, err := c.Dynamic().Resource(gvr).Create(ctx, con, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("%s: constraint %s: %w", p.Source, con.GetName(), err)
			}
		}
	}
	return nil
}

// Loaded reports whether an engine's status shows want templates and
// constraints, all in force without errors.
func Loaded(st opa.Status, wantTemplates, wantConstraints int) bool {
	if len(st.Templates) != wantTemplates || len(st.Constraints) != wantConstraints {
		return false
	}
	for _, ts := range st.Templates {
		if !ts.Active || ts.Error != "" {
			return false
		}
	}
	for _, cs := range st.Constraints {
		if !cs.Active || cs.Error != "" {
			return false
		}
	}
	return true
}

// NotInForce lists the templates and constraints of an engine's status
// that are not in force or carry an error, one line each.
func NotInForce(st opa.Status) []string {
	var bad []string
	for _, ts := range st.Templates {
		if !ts.Active || ts.Error != "" {
			bad = append(bad, fmt.Sprintf("template %s: active %v, %s", ts.Name, ts.Active, ts.Error))
		}
	}
	for _, cs := range st.Constraints {
		if !cs.Active || cs.Error != "" {
			bad = append(bad, fmt.Sprintf("constraint %s/%s: active %v, %s", cs.Kind, cs.Name, cs.Active, cs.Error))
		}
	}
	return bad
}

// RealisticNamespaceLabels label the namespaces of the realistic set's
// pods: a production namespace of no tenant, so the preferred-zones
// template (warn) applies and the tenant-nodes template (deny) keeps the
// pods off the tenant pools (alpha, beta, alpha-spot).
var RealisticNamespaceLabels = map[string]string{"env": "prod", "team": "shop"}

// RealisticPod is pending pod i of the realistic set, named p-%04d:
// cluster.PausePod with, by ReplicaSet, what lets it bind under the deny
// placement constraints. rs-0, rs-1, rs-3: plain (the general pools and
// the system pool; the tenant pools are denied, the spot pools tainted).
// rs-2 tolerates spot (the spot-capacity template allows it on
// spot-a/spot-b; alpha-spot stays denied by tenant-nodes). Every eighth
// pod (i%8 == 7) is a node-agent that uses the host network:
// privileged-system-pool (deny) lets it run only on the system pool.
// Every pod has the token volume ServiceAccount admission would give it
// (the harness's API server runs without that plugin): named
// kube-api-access-<5 characters> per pod, mounted in its container.
func RealisticPod(ns string, i int) *corev1.Pod {
	app := fmt.Sprintf("rs-%d", i%4)
	if i%8 == 7 {
		app = "node-agent"
	}
	p := cluster.PausePod(ns, fmt.Sprintf("p-%04d", i), map[string]string{"app": app})
	addTokenVolume(p, i)
	switch {
	case app == "node-agent":
		p.Spec.HostNetwork = true
		p.Spec.Tolerations = []corev1.Toleration{{Key: "node.example.com/system", Operator: corev1.TolerationOpExists}}
	case i%4 == 2:
		p.Spec.Tolerations = []corev1.Toleration{{Key: "spot", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	}
	return p
}

// addTokenVolume gives p pod i's token volume, as ServiceAccount
// admission makes it: a projected token, the cluster's CA and the
// namespace, named kube-api-access-<suffix>, mounted read-only in every
// container at the service account path. The name's suffix is drawn as
// bench/perf's tokenVolume draws it (that module is not a dependency of
// this one, and is heavy: Gatekeeper's framework).
func addTokenVolume(p *corev1.Pod, i int) {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	n := uint64(i) * 0x9e3779b97f4a7c15
	suffix := make([]byte, 5)
	for j := range suffix {
		suffix[j] = alphabet[n%uint64(len(alphabet))]
		n /= uint64(len(alphabet))
	}
	name := "kube-api-access-" + string(suffix)
	expiry, mode := int64(3607), int32(420)
	p.Spec.ServiceAccountName = "default" // a token source needs one; admission sets it
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: &mode,
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: &expiry, Path: "token"}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace",
				FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		},
	}}})
	for c := range p.Spec.Containers {
		p.Spec.Containers[c].VolumeMounts = append(p.Spec.Containers[c].VolumeMounts,
			corev1.VolumeMount{Name: name, ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"})
	}
}
