package gatekeeper

import (
	"encoding/json"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// realisticPod is a ReplicaSet's pod as the scheduler holds it (no
// apiVersion and kind): containers with resources, probes and mounts, an
// init container, tolerations, projected volumes, an owner reference.
func realisticPod() *v1.Pod {
	ctrl := true
	grace := int64(30)
	res := v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("256Mi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("512Mi")},
	}
	probe := &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
		InitialDelaySeconds: 5, PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3}
	c := func(name string) v1.Container {
		return v1.Container{Name: name, Image: "registry.example.com/team/" + name + ":1.2.3",
			Args:      []string{"--port=8080", "--log-level=info"},
			Ports:     []v1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: v1.ProtocolTCP}},
			Env:       []v1.EnvVar{{Name: "MODE", Value: "prod"}, {Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
			Resources: res, LivenessProbe: probe, ReadinessProbe: probe,
			VolumeMounts:             []v1.VolumeMount{{Name: "config", MountPath: "/etc/app"}, {Name: "kube-api-access-abcde", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}},
			TerminationMessagePath:   "/dev/termination-log",
			TerminationMessagePolicy: v1.TerminationMessageReadFile,
			ImagePullPolicy:          v1.PullIfNotPresent}
	}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-7d9f8b6c5-x2k4p", GenerateName: "web-7d9f8b6c5-", Namespace: "run",
			UID: types.UID("6f1c2d3e-4a5b-6c7d-8e9f-0a1b2c3d4e5f"), ResourceVersion: "123456",
			CreationTimestamp: metav1.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC),
			Labels:            map[string]string{"app": "web", "pod-template-hash": "7d9f8b6c5", "team": "payments"},
			Annotations:       map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "8080"},
			OwnerReferences:   []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9f8b6c5", UID: "0a0b0c0d-1111-2222-3333-444455556666", Controller: &ctrl, BlockOwnerDeletion: &ctrl}}},
		Spec: v1.PodSpec{
			Containers:     []v1.Container{c("web"), c("sidecar")},
			InitContainers: []v1.Container{{Name: "init", Image: "busybox:1.36", Command: []string{"sh", "-c", "true"}, Resources: res}},
			Volumes: []v1.Volume{{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "web-config"}}}},
				{Name: "kube-api-access-abcde", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
					{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: new(int64(3607))}},
					{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []v1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}}}}}}},
			Tolerations: []v1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: new(int64(300))},
				{Key: "node.kubernetes.io/unreachable", Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: new(int64(300))},
				{Key: "dedicated", Operator: v1.TolerationOpEqual, Value: "payments", Effect: v1.TaintEffectNoSchedule}},
			NodeSelector:                  map[string]string{"pool": "pool-3"},
			RestartPolicy:                 v1.RestartPolicyAlways,
			DNSPolicy:                     v1.DNSClusterFirst,
			ServiceAccountName:            "web",
			SchedulerName:                 "default-scheduler",
			TerminationGracePeriodSeconds: &grace,
			SecurityContext:               &v1.PodSecurityContext{RunAsNonRoot: &ctrl},
		},
		Status: v1.PodStatus{Phase: v1.PodPending, QOSClass: v1.PodQOSBurstable},
	}
}

// unstructuredPod is the conversion decodePod replaced, the reference:
// the pod to unstructured content, that to the engine's values.
func unstructuredPod(pod *v1.Pod) (*opa.Pod, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pod)
	if err != nil {
		return nil, err
	}
	m["apiVersion"], m["kind"] = "v1", "Pod"
	return opa.NewPod(m)
}

// TestDecodePod: decodePod gives the engine the content the unstructured
// conversion gave it, and leaves the scheduler's pod as it was.
func TestDecodePod(t *testing.T) {
	typed := realisticPod()
	typed.APIVersion, typed.Kind = "v1", "Pod"
	bare := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "run"}}
	for name, pod := range map[string]*v1.Pod{"realistic": realisticPod(), "with type meta": typed, "bare": bare} {
		t.Run(name, func(t *testing.T) {
			before := pod.DeepCopy()
			got, err := decodePod(opa.NewPodDecoder(), pod)
			if err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(pod, before) {
				t.Errorf("decodePod changed the pod: %+v", pod)
			}
			want, err := unstructuredPod(pod)
			if err != nil {
				t.Fatal(err)
			}
			if got.Name() != want.Name() || got.Namespace() != want.Namespace() || got.UID() != want.UID() {
				t.Errorf("metadata %s/%s %s, want %s/%s %s", got.Namespace(), got.Name(), got.UID(), want.Namespace(), want.Name(), want.UID())
			}
			gc, err := got.Content()
			if err != nil {
				t.Fatal(err)
			}
			wc, err := want.Content()
			if err != nil {
				t.Fatal(err)
			}
			gj, _ := json.Marshal(gc)
			wj, _ := json.Marshal(wc)
			if string(gj) != string(wj) {
				t.Errorf("content\n%s\nwant\n%s", gj, wj)
			}
		})
	}
}

// BenchmarkDecodePod is a realistic pod's conversion: decodePod, and the
// unstructured conversion it replaced.
//
//	cd cmd/opa-kube-scheduler && go test -run '^$' -bench DecodePod -benchmem ./gatekeeper/
func BenchmarkDecodePod(b *testing.B) {
	pod := realisticPod()
	pods := opa.NewPodDecoder()
	json := func(p *v1.Pod) (*opa.Pod, error) { return decodePod(pods, p) }
	for _, c := range []struct {
		name    string
		convert func(*v1.Pod) (*opa.Pod, error)
	}{{"json", json}, {"unstructured", unstructuredPod}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.convert(pod); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
