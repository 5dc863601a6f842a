package analysis

import (
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Root names what a path is relative to.
type Root uint8

const (
	// Input paths are relative to the template's input ({review, parameters}).
	Input Root = iota + 1
	// Node paths are relative to the candidate Node object.
	Node
	// rootConst is a value fixed for the constraint: its parameters, a
	// literal argument, a default given to object.get, or a rule computed
	// from them. It never appears in a Result.
	rootConst
)

// NodeNamePath is input.review.object.spec.nodeName: the candidate's name.
var NodeNamePath = []*ast.Term{ast.StringTerm("review"), ast.StringTerm("object"), ast.StringTerm("spec"), ast.StringTerm("nodeName")}

// MessagePath is a value that only flows into violations' messages and
// details. The engine evaluates with a placeholder in its place and puts the
// real value into the results afterwards, provided the real value is a
// string (and, with Quote, one that %q prints as "value").
type MessagePath struct {
	Root Root
	Path []*ast.Term
	// Quote: some flow prints it with %q. Trim: the message it is printed
	// into is trimmed and must be one line (CEL's messageExpression).
	Quote, Trim bool
	// Absent are objects (paths below input) that the template looks up
	// by keys built from the value (lookupkey.go): the value gets a
	// placeholder only when no key of each contains it, nor placeholder
	// text.
	Absent [][]*ast.Term
	// Helpers are Helpers (helper.go) on the value itself, which the memo
	// key holds the answers of while the template prints the value: it
	// gets a placeholder only when each answers alike on it and on the
	// placeholder, so that the template's tests see the same.
	Helpers []*ast.Term
	// Distinct: the template also compares the value with values at the
	// same path (`pair[0] == container.name`, both a container's name;
	// the path's values in oldObject too). Each element's placeholder is
	// its own, so the comparisons come out as with the real values only
	// when those are pairwise distinct: the values get placeholders only
	// then.
	Distinct bool
}

// Result is what a template can read.
type Result struct {
	// InputPaths are the input paths the verdict depends on (minimal: no
	// path lies below another).
	InputPaths [][]*ast.Term
	// NodePaths are the candidate node's paths the verdict depends on.
	NodePaths [][]*ast.Term
	// NodeExists are node paths only tested for truth (`node.x` alone as
	// an expression): the key holds whether they are defined and not
	// false, not their value.
	NodeExists [][]*ast.Term
	// InventoryOther: the template reads data.inventory beyond the
	// candidate node.
	InventoryOther bool
	// OtherNodes: some of those reads can reach Nodes other than the
	// candidate (data.inventory.cluster.v1.Node[_], a `with` on data...):
	// the Nodes it sees cannot be cut down to the paths below.
	OtherNodes bool
	// Nondeterministic: the template calls time.now_ns, rand.* or similar.
	Nondeterministic bool
	// NodeNameObserved: the verdict can depend on the candidate's name
	// itself, not only on the Node object found under it.
	NodeNameObserved bool
	// Messages are the pod's input paths (never the node name) and the
	// node's paths that only reach messages; NodeNameMessage says that
	// input.review.object.spec.nodeName does too (NodeNameQuote: with %q).
	Messages        []MessagePath
	NodeNameMessage bool
	NodeNameQuote   bool
	// PrintedThroughSeveral: a printed value flows out of a function with
	// several definitions (only for templates that cannot see the node).
	// Those definitions' values are compared when more than one succeeds,
	// and a conflict is an error: values that differ with placeholders in
	// the messages may be equal with the real ones. Equal with
	// placeholders means equal with any real values, so only an error
	// needs checking: the engine evaluates a review whose placeholder
	// evaluation failed again with its real values.
	PrintedThroughSeveral bool
	// DistinctKeys are the key paths of the list maps read element-wise
	// (`input_containers[c.name] = c` over several lists), one group per
	// map: a map merges elements with equal keys, or fails when they
	// differ, where the element-wise reading sees each. The key (and the
	// memo) holds only for a pod whose values at a group's paths are
	// pairwise distinct (missing ones aside); the engine evaluates other
	// pods without memo.
	DistinctKeys [][][]*ast.Term
	// Why explains what makes the template costlier than once per (pod
	// class, node class): reads of the node's name, of values unique to a
	// pod or a node, and printed values that could not be left out of the
	// key, each with the construct and its line.
	Why []string
}

// PerPod reports whether the template cannot see which node is the
// candidate: it is evaluated once per pod, not once per node.
func (a *Result) PerPod() bool {
	return len(a.NodePaths) == 0 && len(a.NodeExists) == 0 && !a.NodeNameObserved && !a.NodeNameMessage && !a.readsNodeMessage()
}

func (a *Result) readsNodeMessage() bool {
	for _, m := range a.Messages {
		if m.Root == Node {
			return true
		}
	}
	return false
}

// Describe lists the paths of the key and the printed paths, for
// /debug/policies.
func (a *Result) Describe() []string {
	var out []string
	for _, p := range a.InputPaths {
		if members, rest, ok := Condition(p); ok {
			out = append(out, "input"+PathString(rest)+" (if "+conditionString("input", members)+" has one)")
			continue
		}
		out = append(out, "input"+PathString(p))
	}
	for _, p := range a.NodePaths {
		out = append(out, "node"+PathString(p))
	}
	for _, p := range a.NodeExists {
		out = append(out, "node"+PathString(p)+" (defined)")
	}
	if a.InventoryOther {
		out = append(out, "data.inventory (a change of the kinds it reads)")
	}
	for _, m := range a.Messages {
		root := "input"
		if m.Root == Node {
			root = "node"
		}
		only := " (message only"
		for _, in := range m.Absent {
			only += ", unless a key of input" + PathString(in) + " holds it"
		}
		for _, h := range m.Helpers {
			call, _ := HelperOf(h)
			only += ", unless " + helperString(call)[1:] + " answers otherwise for a placeholder"
		}
		if m.Distinct {
			only += ", compared with its own values: while they are pairwise distinct"
		}
		out = append(out, root+PathString(m.Path)+only+")")
	}
	if a.NodeNameMessage {
		out = append(out, "input"+PathString(NodeNamePath)+" (message only)")
	}
	return out
}

// Each stands in a path for every element of the array before it:
// review.object.spec.containers[Each].image is the list of the containers'
// images, in order. A path through Each is read element by element, so
// that a value printed from one element (the container's name) can be
// left out of the key while another (its image) is in it. When the value
// before Each is not an array, the path means that value whole. Its name
// cannot be written in Rego, so no template path holds it.
var Each = ast.VarTerm("$each")

// Len ends a path after Each: only how many elements there are.
var Len = ast.VarTerm("$len")

// Keys ends a path: only the keys of the object there whose values are
// defined and not false (`volumes[_][x]` as a condition, x then each key
// whose value holds). A value that is not an object is keyed whole.
var Keys = ast.VarTerm("$keys")

// IsKeys reports whether t is Keys.
func IsKeys(t *ast.Term) bool { v, ok := t.Value.(ast.Var); return ok && v == "$keys" }

// Shape ends a path: only what kind of value is there, if any (absent,
// null, boolean, number, string, array or object): what CEL's has(x.f)
// and the error of a select through a missing or mistyped value depend on.
var Shape = ast.VarTerm("$shape")

// IsShape reports whether t is Shape.
func IsShape(t *ast.Term) bool { v, ok := t.Value.(ast.Var); return ok && v == "$shape" }

// When begins a key path read only if the list at list has an element
// whose values at every filter path hold (the members of a list set
// filtered by field tests): `volume := input_hostpath_volumes[_]` ends the
// body for a pod without host-path volumes, so nothing the body reads
// after it decides that pod's verdict. The key holds the value at the
// path after When where the condition holds, and NotRead where it does
// not.
func When(list []*ast.Term, filter [][]*ast.Term) *ast.Term {
	return WhenAny([]Member{{List: list, Filter: filter}})
}

// Member is one alternative of a When: the list at List has an element
// whose values at every Filter path hold.
type Member struct {
	List   []*ast.Term
	Filter [][]*ast.Term
}

// WhenAny is When for a read that happens only if some member holds: a
// CEL comprehension over variables.anyObject's list runs its body only
// when the object's list, or the old object's, has an element.
func WhenAny(members []Member) *ast.Term {
	terms := []*ast.Term{ast.VarTerm("$when")}
	for _, m := range members {
		terms = append(terms, ast.ArrayTerm(m.List...), EachWhere(m.Filter))
	}
	return ast.ArrayTerm(terms...)
}

// Condition is the members of a path that begins with When (at least
// one), and the path after it; ok is false for any other path.
func Condition(p []*ast.Term) (members []Member, rest []*ast.Term, ok bool) {
	if len(p) == 0 {
		return nil, nil, false
	}
	arr, isArr := p[0].Value.(*ast.Array)
	if !isArr || arr.Len() < 3 || arr.Len()%2 != 1 || !arr.Elem(0).Equal(ast.VarTerm("$when")) {
		return nil, nil, false
	}
	for i := 1; i < arr.Len(); i += 2 {
		l := arr.Elem(i).Value.(*ast.Array)
		list := make([]*ast.Term, l.Len())
		for j := range list {
			list[j] = l.Elem(j)
		}
		members = append(members, Member{List: list, Filter: EachFilter(arr.Elem(i + 1))})
	}
	return members, p[1:], true
}

// Unconditioned is p without a leading When.
func Unconditioned(p []*ast.Term) []*ast.Term {
	if _, rest, ok := Condition(p); ok {
		return rest
	}
	return p
}

// conditionString renders a When's members, each path after root:
// `input.x[_ where ...] or ...`.
func conditionString(root string, members []Member) string {
	parts := make([]string, len(members))
	for i, m := range members {
		parts[i] = root + PathString(append(append([]*ast.Term(nil), m.List...), EachWhere(m.Filter)))
	}
	return strings.Join(parts, " or ")
}

// IsEach reports whether t is Each, filtered or not (EachWhere).
func IsEach(t *ast.Term) bool {
	switch v := t.Value.(type) {
	case ast.Var:
		return v == "$each"
	case *ast.Array:
		return v.Len() > 1 && v.Elem(0).Equal(Each)
	}
	return false
}

// EachWhere stands, like Each, for the elements of the array before it,
// but only those whose values at every guard path (below the element) are
// defined and not false: the elements of a list set whose definition
// only tests fields (`input_flexvolumes[v] { v := ...volumes[_];
// has_field(v, "flexVolume") }`). What is read through it is read for
// those elements only, in order; the others cannot be members of the set.
func EachWhere(guards [][]*ast.Term) *ast.Term {
	if len(guards) == 0 {
		return Each
	}
	terms := make([]*ast.Term, 0, len(guards)+1)
	terms = append(terms, Each)
	for _, g := range guards {
		terms = append(terms, ast.ArrayTerm(g...))
	}
	return ast.ArrayTerm(terms...)
}

// EachFilter are the guard paths of an EachWhere (nil for Each).
func EachFilter(t *ast.Term) [][]*ast.Term {
	arr, ok := t.Value.(*ast.Array)
	if !ok || !IsEach(t) {
		return nil
	}
	out := make([][]*ast.Term, 0, arr.Len()-1)
	for i := 1; i < arr.Len(); i++ {
		g := arr.Elem(i).Value.(*ast.Array)
		path := make([]*ast.Term, g.Len())
		for j := range path {
			path[j] = g.Elem(j)
		}
		out = append(out, path)
	}
	return out
}

// IsLen reports whether t is Len.
func IsLen(t *ast.Term) bool { v, ok := t.Value.(ast.Var); return ok && v == "$len" }

// EachAt is the position of Each in p, or -1.
func EachAt(p []*ast.Term) int {
	for i, t := range p {
		if IsEach(t) {
			return i
		}
	}
	return -1
}

// PathString renders a path as Rego does: .name for identifiers, ["key"]
// for the rest, [_] for Each, .(count) for Len, .(keys) for Keys,
// .(f(_) on .x) for Helper, and a
// path that begins with When as `(if <list>[_ where ...]) <path>`.
func PathString(p []*ast.Term) string {
	var b strings.Builder
	if members, rest, ok := Condition(p); ok {
		b.WriteString("(if " + conditionString("", members) + ") ")
		p = rest
	}
	for _, t := range p {
		if IsEach(t) {
			b.WriteString("[_")
			for i, g := range EachFilter(t) {
				if i == 0 {
					b.WriteString(" where ")
				} else {
					b.WriteString(", ")
				}
				b.WriteString(PathString(g))
			}
			b.WriteString("]")
			continue
		}
		if IsLen(t) {
			b.WriteString(".(count)")
			continue
		}
		if IsKeys(t) {
			b.WriteString(".(keys)")
			continue
		}
		if IsShape(t) {
			b.WriteString(".(shape)")
			continue
		}
		if h, ok := HelperOf(t); ok {
			b.WriteString(helperString(h))
			continue
		}
		if s, ok := t.Value.(ast.String); ok && ast.IsVarCompatibleString(string(s)) {
			b.WriteString("." + string(s))
		} else {
			b.WriteString("[" + t.String() + "]")
		}
	}
	return b.String()
}

// PrefixRelated reports whether one path is a prefix of the other, or
// may be: Each, on either side, matches any key.
func PrefixRelated(a, b []*ast.Term) bool {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if !a[i].Equal(b[i]) && !IsEach(a[i]) && !IsEach(b[i]) {
			return false
		}
	}
	return true
}

