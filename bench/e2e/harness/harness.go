// Package harness holds the e2e tests' helpers over a cluster.Cluster that
// fail the test on error: reading the repository's policies, installing
// them, creating namespaces, nodes and pods, and waiting for what the
// scheduler did with them. The extender's and the plugin build's tests
// (bench/e2e/extender, bench/e2e/plugin) share them. It owns no process:
// package cluster starts and stops those.
package harness

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/cluster"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/source"
)

// RepoRoot is the main module as seen from a test package one level below
// bench/e2e (tests run in their package's folder).
var RepoRoot = filepath.Join("..", "..", "..")

// ReadObjects reads the objects of a file of the repository (rel to its root).
func ReadObjects(t testing.TB, rel string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := source.ReadFile(filepath.Join(RepoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// ExamplePolicy is deploy/examples/<name>'s template and constraint.
func ExamplePolicy(t testing.TB, name string) (*unstructured.Unstructured, *unstructured.Unstructured) {
	t.Helper()
	return ReadObjects(t, "deploy/examples/"+name+"/template.yaml")[0], ReadObjects(t, "deploy/examples/"+name+"/constraint.yaml")[0]
}

// InstallPolicy creates a template (and the constraint CRD Gatekeeper's
// controller would), then its constraints.
func InstallPolicy(t testing.TB, c *cluster.Cluster, template *unstructured.Unstructured, constraints ...*unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	if err := c.CreateConstraintCRDForTemplate(ctx, template); err != nil {
		t.Fatalf("constraint CRD: %v", err)
	}
	if _, err := c.Dynamic().Resource(cluster.ConstraintTemplateGVR).Create(ctx, template, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create template %s: %v", template.GetName(), err)
	}
	for _, con := range constraints {
		CreateConstraint(t, c, con)
	}
}

// CreateConstraint creates a constraint of an installed template.
func CreateConstraint(t testing.TB, c *cluster.Cluster, con *unstructured.Unstructured) {
	t.Helper()
	if _, err := c.Dynamic().Resource(cluster.ConstraintGVR(con.GetKind())).Create(context.Background(), con, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create constraint %s: %v", con.GetName(), err)
	}
}

// DeleteConstraint deletes a constraint.
func DeleteConstraint(t testing.TB, c *cluster.Cluster, kind, name string) {
	t.Helper()
	if err := c.Dynamic().Resource(cluster.ConstraintGVR(kind)).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete constraint %s: %v", name, err)
	}
}

// SetAnnotation sets an annotation on u and returns u.
func SetAnnotation(u *unstructured.Unstructured, k, v string) *unstructured.Unstructured {
	a := u.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[k] = v
	u.SetAnnotations(a)
	return u
}

// CreateNamespace creates a namespace (one that exists is fine).
func CreateNamespace(t testing.TB, c *cluster.Cluster, name string, labels map[string]string) {
	t.Helper()
	_, err := c.Client().CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// CreateNodes creates healthy, empty nodes with the given labels, by name.
func CreateNodes(t testing.TB, c *cluster.Cluster, nodes map[string]map[string]string) {
	t.Helper()
	var names []string
	for n := range nodes {
		names = append(names, n)
	}
	if _, err := c.CreateNodes(context.Background(), len(names), func(i int) *corev1.Node {
		return cluster.FakeNode(names[i], nodes[names[i]], nil)
	}); err != nil {
		t.Fatal(err)
	}
}

// CreatePod creates a pod.
func CreatePod(t testing.TB, c *cluster.Cluster, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	out, err := c.Client().CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// BoundNode waits for the pod to be bound and returns its node.
func BoundNode(t testing.TB, c *cluster.Cluster, ns, name string, timeout time.Duration) string {
	t.Helper()
	p, err := c.WaitForPodBound(context.Background(), ns, name, timeout)
	if err != nil {
		t.Fatalf("pod %s/%s not bound: %v", ns, name, err)
	}
	return p.Spec.NodeName
}

// FailedSchedulingMessage waits for the pod's FailedScheduling event that
// contains want, and returns its message.
func FailedSchedulingMessage(t testing.TB, c *cluster.Cluster, ns, name, want string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		evs, err := c.Client().CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err == nil {
			for _, e := range evs.Items {
				if e.Reason == "FailedScheduling" {
					last = e.Message
					if strings.Contains(e.Message, want) {
						return e.Message
					}
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no FailedScheduling event for %s/%s containing %q; last: %q", ns, name, want, last)
	return ""
}

// AssertPending fails t if the pod is bound.
func AssertPending(t testing.TB, c *cluster.Cluster, ns, name string) {
	t.Helper()
	p, err := c.Client().CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" {
		t.Fatalf("pod %s/%s was bound to %s; want it pending", ns, name, p.Spec.NodeName)
	}
}

// StillPending waits d, then fails t if the pod is bound.
func StillPending(t testing.TB, c *cluster.Cluster, ns, name string, d time.Duration) {
	t.Helper()
	time.Sleep(d)
	AssertPending(t, c, ns, name)
}
