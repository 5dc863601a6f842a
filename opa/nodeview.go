package opa

import (
	"bytes"
	"compress/flate"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
)

// Nodes are the bulk of the inventory (a kubelet's Node is 10 KB of JSON
// and some 50 KB as OPA values: images, conditions, nodeInfo), and
// templates read a few of their fields. The store holds each Node cut down
// to the paths the constraints in force can read (their analysis says
// which, and that nothing reads the Nodes in other ways); the whole Node is
// kept as deflated JSON bytes, which the garbage collector does not scan,
// and a
// change of policy that reads more re-cuts every Node from them, in the
// same commit (a cut that shrinks keeps serving the policy set it replaces
// until the next commit, for requests still holding it). Templates see
// exactly the values they read, so verdicts are
// those of the whole Node; what they can no longer do is reach a field
// nothing read before, which is why the cut follows every policy change.

// nodeView is what the store keeps of each Node.
type nodeView struct {
	// all: keep the whole Node (some constraint reads all of it, or reads
	// Nodes other than the candidate).
	all bool
	// paths are kept with their values; exists only as far as their
	// truth (and, for objects and arrays, their existence) goes.
	paths, exists [][]*ast.Term
	key           string // for comparing views
}

// viewOf is the union of what the bound constraints read of the
// candidate node.
func viewOf(constraints []*boundConstraint) nodeView {
	var v nodeView
	for _, bc := range constraints {
		a := bc.analysis
		if a.OtherNodes || a.Nondeterministic {
			return nodeView{all: true, key: "all"}
		}
		v.paths = append(v.paths, a.NodePaths...)
		v.exists = append(v.exists, a.NodeExists...)
		for _, m := range a.Messages {
			if m.Root == analysis.Node {
				v.paths = append(v.paths, m.Path)
			}
		}
	}
	v.paths = minimal(v.paths)
	for _, p := range v.paths {
		if len(p) == 0 {
			return nodeView{all: true, key: "all"}
		}
	}
	var exists [][]*ast.Term
	for _, p := range minimal(v.exists) {
		if len(p) > 0 && !coveredBy(v.paths, p) {
			exists = append(exists, p)
		}
	}
	v.exists = exists
	for _, p := range v.paths {
		v.key += analysis.PathString(p) + "\n"
	}
	v.key += "?"
	for _, p := range v.exists {
		v.key += analysis.PathString(p) + "\n"
	}
	return v
}

func coveredBy(set [][]*ast.Term, p []*ast.Term) bool {
	for _, q := range set {
		if len(q) <= len(p) && analysis.PrefixRelated(q, p) {
			return true
		}
	}
	return false
}

// minimal drops the paths below another path of the set, in a stable order.
func minimal(paths [][]*ast.Term) [][]*ast.Term {
	sorted := append([][]*ast.Term(nil), paths...)
	sort.SliceStable(sorted, func(i, j int) bool { return len(sorted[i]) < len(sorted[j]) })
	var out [][]*ast.Term
	for _, p := range sorted {
		if !coveredBy(out, p) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return analysis.PathString(out[i]) < analysis.PathString(out[j]) })
	return out
}

// cut gives the part of a Node's content the view keeps.
func (v nodeView) cut(content map[string]any) map[string]any {
	if v.all {
		return content
	}
	out := map[string]any{}
	for _, p := range v.paths {
		copyPath(out, content, p, true)
	}
	for _, p := range v.exists {
		copyPath(out, content, p, false)
	}
	return out
}

// copyPath copies the value at path from src into dst, creating the
// objects on the way. A path through an array copies the whole array
// (indexes must not move). With whole false, an object or array at the end
// is kept only as existing (empty), a scalar as it is.
func copyPath(dst, src map[string]any, path []*ast.Term, whole bool) {
	key, ok := path[0].Value.(ast.String)
	if !ok {
		return // objects have string keys only
	}
	val, found := src[string(key)]
	if !found {
		return
	}
	if len(path) == 1 {
		switch val.(type) {
		case map[string]any:
			if !whole {
				if _, has := dst[string(key)]; !has {
					dst[string(key)] = map[string]any{}
				}
				return
			}
		case []any:
			if !whole {
				if _, has := dst[string(key)]; !has {
					dst[string(key)] = []any{}
				}
				return
			}
		}
		dst[string(key)] = val
		return
	}
	switch child := val.(type) {
	case map[string]any:
		sub, _ := dst[string(key)].(map[string]any)
		if sub == nil {
			sub = map[string]any{}
			dst[string(key)] = sub
		}
		copyPath(sub, child, path[1:], whole)
	default:
		dst[string(key)] = val // an array or a scalar: whole
	}
}

