package perf

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Pool is a group of nodes with the same placement labels and taints.
type Pool struct {
	Name         string
	Labels       map[string]string
	InstanceType string
	CPU          int    // cores
	Memory       string // capacity
	Taints       []map[string]any
}

var spotTaint = map[string]any{"key": "spot", "value": "true", "effect": "NoSchedule"}

// Pools are the ten node pools. Node i belongs to Pools[i%10] and to zone
// Zones[(i/10)%3], so the first n nodes cover every pool evenly for any n
// that is a multiple of 10.
var Pools = []Pool{
	{Name: "general-a", InstanceType: "m6i.xlarge", CPU: 4, Memory: "16248296Ki"},
	{Name: "general-b", InstanceType: "m6i.2xlarge", CPU: 8, Memory: "32496592Ki"},
	{Name: "general-c", InstanceType: "c6i.2xlarge", CPU: 8, Memory: "16248296Ki"},
	{Name: "general-d", InstanceType: "r6i.xlarge", CPU: 4, Memory: "32496592Ki"},
	{Name: "alpha", Labels: map[string]string{"tenant": "alpha"}, InstanceType: "m6i.2xlarge", CPU: 8, Memory: "32496592Ki"},
	{Name: "beta", Labels: map[string]string{"tenant": "beta"}, InstanceType: "m6i.2xlarge", CPU: 8, Memory: "32496592Ki"},
	{Name: "spot-a", Labels: map[string]string{"node.kubernetes.io/lifecycle": "spot"}, InstanceType: "m5.2xlarge", CPU: 8, Memory: "32496592Ki", Taints: []map[string]any{spotTaint}},
	{Name: "spot-b", Labels: map[string]string{"node.kubernetes.io/lifecycle": "spot"}, InstanceType: "c5.4xlarge", CPU: 16, Memory: "32496592Ki", Taints: []map[string]any{spotTaint}},
	{Name: "alpha-spot", Labels: map[string]string{"tenant": "alpha", "node.kubernetes.io/lifecycle": "spot"}, InstanceType: "m5.2xlarge", CPU: 8, Memory: "32496592Ki", Taints: []map[string]any{spotTaint}},
	{Name: "system", Labels: map[string]string{"node.example.com/privileged-pods": "allowed"}, InstanceType: "m6i.large", CPU: 2, Memory: "8124148Ki",
		Taints: []map[string]any{{"key": "node.example.com/system", "value": "true", "effect": "PreferNoSchedule"}}},
}

// Zones of the cluster (the node-preference example prefers zone-a).
var Zones = []string{"zone-a", "zone-b", "zone-c"}

// NodeName is the name of node i: its pool and index.
func NodeName(i int) string { return fmt.Sprintf("%s-%05d", Pools[i%len(Pools)].Name, i) }

// NodeNames are the names of nodes 0..n-1.
func NodeNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = NodeName(i)
	}
	return out
}

// Node is node i as the API server returns it (and as Gatekeeper's sync
// stores it): labels, annotations, taints, capacity, allocatable,
// conditions, addresses, nodeInfo and a few images. About 4 KiB of JSON.
func Node(i int) *unstructured.Unstructured {
	p := Pools[i%len(Pools)]
	zone := Zones[(i/len(Pools))%len(Zones)]
	name := NodeName(i)
	labels := nodeLabels(name, p, zone)
	spec := map[string]any{
		"podCIDR":    fmt.Sprintf("10.%d.%d.0/24", 64+i/65536, (i/256)%256),
		"podCIDRs":   []any{fmt.Sprintf("10.%d.%d.0/24", 64+i/65536, (i/256)%256)},
		"providerID": fmt.Sprintf("aws:///%s/i-0%016x", zone, 0x5eed0000+i),
	}
	if len(p.Taints) > 0 {
		taints := make([]any, len(p.Taints))
		for j, t := range p.Taints {
			taints[j] = t
		}
		spec["taints"] = taints
	}
	ip := fmt.Sprintf("10.0.%d.%d", (i/250)%256, 4+i%250)
	hb := "2025-03-01T10:05:00Z"
	cond := func(typ, status, reason, msg string) any {
		return map[string]any{"type": typ, "status": status, "reason": reason, "message": msg,
			"lastHeartbeatTime": hb, "lastTransitionTime": "2025-03-01T10:00:30Z"}
	}
	image := func(names []any, size int64) any { return map[string]any{"names": names, "sizeBytes": size} }
	obj := map[string]any{
		"apiVersion": "v1",
		"kind":       "Node",
		"metadata": map[string]any{
			"name":              name,
			"uid":               fmt.Sprintf("6e0d0000-0000-4000-8000-%012d", i),
			"resourceVersion":   fmt.Sprintf("%d", 100000+i),
			"creationTimestamp": "2025-03-01T10:00:00Z",
			"labels":            labels,
			"annotations": map[string]any{
				"node.alpha.kubernetes.io/ttl":                           "0",
				"volumes.kubernetes.io/controller-managed-attach-detach": "true",
				"csi.volume.kubernetes.io/nodeid":                        fmt.Sprintf(`{"ebs.csi.aws.com":"i-0%016x"}`, 0x5eed0000+i),
			},
		},
		"spec": spec,
		"status": map[string]any{
			"capacity":    map[string]any{"cpu": fmt.Sprint(p.CPU), "memory": p.Memory, "pods": "110", "ephemeral-storage": "104845292Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0"},
			"allocatable": map[string]any{"cpu": fmt.Sprintf("%dm", p.CPU*1000-80), "memory": p.Memory, "pods": "110", "ephemeral-storage": "95551679124", "hugepages-1Gi": "0", "hugepages-2Mi": "0"},
			"conditions": []any{
				cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
				cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
				cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
				cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
			},
			"addresses": []any{
				map[string]any{"type": "InternalIP", "address": ip},
				map[string]any{"type": "InternalDNS", "address": "ip-" + ip + ".eu-west-1.compute.internal"},
				map[string]any{"type": "Hostname", "address": name},
			},
			"daemonEndpoints": map[string]any{"kubeletEndpoint": map[string]any{"Port": int64(10250)}},
			"nodeInfo": map[string]any{
				"architecture": "amd64", "operatingSystem": "linux", "osImage": "Amazon Linux 2023.6.20250203",
				"kernelVersion": "6.1.127-135.201.amzn2023.x86_64", "containerRuntimeVersion": "containerd://1.7.25",
				"kubeletVersion": "v1.33.1", "kubeProxyVersion": "v1.33.1",
				"machineID": fmt.Sprintf("ec2%029x", i), "systemUUID": fmt.Sprintf("ec2%05x-0000-0000-0000-%012x", i%0xfffff, i), "bootID": fmt.Sprintf("b0070000-0000-4000-8000-%012x", i),
			},
			"images": []any{
				image([]any{"602401143452.dkr.ecr.eu-west-1.amazonaws.com/amazon-k8s-cni@sha256:5b7e7b0c5ab8d2f0f8e8a1c1a7f1b0e4d9c7b3c5d1e2f3a4b5c6d7e8f9a0b1c2", "602401143452.dkr.ecr.eu-west-1.amazonaws.com/amazon-k8s-cni:v1.19.2"}, 47389010),
				image([]any{"602401143452.dkr.ecr.eu-west-1.amazonaws.com/eks/kube-proxy@sha256:0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0", "602401143452.dkr.ecr.eu-west-1.amazonaws.com/eks/kube-proxy:v1.33.1-eksbuild.2"}, 30642218),
				image([]any{"openpolicyagent/frontend@sha256:aa11bb22cc33dd44ee55ff6600112233445566778899aabbccddeeff00112233", "openpolicyagent/frontend:1.4.2"}, 61234567),
				image([]any{"602401143452.dkr.ecr.eu-west-1.amazonaws.com/eks/pause@sha256:529cf6b1b6e5b76e901abc43aee825badbd93f9c5ee5f1e316d46a83abbce5a2", "602401143452.dkr.ecr.eu-west-1.amazonaws.com/eks/pause:3.10"}, 318731),
			},
		},
	}
	return &unstructured.Unstructured{Object: obj}
}

