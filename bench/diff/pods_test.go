package diff

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// deepCopy copies JSON-like values keeping their Go types (int64, float64,
// string, bool, nil, map[string]any, []any).
func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = deepCopy(e)
		}
		return s
	default:
		return v
	}
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

// child returns m[key] as a map, creating it when absent or not a map.
func child(m map[string]any, key string) map[string]any {
	if c, ok := m[key].(map[string]any); ok {
		return c
	}
	c := map[string]any{}
	m[key] = c
	return c
}

func spec(pod map[string]any) map[string]any { return child(pod, "spec") }

func metadata(pod map[string]any) map[string]any { return child(pod, "metadata") }

var containerLists = []string{"containers", "initContainers", "ephemeralContainers"}

// allContainers lists the pod's containers of every kind.
func allContainers(pod map[string]any) []map[string]any {
	var out []map[string]any
	s := spec(pod)
	for _, l := range containerLists {
		cs, _ := s[l].([]any)
		for _, c := range cs {
			if m, ok := c.(map[string]any); ok {
				out = append(out, m)
			}
		}
	}
	return out
}

// someContainer picks a container, adding one when the pod has none.
func someContainer(r *rand.Rand, pod map[string]any) map[string]any {
	cs := allContainers(pod)
	if len(cs) == 0 {
		c := map[string]any{"name": "main", "image": "nginx:1.27"}
		spec(pod)["containers"] = []any{c}
		return c
	}
	return pick(r, cs)
}

func containerName(c map[string]any) string {
	n, _ := c["name"].(string)
	return n
}

// setOrDelete sets m[key] to one of values, or deletes it when the pick is nil.
func setOrDelete(r *rand.Rand, m map[string]any, key string, values ...any) {
	v := pick(r, values)
	if v == nil {
		delete(m, key)
		return
	}
	m[key] = v
}

const digest = "sha256:2d9a3f5e7c1b4a6d8e0f2a4c6e8b0d2f4a6c8e0b2d4f6a8c0e2b4d6f8a0c2e4b"

var images = []string{
	"openpolicyagent/opa:0.9.2",
	"openpolicyagent/opa:latest",
	"openpolicyagent/opa-exp:latest",
	"openpolicyagent/opa-exp2:latest",
	"openpolicyagent/opa@" + digest,
	"nginx",
	"nginx:latest",
	"nginx:1.27",
	"nginx@" + digest,
	"nginx:1.27@" + digest,
	"nginx-exempt",
	"k8s.gcr.io/pause:3.9",
	"k8s.gcr.io/kube-proxy",
	"registry.k8s.io/pause:3.10",
	"myregistry.azurecr.io/app:v1",
	"mydockerhub/tool:latest",
	"ubuntu:20.14",
	"ubuntu",
	"123456789123.dkr.ecr.eu-west-1.amazonaws.com/postgres",
	"123456789123.dkr.ecr.eu-west-1.amazonaws.com/postgres:15",
	"safeimages.com/tool:1.0",
	"safe-images.com/x:2",
	"specialprogram",
	"docker.io/library/busybox:1.36",
	"localhost:5000/app:dev",
	"registry.example.com:443/team/app@" + digest,
	"gcr.io/distroless/static:nonroot",
	"",
}

var capabilityNames = []string{"ALL", "NET_ADMIN", "SYS_ADMIN", "NET_BIND_SERVICE", "CHOWN", "NET_RAW", "SETUID", "KILL", "SYS_TIME", "all"}

