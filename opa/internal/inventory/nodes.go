package inventory

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/compact"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/policy"
)

// keepNode gives the value the store keeps of a Node, as view cuts it,
// and, when the view is a cut, keeps its JSON for later cuts (in raw,
// applied when the commit is): the whole Node is kept even when its cut
// is unchanged, so that a later policy reading more sees the newest.
func (i *Inventory) keepNode(name string, content map[string]any, view View, raw map[string][]byte) (ast.Value, error) {
	if !view.all {
		b, err := json.Marshal(content)
		if err != nil {
			return nil, fmt.Errorf("encode node: %w", err)
		}
		raw[name] = i.nodeCodec(b).Encode(b)
	}
	return i.shared.Value(name, view.Cut(content))
}

// nodeCodec is the codec of the kept Nodes, made on first use with
// samples (the Node being kept and, when the inventory holds them, a few
// others) as its dictionary; it stays for the engine's life, since every
// kept Node decodes with it alone.
func (i *Inventory) nodeCodec(samples ...[]byte) *compact.Codec {
	if i.codec == nil {
		i.codec = compact.NewCodec(samples...)
	}
	return i.codec
}

// dictionarySamples is how many Nodes make the kept Nodes' dictionary:
// three kubelet-sized Nodes fill deflate's 32 KiB window.
const dictionarySamples = 3

// prepareNodeCodec makes the node codec, before the first Node of changes
// is kept, from the first few of them.
func (i *Inventory) prepareNodeCodec(changes []policy.Change) {
	if i.codec == nil {
		if samples := nodeSamples(changes); len(samples) > 0 {
			i.nodeCodec(samples...)
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
		if ref, err := ch.Ref(); err != nil || ch.Object == nil || !IsNode(ref) {
			continue
		}
		if b, err := json.Marshal(WithoutManagedFields(ch.Object.Object)); err == nil {
			out = append(out, b)
		}
	}
	return out
}

// wholeNodes gives every inventory Node whole, encoded by the node codec:
// the kept copies under a cut, the store's values when the store holds
// them whole.
func (i *Inventory) wholeNodes(ctx context.Context, txn storage.Transaction) (map[string][]byte, error) {
	if !i.view.all {
		return i.nodesRaw, nil
	}
	nodes, _ := i.Value(ctx, txn, NodesPath).(ast.Object)
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
	codec := i.nodeCodec(samples...)
	for name, b := range docs {
		docs[name] = codec.Encode(b)
	}
	return docs, nil
}

// Cut readies the Nodes for a commit whose policy set reads view of a
// candidate Node, re-cutting every Node in txn when the view changed, and
// gives the map that receives the whole Nodes to keep once the commit is
// done (nil entries: drop). A request may still hold the policy set in
// force before the commit (loaded after its transaction opened, before the
// new set was installed): the caller's view covers both until the next
// commit.
func (i *Inventory) Cut(ctx context.Context, txn storage.Transaction, view View) (raw map[string][]byte, recut bool, err error) {
	raw = map[string][]byte{}
	if view.Equal(i.view) {
		return raw, false, nil
	}
	if err := i.recutNodes(ctx, txn, view, raw); err != nil {
		return nil, false, fmt.Errorf("cut nodes to the new policy set: %w", err)
	}
	return raw, true, nil
}

// WholeNode is the whole of the Node kept aside while the store holds
// Nodes cut, as JSON; false when none is kept.
func (i *Inventory) WholeNode(name string) ([]byte, bool) {
	b, ok := i.nodesRaw[name]
	if !ok || i.codec == nil {
		return nil, false
	}
	doc, err := i.codec.Decode(b)
	return doc, err == nil
}

// recutNodes rewrites every Node in the store under a new view; raw
// receives the whole Nodes to keep under it (nil entries: keep none). The
// Nodes are written as one object: the store's transaction compares every
// write with the ones before it, so a write per Node would cost the square
// of their number.
func (i *Inventory) recutNodes(ctx context.Context, txn storage.Transaction, view View, raw map[string][]byte) error {
	whole, err := i.wholeNodes(ctx, txn)
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
		doc, err := i.codec.Decode(b)
		if err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		var content map[string]any
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.UseNumber() // numbers as written, never through float64
		if err := dec.Decode(&content); err != nil {
			return fmt.Errorf("decode node %s: %w", name, err)
		}
		value, err := i.shared.Value(name, view.Cut(content))
		if err != nil {
			return fmt.Errorf("convert node %s: %w", name, err)
		}
		nodes.Insert(ast.StringTerm(name), ast.NewTerm(value))
	}
	if err := i.store.Write(ctx, txn, storage.ReplaceOp, NodesPath, nodes); err != nil {
		return fmt.Errorf("store nodes: %w", err)
	}
	return nil
}
