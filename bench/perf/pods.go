package perf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
)

// ReplicaSet is a workload whose pods differ only in name and uid, as the
// replicas of a real ReplicaSet do.
type ReplicaSet struct {
	Namespace string
	App       string // the Deployment's name
	Hash      string // pod-template-hash
	Images    []string
	// InitImage, if set, adds an init container.
	InitImage      string
	TolerateSpot   bool
	HostNetwork    bool
	ExtraLabels    map[string]string
	ContainerPorts []int64
}

// ReplicaSets are the workloads the pod stream draws from. Against the
// mix's placement policies: frontend and api may go to the five general
// and system pools (api also prefers zone-a, a warn constraint), web only
// to the alpha tenant's pools, worker only to beta's, etl and trainer
// also to the spot pools, node-agent (host network) only to the system
// pool; cart goes where frontend goes.
var ReplicaSets = []ReplicaSet{
	{Namespace: "default", App: "frontend", Hash: "7d9c8b6f5d", Images: []string{"openpolicyagent/frontend:1.4.2", "openpolicyagent/envoy:1.33.0"}, ContainerPorts: []int64{8080, 9901}},
	{Namespace: "default", App: "api", Hash: "5f6b7c8d9e", Images: []string{"openpolicyagent/api:2.1.0"}, ExtraLabels: map[string]string{"prefer-zone": "a"}, ContainerPorts: []int64{8443}},
	{Namespace: "alpha", App: "web", Hash: "66c8f9d7b4", Images: []string{"registry.example.com/alpha/web:3.2.1"}, TolerateSpot: true, ContainerPorts: []int64{8080}},
	{Namespace: "beta", App: "worker", Hash: "84d6b5c7f9", Images: []string{"registry.example.com/beta/worker:0.9.14"}, InitImage: "registry.example.com/beta/migrate:0.9.14"},
	{Namespace: "batch", App: "etl", Hash: "b7c6d5e4f3", Images: []string{"registry.example.com/data/etl:2025.02.1"}, TolerateSpot: true},
	{Namespace: "shop", App: "cart", Hash: "9a8b7c6d5e", Images: []string{"registry.example.com/shop/cart:4.0.3", "docker.io/library/redis:7.4.2"}, ContainerPorts: []int64{8080, 6379}},
	{Namespace: "monitoring", App: "node-agent", Hash: "c4d5e6f7a8", Images: []string{"quay.io/prometheus/node-exporter:v1.9.0"}, HostNetwork: true, ContainerPorts: []int64{8100}},
	{Namespace: "ml", App: "trainer", Hash: "d1e2f3a4b5", Images: []string{"registry.example.com/ml/trainer:1.12.0", "registry.example.com/ml/metrics-sidecar:0.3.1"}, InitImage: "registry.example.com/ml/fetch-model:1.12.0", TolerateSpot: true},
}

// Pod is one pod of the stream, as the scheduler sends it.
type Pod struct {
	// Kind is "replica" or "one-off".
	Kind      string
	Namespace string
	Name      string
	// JSON is the v1 Pod, compact.
	JSON []byte
}

// Object decodes the pod's JSON.
func (p Pod) Object() (map[string]any, error) {
	m := map[string]any{}
	err := json.Unmarshal(p.JSON, &m)
	return m, err
}

const (
	namePlaceholder = "__POD_NAME__"
	uidPlaceholder  = "__POD_UID__"
	// tokenPlaceholder is the service account token volume's name. The
	// ServiceAccount admission plugin names it kube-api-access-<5 random
	// characters>, per pod, in the volume and in every container's mount.
	tokenPlaceholder = "__TOKEN_VOLUME__"
)

// Stream generates pods: with probability OneOffShare a one-off pod (a
// Job's pod with an image and labels seen once; every fifth of them uses a
// :latest image in namespace default, which the disallowedtags sample
// denies everywhere), else a new replica of a ReplicaSet drawn uniformly.
// It is not safe for concurrent use; give each worker its own.
type Stream struct {
	OneOffShare float64
	rng         *rand.Rand
	templates   [][]byte // per ReplicaSet, with placeholders
	worker      int
	n           int
}

// NewStream starts a deterministic stream; worker makes names unique
// across concurrent streams.
func NewStream(seed uint64, worker int, oneOffShare float64) *Stream {
	s := &Stream{OneOffShare: oneOffShare, rng: rand.New(rand.NewPCG(seed, uint64(worker))), worker: worker}
	for _, rs := range ReplicaSets {
		b, err := json.Marshal(replicaPod(rs, namePlaceholder, uidPlaceholder))
		if err != nil {
			panic(err)
		}
		s.templates = append(s.templates, b)
	}
	return s
}

// Next is the next pod.
func (s *Stream) Next() Pod {
	s.n++
	if s.rng.Float64() < s.OneOffShare {
		return s.OneOff(s.n)
	}
	return s.Replica(s.rng.IntN(len(ReplicaSets)), s.n)
}

// Replica is pod i of ReplicaSets[rs].
func (s *Stream) Replica(rs, i int) Pod {
	return s.replicaInto(nil, rs, i)
}