// prefixCovers reports whether the value at q holds the value at p for
// every review: q is a prefix of p, where Each in q matches any key of p
// (every element holds any one), but a key of q does not match Each in p
// (one element does not hold them all), nor does an EachWhere in q match
// anything but itself.
func prefixCovers(q, p []*ast.Term) bool {
	if len(q) > len(p) {
		return false
	}
	for i := range q {
		if !q[i].Equal(p[i]) && (!IsEach(q[i]) || EachFilter(q[i]) != nil) {
			return false // an EachWhere holds only some elements
		}
	}
	return true
}

// covers reports whether some path of set covers p (prefixCovers).
func covers(set [][]*ast.Term, p []*ast.Term) bool {
	for _, q := range set {
		if prefixCovers(q, p) {
			return true
		}
	}
	return false
}

func related(set [][]*ast.Term, p []*ast.Term) bool {
	for _, q := range set {
		if PrefixRelated(q, p) {
			return true
		}
	}
	return false
}

// minimizePaths drops paths that lie below another path of the set, and
// sorts the rest so that keys are built in a stable order. A read of the
// whole input becomes a read of input.review: parameters are constant
// for a constraint, and the memo is per constraint.
func minimizePaths(paths [][]*ast.Term, input bool) [][]*ast.Term {
	var clean [][]*ast.Term
	for _, p := range paths {
		if len(p) == 0 && input {
			p = []*ast.Term{ast.StringTerm("review")}
		}
		clean = append(clean, p)
	}
	sort.SliceStable(clean, func(i, j int) bool { return len(clean[i]) < len(clean[j]) })
	var out [][]*ast.Term
	for _, p := range clean {
		if !covers(out, p) && !covers(out, Unconditioned(p)) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return PathString(out[i]) < PathString(out[j]) })
	return out
}

