package throughput

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/cluster"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/source"
)

// Policy sets (-policy-set).
const (
	// setExamples is the four example placement policies of
	// deploy/examples, fake nodes (cluster.FakeNode) and plain pause pods.
	setExamples = "examples"
	// setRealistic is the whole Gatekeeper library (every template with
	// its first sample constraint, each made warn here by opa.ActionAnnotation)
	// plus the five placement templates of bench/testdata/realistic (three
	// deny, two warn), kubelet-sized nodes (kubeletNode) in the pools those
	// templates use, and pods some of which tolerate spot capacity or use
	// the host network.
	setRealistic = "realistic"
)

// policy is one ConstraintTemplate and its constraints.
type policy struct {
	source      string // "deploy/examples/x", "library/general/x", "realistic/x"
	template    *unstructured.Unstructured
	constraints []*unstructured.Unstructured
}

// realisticPlacementTemplates is the number of templates in bench/testdata/realistic.
const realisticPlacementTemplates = 5

// loadPolicySet reads the policies of a set. Paths are relative to
// bench/e2e/throughput (the test's working directory).
func loadPolicySet(set, libraryDir string) ([]policy, error) {
	switch set {
	case setExamples:
		return loadDirs(filepath.Join("..", "..", "..", "deploy", "examples"), "deploy/examples/", 4)
	case setRealistic:
		lib, err := loadLibrary(libraryDir)
		if err != nil {
			return nil, err
		}
		pl, err := loadDirs(filepath.Join("..", "..", "testdata", "realistic"), "realistic/", realisticPlacementTemplates)
		if err != nil {
			return nil, err
		}
		return append(lib, pl...), nil
	}
	return nil, fmt.Errorf("unknown -policy-set %q (want %q or %q)", set, setExamples, setRealistic)
}

// loadDirs reads dir/*/template.yaml and dir/*/constraint.yaml (want of
// them, in name order).
func loadDirs(dir, prefix string, want int) ([]policy, error) {
	tmpls, err := filepath.Glob(filepath.Join(dir, "*", "template.yaml"))
	if err != nil {
		return nil, err
	}
	if len(tmpls) != want {
		abs, _ := filepath.Abs(dir)
		return nil, fmt.Errorf("want %d templates in %s/*/template.yaml, found %d", want, abs, len(tmpls))
	}
	sort.Strings(tmpls)
	var out []policy
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
		out = append(out, policy{source: prefix + filepath.Base(d), template: t, constraints: cons})
	}
	return out, nil
}

