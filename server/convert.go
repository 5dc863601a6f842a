package server

import (
	"encoding/json"
	"errors"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/freelist"
)

// unknownNodeReason is the FailedNodes message for a node the engine knows
// nothing about (names-only request, node not in the inventory).
const unknownNodeReason = "node not in the extender's node inventory"

// checkPod validates the pod of a request and returns "namespace/name".
// Both name and namespace are required: the scheduler always sends them,
// and defaulting an empty namespace would evaluate namespace-scoped
// constraints against the wrong Namespace.
func checkPod(name, namespace string) (string, *requestError) {
	switch {
	case name == "":
		return "", badRequest("Pod has no metadata.name")
	case namespace == "":
		return "", badRequest("Pod %q has no metadata.namespace", name)
	}
	return namespace + "/" + name, nil
}

// checkTypedPod is checkPod for the verbs that decode a typed Pod.
func checkTypedPod(p *v1.Pod) (string, *requestError) {
	if p == nil {
		return "", badRequest("request has no Pod")
	}
	return checkPod(p.Name, p.Namespace)
}

// decodePod reads the pod of a request of type what straight into the
// engine's values. A pod's fields reach templates as the scheduler sent
// them; only the metadata the engine reads itself is type-checked.
func (s *Server) decodePod(raw json.RawMessage, what string) (*opa.Pod, *requestError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("request has no Pod")
	}
	pod, err := s.pods.Decode(raw)
	var fe *opa.PodFieldError
	switch {
	case errors.As(err, &fe) && fe.Field == "(the pod)":
		return nil, badRequest("wrong type in JSON %s: field Pod is a JSON %s, want an object", what, fe.Got)
	case errors.As(err, &fe):
		return nil, badRequest("wrong type in JSON %s: field Pod.%s is a JSON %s, want a %s", what, fe.Field, fe.Got, fe.Want)
	case err != nil:
		return nil, badRequest("cannot decode the Pod of the JSON %s: %v", what, err)
	}
	return pod, nil
}

// podObject converts the wire pod into the unstructured content the engine
// takes, with apiVersion v1 and kind Pod.
func podObject(p *v1.Pod) (map[string]any, *requestError) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		return nil, badRequest("cannot convert Pod %s/%s: %v", p.Namespace, p.Name, err)
	}
	m["apiVersion"] = "v1"
	m["kind"] = "Pod"
	return m, nil
}

// nodeObject converts a wire node into unstructured content, with
// apiVersion v1 and kind Node (items of a NodeList usually carry neither).
func nodeObject(n *v1.Node) (map[string]any, *requestError) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(n)
	if err != nil {
		return nil, badRequest("cannot convert Node %q: %v", n.Name, err)
	}
	m["apiVersion"] = "v1"
	m["kind"] = "Node"
	return m, nil
}

// nodeArgs is the node list of an ExtenderArgs, deduplicated.
type nodeArgs struct {
	// names are the unique node names in input order.
	names []string
	// items, in full-node mode, are the indexes into Nodes.Items of the
	// first occurrence of each name (parallel to names); nil in names mode.
	items []int
	// full is true when the request carried full Node objects.
	full bool
}

// candidateBuffers are the engine's candidate lists, reused by later
// requests: Evaluate keeps nothing of them once it returns.
var candidateBuffers = freelist.List[*[]opa.Candidate]{New: func() *[]opa.Candidate { return new([]opa.Candidate) }}

// parseNodes validates and deduplicates the nodes of an ExtenderArgs.
// Neither list set is a valid, empty request. wire.names, when the scanner
// read NodeNames, holds their numbers (nodenames.go).
func parseNodes(wire *extenderArgsWire) (nodeArgs, *requestError) {
	var items []json.RawMessage
	if wire.Nodes != nil {
		items = wire.Nodes.Items
	}
	if wire.names != nil && wire.NodeNames != nil && len(items) == 0 {
		return parseNumberedNames(*wire.NodeNames, wire.names)
	}
	var names []string
	if wire.NodeNames != nil {
		names = *wire.NodeNames
	}
	if len(names) > 0 && len(items) > 0 {
		return nodeArgs{}, badRequest("request has both Nodes and NodeNames: send one (the scheduler sends NodeNames when the extender is nodeCacheCapable, Nodes otherwise)")
	}
	if len(items) > 0 {
		return parseNodeItems(items, wire.Nodes.names)
	}
	seen := seenNames.Get()
	defer func() { clear(seen); seenNames.Put(seen) }()
	dups := false
	for i, name := range names {
		if name == "" {
			return nodeArgs{}, badRequest("NodeNames[%d] is empty", i)
		}
		if _, dup := seen[name]; dup {
			dups = true
			continue
		}
		seen[name] = struct{}{}
	}
	if dups { // rare: the scheduler sends unique names
		names = dedupeNames(names)
	}
	return nodeArgs{names: names}, nil
}

// parseNodeItems names the Nodes of a request by their metadata.name
// (known, when the scanner read them: "" for the ones it could not tell),
// keeping the first of each name.
func parseNodeItems(items []json.RawMessage, known []string) (nodeArgs, *requestError) {
	na := nodeArgs{full: true, names: make([]string, 0, len(items)), items: make([]int, 0, len(items))}
	seen := make(map[string]struct{}, len(items))
	for i, raw := range items {
		var name string
		if i < len(known) {
			name = known[i]
		}
		if name == "" {
			var problem string
			if name, problem = nodeItemName(raw); problem != "" {
				return nodeArgs{}, badRequest("Nodes.items[%d] %s", i, problem)
			}
		}
		if _, dup := seen[name]; dup {
			continue
		}
		seen[name] = struct{}{}
		na.names = append(na.names, name)
		na.items = append(na.items, i)
	}
	return na, nil
}

// parseNumberedNames is parseNodes for interned names: duplicates are
// found by number.
func parseNumberedNames(names []string, buf *nameBuffers) (nodeArgs, *requestError) {
	for i, name := range names {
		if name == "" {
			return nodeArgs{}, badRequest("NodeNames[%d] is empty", i)
		}
	}
	if buf.repeats(buf.ids[:len(names)]) { // rare: the scheduler sends unique names
		names = dedupeNames(names)
	}
	return nodeArgs{names: names}, nil
}

// seenNames recycles the duplicate check's set: it is as large as the
// candidate list, and made anew on every call it was 4% of what a filter
// call allocated (realistic mix, 500 candidates).
var seenNames = freelist.List[map[string]struct{}]{New: func() map[string]struct{} { return map[string]struct{}{} }}

func dedupeNames(names []string) []string {
	out := make([]string, 0, len(names))
	seen := make(map[string]struct{}, len(names))
	for _, n := range names {
		if _, dup := seen[n]; dup {
			continue
		}
		seen[n] = struct{}{}
		out = append(out, n)
	}
	return out
}

// candidates builds the engine's candidate list in cs: names only, or
// names and the given Nodes' JSON. cs must be zero over its whole
// capacity (placeArgs clears it whole when it gives it back): clearing it
// again would cost a write barrier per element while the collector marks.
func (na nodeArgs) candidates(wire *extenderArgsWire, cs []opa.Candidate) []opa.Candidate {
	if cap(cs) < len(na.names) {
		cs = make([]opa.Candidate, len(na.names))
	}
	cs = cs[:len(na.names)] // zero: the list is cleared whole when given back (placeArgs)
	for i, name := range na.names {
		cs[i].Name = name
		if na.full {
			cs[i].JSON = wire.Nodes.Items[na.items[i]]
		}
	}
	return cs
}
