package opa

import (
	"errors"
	"fmt"
	"sync"

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
// Each call reads the pod anew; a front end decodes with a PodDecoder.
func DecodePod(b []byte) (*Pod, error) {
	v, err := jsonvalue.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("malformed pod JSON: %w", err)
	}
	return podOf(v, nil)
}

// podOf is the pod v, read strictly; labels, when not nil, keeps the
// label maps made.
func podOf(v ast.Value, labels *termMaps) (*Pod, error) {
	obj, ok := v.(ast.Object)
	if !ok {
		return nil, &PodFieldError{Field: "(the pod)", Got: jsonType(v), Want: "object"}
	}
	return newPod(obj, true, labels)
}

// PodDecoder decodes pods as DecodePod does, and remembers what recurs:
// the last pods it read with their JSON (the verbs of one scheduling
// cycle send the same pod: each gets the same *Pod, which the engine's
// answer reuse keys on), the parts of pods that recur across pods (a
// ReplicaSet's containers, tolerations, affinity: read once and shared,
// see jsonvalue.Shared; a replica's decoding allocates about a third of
// what it did), and the label maps made. A front end (the extender's
// server, the plugin) holds one; it is bounded (a few pods, 8192 parts
// and 1 MiB of their JSON, a few label maps) and safe for concurrent use.
type PodDecoder struct {
	pods   podCache
	values *jsonvalue.Shared
	labels termMaps
}

// NewPodDecoder is an empty PodDecoder.
func NewPodDecoder() *PodDecoder {
	return &PodDecoder{values: jsonvalue.NewShared(jsonvalue.SharedLimits{})}
}

// Decode is DecodePod, with what d remembers.
func (d *PodDecoder) Decode(b []byte) (*Pod, error) {
	digest := digestOf(b)
	if p := d.pods.find(digest, b); p != nil {
		return p, nil
	}
	v, err := d.values.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("malformed pod JSON: %w", err)
	}
	p, err := podOf(v, &d.labels)
	if err != nil {
		return nil, err
	}
	d.pods.add(digest, b, p)
	return p, nil
}

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
	return newPod(obj, false, nil)
}

var (
	termAPIVersion = ast.StringTerm("apiVersion")
	termKind       = ast.StringTerm("kind")
	termMetadata   = ast.StringTerm("metadata")

	termName         = ast.StringTerm("name")
	termNamespace    = ast.StringTerm("namespace")
	termUID          = ast.StringTerm("uid")
	termGenerateName = ast.StringTerm("generateName")
	termLabels       = ast.StringTerm("labels")
	termAnnotations  = ast.StringTerm("annotations")
	termSpec         = ast.StringTerm("spec")
)

// newPod reads the metadata of obj; strict makes a field of the wrong
// type an error, else it is skipped. labels, when not nil, keeps the label
// maps made, for the pods that share their terms.
func newPod(obj ast.Object, strict bool, labels *termMaps) (*Pod, error) {
	// Every review of a placement has a spec, the candidate's name in it
	// (gatekeeper.WithNodeName): a pod judged once for all candidates
	// must see one too, or has(object.spec.x) would fail where a review
	// with the name set does not.
	if t := obj.Get(termSpec); t == nil || !isObject(t) {
		obj = gatekeeper.ReplaceKey(obj, termSpec, ast.NewTerm(ast.NewObject()))
	}
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
		key *ast.Term
		to  *string
	}{{termName, &p.name}, {termNamespace, &p.namespace}, {termUID, &p.uid}, {termGenerateName, &generateName}} {
		s, err := stringField(md, f.key)
		if err = keep(err, strict); err != nil {
			return nil, err
		}
		*f.to = s
	}
	if p.labels, err = podLabels(md, strict, labels); err != nil {
		return nil, err
	}
	// Annotations are only checked: the engine reads none of them itself.
	if err := checkStrings(md, termAnnotations, strict); err != nil {
		return nil, err
	}
	p.workload, p.nsLast = workloadNames(p.namespace, generateName)
	return p, nil
}

func isObject(t *ast.Term) bool {
	_, ok := t.Value.(ast.Object)
	return ok
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

// stringField is the string at metadata's key ("" when absent or null).
func stringField(md ast.Object, key *ast.Term) (string, error) {
	t := md.Get(key)
	if t == nil {
		return "", nil
	}
	switch x := t.Value.(type) {
	case ast.String:
		return string(x), nil
	case ast.Null:
		return "", nil
	}
	return "", &PodFieldError{Field: metadataPath(key), Got: jsonType(t.Value), Want: "string"}
}

func metadataPath(key *ast.Term) string {
	k, _ := key.Value.(ast.String)
	return "metadata." + string(k)
}

// stringMap is metadata's map of strings at key (labels, annotations);
// nil when absent.
func stringMap(md ast.Object, key *ast.Term, strict bool) (map[string]string, error) {
	m, err := objectField(md, key, metadataPath(key))
	if m == nil {
		return nil, keep(err, strict)
	}
	out := make(map[string]string, m.Len())
	err = eachString(m, key, strict, func(k, v string) { out[k] = v })
	return out, err
}

// checkStrings checks, when strict, that metadata's key holds an object
// of strings (or null values), and keeps nothing of it.
func checkStrings(md ast.Object, key *ast.Term, strict bool) error {
	if !strict {
		return nil
	}
	m, err := objectField(md, key, metadataPath(key))
	if m == nil {
		return err
	}
	return eachString(m, key, strict, func(string, string) {})
}

// eachString calls f with each string of m (metadata's key); a null value
// is skipped, and so is any other unless strict, where it is an error.
func eachString(m ast.Object, key *ast.Term, strict bool, f func(k, v string)) error {
	return m.Iter(func(k, v *ast.Term) error {
		ks, _ := k.Value.(ast.String) // JSON keys are strings
		switch vs := v.Value.(type) {
		case ast.String:
			f(string(ks), string(vs))
		case ast.Null:
		default:
			if strict {
				return &PodFieldError{Field: metadataPath(key) + "." + string(ks), Got: jsonType(v.Value), Want: "string"}
			}
		}
		return nil
	})
}

// podLabels is the pod's labels. A ReplicaSet's replicas carry the same
// labels, which a PodDecoder's shared values give as the very same term:
// the map made for one replica serves the next ones (recent, the
// decoder's), so that a replica's labels cost a lookup, not a map. The map
// is never written once made.
func podLabels(md ast.Object, strict bool, recent *termMaps) (map[string]string, error) {
	t := md.Get(termLabels)
	if t == nil {
		return nil, nil
	}
	if recent != nil {
		if m, ok := recent.find(t); ok {
			return m, nil
		}
	}
	m, err := stringMap(md, termLabels, strict)
	if err != nil {
		return nil, err
	}
	if strict && recent != nil {
		// A lenient read skips values of other types: its map is not the
		// term's whole, and a strict read of the same term must fail.
		recent.add(t, m)
	}
	return m, nil
}

// recentLabelMaps is how many label maps a decoder keeps, by the term
// they were read from: one per workload scheduled at once is plenty.
const recentLabelMaps = 8

type termMaps struct {
	mu      sync.Mutex
	entries [recentLabelMaps]struct {
		term *ast.Term
		m    map[string]string
	}
	next int
}

func (c *termMaps) find(t *ast.Term) (map[string]string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.entries {
		if c.entries[i].term == t {
			return c.entries[i].m, true
		}
	}
	return nil, false
}

func (c *termMaps) add(t *ast.Term, m map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries[c.next].term, c.entries[c.next].m = t, m
	c.next = (c.next + 1) % recentLabelMaps
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
