package perf

import (
	"bytes"
	"encoding/json"
	"fmt"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// Args builds the ExtenderArgs bodies the scheduler sends for filter and
// prioritize: {"Pod":<pod>,"NodeNames":[...]} to a nodeCacheCapable
// extender, {"Pod":<pod>,"Nodes":{"metadata":{},"items":[...]}} to the
// others. The node part is encoded once.
type Args struct {
	suffix []byte
	n      int
	full   bool
}

// NewArgs prepares bodies for nodes 0..n-1, by name or (full) as objects
// (the small nodes, Node(i)).
func NewArgs(n int, full bool) *Args { return NewArgsOf(SmallNodes, n, full) }

// NewArgsOf prepares bodies for nodes 0..n-1 of the given size, by name or
// (full) as objects.
func NewArgsOf(size NodeSize, n int, full bool) *Args {
	var b bytes.Buffer
	if full {
		// The scheduler sends a v1.NodeList it built from its cache.
		b.WriteString(`,"Nodes":{"metadata":{},"items":[`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			j, err := json.Marshal(size.Node(i).Object)
			if err != nil {
				panic(err)
			}
			b.Write(j)
		}
		b.WriteString(`]}}`)
	} else {
		names, err := json.Marshal(NodeNames(n))
		if err != nil {
			panic(err)
		}
		b.WriteString(`,"NodeNames":`)
		b.Write(names)
		b.WriteString(`}`)
	}
	return &Args{suffix: b.Bytes(), n: n, full: full}
}

// Build is the body for pod p.
func (a *Args) Build(p Pod) []byte {
	var buf bytes.Buffer
	return a.BuildInto(&buf, p)
}

// BuildInto is Build into a reused buffer.
func (a *Args) BuildInto(buf *bytes.Buffer, p Pod) []byte {
	buf.Reset()
	buf.Grow(len(`{"Pod":`) + len(p.JSON) + len(a.suffix))
	buf.WriteString(`{"Pod":`)
	buf.Write(p.JSON)
	buf.Write(a.suffix)
	return buf.Bytes()
}

// Check decodes a body with the upstream wire type: the envelope built
// here must be what the scheduler sends.
func (a *Args) Check(body []byte, p Pod) error {
	var args extenderv1.ExtenderArgs
	if err := json.Unmarshal(body, &args); err != nil {
		return fmt.Errorf("request body is not an ExtenderArgs: %w", err)
	}
	if args.Pod == nil || args.Pod.Name != p.Name || args.Pod.Namespace != p.Namespace {
		return fmt.Errorf("request body: wrong pod")
	}
	if a.full {
		if args.Nodes == nil || len(args.Nodes.Items) != a.n || args.NodeNames != nil {
			return fmt.Errorf("request body: want %d Nodes and no NodeNames", a.n)
		}
	} else if args.NodeNames == nil || len(*args.NodeNames) != a.n || args.Nodes != nil {
		return fmt.Errorf("request body: want %d NodeNames and no Nodes", a.n)
	}
	return nil
}
