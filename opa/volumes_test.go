package opa_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// volumePolicies read a pod's volumes and mounts the ways Gatekeeper's
// library does (automount-serviceaccount-token, volumes, flexvolume-
// drivers, host-filesystem) and a comprehension of privileged containers.
// Every pod the ServiceAccount admission plugin admits has a token volume
// named kube-api-access-<random>, mounted in each container: only the
// host-path template, which joins host-path volumes and mounts by name,
// reads that name, and only for a pod that has a host-path volume.
const volumePolicies = `
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8svolautomount}
spec:
  crd: {spec: {names: {kind: K8sVolAutomount}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8svolautomount
        violation[{"msg": msg}] {
          obj := input.review.object
          mountServiceAccountToken(obj.spec)
          msg := sprintf("Automounting service account token is disallowed, pod: %v", [obj.metadata.name])
        }
        mountServiceAccountToken(spec) {
          spec.automountServiceAccountToken == true
        }
        mountServiceAccountToken(spec) {
          not has_key(spec, "automountServiceAccountToken")
          "/var/run/secrets/kubernetes.io/serviceaccount" == input_containers[_].volumeMounts[_].mountPath
        }
        input_containers[c] {
          c := input.review.object.spec.containers[_]
        }
        input_containers[c] {
          c := input.review.object.spec.initContainers[_]
        }
        has_key(x, k) {
          _ = x[k]
        }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sVolAutomount
metadata: {name: vol-automount}
---
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8svoltypes}
spec:
  crd:
    spec:
      names: {kind: K8sVolTypes}
      validation: {openAPIV3Schema: {type: object, properties: {volumes: {type: array, items: {type: string}}}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8svoltypes
        violation[{"msg": msg, "details": {}}] {
          volume_fields := {x | input.review.object.spec.volumes[_][x]; x != "name"}
          field := volume_fields[_]
          not input_volume_type_allowed(field)
          msg := sprintf("The volume type %v is not allowed, pod: %v. Allowed volume types: %v", [field, input.review.object.metadata.name, input.parameters.volumes])
        }
        input_volume_type_allowed(_) {
          input.parameters.volumes[_] == "*"
        }
        input_volume_type_allowed(field) {
          field == input.parameters.volumes[_]
        }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sVolTypes
metadata: {name: vol-types}
spec:
  parameters:
    volumes: [configMap, emptyDir, projected, secret, flexVolume, hostPath]
---
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8svolflex}
spec:
  crd:
    spec:
      names: {kind: K8sVolFlex}
      validation: {openAPIV3Schema: {type: object, properties: {allowedFlexVolumes: {type: array, items: {type: object, properties: {driver: {type: string}}}}}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8svolflex
        violation[{"msg": msg, "details": {}}] {
          volume := input_flexvolumes[_]
          not input_flexvolumes_allowed(volume)
          msg := sprintf("FlexVolume %v is not allowed, pod: %v. Allowed drivers: %v", [volume, input.review.object.metadata.name, input.parameters.allowedFlexVolumes])
        }
        input_flexvolumes_allowed(volume) {
          input.parameters.allowedFlexVolumes[_].driver == volume.flexVolume.driver
        }
        input_flexvolumes[v] {
          v := input.review.object.spec.volumes[_]
          has_field(v, "flexVolume")
        }
        has_field(object, field) = true {
          object[field]
        }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sVolFlex
metadata: {name: vol-flex}
spec:
  parameters:
    allowedFlexVolumes: [{driver: example/lvm}]
---
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8svolprivileged}
spec:
  crd: {spec: {names: {kind: K8sVolPrivileged}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8svolprivileged
        violation[{"msg": msg, "details": {"reasons": reasons}}] {
          reasons := {sprintf("container %v is privileged", [c.name]) | c := input.review.object.spec.containers[_]; c.securityContext.privileged}
          count(reasons) > 0
          msg := sprintf("pod %v: %v", [input.review.object.metadata.name, concat(", ", sort(reasons))])
        }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sVolPrivileged
metadata: {name: vol-privileged}
---
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8svolhostpath}
spec:
  crd: {spec: {names: {kind: K8sVolHostPath}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8svolhostpath
        violation[{"msg": msg, "details": {}}] {
          volume := input_hostpath_volumes[_]
          writeable(volume.name)
          msg := sprintf("HostPath volume %v is writeable, pod: %v", [volume, input.review.object.metadata.name])
        }
        writeable(name) {
          mount := input.review.object.spec.containers[_].volumeMounts[_]
          mount.name == name
          not mount.readOnly
        }
        input_hostpath_volumes[v] {
          v := input.review.object.spec.volumes[_]
          has_field(v, "hostPath")
        }
        has_field(object, field) = true {
          object[field]
        }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sVolHostPath
metadata: {name: vol-hostpath}
`

// volumePod is a pod as admission leaves it: a token volume named token,
// mounted by every container, and the extra volumes, mounts and
// container fields of the case.
func volumePod(name, token string, mutate ...func(map[string]any)) map[string]any {
	return pod("default", name, func(p map[string]any) {
		mount := func() map[string]any {
			return map[string]any{"name": token, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}
		}
		spec(p)["containers"] = []any{
			map[string]any{"name": "app", "image": "nginx:1.27", "volumeMounts": []any{mount(), map[string]any{"name": "tmp", "mountPath": "/tmp"}}},
			map[string]any{"name": "sidecar", "image": "envoy:1.30", "volumeMounts": []any{mount()}},
		}
		spec(p)["volumes"] = []any{
			map[string]any{"name": token, "projected": map[string]any{"defaultMode": 420, "sources": []any{
				map[string]any{"serviceAccountToken": map[string]any{"expirationSeconds": 3607, "path": "token"}}}}},
			map[string]any{"name": "tmp", "emptyDir": map[string]any{}},
		}
		for _, m := range mutate {
			m(p)
		}
	})
}

