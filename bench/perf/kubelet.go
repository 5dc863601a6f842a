package perf

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// NodeSize selects which Node objects make up the cluster. The node names,
// pools, zones, placement labels and taints are the same in both; what
// differs is everything else the kubelet and the cloud provider report.
type NodeSize string

const (
	// SmallNodes are Node(i): the usual labels and annotations, four
	// images, fixed status values; 3.6 KB of JSON.
	SmallNodes NodeSize = "small"
	// KubeletNodes are KubeletNode(i): what a kubelet on a cloud VM
	// reports, 30 to 50 images included; about 10 KB of JSON.
	KubeletNodes NodeSize = "kubelet"
)

// ParseNodeSize reads a -node-size flag; "" is def.
func ParseNodeSize(s string, def NodeSize) (NodeSize, error) {
	switch NodeSize(s) {
	case "":
		return def, nil
	case SmallNodes, KubeletNodes:
		return NodeSize(s), nil
	}
	return "", fmt.Errorf("unknown node size %q (want %q or %q)", s, SmallNodes, KubeletNodes)
}

// DefaultNodeSize is the node size a policy set is measured with:
// kubelet-sized nodes for the realistic set, small nodes for the others
// (so that their figures stay comparable with earlier runs).
func DefaultNodeSize(set string) NodeSize {
	if set == SetRealistic {
		return KubeletNodes
	}
	return SmallNodes
}

// Node is node i of this size.
func (s NodeSize) Node(i int) *unstructured.Unstructured {
	if s == KubeletNodes {
		return KubeletNode(i)
	}
	return Node(i)
}

// Nodes are nodes 0..n-1 of this size.
func (s NodeSize) Nodes(n int) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, n)
	for i := range out {
		out[i] = s.Node(i)
	}
	return out
}

// MaintenanceLabel marks the kubelet-sized nodes that are about to be
// drained (every 23rd node, across all pools and zones); the realistic
// set's maintenance template steers pods away from them.
// MaintenanceReasonAnnotation says why.
const (
	MaintenanceLabel            = "node.example.com/maintenance"
	MaintenanceReasonAnnotation = "node.example.com/maintenance-reason"
)

// UnderMaintenance reports whether kubelet-sized node i carries
// MaintenanceLabel=true.
func UnderMaintenance(i int) bool { return i%23 == 11 }

// nodeImage is an image a node may hold, as the kubelet reports it.
type nodeImage struct {
	repo, tag string
	size      int64
	// digestOnly images were pulled by digest: no tag name is reported.
	digestOnly bool
	// extraTag is a second tag of the same digest ("latest", "stable").
	extraTag string
}

func (im nodeImage) entry() map[string]any {
	sum := sha256.Sum256([]byte(im.repo + ":" + im.tag))
	names := []any{im.repo + "@sha256:" + hex.EncodeToString(sum[:])}
	if !im.digestOnly {
		names = append(names, im.repo+":"+im.tag)
		if im.extraTag != "" {
			names = append(names, im.repo+":"+im.extraTag)
		}
	}
	return map[string]any{"names": names, "sizeBytes": im.size}
}

const ecr = "602401143452.dkr.ecr.eu-west-1.amazonaws.com"

// systemImages are on every node: the node's daemons (CNI, kube-proxy,
// CSI node plugin, log and metrics agents) and the sandbox image.
var systemImages = []nodeImage{
	{repo: ecr + "/amazon-k8s-cni", tag: "v1.19.2-eksbuild.1", size: 47389010},
	{repo: ecr + "/amazon-k8s-cni-init", tag: "v1.19.2-eksbuild.1", size: 61827735},
	{repo: ecr + "/amazon/aws-network-policy-agent", tag: "v1.1.6-eksbuild.1", size: 40237455},
	{repo: ecr + "/eks/kube-proxy", tag: "v1.33.0-minimal-eksbuild.2", size: 30642218},
	{repo: ecr + "/eks/pause", tag: "3.10", size: 318731, extraTag: "latest"},
	{repo: ecr + "/eks/aws-ebs-csi-driver", tag: "v1.41.0", size: 112443562},
	{repo: ecr + "/eks/csi-node-driver-registrar", tag: "v2.13.0-eks-1-33-1", size: 15112381},
	{repo: ecr + "/eks/livenessprobe", tag: "v2.15.0-eks-1-33-1", size: 14273903},
	{repo: "public.ecr.aws/aws-observability/aws-for-fluent-bit", tag: "2.32.5", size: 110342901},
	{repo: "quay.io/prometheus/node-exporter", tag: "v1.9.0", size: 12463981},
	{repo: "docker.io/datadog/agent", tag: "7.63.3", size: 487261533},
}

