package inventory

import (
	"fmt"
	"sort"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/jsonvalue"
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

// View is what the store keeps of each Node.
type View struct {
	// all: keep the whole Node (some constraint reads all of it, or reads
	// Nodes other than the candidate).
	all bool
	// paths are kept with their values; exists only as far as their
	// truth (and, for objects and arrays, their existence) goes.
	paths, exists [][]*ast.Term
	key           string // for comparing views
	// json is the view as a cut of a Node's JSON (CutJSON).
	json *jsonvalue.Cut
}

// Whole keeps every Node whole.
var Whole = View{all: true, key: "all", json: jsonCut(true, nil, nil)}

// unknown is the view of an inventory that holds no Node yet: any view
// differs from it.
var unknown = View{key: "?"}

// NewView is the view that keeps the values at paths and the truth (or,
// for objects and arrays, the existence) of the values at exists: the
// union of what the policy set reads of a candidate node.
func NewView(paths, exists [][]*ast.Term) View {
	var v View
	v.paths = minimal(paths)
	for _, p := range v.paths {
		if len(p) == 0 {
			return Whole
		}
	}
	for _, p := range minimal(exists) {
		if len(p) > 0 && !coveredBy(v.paths, p) {
			v.exists = append(v.exists, p)
		}
	}
	for _, p := range v.paths {
		v.key += analysis.PathString(p) + "\n"
	}
	v.key += "?"
	for _, p := range v.exists {
		v.key += analysis.PathString(p) + "\n"
	}
	v.json = jsonCut(false, v.paths, v.exists)
	return v
}

// jsonCut is the cut of a Node's JSON that keeps what Cut keeps of its
// content after WithoutManagedFields: the same paths, by the same rules
// (see jsonvalue.Cut), metadata.managedFields omitted.
func jsonCut(all bool, paths, exists [][]*ast.Term) *jsonvalue.Cut {
	c := jsonvalue.NewCut()
	if all {
		c.Keep()
	}
	for _, p := range paths {
		if keys, whole := stringKeys(p); whole {
			c.Keep(keys...)
		} else if len(keys) > 0 {
			c.Follow(keys...)
		}
	}
	for _, p := range exists {
		if keys, whole := stringKeys(p); whole {
			c.KeepExistence(keys...)
		} else if len(keys) > 0 {
			c.Follow(keys...)
		}
	}
	c.Omit("metadata", "managedFields")
	return c
}

// stringKeys is the keys of path up to its first that is not a string
// (copyPath follows a path no further: objects have string keys only);
// whole reports that every key is a string.
func stringKeys(path []*ast.Term) (keys []string, whole bool) {
	for _, t := range path {
		s, ok := t.Value.(ast.String)
		if !ok {
			return keys, false
		}
		keys = append(keys, string(s))
	}
	return keys, true
}

// CutJSON reads a Node sent as JSON into the value the view keeps of it:
// the value of Cut(WithoutManagedFields(WithTypeMeta(content))) for the
// content encoding/json would decode (with UseNumber), read without
// building what the view does not keep. Malformed JSON, or a document that
// is not an object, is an error.
func (v View) CutJSON(b []byte) (ast.Object, error) {
	c := v.json
	if c == nil {
		c = Whole.json
	}
	val, err := jsonvalue.ParseCut(b, c)
	if err != nil {
		return nil, err
	}
	obj, ok := val.(ast.Object)
	if !ok {
		return nil, fmt.Errorf("a Node is a JSON object, not %s", ast.ValueName(val))
	}
	for _, tm := range nodeTypeMeta {
		if obj.Get(tm[0]) == nil && v.keepsTop(tm[0]) {
			obj.Insert(tm[0], tm[1])
		}
	}
	return obj, nil
}

// nodeTypeMeta is what WithTypeMeta gives a Node that has none.
var nodeTypeMeta = [][2]*ast.Term{
	{ast.StringTerm("apiVersion"), ast.StringTerm("v1")},
	{ast.StringTerm("kind"), ast.StringTerm("Node")},
}

// keepsTop says whether the view keeps anything at the Node's key k.
func (v View) keepsTop(k *ast.Term) bool {
	if v.all || v.json == nil {
		return true
	}
	for _, set := range [][][]*ast.Term{v.paths, v.exists} {
		for _, p := range set {
			if len(p) > 0 && p[0].Equal(k) {
				return true
			}
		}
	}
	return false
}

// All says whether the view keeps Nodes whole.
func (v View) All() bool { return v.all }

// Equal says whether two views keep the same of every Node.
func (v View) Equal(o View) bool { return v.key == o.key }

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

// Cut gives the part of a Node's content the view keeps.
func (v View) Cut(content map[string]any) map[string]any {
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