// uniquePodPaths are review paths that differ between any two pods, and
// uniqueNodePaths node paths that differ between any two nodes: a key
// holding them is worth nothing to another pod or node.
var (
	uniquePodPaths = [][]*ast.Term{
		{ast.StringTerm("review"), ast.StringTerm("name")},
		{ast.StringTerm("review"), ast.StringTerm("uid")},
		{ast.StringTerm("review"), ast.StringTerm("object"), ast.StringTerm("metadata"), ast.StringTerm("name")},
		{ast.StringTerm("review"), ast.StringTerm("object"), ast.StringTerm("metadata"), ast.StringTerm("uid")},
	}
	uniqueNodePaths = [][]*ast.Term{
		{ast.StringTerm("metadata"), ast.StringTerm("name")},
		{ast.StringTerm("metadata"), ast.StringTerm("uid")},
		{ast.StringTerm("metadata"), ast.StringTerm("labels"), ast.StringTerm("kubernetes.io/hostname")},
		{ast.StringTerm("status"), ast.StringTerm("addresses")},
		{ast.StringTerm("status"), ast.StringTerm("nodeInfo")},
	}
)

// PodUnique reports whether the key holds a value unique to each pod (its
// name or uid): no other pod can reuse its memo entries.
func (a *Result) PodUnique() bool {
	for _, p := range a.InputPaths {
		p = Unconditioned(p)
		if len(p) > 0 && IsShape(p[len(p)-1]) {
			continue // what kind of value a name is: a string for every pod
		}
		if related(uniquePodPaths, p) {
			return true
		}
	}
	return false
}

