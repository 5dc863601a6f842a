package opa

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/compact"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/policy"
)

// Nodes are the bulk of the inventory (a kubelet's Node is 10 KB of JSON
// and some 50 KB as OPA values: images, conditions, nodeInfo), and
// templates read a few of their fields. The store holds each Node cut down
// to the paths the constraints in force can read (their analysis says
// which, and that nothing reads the Nodes in other ways); the whole Node is
// kept as JSON deflated against a dictionary of the first Nodes seen
// (opa/internal/compact: what Nodes share, keys, images, digests, costs
// nothing per Node), bytes the garbage collector does not scan, and a
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

// keepNode gives the value the store keeps of a Node, as view cuts it,
// and, when the view is a cut, keeps its JSON for later cuts (in raw,
// applied when the commit is): the whole Node is kept even when its cut
// is unchanged, so that a later policy reading more sees the newest.
func (e *Engine) keepNode(name string, content map[string]any, view nodeView, raw map[string][]byte) (ast.Value, error) {
	if !view.all {
		b, err := json.Marshal(content)
		if err != nil {
			return nil, fmt.Errorf("encode node: %w", err)
		}
		raw[name] = e.nodeCodec(b).Encode(b)
	}
	return ast.InterfaceToValue(view.cut(content))
}

// nodeCodec is the codec of the kept Nodes, made on first use with
// samples (the Node being kept and, when the inventory holds them, a few
// others) as its dictionary; it stays for the engine's life, since every
// kept Node decodes with it alone. Called with e.mu held.
func (e *Engine) nodeCodec(samples ...[]byte) *compact.Codec {
	if e.codec == nil {
		e.codec = compact.NewCodec(samples...)
	}
	return e.codec
}

// dictionarySamples is how many Nodes make the kept Nodes' dictionary:
// three kubelet-sized Nodes fill deflate's 32 KiB window.
const dictionarySamples = 3

// prepareNodeCodec makes the node codec, before the first Node of changes
// is kept, from the first few of them.
func (e *Engine) prepareNodeCodec(changes []policy.Change) {
	if e.codec == nil {
		if samples := nodeSamples(changes); len(samples) > 0 {
			e.nodeCodec(samples...)
		}
	}
}

// nodeSamples are the first Nodes of changes, as the kept copies would
// hold them.
func nodeSamples(changes []policy.Change) [][]byte {
	var out [][]byte
	for _, ch := range changes {
		if len(out) == dictionarySamples {
			break
		}
		if ref, err := changeRef(ch); err != nil || ch.Object == nil || !isNode(ref) {
			continue
		}
		if b, err := json.Marshal(withoutManagedFields(ch.Object.Object)); err == nil {
			out = append(out, b)
		}
	}
	return out
}

// wholeNodes gives every inventory Node whole, encoded by the node codec:
// the kept copies under a cut, the store's values when the store holds
// them whole.
func (e *Engine) wholeNodes(ctx context.Context, txn storage.Transaction) (map[string][]byte, error) {
	if !e.view.all {
		return e.nodesRaw, nil
	}
	nodes, _ := e.readValue(ctx, txn, nodeGV).(ast.Object)
	if nodes == nil {
		return map[string][]byte{}, nil
	}
	docs := make(map[string][]byte, nodes.Len())
	var samples [][]byte
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
			docs[string(name)] = b
			if len(samples) < dictionarySamples {
				samples = append(samples, b)
			}
		}
	})
	if err != nil || len(docs) == 0 {
		return docs, err
	}
	codec := e.nodeCodec(samples...)
	for name, b := range docs {
		docs[name] = codec.Encode(b)
	}
	return docs, nil
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
// receives the whole Nodes to keep under it (nil entries: keep none). The
// Nodes are written as one object: the store's transaction compares every
// write with the ones before it, so a write per Node would cost the square
// of their number.
func (e *Engine) recutNodes(ctx context.Context, txn storage.Transaction, view nodeView, raw map[string][]byte) error {
	whole, err := e.wholeNodes(ctx, txn)
	if err != nil || len(whole) == 0 {
		return err
	}
	nodes := ast.NewObject()
	for name, b := range whole {
		if view.all {
			raw[name] = nil
		} else {
			raw[name] = b
		}
		doc, err := e.codec.Decode(b)
		if err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		var content map[string]any
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.UseNumber() // numbers as written, never through float64
		if err := dec.Decode(&content); err != nil {
			return fmt.Errorf("decode node %s: %w", name, err)
		}
		value, err := ast.InterfaceToValue(view.cut(content))
		if err != nil {
			return fmt.Errorf("convert node %s: %w", name, err)
		}
		nodes.Insert(ast.StringTerm(name), ast.NewTerm(value))
	}
	if err := e.store.Write(ctx, txn, storage.ReplaceOp, nodeGV, nodes); err != nil {
		return fmt.Errorf("store nodes: %w", err)
	}
	return nil
}
