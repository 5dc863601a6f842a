package opa

import (
	"errors"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/gatekeeper"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/jsonvalue"
)

// Pod is a pod converted once into the values templates read. The
// extender's pods arrive as JSON: DecodePod reads them straight into
// those values, where decoding a typed Pod, converting it to unstructured
// content and that to values cost three times as much (a third of a
// filter call at 500 nodes). A Pod is immutable and safe for concurrent
// use.
type Pod struct {
	value                ast.Object // apiVersion and kind set
	name, namespace, uid string
	labels               map[string]string
	// workload and nsLast name the key values it shares with its
	// workload's and its namespace's pods (workloadkeys.go).
	workload, nsLast string
}

// Name, Namespace and UID are the pod's metadata ("" when absent).
func (p *Pod) Name() string      { return p.name }
func (p *Pod) Namespace() string { return p.namespace }
func (p *Pod) UID() string       { return p.uid }

// Content is the pod as unstructured content (a copy), apiVersion and
// kind included.
func (p *Pod) Content() (map[string]any, error) {
	v, err := ast.JSON(p.value)
	if err != nil {
		return nil, fmt.Errorf("pod as JSON: %w", err)
	}
	m, _ := v.(map[string]any)
	return m, nil
}

// PodFieldError is a field of the pod's metadata that is not of the type
// Kubernetes gives it.
type PodFieldError struct {
	// Field is the path below the pod, as metadata.labels.app.
	Field string
	// Got is the JSON type found (string, number, object, array, boolean,
	// null); Want the type required.
	Got, Want string
}

func (e *PodFieldError) Error() string {
	return fmt.Sprintf("field %s is a JSON %s, want a %s", e.Field, e.Got, e.Want)
}

// DecodePod reads a pod from its JSON, as the scheduler sends it. The
// metadata the engine reads itself (name, namespace, uid, generateName,
// labels, annotations) must have Kubernetes' types (a *PodFieldError
// otherwise); the rest reaches templates as it was sent, as the object of
// an admission review does. Malformed JSON is a *jsonvalue.SyntaxError
// (wrapped); a document that is not an object is an error too.
func DecodePod(b []byte) (*Pod, error) {
	d := digestOf(b)
	if p := decodedPods.find(d, b); p != nil {
		return p, nil
	}
	v, err := podValues.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("malformed pod JSON: %w", err)
	}
	obj, ok := v.(ast.Object)
	if !ok {
		return nil, &PodFieldError{Field: "(the pod)", Got: jsonType(v), Want: "object"}
	}
	p, err := newPod(obj, true)
	if err != nil {
		return nil, err
	}
	decodedPods.add(d, b, p)
	return p, nil
}

// podValues are the parts of pods read by DecodePod that recur across
// pods (a ReplicaSet's containers, tolerations, affinity), read once and
// shared by the pods that repeat them (see jsonvalue.Shared): a replica's
// decoding allocates about a third of what it did. Bounded at 8192 parts
// and 1 MiB of their JSON.
var podValues = jsonvalue.NewShared(jsonvalue.SharedLimits{})

// NewPod converts unstructured content (apiVersion and kind may be
// missing: they are set to v1 and Pod). Unlike DecodePod it takes any
// content: metadata of another type than Kubernetes gives it is not read
// for matching (a name that is a number is no name), and reaches templates
// as it is, which is how the engine's tests feed it odd values.
func NewPod(content map[string]any) (*Pod, error) {
	if content == nil {
		return nil, errors.New("pod is required")
	}
	v, err := ast.InterfaceToValue(gatekeeper.WithTypeMeta(content, podGVK))
	if err != nil {
		return nil, fmt.Errorf("convert pod: %w", err)
	}
	obj, ok := v.(ast.Object)
	if !ok {
		return nil, errors.New("pod is not an object")
	}
	return newPod(obj, false)
}

var (
	termAPIVersion = ast.StringTerm("apiVersion")
	termKind       = ast.StringTerm("kind")
	termMetadata   = ast.StringTerm("metadata")
)