// nodeLabels are the labels every Node of pool p in zone carries, small
// or kubelet-sized: the well-known topology and instance labels, the
// pool's own and example.com/pool.
func nodeLabels(name string, p Pool, zone string) map[string]any {
	labels := map[string]any{
		"kubernetes.io/hostname":                   name,
		"kubernetes.io/os":                         "linux",
		"kubernetes.io/arch":                       "amd64",
		"beta.kubernetes.io/os":                    "linux",
		"beta.kubernetes.io/arch":                  "amd64",
		"beta.kubernetes.io/instance-type":         p.InstanceType,
		"node.kubernetes.io/instance-type":         p.InstanceType,
		"topology.kubernetes.io/region":            "eu-west-1",
		"topology.kubernetes.io/zone":              zone,
		"failure-domain.beta.kubernetes.io/region": "eu-west-1",
		"failure-domain.beta.kubernetes.io/zone":   zone,
		"example.com/pool":                         p.Name,
	}
	for k, v := range p.Labels {
		labels[k] = v
	}
	return labels
}

// Nodes are nodes 0..n-1.
func Nodes(n int) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, n)
	for i := range out {
		out[i] = Node(i)
	}
	return out
}

// NamespaceSpec is a Namespace of the cluster.
type NamespaceSpec struct {
	Name   string
	Labels map[string]string
}

// ClusterNamespaces are the cluster's Namespaces; tenant namespaces carry
// the tenant label the tenant-isolation example reads.
var ClusterNamespaces = []NamespaceSpec{
	{Name: "default"},
	{Name: "kube-system"},
	{Name: "alpha", Labels: map[string]string{"tenant": "alpha"}},
	{Name: "beta", Labels: map[string]string{"tenant": "beta"}},
	{Name: "shop", Labels: map[string]string{"team": "shop", "env": "prod"}},
	{Name: "batch", Labels: map[string]string{"team": "data"}},
	{Name: "ml", Labels: map[string]string{"team": "data", "env": "prod"}},
	{Name: "monitoring", Labels: map[string]string{"team": "platform"}},
}

// Namespaces are the cluster's Namespace objects, as the API server
// returns them.
func Namespaces() []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, len(ClusterNamespaces))
	for i, ns := range ClusterNamespaces {
		labels := map[string]any{"kubernetes.io/metadata.name": ns.Name}
		for k, v := range ns.Labels {
			labels[k] = v
		}
		out[i] = &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1",
			"kind":       "Namespace",
			"metadata": map[string]any{
				"name":              ns.Name,
				"uid":               fmt.Sprintf("11111111-0000-4000-8000-%012d", i),
				"resourceVersion":   fmt.Sprintf("%d", 500+i),
				"creationTimestamp": "2025-02-01T09:00:00Z",
				"labels":            labels,
			},
			"spec":   map[string]any{"finalizers": []any{"kubernetes"}},
			"status": map[string]any{"phase": "Active"},
		}}
	}
	return out
}

// NamespaceObject is the Namespace named name, or nil.
func NamespaceObject(name string) map[string]any {
	for _, ns := range Namespaces() {
		if ns.GetName() == name {
			return ns.Object
		}
	}
	return nil
}