// clusterImages are the cluster add-ons; each node holds most of them.
var clusterImages = []nodeImage{
	{repo: ecr + "/eks/coredns", tag: "v1.11.4-eksbuild.2", size: 25621374},
	{repo: "docker.io/istio/proxyv2", tag: "1.25.1", size: 99517244},
	{repo: "docker.io/istio/pilot", tag: "1.25.1", size: 77262111},
	{repo: "quay.io/jetstack/cert-manager-controller", tag: "v1.17.1", size: 20103764},
	{repo: "quay.io/jetstack/cert-manager-webhook", tag: "v1.17.1", size: 16294032},
	{repo: "registry.k8s.io/metrics-server/metrics-server", tag: "v0.7.2", size: 19494617},
	{repo: "registry.k8s.io/kube-state-metrics/kube-state-metrics", tag: "v2.15.0", size: 20862311},
	{repo: "registry.k8s.io/autoscaling/cluster-autoscaler", tag: "v1.32.1", size: 31775520},
	{repo: "public.ecr.aws/eks/aws-load-balancer-controller", tag: "v2.12.0", size: 43815205},
	{repo: "registry.k8s.io/external-dns/external-dns", tag: "v0.15.1", size: 32451790},
	{repo: "docker.io/grafana/promtail", tag: "3.4.2", size: 78034512},
	{repo: "openpolicyagent/gatekeeper", tag: "v3.19.1", size: 41372830},
}

// workloadImages are the images of the cluster's applications, several
// versions of each (a node keeps the images of pods it ran since its
// boot): the ReplicaSets' images, their predecessors, and common bases.
var workloadImages = func() []nodeImage {
	apps := []struct {
		repo     string
		versions []string
		size     int64
	}{
		{"openpolicyagent/frontend", []string{"1.4.2", "1.4.1", "1.3.9"}, 61234567},
		{"openpolicyagent/envoy", []string{"1.33.0", "1.32.3"}, 58210994},
		{"openpolicyagent/api", []string{"2.1.0", "2.0.7", "2.0.6"}, 84455210},
		{"registry.example.com/alpha/web", []string{"3.2.1", "3.2.0", "3.1.4"}, 142663011},
		{"registry.example.com/beta/worker", []string{"0.9.14", "0.9.13"}, 203118734},
		{"registry.example.com/beta/migrate", []string{"0.9.14", "0.9.13"}, 45120998},
		{"registry.example.com/data/etl", []string{"2025.02.1", "2025.01.3", "2025.01.2"}, 734551209},
		{"registry.example.com/shop/cart", []string{"4.0.3", "4.0.2"}, 96034521},
		{"docker.io/library/redis", []string{"7.4.2", "7.2.7"}, 45867113},
		{"registry.example.com/ml/trainer", []string{"1.12.0", "1.11.2"}, 2840332197},
		{"registry.example.com/ml/metrics-sidecar", []string{"0.3.1"}, 18822301},
		{"registry.example.com/ml/fetch-model", []string{"1.12.0", "1.11.2"}, 73002145},
		{"registry.example.com/jobs/report", []string{"1.6.0", "1.5.3", "1.5.2"}, 122045987},
		{"docker.io/library/nginx", []string{"1.27.4-alpine", "1.27.3-alpine"}, 20445312},
		{"docker.io/library/postgres", []string{"16.8", "16.6"}, 158432567},
		{"docker.io/library/python", []string{"3.12.9-slim", "3.11.11-slim"}, 49875210},
		{"docker.io/library/busybox", []string{"1.37.0", "1.36.1"}, 2156723},
		{"docker.io/library/alpine", []string{"3.21.3", "3.20.6"}, 3652114},
		{"docker.io/bitnami/kafka", []string{"3.9.0-debian-12-r12"}, 312554011},
		{"docker.io/bitnami/rabbitmq", []string{"4.0.7-debian-12-r1"}, 285112330},
		{"docker.elastic.co/elasticsearch/elasticsearch", []string{"8.17.3"}, 743221045},
		{"docker.io/library/eclipse-temurin", []string{"21.0.6_7-jre", "17.0.14_7-jre"}, 101224411},
		{"ghcr.io/example-org/payments", []string{"5.12.0", "5.11.4", "5.11.3"}, 176550321},
		{"ghcr.io/example-org/search", []string{"2.8.1", "2.8.0"}, 214003562},
		{"registry.example.com/shop/checkout", []string{"1.19.2", "1.19.1"}, 88120034},
		{"registry.example.com/shop/catalog", []string{"7.3.0", "7.2.9"}, 129876544},
	}
	var out []nodeImage
	for a, app := range apps {
		for v, ver := range app.versions {
			out = append(out, nodeImage{repo: app.repo, tag: ver, size: app.size - int64(v)*int64(1+a)*731421,
				digestOnly: (a+v)%7 == 3, extraTag: map[bool]string{true: "stable"}[v == 0 && a%5 == 1]})
		}
	}
	return out
}()

