package perf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync/atomic"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// Args builds the ExtenderArgs bodies the scheduler sends for filter and
// prioritize: {"Pod":<pod>,"NodeNames":[...]} to a nodeCacheCapable
// extender, {"Pod":<pod>,"Nodes":{"metadata":{},"items":[...]}} to the
// others. The node part is encoded once.
type Args struct {
	suffix []byte
	// windows, when set, are the node parts of successive calls
	// (NewRotatingArgs); calls counts the bodies built from them.
	windows [][]byte
	calls   atomic.Uint64
	n       int
	full    bool
}

// NewRotatingArgs prepares names-only bodies whose candidates move through
// a cluster of inventory Nodes as kube-scheduler's do: its filter starts
// each cycle where the last one stopped (the next start index moves past
// the Nodes it looked at), so successive calls name successive windows of
// n Nodes, wrapping around. BuildInto takes the windows in turn; Build
// (the probe's body) always the first. With inventory <= n it is
// NewArgsOf's names-only Args.
func NewRotatingArgs(n, inventory int) *Args {
	if inventory <= n {
		return NewArgsOf(SmallNodes, n, false)
	}
	a := &Args{n: n}
	names := make([]string, n)
	for start := 0; start < inventory; start += n {
		for i := range names {
			names[i] = NodeName((start + i) % inventory)
		}
		a.windows = append(a.windows, namesSuffix(names))
	}
	a.suffix = a.windows[0]
	return a
}

// namesSuffix is the node part of a names-only body.
func namesSuffix(names []string) []byte {
	j, err := json.Marshal(names)
	if err != nil {
		panic(err)
	}
	return append(append([]byte(`,"NodeNames":`), j...), '}')
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
		b.Write(namesSuffix(NodeNames(n)))
	}
	return &Args{suffix: b.Bytes(), n: n, full: full}
}

// Build is the body for pod p (with rotating windows, on the first).
func (a *Args) Build(p Pod) []byte {
	var buf bytes.Buffer
	return a.build(&buf, p, a.suffix)
}

// BuildInto is the body of the next call for pod p, into a reused buffer.
func (a *Args) BuildInto(buf *bytes.Buffer, p Pod) []byte {
	suffix := a.suffix
	if len(a.windows) > 0 {
		suffix = a.windows[(a.calls.Add(1)-1)%uint64(len(a.windows))]
	}
	return a.build(buf, p, suffix)
}

func (a *Args) build(buf *bytes.Buffer, p Pod, suffix []byte) []byte {
	buf.Reset()
	buf.Grow(len(`{"Pod":`) + len(p.JSON) + len(suffix))
	buf.WriteString(`{"Pod":`)
	buf.Write(p.JSON)
	buf.Write(suffix)
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
