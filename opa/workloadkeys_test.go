package opa_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// replicaOf is pod p as the k-th pod of a workload: generateName set,
// its own name and uid, and a token volume of its own mounted in every
// container, as the API server's admission writes them.
func replicaOf(p map[string]any, workload string, k int) map[string]any {
	c := runtime.DeepCopyJSON(p)
	md := c["metadata"].(map[string]any)
	md["generateName"] = workload + "-"
	md["name"] = fmt.Sprintf("%s-%05d", workload, k)
	md["uid"] = fmt.Sprintf("uid-%s-%d", workload, k)
	token := fmt.Sprintf("kube-api-access-%05d", k)
	spec, _ := c["spec"].(map[string]any)
	if spec == nil {
		spec = map[string]any{}
		c["spec"] = spec
	}
	volumes, _ := spec["volumes"].([]any)
	spec["volumes"] = append(volumes, map[string]any{"name": token, "projected": map[string]any{"sources": []any{}}})
	eachContainer(c, func(m map[string]any) {
		mounts, _ := m["volumeMounts"].([]any)
		m["volumeMounts"] = append(mounts, map[string]any{"name": token, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true})
	})
	return c
}

// podChanges are changes of what the library's templates read, made to
// a replica: each gives the workload's next pod something of its own.
var podChanges = []func(p map[string]any, rng *rand.Rand){
	func(p map[string]any, rng *rand.Rand) {
		eachContainer(p, func(m map[string]any) {
			m["image"] = []string{"nginx:1.27", "nginx:latest", "k8s.gcr.io/x:1"}[rng.IntN(3)]
		})
	},
	func(p map[string]any, rng *rand.Rand) {
		eachContainer(p, func(m map[string]any) {
			m["securityContext"] = map[string]any{"privileged": rng.IntN(2) == 0, "runAsNonRoot": rng.IntN(2) == 0}
		})
	},
	func(p map[string]any, rng *rand.Rand) { spec(p)["hostNetwork"] = rng.IntN(2) == 0 },
	func(p map[string]any, rng *rand.Rand) {
		p["metadata"].(map[string]any)["labels"] = map[string]any{"app": []string{"web", "db"}[rng.IntN(2)]}
	},
	func(p map[string]any, rng *rand.Rand) {
		eachContainer(p, func(m map[string]any) {
			m["resources"] = map[string]any{"limits": map[string]any{"cpu": []string{"1", "200m", "9"}[rng.IntN(3)], "memory": "1Gi"}}
		})
	},
	func(p map[string]any, rng *rand.Rand) {
		cs, _ := spec(p)["containers"].([]any)
		if len(cs) > 0 && rng.IntN(2) == 0 {
			spec(p)["containers"] = cs[:len(cs)-1]
		} else {
			spec(p)["containers"] = append(cs, map[string]any{"name": "extra", "image": "busybox:1.36"})
		}
	},
	func(p map[string]any, rng *rand.Rand) {
		eachContainer(p, func(m map[string]any) {
			mounts, _ := m["volumeMounts"].([]any) // none in a container another change added
			m["volumeMounts"] = append(mounts, map[string]any{"name": "host", "mountPath": []string{"/", "/data"}[rng.IntN(2)]})
		})
		volumes, _ := spec(p)["volumes"].([]any)
		spec(p)["volumes"] = append(volumes, map[string]any{"name": "host", "hostPath": map[string]any{"path": "/var"}})
	},
}

