// Package opatest holds test fixtures shared by the engine's front ends
// (the extender in package server, the plugin build under
// cmd/opa-kube-scheduler): the enforcement table, read from
// server/testdata/enforcement.yaml, and an engine loaded with its
// policies and inventory. It is imported by tests only.
package opatest

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/source"
)

// EnforcementTable is server/testdata/enforcement.yaml.
type EnforcementTable struct {
	Policies   string                       `json:"policies"`
	Namespaces []string                     `json:"namespaces"`
	Nodes      map[string]map[string]string `json:"nodes"`
	Cases      []EnforcementCase            `json:"cases"`
}

// EnforcementCase is one pod and what each listed node's answer must be.
type EnforcementCase struct {
	Name string `json:"name"`
	Pod  struct {
		Namespace string            `json:"namespace"`
		Name      string            `json:"name"`
		Labels    map[string]string `json:"labels"`
	} `json:"pod"`
	// RejectedEverywhere is the pod-only deny message, when there is one.
	RejectedEverywhere string `json:"rejectedEverywhere"`
	// Want is per node name (nodes not listed are not checked).
	Want map[string]NodeAnswer `json:"want"`
}

// NodeAnswer is a node's expected answer: Denied is the deny message
// (empty: the node passes), Score the extender's 0..10 score of a node
// that passes.
type NodeAnswer struct {
	Denied string `json:"denied"`
	Score  int64  `json:"score"`
}

// ReadEnforcementTable reads the table from path.
func ReadEnforcementTable(path string) (*EnforcementTable, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var t EnforcementTable
	if err := yaml.UnmarshalStrict(b, &t); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &t, nil
}

// PodObject is the case's pod.
func (c *EnforcementCase) PodObject() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Pod.Namespace, Name: c.Pod.Name, Labels: c.Pod.Labels,
			UID: types.UID("uid-" + c.Pod.Namespace + "-" + c.Pod.Name)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}}},
	}
}

// NodeNames lists the table's nodes, sorted.
func (t *EnforcementTable) NodeNames() []string {
	names := make([]string, 0, len(t.Nodes))
	for n := range t.Nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// NodeObjects are the table's nodes, in NodeNames order.
func (t *EnforcementTable) NodeObjects() []*corev1.Node {
	var out []*corev1.Node
	for _, n := range t.NodeNames() {
		out = append(out, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: t.Nodes[n]}})
	}
	return out
}

// Engine is an engine with the table's policies, Namespaces and Nodes
// applied; every object must be accepted.
func (t *EnforcementTable) Engine(ctx context.Context) (*opa.Engine, error) {
	e, err := opa.New(ctx, opa.Options{})
	if err != nil {
		return nil, err
	}
	objs, err := source.ReadObjects(strings.NewReader(t.Policies))
	if err != nil {
		return nil, fmt.Errorf("policies: %w", err)
	}
	for _, ns := range t.Namespaces {
		objs = append(objs, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace",
			"metadata": map[string]any{"name": ns, "labels": map[string]any{"kubernetes.io/metadata.name": ns}}}})
	}
	for _, n := range t.NodeObjects() {
		content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(n)
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{Object: content}
		u.SetAPIVersion("v1")
		u.SetKind("Node")
		objs = append(objs, u)
	}
	changes := make([]opa.Change, len(objs))
	for i, o := range objs {
		changes[i] = opa.Change{Object: o}
	}
	if errs := e.Apply(ctx, changes); len(errs) > 0 {
		return nil, fmt.Errorf("apply the table's objects: %v", errs)
	}
	return e, nil
}
