package diff

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// pool is a group of nodes with the same placement labels.
type pool struct {
	name   string
	size   int
	labels map[string]string
	spot   bool // also gets the spot taint
}

// The node pools: ~40 nodes with the labels the placement templates read.
var pools = []pool{
	{name: "alpha", size: 4, labels: map[string]string{"tenant": "alpha"}},
	{name: "alpha-spot", size: 2, labels: map[string]string{"tenant": "alpha", "node.kubernetes.io/lifecycle": "spot"}, spot: true},
	{name: "beta", size: 5, labels: map[string]string{"tenant": "beta"}},
	{name: "beta-priv", size: 1, labels: map[string]string{"tenant": "beta", "node.example.com/privileged-pods": "allowed"}},
	{name: "general", size: 12, labels: map[string]string{}},
	{name: "spot", size: 8, labels: map[string]string{"node.kubernetes.io/lifecycle": "spot"}, spot: true},
	{name: "priv", size: 4, labels: map[string]string{"node.example.com/privileged-pods": "allowed"}},
	{name: "priv-spot", size: 1, labels: map[string]string{"node.example.com/privileged-pods": "allowed", "node.kubernetes.io/lifecycle": "spot"}, spot: true},
	{name: "gamma", size: 2, labels: map[string]string{"tenant": "gamma"}},
	// Odd labels: an empty tenant, a privileged-pods value that is not "allowed",
	// a lifecycle that is not spot.
	{name: "odd", size: 1, labels: map[string]string{"tenant": "", "node.example.com/privileged-pods": "denied", "node.kubernetes.io/lifecycle": "on-demand"}},
}

var zones = []string{"zone-a", "zone-b", "zone-c"}

type node struct {
	name string
	pool string
	obj  *unstructured.Unstructured
}

// makeNodes builds realistic Node objects for the pools.
func makeNodes() []node {
	var out []node
	i := 0
	for _, p := range pools {
		for j := 1; j <= p.size; j++ {
			name := fmt.Sprintf("%s-%d", p.name, j)
			zone := zones[i%len(zones)]
			labels := map[string]any{
				"kubernetes.io/hostname":           name,
				"kubernetes.io/os":                 "linux",
				"kubernetes.io/arch":               "amd64",
				"beta.kubernetes.io/os":            "linux",
				"beta.kubernetes.io/arch":          "amd64",
				"node.kubernetes.io/instance-type": "m5.xlarge",
				"topology.kubernetes.io/region":    "eu-west-1",
				"topology.kubernetes.io/zone":      zone,
			}
			for k, v := range p.labels {
				labels[k] = v
			}
			spec := map[string]any{
				"podCIDR":    fmt.Sprintf("10.244.%d.0/24", i),
				"podCIDRs":   []any{fmt.Sprintf("10.244.%d.0/24", i)},
				"providerID": fmt.Sprintf("aws:///%s/i-%012x", zone, 0xabc000+i),
			}
			if p.spot {
				spec["taints"] = []any{map[string]any{"key": "spot", "value": "true", "effect": "NoSchedule"}}
			}
			obj := map[string]any{
				"apiVersion": "v1",
				"kind":       "Node",
				"metadata": map[string]any{
					"name":              name,
					"uid":               fmt.Sprintf("00000000-0000-4000-8000-%012d", i),
					"resourceVersion":   fmt.Sprintf("%d", 1000+i),
					"creationTimestamp": "2025-03-01T10:00:00Z",
					"labels":            labels,
					"annotations": map[string]any{
						"node.alpha.kubernetes.io/ttl":                           "0",
						"volumes.kubernetes.io/controller-managed-attach-detach": "true",
					},
				},
				"spec": spec,
				"status": map[string]any{
					"capacity":    map[string]any{"cpu": "4", "memory": "16246044Ki", "pods": "110", "ephemeral-storage": "101430960Ki"},
					"allocatable": map[string]any{"cpu": "3920m", "memory": "15324444Ki", "pods": "110", "ephemeral-storage": "93478772582"},
					"conditions": []any{
						map[string]any{"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory", "lastHeartbeatTime": "2025-03-01T10:05:00Z", "lastTransitionTime": "2025-03-01T10:00:00Z"},
						map[string]any{"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": "2025-03-01T10:05:00Z", "lastTransitionTime": "2025-03-01T10:00:30Z"},
					},
					"addresses": []any{
						map[string]any{"type": "InternalIP", "address": fmt.Sprintf("10.0.%d.%d", i/200, 10+i%200)},
						map[string]any{"type": "Hostname", "address": name},
					},
					"nodeInfo": map[string]any{
						"architecture": "amd64", "operatingSystem": "linux", "osImage": "Ubuntu 24.04.2 LTS",
						"kernelVersion": "6.8.0-1021-aws", "containerRuntimeVersion": "containerd://1.7.27",
						"kubeletVersion": "v1.33.1", "kubeProxyVersion": "v1.33.1",
						"machineID": fmt.Sprintf("%032x", i), "systemUUID": fmt.Sprintf("ec2%029x", i), "bootID": fmt.Sprintf("b%031x", i),
					},
				},
			}
			out = append(out, node{name: name, pool: p.name, obj: &unstructured.Unstructured{Object: obj}})
			i++
		}
	}
	return out
}

// namespaceSpec is a Namespace of the inventory; pods also go to
// "unsynced", which is not in it (namespaceObject {}).
type namespaceSpec struct {
	name   string
	labels map[string]string
	weight int // share of the generated pods
}

var namespaces = []namespaceSpec{
	{name: "default", weight: 30},
	{name: "alpha", labels: map[string]string{"tenant": "alpha"}, weight: 15},
	{name: "beta", labels: map[string]string{"tenant": "beta"}, weight: 15},
	{name: "gamma", labels: map[string]string{"tenant": "gamma", "env": "prod"}, weight: 5},
	{name: "kube-system", weight: 5},
	{name: "opa-scheduler-extender", labels: map[string]string{"app.kubernetes.io/part-of": "opa-scheduler-extender"}, weight: 3},
	{name: "team-x", labels: map[string]string{"team": "x", "env": "prod"}, weight: 10},
	{name: "sandbox", labels: map[string]string{"env": "dev", "pod-security.kubernetes.io/enforce": "baseline", "tenant": ""}, weight: 7},
	{name: "unsynced", weight: 10}, // not in the inventory
}

const unsyncedNamespace = "unsynced"

// makeNamespace builds a Namespace as the API server returns it. It must
// survive the peer's corev1.Namespace JSON round trip unchanged (checked in
// the test), so that input.review.namespaceObject is the same on both sides.
func makeNamespace(i int, ns namespaceSpec) *unstructured.Unstructured {
	labels := map[string]any{"kubernetes.io/metadata.name": ns.name}
	for k, v := range ns.labels {
		labels[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "Namespace",
		"metadata": map[string]any{
			"name":              ns.name,
			"uid":               fmt.Sprintf("11111111-0000-4000-8000-%012d", i),
			"resourceVersion":   fmt.Sprintf("%d", 500+i),
			"creationTimestamp": "2025-02-01T09:00:00Z",
			"labels":            labels,
			"annotations":       map[string]any{"example.com/owner": "platform"},
		},
		"spec":   map[string]any{"finalizers": []any{"kubernetes"}},
		"status": map[string]any{"phase": "Active"},
	}}
}