// loadLibrary reads every library/*/*/template.yaml with its first
// samples/*/constraint.yaml (sorted by path, as bench/perf LoadAll picks
// them when it has no preference), the constraint annotated warn at this
// enforcement point. Gatekeeper's own enforcementAction is left as shipped.
func loadLibrary(dir string) ([]policy, error) {
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
	var out []policy
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
		out = append(out, policy{source: "library/" + filepath.ToSlash(rel), template: t, constraints: []*unstructured.Unstructured{c}})
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

func countConstraints(ps []policy) int {
	n := 0
	for _, p := range ps {
		n += len(p.constraints)
	}
	return n
}

// installPolicies does what Gatekeeper's template controller and a user
// would: every constraint CRD first, then the templates, then (past the
// API server's 2 s delay for custom resources of a newly Established CRD)
// the constraints.
func installPolicies(ctx context.Context, c *cluster.Cluster, ps []policy) error {
	for _, p := range ps {
		if err := c.CreateConstraintCRDForTemplate(ctx, p.template); err != nil {
			return fmt.Errorf("%s: %w", p.source, err)
		}
	}
	established := time.Now()
	for _, p := range ps {
		gv, err := schema.ParseGroupVersion(p.template.GetAPIVersion())
		if err != nil {
			return fmt.Errorf("%s: %w", p.source, err)
		}
		if _, err := c.Dynamic().Resource(gv.WithResource("constrainttemplates")).Create(ctx, p.template, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("%s: template: %w", p.source, err)
		}
	}
	time.Sleep(time.Until(established.Add(2100 * time.Millisecond)))
	for _, p := range ps {
		for _, con := range p.constraints {
			gv, err := schema.ParseGroupVersion(con.GetAPIVersion())
			if err != nil {
				return fmt.Errorf("%s: %w", p.source, err)
			}
			gvr := gv.WithResource(strings.ToLower(con.GetKind()))
			if _, err := c.Dynamic().Resource(gvr).Create(ctx, con, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("%s: constraint %s: %w", p.source, con.GetName(), err)
			}
		}
	}
	return nil
}

// --- the realistic set's nodes -------------------------------------------

// pool is a group of nodes with the same placement labels and taints; the
// same ten pools as bench/perf cluster.go Pools. Node i belongs to
// pools[i%10] and to zone zones[(i/10)%3].
type pool struct {
	name         string
	labels       map[string]string
	instanceType string
	cpu          int64 // cores
	memoryKi     int64 // capacity
	taints       []corev1.Taint
}

var spotTaint = corev1.Taint{Key: "spot", Value: "true", Effect: corev1.TaintEffectNoSchedule}

const (
	lifecycleLabel = "node.kubernetes.io/lifecycle"
	// maintenanceLabel marks every 23rd node as about to be drained (the
	// node-maintenance template, warn); maintenanceReason says why.
	maintenanceLabel  = "node.example.com/maintenance"
	maintenanceReason = "node.example.com/maintenance-reason"
)

var pools = []pool{
	{name: "general-a", instanceType: "m6i.xlarge", cpu: 4, memoryKi: 16248296},
	{name: "general-b", instanceType: "m6i.2xlarge", cpu: 8, memoryKi: 32496592},
	{name: "general-c", instanceType: "c6i.2xlarge", cpu: 8, memoryKi: 16248296},
	{name: "general-d", instanceType: "r6i.xlarge", cpu: 4, memoryKi: 32496592},
	{name: "alpha", labels: map[string]string{"tenant": "alpha"}, instanceType: "m6i.2xlarge", cpu: 8, memoryKi: 32496592},
	{name: "beta", labels: map[string]string{"tenant": "beta"}, instanceType: "m6i.2xlarge", cpu: 8, memoryKi: 32496592},
	{name: "spot-a", labels: map[string]string{lifecycleLabel: "spot"}, instanceType: "m5.2xlarge", cpu: 8, memoryKi: 32496592, taints: []corev1.Taint{spotTaint}},
	{name: "spot-b", labels: map[string]string{lifecycleLabel: "spot"}, instanceType: "c5.4xlarge", cpu: 16, memoryKi: 32496592, taints: []corev1.Taint{spotTaint}},
	{name: "alpha-spot", labels: map[string]string{"tenant": "alpha", lifecycleLabel: "spot"}, instanceType: "m5.2xlarge", cpu: 8, memoryKi: 32496592, taints: []corev1.Taint{spotTaint}},
	{name: "system", labels: map[string]string{"node.example.com/privileged-pods": "allowed"}, instanceType: "m6i.large", cpu: 2, memoryKi: 8124148,
		taints: []corev1.Taint{{Key: "node.example.com/system", Value: "true", Effect: corev1.TaintEffectPreferNoSchedule}}},
}

var zones = []string{"zone-a", "zone-b", "zone-c"}

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

// nodeName is the name of realistic node i: its pool and index.
func nodeName(i int) string { return fmt.Sprintf("%s-%05d", pools[i%len(pools)].name, i) }

// kubeletNode is node i as a kubelet on a cloud VM reports it: the same
// shape as bench/perf KubeletNode (which bench/e2e cannot import), about
// 10 KB of JSON: the pool's placement labels and taints, the cloud
// provider's labels and annotations, every 23rd node under maintenance,
// capacity and allocatable, the four conditions, addresses,
// daemonEndpoints, full nodeInfo, runtime handlers, features and the 30 to
// 50 largest images the node holds, largest first. Per-node values (IPs,
// IDs, times, image list) vary per node, deterministically.
func kubeletNode(i int) *corev1.Node {
	rng := rand.New(rand.NewPCG(uint64(i), 0x6b7562656c6574))
	p := pools[i%len(pools)]
	zi := (i / len(pools)) % len(zones)
	zone := zones[zi]
	name := nodeName(i)
	hexN := func(n int) string {
		const digits = "0123456789abcdef"
		b := make([]byte, n)
		for j := range b {
			b[j] = digits[rng.IntN(16)]
		}
		return string(b)
	}
	uuid := func() string { return hexN(8) + "-" + hexN(4) + "-4" + hexN(3) + "-8" + hexN(3) + "-" + hexN(12) }
	instanceID := "i-0" + hexN(16)
	ip := fmt.Sprintf("10.%d.%d.%d", 16+zi*16, (i/250)%256, 4+i%250)
	capacityType := "ON_DEMAND"
	if p.labels[lifecycleLabel] == "spot" {
		capacityType = "SPOT"
	}
	ami, kernel, osImage, kubelet := "ami-0c2e5d1f3a4b69870", "6.1.128-136.201.amzn2023.x86_64", "Amazon Linux 2023.6.20250218", "v1.33.0-eks-802817d"
	if i%len(pools) >= 6 || i%17 == 4 { // a rolling upgrade has not reached every node
		ami, kernel, osImage, kubelet = "ami-07f1a3c9e2d4b5a61", "6.1.127-135.201.amzn2023.x86_64", "Amazon Linux 2023.6.20250203", "v1.32.1-eks-5d632ec"
	}
	labels := map[string]string{
		"kubernetes.io/hostname":                   name,
		"kubernetes.io/os":                         "linux",
		"kubernetes.io/arch":                       "amd64",
		"beta.kubernetes.io/os":                    "linux",
		"beta.kubernetes.io/arch":                  "amd64",
		"beta.kubernetes.io/instance-type":         p.instanceType,
		"node.kubernetes.io/instance-type":         p.instanceType,
		"topology.kubernetes.io/region":            "eu-west-1",
		"topology.kubernetes.io/zone":              zone,
		"failure-domain.beta.kubernetes.io/region": "eu-west-1",
		"failure-domain.beta.kubernetes.io/zone":   zone,
		"topology.k8s.aws/zone-id":                 fmt.Sprintf("euw1-az%d", 1+zi),
		"k8s.io/cloud-provider-aws":                "8f3c1e2d9b7a6054c3e2f1a0b9c8d7e6",
		"eks.amazonaws.com/nodegroup":              p.name,
		"eks.amazonaws.com/nodegroup-image":        ami,
		"eks.amazonaws.com/capacityType":           capacityType,
		"eks.amazonaws.com/sourceLaunchTemplateId": fmt.Sprintf("lt-0%016x", 0x1234abcd0000+i%len(pools)),
		"example.com/pool":                         p.name,
	}
	for k, v := range p.labels {
		labels[k] = v
	}
	annotations := map[string]string{
		"node.alpha.kubernetes.io/ttl":                           "0",
		"volumes.kubernetes.io/controller-managed-attach-detach": "true",
		"alpha.kubernetes.io/provided-node-ip":                   ip,
		"csi.volume.kubernetes.io/nodeid":                        fmt.Sprintf(`{"ebs.csi.aws.com":"%s","efs.csi.aws.com":"%s"}`, instanceID, instanceID),
	}
	if i%23 == 11 {
		labels[maintenanceLabel] = "true"
		annotations[maintenanceReason] = fmt.Sprintf("kernel upgrade, ticket OPS-%d", 4100+i)
	}
	created := metav1.NewTime(time.Unix(1740819600+int64(i)*37+rng.Int64N(30), 0).UTC())
	heartbeat := metav1.NewTime(time.Unix(1740931200+rng.Int64N(40), 0).UTC())
	cond := func(typ corev1.NodeConditionType, status corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: typ, Status: status, Reason: reason, Message: msg,
			LastHeartbeatTime: heartbeat, LastTransitionTime: metav1.NewTime(created.Add(time.Duration(12+len(typ)) * time.Second))}
	}

	want := 30 + rng.IntN(1+rng.IntN(21)) // 30 to 50 images, 35 on average
	imgs := append([]nodeImage(nil), daemonImages...)
	for _, im := range addonImages {
		if rng.IntN(10) < 6 {
			imgs = append(imgs, im)
		}
	}
	for _, j := range rng.Perm(len(appImages)) {
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

	allocMemKi := p.memoryKi - 500*1024 - p.cpu*100*1024 // kube-reserved + eviction threshold
	ki := func(n int64) resource.Quantity { return resource.MustParse(fmt.Sprintf("%dKi", n)) }
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(p.cpu, resource.DecimalSI),
		corev1.ResourceMemory:           ki(p.memoryKi),
		corev1.ResourcePods:             resource.MustParse("58"),
		corev1.ResourceEphemeralStorage: resource.MustParse("104845292Ki"),
		"hugepages-1Gi":                 resource.MustParse("0"),
		"hugepages-2Mi":                 resource.MustParse("0"),
	}
	allocatable := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewMilliQuantity(p.cpu*1000-70-10*p.cpu, resource.DecimalSI),
		corev1.ResourceMemory:           ki(allocMemKi),
		corev1.ResourcePods:             resource.MustParse("58"),
		corev1.ResourceEphemeralStorage: resource.MustParse("95551679124"),
		"hugepages-1Gi":                 resource.MustParse("0"),
		"hugepages-2Mi":                 resource.MustParse("0"),
	}
	cidr := fmt.Sprintf("10.%d.%d.0/24", 64+i/65536, (i/256)%256)
	yes := true
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations, CreationTimestamp: created},
		Spec: corev1.NodeSpec{
			PodCIDR:    cidr,
			PodCIDRs:   []string{cidr},
			ProviderID: "aws:///" + zone + "/" + instanceID,
			Taints:     append([]corev1.Taint(nil), p.taints...),
		},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: allocatable,
			Phase:       corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
				cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
			},
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: ip},
				{Type: corev1.NodeInternalDNS, Address: "ip-" + strings.ReplaceAll(ip, ".", "-") + ".eu-west-1.compute.internal"},
				{Type: corev1.NodeHostName, Address: name},
			},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
			NodeInfo: corev1.NodeSystemInfo{
				MachineID:               "ec2" + hexN(29),
				SystemUUID:              "ec2" + hexN(5) + "-" + hexN(4) + "-" + hexN(4) + "-" + hexN(4) + "-" + hexN(12),
				BootID:                  uuid(),
				KernelVersion:           kernel,
				OSImage:                 osImage,
				ContainerRuntimeVersion: "containerd://1.7.25",
				KubeletVersion:          kubelet,
				KubeProxyVersion:        kubelet,
				OperatingSystem:         "linux",
				Architecture:            "amd64",
			},
			Images: images,
			RuntimeHandlers: []corev1.NodeRuntimeHandler{
				{Name: "runc", Features: &corev1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: &yes, UserNamespaces: &yes}},
				{Name: "", Features: &corev1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: &yes, UserNamespaces: &yes}},
			},
			Features: &corev1.NodeFeatures{SupplementalGroupsPolicy: &yes},
		},
	}
}