// amis are the node images in use: most pools run the current one, a
// rolling upgrade has not reached every node yet.
var amis = []struct{ id, kernel, osImage, runtime, kubelet string }{
	{"ami-0c2e5d1f3a4b69870", "6.1.128-136.201.amzn2023.x86_64", "Amazon Linux 2023.6.20250218", "containerd://1.7.25", "v1.33.0-eks-802817d"},
	{"ami-07f1a3c9e2d4b5a61", "6.1.127-135.201.amzn2023.x86_64", "Amazon Linux 2023.6.20250203", "containerd://1.7.25", "v1.32.1-eks-5d632ec"},
}

// KubeletNode is node i as a kubelet on a cloud VM reports it and as the
// API server returns it (and Gatekeeper's sync stores it): the placement
// labels and taints of Node(i), plus what a real node carries: the
// cloud provider's labels and annotations, full nodeInfo, the four
// pressure and ready conditions with their timestamps, addresses,
// daemonEndpoints, capacity and allocatable, runtime handlers, and the 30
// to 50 largest images the node holds (the kubelet reports at most 50,
// largest first). Every value a real cluster varies per node varies per
// node: names, IPs, instance, machine, system and boot IDs, creation and
// heartbeat times, the image list; the node image varies within a pool
// during a rolling upgrade. About 10 KB of JSON (8 to 14 KB).
func KubeletNode(i int) *unstructured.Unstructured {
	g := newKubeletGen(i)
	// The random draws come in a fixed order (instance, times, images,
	// uid, resourceVersion, nodeInfo): node i is the same in every run.
	instanceID := "i-0" + g.hex(16)
	labels, annotations := g.meta(instanceID)
	created := 1740819600 + int64(i)*37 + g.rng.Int64N(30) // 2025-03-01T09:00:00Z, a node every ~37 s
	heartbeat := 1740931200 + g.rng.Int64N(40)             // 2025-03-02T16:00:00Z, heartbeats 40 s apart
	spec := g.spec(instanceID)
	images := g.images()
	metadata := map[string]any{
		"name":              g.name,
		"uid":               uuid4(g.rng),
		"resourceVersion":   fmt.Sprintf("%d", 48213000+i*7+g.rng.IntN(7)),
		"creationTimestamp": rfc3339(created),
		"labels":            labels,
		"annotations":       annotations,
	}
	status := g.status(created, heartbeat, images)
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": metadata, "spec": spec, "status": status}}
}