// NextInto is Next, a replica's JSON written into buf's storage (grown as
// needed): a load generator in the service's process leaves the service's
// collector only the service's own garbage. The pod's JSON is valid until
// buf is written again.
func (s *Stream) NextInto(buf *[]byte) Pod {
	s.n++
	if s.rng.Float64() < s.OneOffShare {
		return s.OneOff(s.n)
	}
	p := s.replicaInto((*buf)[:0], s.rng.IntN(len(ReplicaSets)), s.n)
	*buf = p.JSON
	return p
}

// replicaInto appends pod i of ReplicaSets[rs] to dst: the ReplicaSet's
// template with its name, uid and token volume name filled in.
func (s *Stream) replicaInto(dst []byte, rs, i int) Pod {
	r := ReplicaSets[rs]
	name := fmt.Sprintf("%s-%s-w%d%05d", r.App, r.Hash, s.worker, i)
	uid := fmt.Sprintf("0d000000-%04x-4000-8000-%012x", s.worker, i)
	token := tokenVolume(s.worker, i)
	src := s.templates[rs]
	for len(src) > 0 {
		at := bytes.Index(src, []byte("__"))
		if at < 0 {
			dst = append(dst, src...)
			break
		}
		dst = append(dst, src[:at]...)
		src = src[at:]
		switch {
		case bytes.HasPrefix(src, []byte(namePlaceholder)):
			dst, src = append(dst, name...), src[len(namePlaceholder):]
		case bytes.HasPrefix(src, []byte(uidPlaceholder)):
			dst, src = append(dst, uid...), src[len(uidPlaceholder):]
		case bytes.HasPrefix(src, []byte(tokenPlaceholder)):
			dst, src = append(dst, token...), src[len(tokenPlaceholder):]
		default:
			dst, src = append(dst, src[:2]...), src[2:]
		}
	}
	return Pod{Kind: "replica", Namespace: r.Namespace, Name: name, JSON: dst}
}

// OneOff is the i-th one-off pod.
func (s *Stream) OneOff(i int) Pod {
	nss := []string{"default", "batch", "shop", "ml"}
	ns := nss[i%len(nss)]
	image := fmt.Sprintf("registry.example.com/jobs/report-%d:1.%d.%d", i, i%7, s.worker)
	if ns == "default" {
		image = fmt.Sprintf("openpolicyagent/report-%d:1.%d.%d", i, i%7, s.worker)
	}
	if i%5 == 0 {
		ns = "default"
		image = fmt.Sprintf("openpolicyagent/report-%d:latest", i)
	}
	job := fmt.Sprintf("report-w%d-%d", s.worker, i)
	rs := ReplicaSet{Namespace: ns, App: job, Images: []string{image}, TolerateSpot: i%2 == 0,
		ExtraLabels: map[string]string{"job-name": job, "batch.kubernetes.io/job-name": job}}
	p := replicaPod(rs, job+"-x7k2q", fmt.Sprintf("0e000000-%04x-4000-8000-%012x", s.worker, i))
	md := p["metadata"].(map[string]any)
	md["generateName"] = job + "-"
	md["ownerReferences"] = []any{map[string]any{"apiVersion": "batch/v1", "kind": "Job", "name": job,
		"uid": fmt.Sprintf("0f000000-%04x-4000-8000-%012x", s.worker, i), "controller": true, "blockOwnerDeletion": true}}
	p["spec"].(map[string]any)["restartPolicy"] = "Never"
	b, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	b = bytes.ReplaceAll(b, []byte(tokenPlaceholder), []byte(tokenVolume(s.worker, 1<<20+i)))
	return Pod{Kind: "one-off", Namespace: ns, Name: job + "-x7k2q", JSON: b}
}

// tokenVolume is pod i's token volume name: kube-api-access- and five
// characters of the alphabet Kubernetes' name generator draws from,
// distinct per (worker, i) like the random ones.
func tokenVolume(worker, i int) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	n := uint64(worker)<<32 | uint64(i)
	n *= 0x9e3779b97f4a7c15 // spread consecutive pods over the alphabet
	var suffix [5]byte
	for j := range suffix {
		suffix[j] = alphabet[n%uint64(len(alphabet))]
		n /= uint64(len(alphabet))
	}
	return "kube-api-access-" + string(suffix[:])
}

