package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels and annotations of kubelet-sized nodes (KubeletNode) that
// placement policies read.
const (
	// LifecycleLabel is "spot" on the spot pools.
	LifecycleLabel = "node.kubernetes.io/lifecycle"
	// MaintenanceLabel is "true" on every 23rd node (KubeletNodeUnderMaintenance),
	// about to be drained; MaintenanceReasonAnnotation says why.
	MaintenanceLabel            = "node.example.com/maintenance"
	MaintenanceReasonAnnotation = "node.example.com/maintenance-reason"
)

// kubeletPool is a group of nodes with the same placement labels and
// taints; the same ten pools as bench/perf cluster.go Pools. Node i
// belongs to kubeletPools[i%10] and to zone kubeletZones[(i/10)%3].
type kubeletPool struct {
	name         string
	labels       map[string]string
	instanceType string
	cpu          int64 // cores
	memoryKi     int64 // capacity
	taints       []corev1.Taint
}

var spotTaint = corev1.Taint{Key: "spot", Value: "true", Effect: corev1.TaintEffectNoSchedule}

var kubeletPools = []kubeletPool{
	{name: "general-a", instanceType: "m6i.xlarge", cpu: 4, memoryKi: 16248296},
	{name: "general-b", instanceType: "m6i.2xlarge", cpu: 8, memoryKi: 32496592},
	{name: "general-c", instanceType: "c6i.2xlarge", cpu: 8, memoryKi: 16248296},
	{name: "general-d", instanceType: "r6i.xlarge", cpu: 4, memoryKi: 32496592},
	{name: "alpha", labels: map[string]string{"tenant": "alpha"}, instanceType: "m6i.2xlarge", cpu: 8, memoryKi: 32496592},
	{name: "beta", labels: map[string]string{"tenant": "beta"}, instanceType: "m6i.2xlarge", cpu: 8, memoryKi: 32496592},
	{name: "spot-a", labels: map[string]string{LifecycleLabel: "spot"}, instanceType: "m5.2xlarge", cpu: 8, memoryKi: 32496592, taints: []corev1.Taint{spotTaint}},
	{name: "spot-b", labels: map[string]string{LifecycleLabel: "spot"}, instanceType: "c5.4xlarge", cpu: 16, memoryKi: 32496592, taints: []corev1.Taint{spotTaint}},
	{name: "alpha-spot", labels: map[string]string{"tenant": "alpha", LifecycleLabel: "spot"}, instanceType: "m5.2xlarge", cpu: 8, memoryKi: 32496592, taints: []corev1.Taint{spotTaint}},
	{name: "system", labels: map[string]string{"node.example.com/privileged-pods": "allowed"}, instanceType: "m6i.large", cpu: 2, memoryKi: 8124148,
		taints: []corev1.Taint{{Key: "node.example.com/system", Value: "true", Effect: corev1.TaintEffectPreferNoSchedule}}},
}

var kubeletZones = []string{"zone-a", "zone-b", "zone-c"}

// KubeletNodePool is the pool of kubelet-sized node i: general-a..d,
// alpha, beta (tenants), spot-a, spot-b, alpha-spot (tainted spot=true
// NoSchedule) or system (tainted node.example.com/system PreferNoSchedule).
func KubeletNodePool(i int) string { return kubeletPools[i%len(kubeletPools)].name }

// KubeletNodeName is the name of kubelet-sized node i: its pool and index.
func KubeletNodeName(i int) string { return fmt.Sprintf("%s-%05d", KubeletNodePool(i), i) }

// KubeletNodeUnderMaintenance reports whether node i carries
// MaintenanceLabel=true and a MaintenanceReasonAnnotation (every 23rd node).
func KubeletNodeUnderMaintenance(i int) bool { return i%23 == 11 }

// nodeImage is an image a node may hold, as the kubelet reports it.
type nodeImage struct {
	repo, tag  string
	size       int64
	digestOnly bool // pulled by digest: no tag name reported
}

func (im nodeImage) entry() corev1.ContainerImage {
	sum := sha256.Sum256([]byte(im.repo + ":" + im.tag))
	names := []string{im.repo + "@sha256:" + hex.EncodeToString(sum[:])}
	if !im.digestOnly {
		names = append(names, im.repo+":"+im.tag)
	}
	return corev1.ContainerImage{Names: names, SizeBytes: im.size}
}

const ecr = "602401143452.dkr.ecr.eu-west-1.amazonaws.com"