// kubeletGen is what KubeletNode derives node i from.
type kubeletGen struct {
	i        int
	rng      *rand.Rand
	p        Pool
	zone     string
	name, ip string
	ami      struct{ id, kernel, osImage, runtime, kubelet string }
}

func newKubeletGen(i int) *kubeletGen {
	g := &kubeletGen{i: i, rng: rand.New(rand.NewPCG(uint64(i), 0x6b7562656c6574)), p: Pools[i%len(Pools)],
		zone: Zones[(i/len(Pools))%len(Zones)], name: NodeName(i), ami: amis[0]}
	g.ip = fmt.Sprintf("10.%d.%d.%d", 16+(i/len(Pools))%len(Zones)*16, (i/250)%256, 4+i%250)
	if i%len(Pools) >= 6 || i%17 == 4 {
		g.ami = amis[1]
	}
	return g
}

func (g *kubeletGen) hex(n int) string {
	const digits = "0123456789abcdef"
	b := make([]byte, n)
	for j := range b {
		b[j] = digits[g.rng.IntN(16)]
	}
	return string(b)
}

func rfc3339(unix int64) string { return time.Unix(unix, 0).UTC().Format(time.RFC3339) }

// meta are the labels and annotations a kubelet and the cloud provider set.
func (g *kubeletGen) meta(instanceID string) (labels, annotations map[string]any) {
	capacityType := "ON_DEMAND"
	if g.p.Labels["node.kubernetes.io/lifecycle"] == "spot" {
		capacityType = "SPOT"
	}
	labels = nodeLabels(g.name, g.p, g.zone)
	for k, v := range map[string]any{
		"topology.k8s.aws/zone-id":                 fmt.Sprintf("euw1-az%d", 1+(g.i/len(Pools))%len(Zones)),
		"k8s.io/cloud-provider-aws":                "8f3c1e2d9b7a6054c3e2f1a0b9c8d7e6",
		"eks.amazonaws.com/nodegroup":              g.p.Name,
		"eks.amazonaws.com/nodegroup-image":        g.ami.id,
		"eks.amazonaws.com/capacityType":           capacityType,
		"eks.amazonaws.com/sourceLaunchTemplateId": fmt.Sprintf("lt-0%016x", 0x1234abcd0000+uint64(g.i%len(Pools))),
	} {
		if _, pool := g.p.Labels[k]; !pool {
			labels[k] = v // the pool's own labels win, as before
		}
	}
	annotations = map[string]any{
		"node.alpha.kubernetes.io/ttl":                           "0",
		"volumes.kubernetes.io/controller-managed-attach-detach": "true",
		"alpha.kubernetes.io/provided-node-ip":                   g.ip,
		"csi.volume.kubernetes.io/nodeid":                        fmt.Sprintf(`{"ebs.csi.aws.com":"%s","efs.csi.aws.com":"%s"}`, instanceID, instanceID),
	}
	if UnderMaintenance(g.i) {
		labels[MaintenanceLabel] = "true"
		annotations[MaintenanceReasonAnnotation] = fmt.Sprintf("kernel upgrade, ticket OPS-%d", 4100+g.i)
	}
	return labels, annotations
}

func (g *kubeletGen) spec(instanceID string) map[string]any {
	cidr := fmt.Sprintf("10.%d.%d.0/24", 64+g.i/65536, (g.i/256)%256)
	spec := map[string]any{"podCIDR": cidr, "podCIDRs": []any{cidr}, "providerID": "aws:///" + g.zone + "/" + instanceID}
	if len(g.p.Taints) > 0 {
		taints := make([]any, len(g.p.Taints))
		for j, t := range g.p.Taints {
			taints[j] = t
		}
		spec["taints"] = taints
	}
	return spec
}

// images are the node's images: its daemons', most add-ons, and what its
// pods ran; 30 to 50 in all (35 on average), largest first.
func (g *kubeletGen) images() []any {
	want := 30 + g.rng.IntN(1+g.rng.IntN(21))
	var imgs []nodeImage
	imgs = append(imgs, systemImages...)
	for _, im := range clusterImages {
		if g.rng.IntN(10) < 6 {
			imgs = append(imgs, im)
		}
	}
	for _, j := range g.rng.Perm(len(workloadImages)) {
		if len(imgs) >= want {
			break
		}
		imgs = append(imgs, workloadImages[j])
	}
	sort.SliceStable(imgs, func(a, b int) bool { return imgs[a].size > imgs[b].size })
	images := make([]any, len(imgs))
	for j, im := range imgs {
		images[j] = im.entry()
	}
	return images
}