func volumeEngine(t testing.TB, opts opa.Options) *opa.Engine {
	t.Helper()
	objs, err := readObjects(strings.NewReader(volumePolicies))
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, opts)
	apply(t, e, objs...)
	apply(t, e, node("n-1", nil))
	return e
}

func addVolume(v map[string]any) func(map[string]any) {
	return func(p map[string]any) { spec(p)["volumes"] = append(spec(p)["volumes"].([]any), v) }
}

func addMount(container int, m map[string]any) func(map[string]any) {
	return func(p map[string]any) {
		c := spec(p)["containers"].([]any)[container].(map[string]any)
		c["volumeMounts"] = append(c["volumeMounts"].([]any), m)
	}
}

// TestVolumesNotKeyedOnTokenNames: pods that differ only in their names
// and their token volume's name share the verdicts of every template, and
// every pod's messages
// are those of the engine without memo, over volumes and mounts of every
// kind the templates tell apart.
func TestVolumesNotKeyedOnTokenNames(t *testing.T) {
	memo := volumeEngine(t, opa.Options{})
	exact := volumeEngine(t, opa.Options{DisableMemo: true})
	cands := []opa.Candidate{{Name: "n-1"}}
	check := func(p map[string]any) []string {
		t.Helper()
		return sameAsWithoutMemo(t, memo, exact, p, cands)
	}
	privileged := func(p map[string]any) {
		spec(p)["containers"].([]any)[1].(map[string]any)["securityContext"] = map[string]any{"privileged": true}
	}
	first := check(volumePod("web-1", "kube-api-access-b7x2k", privileged))
	if len(first) != 2 { // automount, privileged
		t.Fatalf("the first pod's violations %q, want automount's and privileged's", first)
	}
	before := memo.Stats().Evaluations
	for i := range 20 {
		check(volumePod(fmt.Sprintf("web-%d", i+2), fmt.Sprintf("kube-api-access-%05d", i), privileged))
	}
	if evals := memo.Stats().Evaluations - before; evals != 0 {
		t.Errorf("20 pods with new token volume names ran %d evaluations, want none: the host-path template reads the mounts' names only for a pod with a host-path volume", evals)
	}
	cases := map[string][]func(map[string]any){
		"flex allowed":              {addVolume(map[string]any{"name": "data", "flexVolume": map[string]any{"driver": "example/lvm"}})},
		"flex denied":               {addVolume(map[string]any{"name": "data", "flexVolume": map[string]any{"driver": "other/nfs"}})},
		"flex denied, another name": {addVolume(map[string]any{"name": "logs", "flexVolume": map[string]any{"driver": "other/nfs"}})},
		"flex false":                {addVolume(map[string]any{"name": "data", "flexVolume": false})},
		"two equal flex":            {addVolume(map[string]any{"name": "d", "flexVolume": map[string]any{"driver": "x"}}), addVolume(map[string]any{"name": "d", "flexVolume": map[string]any{"driver": "x"}})},
		"host path ro":              {addVolume(map[string]any{"name": "host", "hostPath": map[string]any{"path": "/etc"}}), addMount(0, map[string]any{"name": "host", "mountPath": "/h", "readOnly": true})},
		"host path rw":              {addVolume(map[string]any{"name": "host", "hostPath": map[string]any{"path": "/etc"}}), addMount(1, map[string]any{"name": "host", "mountPath": "/h"})},
		"a type not allowed":        {addVolume(map[string]any{"name": "x", "gcePersistentDisk": map[string]any{"pdName": "d"}})},
		"a type set false":          {addVolume(map[string]any{"name": "x", "gcePersistentDisk": false})},
		"a volume not an object": {addVolume(map[string]any{"name": "x", "emptyDir": map[string]any{}}), func(p map[string]any) {
			spec(p)["volumes"] = append(spec(p)["volumes"].([]any), "configMap")
		}},
		"volumes not a list": {func(p map[string]any) {
			spec(p)["volumes"] = map[string]any{"a": map[string]any{"hostPath": map[string]any{}}}
		}},
		"no volumes":      {func(p map[string]any) { delete(spec(p), "volumes") }},
		"automount false": {func(p map[string]any) { spec(p)["automountServiceAccountToken"] = false }},
		"automount true":  {func(p map[string]any) { spec(p)["automountServiceAccountToken"] = true }},
		"no token mount": {func(p map[string]any) {
			for _, c := range spec(p)["containers"].([]any) {
				c.(map[string]any)["volumeMounts"] = []any{}
			}
		}},
		"token mounted in an init container only": {func(p map[string]any) {
			cs := spec(p)["containers"].([]any)
			spec(p)["initContainers"] = []any{map[string]any{"name": "init", "image": "busybox", "volumeMounts": cs[1].(map[string]any)["volumeMounts"]}}
			for _, c := range cs {
				c.(map[string]any)["volumeMounts"] = []any{}
			}
		}},
		"privileged false": {func(p map[string]any) {
			spec(p)["containers"].([]any)[0].(map[string]any)["securityContext"] = map[string]any{"privileged": false}
		}},
		"odd names": {privileged, func(p map[string]any) {
			spec(p)["containers"].([]any)[1].(map[string]any)["name"] = `q"uote %v ünï`
		}},
	}
	for name, mutate := range cases {
		for i, token := range []string{"kube-api-access-aaaaa", "kube-api-access-zzzzz", "host"} {
			check(volumePod(fmt.Sprintf("%s-%d", strings.ReplaceAll(name, " ", "-"), i), token, mutate...))
		}
	}
}