// daemonImages are on every node; addonImages on most; appImages (several
// versions of each application) fill the list up to 30-50 images.
var (
	daemonImages = []nodeImage{
		{ecr + "/amazon-k8s-cni", "v1.19.2-eksbuild.1", 47389010, false},
		{ecr + "/amazon-k8s-cni-init", "v1.19.2-eksbuild.1", 61827735, false},
		{ecr + "/amazon/aws-network-policy-agent", "v1.1.6-eksbuild.1", 40237455, false},
		{ecr + "/eks/kube-proxy", "v1.33.0-minimal-eksbuild.2", 30642218, false},
		{ecr + "/eks/pause", "3.10", 318731, false},
		{ecr + "/eks/aws-ebs-csi-driver", "v1.41.0", 112443562, false},
		{ecr + "/eks/csi-node-driver-registrar", "v2.13.0-eks-1-33-1", 15112381, false},
		{ecr + "/eks/livenessprobe", "v2.15.0-eks-1-33-1", 14273903, false},
		{"public.ecr.aws/aws-observability/aws-for-fluent-bit", "2.32.5", 110342901, false},
		{"quay.io/prometheus/node-exporter", "v1.9.0", 12463981, false},
		{"docker.io/datadog/agent", "7.63.3", 487261533, false},
	}
	addonImages = []nodeImage{
		{ecr + "/eks/coredns", "v1.11.4-eksbuild.2", 25621374, false},
		{"docker.io/istio/proxyv2", "1.25.1", 99517244, false},
		{"docker.io/istio/pilot", "1.25.1", 77262111, false},
		{"quay.io/jetstack/cert-manager-controller", "v1.17.1", 20103764, false},
		{"quay.io/jetstack/cert-manager-webhook", "v1.17.1", 16294032, false},
		{"registry.k8s.io/metrics-server/metrics-server", "v0.7.2", 19494617, false},
		{"registry.k8s.io/kube-state-metrics/kube-state-metrics", "v2.15.0", 20862311, false},
		{"registry.k8s.io/autoscaling/cluster-autoscaler", "v1.32.1", 31775520, false},
		{"public.ecr.aws/eks/aws-load-balancer-controller", "v2.12.0", 43815205, false},
		{"registry.k8s.io/external-dns/external-dns", "v0.15.1", 32451790, false},
		{"docker.io/grafana/promtail", "3.4.2", 78034512, false},
		{"openpolicyagent/gatekeeper", "v3.19.1", 41372830, false},
	}
	appImages = func() []nodeImage {
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
			{"registry.example.com/data/etl", []string{"2025.02.1", "2025.01.3", "2025.01.2"}, 734551209},
			{"registry.example.com/shop/cart", []string{"4.0.3", "4.0.2"}, 96034521},
			{"docker.io/library/redis", []string{"7.4.2", "7.2.7"}, 45867113},
			{"registry.example.com/ml/trainer", []string{"1.12.0", "1.11.2"}, 2840332197},
			{"registry.example.com/jobs/report", []string{"1.6.0", "1.5.3", "1.5.2"}, 122045987},
			{"docker.io/library/nginx", []string{"1.27.4-alpine", "1.27.3-alpine"}, 20445312},
			{"docker.io/library/postgres", []string{"16.8", "16.6"}, 158432567},
			{"docker.io/library/python", []string{"3.12.9-slim", "3.11.11-slim"}, 49875210},
			{"docker.io/library/busybox", []string{"1.37.0", "1.36.1"}, 2156723},
			{"docker.io/bitnami/kafka", []string{"3.9.0-debian-12-r12"}, 312554011},
			{"docker.elastic.co/elasticsearch/elasticsearch", []string{"8.17.3"}, 743221045},
			{"docker.io/library/eclipse-temurin", []string{"21.0.6_7-jre", "17.0.14_7-jre"}, 101224411},
			{"ghcr.io/example-org/payments", []string{"5.12.0", "5.11.4", "5.11.3"}, 176550321},
			{"ghcr.io/example-org/search", []string{"2.8.1", "2.8.0"}, 214003562},
			{"registry.example.com/shop/checkout", []string{"1.19.2", "1.19.1"}, 88120034},
		}
		var out []nodeImage
		for a, app := range apps {
			for v, ver := range app.versions {
				out = append(out, nodeImage{app.repo, ver, app.size - int64(v*(1+a))*731421, (a+v)%7 == 3})
			}
		}
		return out
	}()
)

// kubeletGen holds what the parts of kubelet-sized node i share. Its rng
// is drawn from in a fixed order (instance ID, creation and heartbeat
// times, images, nodeInfo), so that node i is always the same.
type kubeletGen struct {
	i                             int
	rng                           *rand.Rand
	pool                          kubeletPool
	zi                            int
	zone, name, instanceID, ip    string
	ami, kernel, osImage, kubelet string
}