func (g *kubeletGen) status(created, heartbeat int64, images []any) map[string]any {
	p := g.p
	cond := func(typ, status, reason, msg string) any {
		return map[string]any{"type": typ, "status": status, "reason": reason, "message": msg,
			"lastHeartbeatTime": rfc3339(heartbeat), "lastTransitionTime": rfc3339(created + 12 + int64(len(typ)))}
	}
	allocMem := memoryKi(p.Memory) - 500*1024 - int64(p.CPU)*100*1024 // kube-reserved + eviction threshold
	dns := "ip-" + strings.ReplaceAll(g.ip, ".", "-") + ".eu-west-1.compute.internal"
	return map[string]any{
		"capacity": map[string]any{"cpu": fmt.Sprint(p.CPU), "memory": p.Memory, "pods": "58", "ephemeral-storage": "104845292Ki",
			"hugepages-1Gi": "0", "hugepages-2Mi": "0"},
		"allocatable": map[string]any{"cpu": fmt.Sprintf("%dm", p.CPU*1000-70-10*p.CPU), "memory": fmt.Sprintf("%dKi", allocMem), "pods": "58",
			"ephemeral-storage": "95551679124", "hugepages-1Gi": "0", "hugepages-2Mi": "0"},
		"conditions": []any{
			cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
			cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
			cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
			cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
		},
		"addresses": []any{
			map[string]any{"type": "InternalIP", "address": g.ip},
			map[string]any{"type": "InternalDNS", "address": dns},
			map[string]any{"type": "Hostname", "address": g.name},
		},
		"daemonEndpoints": map[string]any{"kubeletEndpoint": map[string]any{"Port": int64(10250)}},
		"nodeInfo":        g.nodeInfo(),
		"images":          images,
		"runtimeHandlers": []any{
			map[string]any{"name": "runc", "features": map[string]any{"recursiveReadOnlyMounts": true, "userNamespaces": true}},
			map[string]any{"name": "", "features": map[string]any{"recursiveReadOnlyMounts": true, "userNamespaces": true}},
		},
		"features": map[string]any{"supplementalGroupsPolicy": true},
	}
}

func (g *kubeletGen) nodeInfo() map[string]any {
	machineID := "ec2" + g.hex(29)
	systemUUID := "ec2" + g.hex(5) + "-" + g.hex(4) + "-" + g.hex(4) + "-" + g.hex(4) + "-" + g.hex(12)
	return map[string]any{
		"machineID":               machineID,
		"systemUUID":              systemUUID,
		"bootID":                  uuid4(g.rng),
		"kernelVersion":           g.ami.kernel,
		"osImage":                 g.ami.osImage,
		"containerRuntimeVersion": g.ami.runtime,
		"kubeletVersion":          g.ami.kubelet,
		"kubeProxyVersion":        g.ami.kubelet,
		"operatingSystem":         "linux",
		"architecture":            "amd64",
		"swap":                    map[string]any{"capacity": int64(0)},
	}
}

func uuid4(rng *rand.Rand) string {
	const digits = "0123456789abcdef"
	b := []byte("xxxxxxxx-xxxx-4xxx-8xxx-xxxxxxxxxxxx")
	for j, c := range b {
		if c == 'x' {
			b[j] = digits[rng.IntN(16)]
		}
	}
	b[19] = "89ab"[rng.IntN(4)]
	return string(b)
}

// memoryKi reads a "<n>Ki" quantity.
func memoryKi(q string) int64 {
	var n int64
	if _, err := fmt.Sscanf(q, "%dKi", &n); err != nil {
		panic(fmt.Sprintf("memory %q: %v", q, err))
	}
	return n
}