// NodeUnique reports whether the node part of the key holds a value
// unique to each node: every node is its own class.
func (a *Result) NodeUnique() bool {
	for _, p := range a.NodePaths {
		if related(uniqueNodePaths, p) {
			return true
		}
	}
	return false
}

// Class names how often the template is evaluated, for explain and tests.
type Class string

const (
	// PerPodClass: once per pod class (pods that agree on the key).
	PerPodClass Class = "per pod class"
	// PerPodEach: once per pod (the key holds the pod's name or uid).
	PerPodEach Class = "per pod"
	// PerPodNodeClass: once per (pod class, node class).
	PerPodNodeClass Class = "per (pod class, node class)"
	// PerPodEachNodeClass: once per (pod, node class): the key holds the
	// pod's name or uid.
	PerPodEachNodeClass Class = "per (pod, node class)"
	// PerPodClassNode: once per (pod class, node): the key holds a value
	// unique to each node (its name, hostname label, addresses).
	PerPodClassNode Class = "per (pod class, node)"
	// PerPodNode: once per (pod, node): the verdict can depend on the
	// node's name, or the key holds values unique to pods and nodes.
	PerPodNode Class = "per (pod, node)"
	// Never: nondeterministic, evaluated on every question.
	Never Class = "never memoised"
)

// Classify names the evaluation class of a Result.
func (a *Result) Classify() Class {
	switch {
	case a.Nondeterministic:
		return Never
	case a.NodeNameObserved:
		return PerPodNode
	case a.PerPod() && a.PodUnique():
		return PerPodEach
	case a.PerPod():
		return PerPodClass
	case a.PodUnique() && a.NodeUnique():
		return PerPodNode
	case a.PodUnique():
		return PerPodEachNodeClass
	case a.NodeUnique():
		return PerPodClassNode
	}
	return PerPodNodeClass
}