func newKubeletGen(i int) *kubeletGen {
	g := &kubeletGen{i: i, rng: rand.New(rand.NewPCG(uint64(i), 0x6b7562656c6574)), pool: kubeletPools[i%len(kubeletPools)]}
	g.zi = (i / len(kubeletPools)) % len(kubeletZones)
	g.zone = kubeletZones[g.zi]
	g.name = KubeletNodeName(i)
	g.instanceID = "i-0" + g.hex(16)
	g.ip = fmt.Sprintf("10.%d.%d.%d", 16+g.zi*16, (i/250)%256, 4+i%250)
	g.ami, g.kernel, g.osImage, g.kubelet = "ami-0c2e5d1f3a4b69870", "6.1.128-136.201.amzn2023.x86_64", "Amazon Linux 2023.6.20250218", "v1.33.0-eks-802817d"
	if i%len(kubeletPools) >= 6 || i%17 == 4 { // a rolling upgrade has not reached every node
		g.ami, g.kernel, g.osImage, g.kubelet = "ami-07f1a3c9e2d4b5a61", "6.1.127-135.201.amzn2023.x86_64", "Amazon Linux 2023.6.20250203", "v1.32.1-eks-5d632ec"
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

// KubeletNode is node i as a kubelet on a cloud VM reports it: the same
// shape as bench/perf KubeletNode (which bench/e2e cannot import), about
// 10 KB of JSON: the pool's placement labels and taints, the cloud
// provider's labels and annotations, every 23rd node under maintenance,
// capacity and allocatable, the four conditions, addresses,
// daemonEndpoints, full nodeInfo, runtime handlers, features and the 30 to
// 50 largest images the node holds, largest first. Per-node values (IPs,
// IDs, times, image list) vary per node, deterministically.
func KubeletNode(i int) *corev1.Node {
	g := newKubeletGen(i)
	created := metav1.NewTime(time.Unix(1740819600+int64(i)*37+g.rng.Int64N(30), 0).UTC())
	heartbeat := metav1.NewTime(time.Unix(1740931200+g.rng.Int64N(40), 0).UTC())
	images := g.images()
	capacity, allocatable := g.resources()
	cidr := fmt.Sprintf("10.%d.%d.0/24", 64+i/65536, (i/256)%256)
	yes := true
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: g.name, Labels: g.labels(), Annotations: g.annotations(), CreationTimestamp: created},
		Spec: corev1.NodeSpec{
			PodCIDR:    cidr,
			PodCIDRs:   []string{cidr},
			ProviderID: "aws:///" + g.zone + "/" + g.instanceID,
			Taints:     append([]corev1.Taint(nil), g.pool.taints...),
		},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: allocatable,
			Phase:       corev1.NodeRunning,
			Conditions:  kubeletConditions(created, heartbeat),
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: g.ip},
				{Type: corev1.NodeInternalDNS, Address: "ip-" + strings.ReplaceAll(g.ip, ".", "-") + ".eu-west-1.compute.internal"},
				{Type: corev1.NodeHostName, Address: g.name},
			},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
			NodeInfo:        g.nodeInfo(),
			Images:          images,
			RuntimeHandlers: []corev1.NodeRuntimeHandler{
				{Name: "runc", Features: &corev1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: &yes, UserNamespaces: &yes}},
				{Name: "", Features: &corev1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: &yes, UserNamespaces: &yes}},
			},
			Features: &corev1.NodeFeatures{SupplementalGroupsPolicy: &yes},
		},
	}
}

func (g *kubeletGen) labels() map[string]string {
	p := g.pool
	capacityType := "ON_DEMAND"
	if p.labels[LifecycleLabel] == "spot" {
		capacityType = "SPOT"
	}
	labels := map[string]string{
		"kubernetes.io/hostname":                   g.name,
		"kubernetes.io/os":                         "linux",
		"kubernetes.io/arch":                       "amd64",
		"beta.kubernetes.io/os":                    "linux",
		"beta.kubernetes.io/arch":                  "amd64",
		"beta.kubernetes.io/instance-type":         p.instanceType,
		"node.kubernetes.io/instance-type":         p.instanceType,
		"topology.kubernetes.io/region":            "eu-west-1",
		"topology.kubernetes.io/zone":              g.zone,
		"failure-domain.beta.kubernetes.io/region": "eu-west-1",
		"failure-domain.beta.kubernetes.io/zone":   g.zone,
		"topology.k8s.aws/zone-id":                 fmt.Sprintf("euw1-az%d", 1+g.zi),
		"k8s.io/cloud-provider-aws":                "8f3c1e2d9b7a6054c3e2f1a0b9c8d7e6",
		"eks.amazonaws.com/nodegroup":              p.name,
		"eks.amazonaws.com/nodegroup-image":        g.ami,
		"eks.amazonaws.com/capacityType":           capacityType,
		"eks.amazonaws.com/sourceLaunchTemplateId": fmt.Sprintf("lt-0%016x", 0x1234abcd0000+g.i%len(kubeletPools)),
		"example.com/pool":                         p.name,
	}
	for k, v := range p.labels {
		labels[k] = v
	}
	if KubeletNodeUnderMaintenance(g.i) {
		labels[MaintenanceLabel] = "true"
	}
	return labels
}

