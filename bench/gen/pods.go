package gen

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
)

// Objects generates the pods, nodes and namespaces that templates are
// judged on: fields optional, absent, null, empty or of the wrong type,
// 0 to 3 containers, labels and annotations that templates test.
type Objects struct {
	r *rand.Rand
}

// NewObjects is a generator seeded with seed.
func NewObjects(seed uint64) *Objects {
	return &Objects{r: rand.New(rand.NewPCG(seed, 0x706f6473))}
}

// Namespaces are the namespaces pods are put in; the last one is not in
// the inventory (its review has no namespaceObject), and team-c's labels
// are not all strings (CEL's namespaceObject cannot hold it).
var Namespaces = []string{"team-a", "team-b", "team-c", "unsynced"}

// NamespaceObjects are the synced namespaces as objects.
func NamespaceObjects() []map[string]any {
	return []map[string]any{
		{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "team-a", "labels": map[string]any{"team": "a", "tier": "gpu-"}}},
		{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "team-b"}},
		{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "team-c", "labels": map[string]any{"team": "c", "size": int64(3)}}},
	}
}

// Malformed reports whether obj has a label or annotation that is not a
// string: Gatekeeper's cache refuses such a Namespace.
func Malformed(obj map[string]any) bool {
	md, _ := obj["metadata"].(map[string]any)
	for _, key := range []string{"labels", "annotations"} {
		m, _ := md[key].(map[string]any)
		for _, v := range m {
			if _, ok := v.(string); !ok {
				return true
			}
		}
	}
	return false
}

// NodeNames are the candidate nodes: names that the generated prefixes
// and patterns tell apart.
var NodeNames = []string{"gpu-0", "gpu-1", "cpu-0", "spot-7", "node-a"}

// NodeObjects are the nodes as objects, labelled by pool and zone.
func NodeObjects() []map[string]any {
	var out []map[string]any
	for i, n := range NodeNames {
		labels := map[string]any{"kubernetes.io/hostname": n, "topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", i%2)}
		if i%3 == 0 {
			labels["team"] = "a"
		}
		out = append(out, map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": n, "labels": labels}})
	}
	return out
}

// Pod is a random pod named after i.
func (o *Objects) Pod(i int) map[string]any {
	r := o.r
	md := map[string]any{
		"name":      pick(r, []string{"web", "gpu-job", "db", "a-b"}) + fmt.Sprintf("-%d", i),
		"namespace": pick(r, Namespaces),
		"uid":       fmt.Sprintf("33333333-0000-4000-8000-%012d", i),
	}
	o.maybe(md, "labels", map[string]any{}, map[string]any{"team": "a"}, map[string]any{"team": "b", "app": "web"},
		map[string]any{"team": "gpu-"}, map[string]any{"app": "db"}, map[string]any{"team": int64(7)}, nil)
	o.maybe(md, "annotations", map[string]any{"owner": "me"}, map[string]any{"team": "a", "tier": "x"}, map[string]any{})
	spec := map[string]any{}
	n := r.IntN(4)
	if n > 0 || r.IntN(2) == 0 {
		var cs []any
		for j := range n {
			cs = append(cs, o.container(j))
		}
		if cs == nil {
			cs = []any{}
		}
		spec["containers"] = cs
	}
	if r.IntN(3) == 0 {
		spec["initContainers"] = []any{o.container(9)}
	}
	o.maybe(spec, "priorityClassName", "high", "", "gpu-1", nil)
	o.maybe(spec, "hostNetwork", true, false, "true")
	return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec}
}

func (o *Objects) container(j int) map[string]any {
	r := o.r
	c := map[string]any{
		"name":  fmt.Sprintf("c%d", j),
		"image": pick(r, []string{"nginx:1.27", "nginx:latest", "gpu/cuda:12", "web", "registry.io/a@sha256:0123"}),
	}
	if r.IntN(6) == 0 {
		delete(c, "image")
	}
	o.maybe(c, "ports", []any{}, []any{map[string]any{"containerPort": int64(80)}},
		[]any{map[string]any{"containerPort": int64(8080), "name": "http"}, map[string]any{"containerPort": int64(80)}},
		[]any{map[string]any{"name": "noport"}})
	o.maybe(c, "securityContext", map[string]any{}, map[string]any{"privileged": true}, map[string]any{"privileged": false},
		map[string]any{"privileged": "yes"}, nil)
	return c
}

// maybe sets m[key] to one of values (nil is JSON null), or leaves it
// unset a third of the time.
func (o *Objects) maybe(m map[string]any, key string, values ...any) {
	if o.r.IntN(3) == 0 {
		return
	}
	m[key] = deepCopy(values[o.r.IntN(len(values))])
}

// Candidates are k distinct node names.
func (o *Objects) Candidates(k int) []string {
	perm := o.r.Perm(len(NodeNames))
	out := make([]string, k)
	for i := range out {
		out[i] = NodeNames[perm[i]]
	}
	return out
}

// deepCopy copies JSON-like values.
func deepCopy[T any](v T) T {
	c, _ := copyValue(v).(T)
	return c
}

func copyValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = copyValue(e)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = copyValue(e)
		}
		return l
	}
	return v
}

// Simpler are the pods one step simpler than p: one field of it (at any
// depth) removed, or one list element dropped.
func Simpler(p map[string]any) []map[string]any {
	var out []map[string]any
	var walk func(v any, path []any)
	walk = func(v any, path []any) {
		switch x := v.(type) {
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(x)) {
				e := x[k]
				if len(path) == 1 && (k == "name" || k == "namespace" || k == "uid") && path[0] == "metadata" {
					continue
				}
				if len(path) == 0 && (k == "apiVersion" || k == "kind" || k == "metadata") {
					walk(e, append(path, k))
					continue
				}
				out = append(out, removed(p, append(append([]any(nil), path...), k)))
				walk(e, append(append([]any(nil), path...), k))
			}
		case []any:
			for i, e := range x {
				out = append(out, removed(p, append(append([]any(nil), path...), i)))
				walk(e, append(append([]any(nil), path...), i))
			}
		}
	}
	walk(p, nil)
	return out
}

// removed is a copy of p without the value at path.
func removed(p map[string]any, path []any) map[string]any {
	c := deepCopy(p)
	parent := valueAt(c, path[:len(path)-1])
	switch s := path[len(path)-1].(type) {
	case string:
		delete(parent.(map[string]any), s)
	case int:
		// A shorter list, set in its parent.
		l := parent.([]any)
		shorter := append(append([]any{}, l[:s]...), l[s+1:]...)
		grand, last := valueAt(c, path[:len(path)-2]), path[len(path)-2]
		switch k := last.(type) {
		case string:
			grand.(map[string]any)[k] = shorter
		case int:
			grand.([]any)[k] = shorter
		}
	}
	return c
}

// valueAt is the value at path in root.
func valueAt(root map[string]any, path []any) any {
	var v any = root
	for _, step := range path {
		switch s := step.(type) {
		case string:
			v = v.(map[string]any)[s]
		case int:
			v = v.([]any)[s]
		}
	}
	return v
}