// TestWorkloadKeysFollowEachPod runs the library's sample Pods as
// workloads: replicas that differ from the one before only in name, uid
// and token volume, and replicas changed in what templates read, each
// judged by the memoised engine (which takes the previous replica's key
// values where no difference can move them, and a workload's first pod
// the last pod's of its namespace: another sample's; workloadkeys.go) and
// by one without memo: the same violations every time, and key values
// taken both ways.
func TestWorkloadKeysFollowEachPod(t *testing.T) {
	if _, err := os.Stat(libraryDir); err != nil {
		t.Skipf("gatekeeper-library not found at %s: %v", libraryDir, err)
	}
	memo, ref, cands := libraryEngines(t, opa.Options{})
	rng := rand.New(rand.NewPCG(1, 2))
	before := memo.Stats().KeysReused
	fromNamespace := 0 // first pods that took values from another workload's
	for i, sample := range librarySamplePods(t) {
		workload := fmt.Sprintf("wl-%d", i)
		beforeFirst := memo.Stats().KeysReused
		judgeAsReference(t, memo, ref, replicaOf(sample, workload, 0), cands, false)
		afterFirst := memo.Stats().KeysReused
		if afterFirst > beforeFirst {
			fromNamespace++
		}
		judgeAsReference(t, memo, ref, replicaOf(sample, workload, 1), cands, false)
		if memo.Stats().KeysReused == afterFirst {
			t.Errorf("sample %d (%v): its second replica took no key value from the first", i, sample["metadata"])
		}
		for k := 2; k < 5; k++ {
			p := replicaOf(sample, workload, k)
			podChanges[rng.IntN(len(podChanges))](p, rng)
			judgeAsReference(t, memo, ref, p, cands, false)
		}
	}
	if got := memo.Stats().KeysReused - before; got == 0 {
		t.Error("no key value was taken from a workload's previous pod")
	}
	// The samples differ from each other in more than a replica does;
	// some are close enough to the one before for its values to serve.
	t.Logf("%d first pods took values from the last pod of their namespace", fromNamespace)
	if fromNamespace == 0 {
		t.Error("no workload's first pod took a value from its namespace's last pod")
	}
}

// FuzzWorkloadKeys judges a sequence of one workload's pods, each the
// sample it starts from changed at random, on the memoised engine and on
// one without memo.
func FuzzWorkloadKeys(f *testing.F) {
	if _, err := os.Stat(libraryDir); err != nil {
		f.Skipf("gatekeeper-library not found at %s: %v", libraryDir, err)
	}
	for seed := range uint64(4) {
		f.Add(seed, uint8(seed*7))
	}
	memo, ref, cands := libraryEngines(f, opa.Options{})
	samples := librarySamplePods(f)
	f.Fuzz(func(t *testing.T, seed uint64, first uint8) {
		rng := rand.New(rand.NewPCG(seed, 3))
		sample := samples[int(first)%len(samples)]
		for k := range 6 {
			p := replicaOf(sample, fmt.Sprintf("fuzz-%d", seed%4), k)
			for range rng.IntN(3) {
				podChanges[rng.IntN(len(podChanges))](p, rng)
			}
			judgeAsReference(t, memo, ref, p, cands, false)
		}
	})
}

// TestBarePodsTakeTheirNamespacesValues: pods of no workload (no
// generateName, as a StatefulSet's) take key values from the last pod
// judged in their namespace, and are judged as without memo.
func TestBarePodsTakeTheirNamespacesValues(t *testing.T) {
	if _, err := os.Stat(libraryDir); err != nil {
		t.Skipf("gatekeeper-library not found at %s: %v", libraryDir, err)
	}
	memo, ref, cands := libraryEngines(t, opa.Options{})
	images := []string{"nginx:1.27", "nginx:latest", "k8s.gcr.io/pause:3.9", "nginx:1.27"}
	before := memo.Stats().KeysReused
	for i, image := range images {
		p := pod("default", fmt.Sprintf("web-%d", i), func(p map[string]any) {
			spec(p)["containers"].([]any)[0].(map[string]any)["image"] = image
			spec(p)["hostNetwork"] = i%2 == 1
		})
		judgeAsReference(t, memo, ref, p, cands, false)
	}
	if memo.Stats().KeysReused == before {
		t.Error("no bare pod took a key value from the pod before it")
	}
}