// newPod reads the metadata of obj; strict makes a field of the wrong
// type an error, else it is skipped.
func newPod(obj ast.Object, strict bool) (*Pod, error) {
	if obj.Get(termAPIVersion) == nil || obj.Get(termKind) == nil {
		// A new top level sharing every value (the scheduler's pods carry
		// no TypeMeta, so this is the common case): Copy would copy the
		// whole pod.
		items := make([][2]*ast.Term, 0, obj.Len()+2)
		obj.Foreach(func(k, v *ast.Term) { items = append(items, [2]*ast.Term{k, v}) })
		if obj.Get(termAPIVersion) == nil {
			items = append(items, [2]*ast.Term{termAPIVersion, ast.StringTerm(podGVK.GroupVersion().String())})
		}
		if obj.Get(termKind) == nil {
			items = append(items, [2]*ast.Term{termKind, ast.StringTerm(podGVK.Kind)})
		}
		obj = ast.NewObject(items...)
	}
	p := &Pod{value: obj}
	p.workload, p.nsLast = workloadNames("", "")
	md, err := objectField(obj, termMetadata, "metadata")
	if md == nil {
		return p, keep(err, strict)
	}
	var generateName string
	for _, f := range []struct {
		key string
		to  *string
	}{{"name", &p.name}, {"namespace", &p.namespace}, {"uid", &p.uid}, {"generateName", &generateName}} {
		s, err := stringField(md, f.key, "metadata."+f.key)
		if err = keep(err, strict); err != nil {
			return nil, err
		}
		*f.to = s
	}
	for _, key := range []string{"labels", "annotations"} {
		m, err := stringMap(md, key, "metadata."+key, strict)
		if err != nil {
			return nil, err
		}
		if key == "labels" {
			p.labels = m
		}
	}
	p.workload, p.nsLast = workloadNames(p.namespace, generateName)
	return p, nil
}

// keep drops a field error unless strict.
func keep(err error, strict bool) error {
	if strict {
		return err
	}
	return nil
}

// objectField is obj[key] when it is an object, nil when absent or null.
func objectField(obj ast.Object, key *ast.Term, path string) (ast.Object, error) {
	t := obj.Get(key)
	if t == nil {
		return nil, nil
	}
	switch x := t.Value.(type) {
	case ast.Object:
		return x, nil
	case ast.Null:
		return nil, nil
	}
	return nil, &PodFieldError{Field: path, Got: jsonType(t.Value), Want: "object"}
}

func stringField(obj ast.Object, key, path string) (string, error) {
	t := obj.Get(ast.StringTerm(key))
	if t == nil {
		return "", nil
	}
	switch x := t.Value.(type) {
	case ast.String:
		return string(x), nil
	case ast.Null:
		return "", nil
	}
	return "", &PodFieldError{Field: path, Got: jsonType(t.Value), Want: "string"}
}

// stringMap is a map of strings (labels, annotations); nil when absent.
func stringMap(obj ast.Object, key, path string, strict bool) (map[string]string, error) {
	m, err := objectField(obj, ast.StringTerm(key), path)
	if m == nil {
		return nil, keep(err, strict)
	}
	out := make(map[string]string, m.Len())
	err = m.Iter(func(k, v *ast.Term) error {
		ks, _ := k.Value.(ast.String) // JSON keys are strings
		switch vs := v.Value.(type) {
		case ast.String:
			out[string(ks)] = string(vs)
		case ast.Null:
		default:
			if !strict {
				return nil
			}
			return &PodFieldError{Field: path + "." + string(ks), Got: jsonType(v.Value), Want: "string"}
		}
		return nil
	})
	return out, err
}

func jsonType(v ast.Value) string {
	switch v.(type) {
	case ast.String:
		return "string"
	case ast.Number:
		return "number"
	case ast.Boolean:
		return "boolean"
	case ast.Null:
		return "null"
	case *ast.Array:
		return "array"
	case ast.Object:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}