// --- the realistic set's pods ----------------------------------------------

// realisticNamespaceLabels label the runs' namespaces for the realistic
// set: a production namespace of no tenant, so the preferred-zones
// template (warn) applies and the tenant-nodes template (deny) keeps the
// pods off the tenant pools (alpha, beta, alpha-spot).
var realisticNamespaceLabels = map[string]string{"env": "prod", "team": "shop"}

// realisticPod is pending pod i of the realistic set: cluster.PausePod
// with, by ReplicaSet, what lets it bind under the deny placement
// constraints. rs-0, rs-1, rs-3: plain (the general pools and the system
// pool; the tenant pools are denied, the spot pools tainted). rs-2
// tolerates spot (the spot-capacity template allows it on spot-a/spot-b;
// alpha-spot stays denied by tenant-nodes). Every eighth pod is a
// node-agent that uses the host network: privileged-system-pool (deny)
// lets it run only on the system pool.
func realisticPod(ns string, i int) *corev1.Pod {
	app := fmt.Sprintf("rs-%d", i%4)
	if i%8 == 7 {
		app = "node-agent"
	}
	p := cluster.PausePod(ns, fmt.Sprintf("p-%04d", i), map[string]string{"app": app})
	switch {
	case app == "node-agent":
		p.Spec.HostNetwork = true
		p.Spec.Tolerations = []corev1.Toleration{{Key: "node.example.com/system", Operator: corev1.TolerationOpExists}}
	case i%4 == 2:
		p.Spec.Tolerations = []corev1.Toleration{{Key: "spot", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	}
	return p
}

// placementSummary counts the realistic set's bound pods (pod name to
// node name) per pool, and those on a pool the deny placement templates
// forbid them: any pod on a tenant pool (the runs' namespaces belong to no
// tenant), a node-agent (host network) off the system pool.
func placementSummary(bound map[string]string) (perPool map[string]int, forbidden int) {
	perPool = map[string]int{}
	for pod, node := range bound {
		pl := node
		if i := strings.LastIndexByte(node, '-'); i > 0 {
			pl = node[:i]
		}
		perPool[pl]++
		idx, err := strconv.Atoi(strings.TrimPrefix(pod, "p-"))
		agent := err == nil && idx%8 == 7
		switch {
		case pl == "alpha" || pl == "beta" || pl == "alpha-spot":
			forbidden++
		case agent && pl != "system":
			forbidden++
		}
	}
	return perPool, forbidden
}