// writeNode stores a Node as view cuts it and, when the view is a cut,
// keeps its JSON for later cuts (in raw, applied when the commit is).
func (e *Engine) writeNode(ctx context.Context, txn storage.Transaction, op storage.PatchOp, path storage.Path, name string, content map[string]any, view nodeView, raw map[string][]byte) error {
	if !view.all {
		b, err := json.Marshal(content)
		if err != nil {
			return fmt.Errorf("encode node: %w", err)
		}
		raw[name] = deflate(b)
	}
	value, err := ast.InterfaceToValue(view.cut(content))
	if err != nil {
		return fmt.Errorf("convert object: %w", err)
	}
	return e.store.Write(ctx, txn, op, path, value)
}

// wholeNodes gives every inventory Node whole, as deflated JSON: the kept copies
// under a cut, the store's values when the store holds them whole.
func (e *Engine) wholeNodes(ctx context.Context, txn storage.Transaction) (map[string][]byte, error) {
	if !e.view.all {
		return e.nodesRaw, nil
	}
	out := map[string][]byte{}
	nodes, _ := e.readValue(ctx, txn, nodeGV).(ast.Object)
	if nodes == nil {
		return out, nil
	}
	var err error
	nodes.Foreach(func(k, v *ast.Term) {
		name, ok := k.Value.(ast.String)
		if !ok || err != nil {
			return
		}
		var x any
		if x, err = ast.JSON(v.Value); err != nil {
			return
		}
		var b []byte
		if b, err = json.Marshal(x); err == nil {
			out[string(name)] = deflate(b)
		}
	})
	return out, err
}

// deflate compresses a Node's JSON for keeping: a kubelet's Node is mostly
// image names, digests and condition messages, which shrink several times.
func deflate(b []byte) []byte {
	z := deflaters.Get().(*deflater)
	defer deflaters.Put(z)
	z.out.Reset()
	z.w.Reset(&z.out)
	_, _ = z.w.Write(b)
	_ = z.w.Close()
	return bytes.Clone(z.out.Bytes())
}

// deflaters recycle compressors: each holds about a megabyte of state.
var deflaters = sync.Pool{New: func() any {
	z := &deflater{}
	z.w, _ = flate.NewWriter(&z.out, flate.BestSpeed)
	return z
}}

type deflater struct {
	out bytes.Buffer
	w   *flate.Writer
}

// cutNodes gives the view the store keeps Nodes in after a commit that
// installs next (nil: the policy set stays), re-cutting every Node in txn
// when it changed. A request may still hold the policy set in force before
// the commit (loaded after its transaction opened, before the new set was
// installed): the view serves both until the next commit. raw receives the
// whole Nodes to keep once the commit is done (nil entries: drop).
func (e *Engine) cutNodes(ctx context.Context, txn storage.Transaction, next *snapshot) (nodeView, map[string][]byte, error) {
	constraints := e.snap.Load().constraints
	if next != nil {
		constraints = append(append([]*boundConstraint(nil), constraints...), next.constraints...)
	}
	view := viewOf(constraints)
	raw := map[string][]byte{}
	if view.key != e.view.key {
		if err := e.recutNodes(ctx, txn, view, raw); err != nil {
			return view, nil, fmt.Errorf("cut nodes to the new policy set: %w", err)
		}
	}
	return view, raw, nil
}

// keepNodes records, once a commit is done, the view it wrote and the
// whole Nodes it changed.
func (e *Engine) keepNodes(view nodeView, raw map[string][]byte) {
	e.view = view
	for name, b := range raw {
		if b == nil {
			delete(e.nodesRaw, name)
		} else {
			e.nodesRaw[name] = b
		}
	}
}

// recutNodes rewrites every Node in the store under a new view; raw
// receives the whole Nodes to keep under it (nil entries: keep none).
func (e *Engine) recutNodes(ctx context.Context, txn storage.Transaction, view nodeView, raw map[string][]byte) error {
	whole, err := e.wholeNodes(ctx, txn)
	if err != nil {
		return err
	}
	for name, b := range whole {
		if view.all {
			raw[name] = nil
		} else {
			raw[name] = b
		}
		var content map[string]any
		dec := json.NewDecoder(flate.NewReader(bytes.NewReader(b)))
		dec.UseNumber() // numbers as written, never through float64
		if err := dec.Decode(&content); err != nil {
			return fmt.Errorf("decode node %s: %w", name, err)
		}
		value, err := ast.InterfaceToValue(view.cut(content))
		if err != nil {
			return fmt.Errorf("convert node %s: %w", name, err)
		}
		if err := e.store.Write(ctx, txn, storage.ReplaceOp, storage.Path{"inventory", "cluster", "v1", "Node", name}, value); err != nil {
			return fmt.Errorf("store node %s: %w", name, err)
		}
	}
	return nil
}