// replicaPod is a pod of rs as the API server holds it after admission
// (defaults, the service account token volume, the default tolerations)
// and as the scheduler sends it: pending, no node.
func replicaPod(rs ReplicaSet, name, uid string) map[string]any {
	labels := map[string]any{"app.kubernetes.io/name": rs.App, "app": rs.App}
	if rs.Hash != "" {
		labels["pod-template-hash"] = rs.Hash
	}
	for k, v := range rs.ExtraLabels {
		labels[k] = v
	}
	md := map[string]any{
		"name":              name,
		"namespace":         rs.Namespace,
		"uid":               uid,
		"resourceVersion":   "4242",
		"creationTimestamp": "2025-03-02T08:00:00Z",
		"labels":            labels,
		"annotations":       map[string]any{"kubectl.kubernetes.io/restartedAt": "2025-03-01T12:00:00Z"},
	}
	if rs.Hash != "" {
		md["generateName"] = rs.App + "-" + rs.Hash + "-"
		md["ownerReferences"] = []any{map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs.App + "-" + rs.Hash,
			"uid": "0c000000-0000-4000-8000-00" + rs.Hash, "controller": true, "blockOwnerDeletion": true}}
	}
	mounts := []any{
		map[string]any{"name": tokenPlaceholder, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true},
		map[string]any{"name": "tmp", "mountPath": "/tmp"},
	}
	var containers []any
	for j, img := range rs.Images {
		cname := rs.App
		if j > 0 {
			cname = fmt.Sprintf("sidecar-%d", j)
		}
		var ports []any
		var probe map[string]any
		if j < len(rs.ContainerPorts) {
			p := map[string]any{"name": "http", "containerPort": rs.ContainerPorts[j], "protocol": "TCP"}
			if rs.HostNetwork {
				p["hostPort"] = rs.ContainerPorts[j]
			}
			ports = append(ports, p)
			probe = map[string]any{"tcpSocket": map[string]any{"port": rs.ContainerPorts[j]}}
		} else {
			probe = map[string]any{"exec": map[string]any{"command": []any{"/bin/healthcheck"}}}
		}
		c := container(cname, img, mounts)
		if ports != nil {
			c["ports"] = ports
		}
		c["readinessProbe"] = withProbeDefaults(probe, 5)
		c["livenessProbe"] = withProbeDefaults(probe, 15)
		containers = append(containers, c)
	}
	spec := map[string]any{
		"containers":                    containers,
		"volumes":                       volumes(),
		"restartPolicy":                 "Always",
		"terminationGracePeriodSeconds": int64(30),
		"dnsPolicy":                     "ClusterFirst",
		"serviceAccountName":            "default",
		"serviceAccount":                "default",
		"securityContext": map[string]any{
			"runAsNonRoot":   true,
			"runAsUser":      int64(10001),
			"fsGroup":        int64(10001),
			"seccompProfile": map[string]any{"type": "RuntimeDefault"},
		},
		"schedulerName":      "default-scheduler",
		"tolerations":        tolerations(rs.TolerateSpot),
		"priority":           int64(0),
		"enableServiceLinks": true,
		"preemptionPolicy":   "PreemptLowerPriority",
	}
	if rs.InitImage != "" {
		spec["initContainers"] = []any{container("init", rs.InitImage, mounts)}
	}
	if rs.HostNetwork {
		spec["hostNetwork"] = true
		spec["dnsPolicy"] = "ClusterFirstWithHostNet"
	}
	return map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata":   md,
		"spec":       spec,
		"status":     map[string]any{"phase": "Pending", "qosClass": "Burstable"},
	}
}

func container(name, image string, mounts []any) map[string]any {
	return map[string]any{
		"name":            name,
		"image":           image,
		"imagePullPolicy": "IfNotPresent",
		"env": []any{
			map[string]any{"name": "LOG_LEVEL", "value": "info"},
			map[string]any{"name": "POD_NAME", "valueFrom": map[string]any{"fieldRef": map[string]any{"apiVersion": "v1", "fieldPath": "metadata.name"}}},
		},
		"resources": map[string]any{
			"requests": map[string]any{"cpu": "100m", "memory": "256Mi"},
			"limits":   map[string]any{"cpu": "200m", "memory": "512Mi"},
		},
		"volumeMounts": mounts,
		"securityContext": map[string]any{
			"allowPrivilegeEscalation": false,
			"readOnlyRootFilesystem":   true,
			"capabilities":             map[string]any{"drop": []any{"ALL"}},
		},
		"terminationMessagePath":   "/dev/termination-log",
		"terminationMessagePolicy": "File",
	}
}

func withProbeDefaults(handler map[string]any, initialDelay int64) map[string]any {
	p := map[string]any{"initialDelaySeconds": initialDelay, "timeoutSeconds": int64(1), "periodSeconds": int64(10),
		"successThreshold": int64(1), "failureThreshold": int64(3)}
	for k, v := range handler {
		p[k] = v
	}
	return p
}

func volumes() []any {
	return []any{
		map[string]any{"name": tokenPlaceholder, "projected": map[string]any{
			"defaultMode": int64(420),
			"sources": []any{
				map[string]any{"serviceAccountToken": map[string]any{"expirationSeconds": int64(3607), "path": "token"}},
				map[string]any{"configMap": map[string]any{"name": "kube-root-ca.crt", "items": []any{map[string]any{"key": "ca.crt", "path": "ca.crt"}}}},
				map[string]any{"downwardAPI": map[string]any{"items": []any{map[string]any{"path": "namespace",
					"fieldRef": map[string]any{"apiVersion": "v1", "fieldPath": "metadata.namespace"}}}}},
			},
		}},
		map[string]any{"name": "tmp", "emptyDir": map[string]any{}},
	}
}

func tolerations(spot bool) []any {
	t := []any{
		map[string]any{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": int64(300)},
		map[string]any{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": int64(300)},
	}
	if spot {
		t = append(t, map[string]any{"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"})
	}
	return t
}