func (g *kubeletGen) annotations() map[string]string {
	annotations := map[string]string{
		"node.alpha.kubernetes.io/ttl":                           "0",
		"volumes.kubernetes.io/controller-managed-attach-detach": "true",
		"alpha.kubernetes.io/provided-node-ip":                   g.ip,
		"csi.volume.kubernetes.io/nodeid":                        fmt.Sprintf(`{"ebs.csi.aws.com":"%s","efs.csi.aws.com":"%s"}`, g.instanceID, g.instanceID),
	}
	if KubeletNodeUnderMaintenance(g.i) {
		annotations[MaintenanceReasonAnnotation] = fmt.Sprintf("kernel upgrade, ticket OPS-%d", 4100+g.i)
	}
	return annotations
}

// kubeletConditions are the four conditions a healthy kubelet reports.
func kubeletConditions(created, heartbeat metav1.Time) []corev1.NodeCondition {
	cond := func(typ corev1.NodeConditionType, status corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: typ, Status: status, Reason: reason, Message: msg,
			LastHeartbeatTime: heartbeat, LastTransitionTime: metav1.NewTime(created.Add(time.Duration(12+len(typ)) * time.Second))}
	}
	return []corev1.NodeCondition{
		cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
		cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
		cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
		cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
	}
}

// images is the node's image list: every daemon image, most add-ons and
// application images up to 30 to 50 in all (35 on average), largest first.
func (g *kubeletGen) images() []corev1.ContainerImage {
	want := 30 + g.rng.IntN(1+g.rng.IntN(21))
	imgs := append([]nodeImage(nil), daemonImages...)
	for _, im := range addonImages {
		if g.rng.IntN(10) < 6 {
			imgs = append(imgs, im)
		}
	}
	for _, j := range g.rng.Perm(len(appImages)) {
		if len(imgs) >= want {
			break
		}
		imgs = append(imgs, appImages[j])
	}
	sort.SliceStable(imgs, func(a, b int) bool { return imgs[a].size > imgs[b].size })
	images := make([]corev1.ContainerImage, len(imgs))
	for j, im := range imgs {
		images[j] = im.entry()
	}
	return images
}

func (g *kubeletGen) resources() (capacity, allocatable corev1.ResourceList) {
	p := g.pool
	allocMemKi := p.memoryKi - 500*1024 - p.cpu*100*1024 // kube-reserved + eviction threshold
	ki := func(n int64) resource.Quantity { return resource.MustParse(fmt.Sprintf("%dKi", n)) }
	capacity = corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(p.cpu, resource.DecimalSI),
		corev1.ResourceMemory:           ki(p.memoryKi),
		corev1.ResourcePods:             resource.MustParse("58"),
		corev1.ResourceEphemeralStorage: resource.MustParse("104845292Ki"),
		"hugepages-1Gi":                 resource.MustParse("0"),
		"hugepages-2Mi":                 resource.MustParse("0"),
	}
	allocatable = corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewMilliQuantity(p.cpu*1000-70-10*p.cpu, resource.DecimalSI),
		corev1.ResourceMemory:           ki(allocMemKi),
		corev1.ResourcePods:             resource.MustParse("58"),
		corev1.ResourceEphemeralStorage: resource.MustParse("95551679124"),
		"hugepages-1Gi":                 resource.MustParse("0"),
		"hugepages-2Mi":                 resource.MustParse("0"),
	}
	return capacity, allocatable
}

func (g *kubeletGen) nodeInfo() corev1.NodeSystemInfo {
	machineID := "ec2" + g.hex(29)
	systemUUID := "ec2" + g.hex(5) + "-" + g.hex(4) + "-" + g.hex(4) + "-" + g.hex(4) + "-" + g.hex(12)
	bootID := g.hex(8) + "-" + g.hex(4) + "-4" + g.hex(3) + "-8" + g.hex(3) + "-" + g.hex(12)
	return corev1.NodeSystemInfo{
		MachineID:               machineID,
		SystemUUID:              systemUUID,
		BootID:                  bootID,
		KernelVersion:           g.kernel,
		OSImage:                 g.osImage,
		ContainerRuntimeVersion: "containerd://1.7.25",
		KubeletVersion:          g.kubelet,
		KubeProxyVersion:        g.kubelet,
		OperatingSystem:         "linux",
		Architecture:            "amd64",
	}
}