func capSubset(r *rand.Rand) []any {
	n := r.IntN(3)
	seen := map[string]bool{}
	var out []any
	for i := 0; i < n; i++ {
		c := pick(r, capabilityNames)
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}

func cpuQuantity(r *rand.Rand) any {
	return pick(r, []any{"100m", "200m", "250m", "500m", "1", "2", "1.5", "4000m", "0.1", "1k", "abc", "-1", "", 0.5, int64(2), float64(2), int64(0)})
}

func memQuantity(r *rand.Rand) any {
	return pick(r, []any{"64Mi", "512Mi", "1Gi", "2Gi", "1G", "1024M", "1e3", "128974848", "129e6", "1Ti", "5Ki", "foo", "1.5Gi", "", int64(1073741824), float64(536870912), int64(0)})
}

func storageQuantity(r *rand.Rand) any {
	return pick(r, []any{"100Mi", "500Mi", "1Gi", "499Mi", "2G", "abc", int64(524288000)})
}

func resourceList(r *rand.Rand) map[string]any {
	m := map[string]any{}
	if r.IntN(4) > 0 {
		m["cpu"] = cpuQuantity(r)
	}
	if r.IntN(4) > 0 {
		m["memory"] = memQuantity(r)
	}
	if r.IntN(3) == 0 {
		m["ephemeral-storage"] = storageQuantity(r)
	}
	return m
}

func probe(r *rand.Rand) map[string]any {
	p := map[string]any{"initialDelaySeconds": int64(5), "periodSeconds": int64(10)}
	switch r.IntN(6) {
	case 0:
		hg := map[string]any{"path": "/healthz", "port": int64(8080)}
		if r.IntN(3) == 0 {
			hg["host"] = pick(r, []string{"10.0.0.1", "", "localhost"})
		}
		p["httpGet"] = hg
	case 1:
		ts := map[string]any{"port": int64(8080)}
		if r.IntN(3) == 0 {
			ts["host"] = pick(r, []string{"169.254.169.254", ""})
		}
		p["tcpSocket"] = ts
	case 2:
		p["exec"] = map[string]any{"command": []any{"cat", "/tmp/healthy"}}
	case 3:
		p["grpc"] = map[string]any{"port": int64(9090)}
	case 4:
		// No handler.
	case 5:
		p["httpGet"] = map[string]any{"path": "/ready", "port": "http"}
		p["exec"] = map[string]any{"command": []any{"true"}}
	}
	return p
}

var volumeKinds = []func(r *rand.Rand) (string, map[string]any){
	func(r *rand.Rand) (string, map[string]any) {
		hp := map[string]any{"path": pick(r, []string{"/foo", "/foo/bar", "/etc", "/var/log", "/", "/foobar"})}
		if r.IntN(2) == 0 {
			hp["type"] = pick(r, []string{"Directory", "DirectoryOrCreate", "File"})
		}
		return "hostPath", hp
	},
	func(r *rand.Rand) (string, map[string]any) { return "emptyDir", map[string]any{} },
	func(r *rand.Rand) (string, map[string]any) {
		return "emptyDir", map[string]any{"medium": "Memory", "sizeLimit": "64Mi"}
	},
	func(r *rand.Rand) (string, map[string]any) { return "configMap", map[string]any{"name": "cfg"} },
	func(r *rand.Rand) (string, map[string]any) { return "secret", map[string]any{"secretName": "s"} },
	func(r *rand.Rand) (string, map[string]any) {
		return "persistentVolumeClaim", map[string]any{"claimName": "data"}
	},
	func(r *rand.Rand) (string, map[string]any) {
		return "flexVolume", map[string]any{"driver": pick(r, []string{"example/lvm", "example/cifs", "example/other", ""})}
	},
	func(r *rand.Rand) (string, map[string]any) {
		return "nfs", map[string]any{"server": "nfs.example.com", "path": "/exports"}
	},
	func(r *rand.Rand) (string, map[string]any) {
		return "csi", map[string]any{"driver": "ebs.csi.aws.com"}
	},
	func(r *rand.Rand) (string, map[string]any) {
		return "projected", map[string]any{"sources": []any{map[string]any{"serviceAccountToken": map[string]any{"path": "token"}}}}
	},
	func(r *rand.Rand) (string, map[string]any) {
		return "downwardAPI", map[string]any{"items": []any{map[string]any{"path": "labels", "fieldRef": map[string]any{"fieldPath": "metadata.labels"}}}}
	},
	func(r *rand.Rand) (string, map[string]any) {
		return "gitRepo", map[string]any{"repository": "https://example.com/r.git"}
	},
	func(r *rand.Rand) (string, map[string]any) {
		return "ephemeral", map[string]any{"volumeClaimTemplate": map[string]any{"spec": map[string]any{"accessModes": []any{"ReadWriteOnce"}}}}
	},
}

// mutations are the changes applied to seed pods. Each reads the rand
// source in a fixed order, so the generated set depends on the seed only.
var mutations = []struct {
	name string
	fn   func(r *rand.Rand, pod map[string]any)
}{
	{"image", func(r *rand.Rand, pod map[string]any) {
		c := someContainer(r, pod)
		if im := pick(r, images); im != "" {
			c["image"] = im
		} else {
			delete(c, "image")
		}
	}},
	{"privileged", func(r *rand.Rand, pod map[string]any) {
		setOrDelete(r, child(someContainer(r, pod), "securityContext"), "privileged", true, true, false, nil)
	}},
	{"host-namespaces", func(r *rand.Rand, pod map[string]any) {
		setOrDelete(r, spec(pod), pick(r, []string{"hostNetwork", "hostPID", "hostIPC"}), true, true, false, nil)
	}},
	{"host-ports", func(r *rand.Rand, pod map[string]any) {
		c := someContainer(r, pod)
		var ports []any
		for i := r.IntN(3); i >= 0; i-- {
			p := map[string]any{"containerPort": pick(r, []int64{80, 443, 8080, 9090}), "protocol": "TCP"}
			if hp := pick(r, []int64{-1, 0, 22, 80, 443, 8080, 9000, 9001, 30000}); hp >= 0 {
				p["hostPort"] = hp
			}
			ports = append(ports, p)
		}
		c["ports"] = ports
	}},
	{"capabilities", func(r *rand.Rand, pod map[string]any) {
		sc := child(someContainer(r, pod), "securityContext")
		caps := map[string]any{}
		if add := capSubset(r); add != nil {
			caps["add"] = add
		}
		if r.IntN(2) == 0 {
			caps["drop"] = pick(r, [][]any{{"ALL"}, {"NET_RAW"}, {"all"}, {}, {"ALL", "NET_RAW"}})
		}
		if len(caps) == 0 && r.IntN(2) == 0 {
			delete(sc, "capabilities")
			return
		}
		sc["capabilities"] = caps
	}},
	{"allow-privilege-escalation", func(r *rand.Rand, pod map[string]any) {
		setOrDelete(r, child(someContainer(r, pod), "securityContext"), "allowPrivilegeEscalation", true, false, nil)
	}},
	{"read-only-root-filesystem", func(r *rand.Rand, pod map[string]any) {
		setOrDelete(r, child(someContainer(r, pod), "securityContext"), "readOnlyRootFilesystem", true, false, nil)
	}},
	{"run-as", func(r *rand.Rand, pod map[string]any) {
		var sc map[string]any
		if r.IntN(2) == 0 {
			sc = child(spec(pod), "securityContext")
		} else {
			sc = child(someContainer(r, pod), "securityContext")
		}
		setOrDelete(r, sc, "runAsUser", int64(0), int64(1000), int64(65534), int64(100), nil)
		setOrDelete(r, sc, "runAsNonRoot", true, false, nil)
		setOrDelete(r, sc, "runAsGroup", int64(0), int64(3000), nil, nil)
	}},
	{"fs-groups", func(r *rand.Rand, pod map[string]any) {
		sc := child(spec(pod), "securityContext")
		setOrDelete(r, sc, "fsGroup", int64(0), int64(500), int64(2000), nil)
		setOrDelete(r, sc, "supplementalGroups", []any{int64(100)}, []any{int64(0), int64(5000)}, nil)
		setOrDelete(r, sc, "fsGroupChangePolicy", "OnRootMismatch", nil, nil)
	}},
	{"seccomp-annotation", func(r *rand.Rand, pod map[string]any) {
		ann := child(metadata(pod), "annotations")
		profile := pick(r, []string{"runtime/default", "docker/default", "unconfined", "localhost/profile.json", "localhost/other.json"})
		if r.IntN(2) == 0 {
			ann["seccomp.security.alpha.kubernetes.io/pod"] = profile
		} else {
			ann["container.seccomp.security.alpha.kubernetes.io/"+containerName(someContainer(r, pod))] = profile
		}
	}},
	{"seccomp-profile", func(r *rand.Rand, pod map[string]any) {
		var sc map[string]any
		if r.IntN(2) == 0 {
			sc = child(spec(pod), "securityContext")
		} else {
			sc = child(someContainer(r, pod), "securityContext")
		}
		p := map[string]any{"type": pick(r, []string{"RuntimeDefault", "Unconfined", "Localhost", "Localhost"})}
		if p["type"] == "Localhost" && r.IntN(3) > 0 {
			p["localhostProfile"] = pick(r, []string{"profile.json", "profiles/audit.json"})
		}
		if r.IntN(6) == 0 {
			delete(sc, "seccompProfile")
			return
		}
		sc["seccompProfile"] = p
	}},
	{"apparmor", func(r *rand.Rand, pod map[string]any) {
		c := someContainer(r, pod)
		if r.IntN(2) == 0 {
			child(metadata(pod), "annotations")["container.apparmor.security.beta.kubernetes.io/"+containerName(c)] =
				pick(r, []string{"runtime/default", "unconfined", "localhost/custom", "localhost/"})
			return
		}
		var sc map[string]any
		if r.IntN(2) == 0 {
			sc = child(spec(pod), "securityContext")
		} else {
			sc = child(c, "securityContext")
		}
		p := map[string]any{"type": pick(r, []string{"RuntimeDefault", "Unconfined", "Localhost"})}
		if p["type"] == "Localhost" {
			p["localhostProfile"] = "custom"
		}
		sc["appArmorProfile"] = p
	}},
	{"volume", func(r *rand.Rand, pod map[string]any) {
		s := spec(pod)
		vols, _ := s["volumes"].([]any)
		name := fmt.Sprintf("vol-%d", len(vols))
		kind, src := pick(r, volumeKinds)(r)
		vols = append(vols, map[string]any{"name": name, kind: src})
		s["volumes"] = vols
		c := someContainer(r, pod)
		mounts, _ := c["volumeMounts"].([]any)
		m := map[string]any{"name": name, "mountPath": "/mnt/" + name}
		setOrDelete(r, m, "readOnly", true, false, nil)
		c["volumeMounts"] = append(mounts, m)
	}},
	{"resources", func(r *rand.Rand, pod map[string]any) {
		c := someContainer(r, pod)
		if r.IntN(6) == 0 {
			delete(c, "resources")
			return
		}
		res := map[string]any{}
		if r.IntN(4) > 0 {
			res["limits"] = resourceList(r)
		}
		if r.IntN(4) > 0 {
			res["requests"] = resourceList(r)
		}
		c["resources"] = res
	}},
	{"ephemeral-storage", func(r *rand.Rand, pod map[string]any) {
		c := someContainer(r, pod)
		child(child(c, "resources"), "limits")["ephemeral-storage"] = storageQuantity(r)
	}},
	{"probes", func(r *rand.Rand, pod map[string]any) {
		c := someContainer(r, pod)
		for _, k := range []string{"livenessProbe", "readinessProbe", "startupProbe"} {
			switch r.IntN(3) {
			case 0:
				delete(c, k)
			case 1:
				c[k] = probe(r)
			}
		}
	}},
	{"lifecycle", func(r *rand.Rand, pod map[string]any) {
		c := someContainer(r, pod)
		lc := map[string]any{}
		hook := pick(r, []string{"postStart", "preStop"})
		if r.IntN(2) == 0 {
			lc[hook] = map[string]any{"httpGet": map[string]any{"path": "/hook", "port": int64(80), "host": pick(r, []string{"example.com", ""})}}
		} else {
			lc[hook] = map[string]any{"tcpSocket": map[string]any{"port": int64(80), "host": pick(r, []string{"10.1.2.3", ""})}}
		}
		c["lifecycle"] = lc
	}},
	{"labels", func(r *rand.Rand, pod map[string]any) {
		l := child(metadata(pod), "labels")
		setOrDelete(r, l, "pizza", "margherita", "", nil)
		setOrDelete(r, l, "prefer-zone", "a", "a", "b", nil)
		setOrDelete(r, l, "app", "web", "db", nil)
		setOrDelete(r, l, "owner", "me.agilebank.demo", nil)
	}},
	{"tolerations", func(r *rand.Rand, pod map[string]any) {
		var ts []any
		for i := r.IntN(3); i > 0; i-- {
			ts = append(ts, pick(r, []map[string]any{
				{"key": "spot", "operator": "Exists", "effect": "NoSchedule"},
				{"key": "spot", "operator": "Equal", "value": "true"},
				{"operator": "Exists"},
				{"key": "other", "operator": "Exists"},
				{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": int64(300)},
				{"operator": "Equal", "value": "x"},
			}))
		}
		if ts == nil {
			delete(spec(pod), "tolerations")
			return
		}
		spec(pod)["tolerations"] = deepCopy(ts)
	}},
	{"init-container", func(r *rand.Rand, pod map[string]any) {
		c := deepCopy(someContainer(r, pod)).(map[string]any)
		s := spec(pod)
		inits, _ := s["initContainers"].([]any)
		c["name"] = fmt.Sprintf("init-%d", len(inits))
		delete(c, "livenessProbe")
		delete(c, "readinessProbe")
		delete(c, "startupProbe")
		s["initContainers"] = append(inits, c)
	}},
	{"ephemeral-container", func(r *rand.Rand, pod map[string]any) {
		src := someContainer(r, pod)
		c := map[string]any{"name": fmt.Sprintf("debug-%d", r.IntN(100)), "image": pick(r, images[:12])}
		if sc, ok := src["securityContext"]; ok {
			c["securityContext"] = deepCopy(sc)
		}
		if r.IntN(2) == 0 {
			c["targetContainerName"] = containerName(src)
		}
		s := spec(pod)
		eph, _ := s["ephemeralContainers"].([]any)
		s["ephemeralContainers"] = append(eph, c)
	}},
	{"sysctls", func(r *rand.Rand, pod map[string]any) {
		sc := child(spec(pod), "securityContext")
		var out []any
		for i := r.IntN(3); i >= 0; i-- {
			out = append(out, map[string]any{"name": pick(r, []string{"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.core.somaxconn", "kernel.msgmax", "net.ipv4.tcp_syncookies", "vm.swappiness"}), "value": "1"})
		}
		sc["sysctls"] = out
	}},
	{"proc-mount", func(r *rand.Rand, pod map[string]any) {
		setOrDelete(r, child(someContainer(r, pod), "securityContext"), "procMount", "Default", "Unmasked", "unmasked", nil)
	}},
	{"selinux", func(r *rand.Rand, pod map[string]any) {
		var sc map[string]any
		if r.IntN(2) == 0 {
			sc = child(spec(pod), "securityContext")
		} else {
			sc = child(someContainer(r, pod), "securityContext")
		}
		sc["seLinuxOptions"] = pick(r, []map[string]any{
			{"type": "container_t"},
			{"type": "container_init_t"},
			{"type": "spc_t"},
			{"level": "s0:c123,c456"},
			{"type": "container_t", "user": "system_u"},
			{"role": "sysadm_r"},
			{},
		})
		sc["seLinuxOptions"] = deepCopy(sc["seLinuxOptions"])
	}},
	{"host-process", func(r *rand.Rand, pod map[string]any) {
		var sc map[string]any
		if r.IntN(2) == 0 {
			sc = child(spec(pod), "securityContext")
		} else {
			sc = child(someContainer(r, pod), "securityContext")
		}
		sc["windowsOptions"] = map[string]any{"hostProcess": pick(r, []bool{true, false}), "runAsUserName": "NT AUTHORITY\\SYSTEM"}
	}},
	{"service-account", func(r *rand.Rand, pod map[string]any) {
		s := spec(pod)
		setOrDelete(r, s, "automountServiceAccountToken", true, false, nil)
		setOrDelete(r, s, "serviceAccountName", "default", "builder", nil)
		switch r.IntN(3) {
		case 0:
			c := someContainer(r, pod)
			mounts, _ := c["volumeMounts"].([]any)
			c["volumeMounts"] = append(mounts, map[string]any{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true})
		case 1:
			// As the ServiceAccount admission plugin leaves every pod: a
			// token volume with a name of its own, mounted in each container.
			token := fmt.Sprintf("kube-api-access-%05x", r.IntN(1<<20))
			vols, _ := s["volumes"].([]any)
			s["volumes"] = append(vols, map[string]any{"name": token, "projected": map[string]any{"defaultMode": int64(420),
				"sources": []any{map[string]any{"serviceAccountToken": map[string]any{"expirationSeconds": int64(3607), "path": "token"}}}}})
			for _, c := range allContainers(pod) {
				mounts, _ := c["volumeMounts"].([]any)
				c["volumeMounts"] = append(mounts, map[string]any{"name": token, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true})
			}
		}
	}},
	{"tty", func(r *rand.Rand, pod map[string]any) {
		c := someContainer(r, pod)
		setOrDelete(r, c, "tty", true, false, nil)
		setOrDelete(r, c, "stdin", true, false, nil)
	}},
	{"strip-security-context", func(r *rand.Rand, pod map[string]any) {
		if r.IntN(2) == 0 {
			delete(someContainer(r, pod), "securityContext")
		} else {
			delete(spec(pod), "securityContext")
		}
	}},
	{"second-container", func(r *rand.Rand, pod map[string]any) {
		s := spec(pod)
		cs, _ := s["containers"].([]any)
		c := map[string]any{"name": fmt.Sprintf("sidecar-%d", len(cs)), "image": pick(r, images[:len(images)-1])}
		if r.IntN(2) == 0 {
			c["resources"] = map[string]any{"limits": resourceList(r), "requests": resourceList(r)}
		}
		s["containers"] = append(cs, c)
	}},
	{"node-selector", func(r *rand.Rand, pod map[string]any) {
		s := spec(pod)
		setOrDelete(r, s, "nodeSelector", map[string]any{"topology.kubernetes.io/zone": "zone-a"}, map[string]any{"tenant": "alpha"}, nil)
		setOrDelete(r, s, "priorityClassName", "system-node-critical", "high", nil)
	}},
}

// generatedPod is one pod of the run and the candidate nodes it is judged on.
type generatedPod struct {
	obj     map[string]any
	seed    string   // seed object name
	applied []string // mutations
	nodes   []string
}

// candidatesPerPod is how many nodes each pod is judged on.
const candidatesPerPod = 3

// generatePods builds n pods: every seed unmodified first (up to n), then
// seeds with one to six random mutations, each in a namespace drawn from
// namespaces and with candidate nodes drawn across the pools.
func generatePods(seed uint64, n int, seeds []*unstructured.Unstructured, nodes []node) []generatedPod {
	r := rand.New(rand.NewPCG(seed, 0x6f70612d64696666))
	byPool := map[string][]string{}
	var poolNames []string
	for _, nd := range nodes {
		if _, ok := byPool[nd.pool]; !ok {
			poolNames = append(poolNames, nd.pool)
		}
		byPool[nd.pool] = append(byPool[nd.pool], nd.name)
	}
	sort.Strings(poolNames)
	totalWeight := 0
	for _, ns := range namespaces {
		totalWeight += ns.weight
	}
	out := make([]generatedPod, 0, n)
	for i := 0; i < n; i++ {
		s := seeds[i%len(seeds)]
		if i >= len(seeds) {
			s = seeds[r.IntN(len(seeds))]
		}
		pod := deepCopy(s.Object).(map[string]any)
		g := generatedPod{seed: s.GetName()}
		if i >= len(seeds) {
			for k := 1 + r.IntN(6); k > 0; k-- {
				m := mutations[r.IntN(len(mutations))]
				m.fn(r, pod)
				g.applied = append(g.applied, m.name)
			}
		}
		md := metadata(pod)
		md["name"] = fmt.Sprintf("%s-%03d", truncate(g.seed, 40), i)
		w := r.IntN(totalWeight)
		for _, ns := range namespaces {
			if w < ns.weight {
				md["namespace"] = ns.name
				break
			}
			w -= ns.weight
		}
		md["uid"] = fmt.Sprintf("22222222-0000-4000-8000-%012d", i)
		g.obj = pod
		// Distinct candidates from distinct pools.
		perm := r.Perm(len(poolNames))
		for _, pi := range perm[:candidatesPerPod] {
			g.nodes = append(g.nodes, pick(r, byPool[poolNames[pi]]))
		}
		out = append(out, g)
	}
	return out
}

func truncate(s string, n int) string {
	s = strings.TrimSuffix(s, "-")
	if len(s) > n {
		return s[:n]
	}
	return s
}
