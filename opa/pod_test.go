package opa_test

import (
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// typedPods are pods as a scheduler holds them, with the fields whose
// JSON form could differ between a typed round trip and the wire:
// quantities, times, empty structs, pointers, int-or-string ports.
func typedPods(t *testing.T) []*v1.Pod {
	t.Helper()
	yes, uid := true, int64(1000)
	rich := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-7d9c8b-x7k2q", Namespace: "shop", UID: "0e000000-0000-4000-8000-000000000001",
			Labels:            map[string]string{"app": "web", "ünï": "日本"},
			Annotations:       map[string]string{"note": "quote \" backslash \\ \u2028"},
			CreationTimestamp: metav1.Date(2025, 3, 2, 8, 0, 0, 0, time.UTC),
			OwnerReferences:   []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9c8b", UID: "rs", Controller: &yes}},
		},
		Spec: v1.PodSpec{
			Containers: []v1.Container{{
				Name: "web", Image: "registry.example.com/web:1.2.3",
				Resources: v1.ResourceRequirements{
					Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("1500m"), v1.ResourceMemory: resource.MustParse("1Gi")},
					Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("0.5"), v1.ResourceMemory: resource.MustParse("256Mi")},
				},
				Ports:           []v1.ContainerPort{{ContainerPort: 8080, Protocol: v1.ProtocolTCP}},
				SecurityContext: &v1.SecurityContext{RunAsUser: &uid, AllowPrivilegeEscalation: new(bool)},
			}},
			Tolerations:     []v1.Toleration{{Key: "spot", Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}},
			SecurityContext: &v1.PodSecurityContext{},
			NodeSelector:    map[string]string{"zone": "a"},
		},
	}
	doc, err := os.ReadFile("internal/jsonvalue/testdata/pod.json")
	if err != nil {
		t.Fatal(err)
	}
	fixture := &v1.Pod{}
	if err := json.Unmarshal(doc, fixture); err != nil {
		t.Fatal(err)
	}
	return []*v1.Pod{rich, fixture, {ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: "default"}}}
}

// TestDecodePodMatchesTypedConversion: a pod read from the scheduler's JSON
// is the pod the typed conversion made (decode into v1.Pod, then
// ToUnstructured), so templates see the same values either way.
func TestDecodePodMatchesTypedConversion(t *testing.T) {
	for _, typed := range typedPods(t) {
		wire, err := json.Marshal(typed)
		if err != nil {
			t.Fatal(err)
		}
		decoded, err := opa.DecodePod(wire)
		if err != nil {
			t.Fatalf("%s: %v", typed.Name, err)
		}
		var back v1.Pod // what the wire decodes to, as the extender did
		if err := json.Unmarshal(wire, &back); err != nil {
			t.Fatal(err)
		}
		content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&back)
		if err != nil {
			t.Fatal(err)
		}
		converted, err := opa.NewPod(content)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := contentJSON(t, decoded), contentJSON(t, converted); got != want {
			t.Errorf("%s:\n decoded   %s\n converted %s", typed.Name, got, want)
		}
		if decoded.Name() != typed.Name || decoded.Namespace() != typed.Namespace || decoded.UID() != string(typed.UID) {
			t.Errorf("metadata %q %q %q, want %q %q %q", decoded.Name(), decoded.Namespace(), decoded.UID(), typed.Name, typed.Namespace, typed.UID)
		}
	}
}

func contentJSON(t *testing.T, p *opa.Pod) string {
	t.Helper()
	m, err := p.Content()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDecodePodRefusesWrongMetadata(t *testing.T) {
	for _, tc := range []struct {
		doc, field string
	}{
		{`"p"`, "(the pod)"},
		{`[]`, "(the pod)"},
		{`{"metadata": "x"}`, "metadata"},
		{`{"metadata": {"name": 5}}`, "metadata.name"},
		{`{"metadata": {"namespace": true}}`, "metadata.namespace"},
		{`{"metadata": {"uid": {}}}`, "metadata.uid"},
		{`{"metadata": {"generateName": []}}`, "metadata.generateName"},
		{`{"metadata": {"labels": []}}`, "metadata.labels"},
		{`{"metadata": {"labels": {"a": 1}}}`, "metadata.labels.a"},
		{`{"metadata": {"annotations": {"a": {}}}}`, "metadata.annotations.a"},
	} {
		_, err := opa.DecodePod([]byte(tc.doc))
		var fe *opa.PodFieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("DecodePod(%s) = %v, want a field error on %s", tc.doc, err, tc.field)
		}
	}
	if _, err := opa.DecodePod([]byte(`{"metadata": {`)); err == nil {
		t.Error("malformed JSON decoded")
	}
	// What the engine does not read itself reaches templates as sent.
	p, err := opa.DecodePod([]byte(`{"metadata": {"name": "p", "namespace": "ns", "labels": null}, "spec": {"containers": "odd"}}`))
	if err != nil || p.Name() != "p" {
		t.Fatalf("DecodePod: %v", err)
	}
	if got := contentJSON(t, p); got != `{"apiVersion":"v1","kind":"Pod","metadata":{"labels":null,"name":"p","namespace":"ns"},"spec":{"containers":"odd"}}` {
		t.Errorf("content %s", got)
	}
}
