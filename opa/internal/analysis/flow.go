package analysis

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Printed values. Most templates name the pod and the node in their
// messages (sprintf("... %v ...", [input.review.object.metadata.name])).
// Such a value does not decide the verdict, only what the message says, so
// it can be left out of the memo key: the engine evaluates with a
// placeholder in its place and puts the real value into msg and details
// afterwards. That is sound when, statically, for every flow of the value:
//
//   - it reaches sprintf as an argument whose verb is a plain %v or %s (or
//     %q, when the real value is one that %q prints as "value"), with a
//     constant format, no flags, width, precision, * or %[n], and as many
//     verbs as arguments; or it is placed as is as the violation's msg or
//     as a value of its details object;
//   - or it is a part of concat with a constant separator (as %s), or
//     part of a key looked up in a review object under a run-time check
//     (lookupkey.go);
//   - the string sprintf builds flows on only through aliases, into other
//     such sprintf calls, into msg or details, into a template function
//     as an argument (settled there), or out of a function (with
//     several definitions, only in a template that cannot see the node:
//     their values are compared when more than one succeeds, and a
//     conflict is an error that can depend on the value, so the engine
//     evaluates a review whose placeholder evaluation failed again with
//     the real values; Result.PrintedThroughSeveral);
//   - nothing else in the template reads the same path (a condition, a
//     set, count, startswith, a comparison: those are reads, and a read
//     keeps the path in the key);
//
// and, at run time, the real value is a string (a missing or non-string
// value is put into the key instead and evaluated as it is). Results whose
// placeholders stand for equal values are de-duplicated again, as Rego's
// set would have. Anything else keeps the value in the key: the cost is
// evaluations, never a wrong verdict or message.

// source is a value printed into a message: where it comes from, and how.
type source struct {
	o     origin // exact, root Input or Node
	quote bool
	where string
}

// printed is a string variable built only from printed values.
type printed struct {
	sources []source
	// allowed counts the variable's occurrences accounted for (its
	// binding, and uses as a sprintf argument, an alias, a sink).
	allowed int
	// next are the variables it flows into; it is clean only if they are.
	next []ast.Var
}

func newScope(r *ast.Rule, violation bool) *scope {
	sc := &scope{rule: r, occurrences: map[ast.Var]int{}, strings: map[ast.Var]*printed{}, violation: violation}
	count := func(v ast.Var) bool { sc.occurrences[v]++; return false }
	ast.WalkVars(r.Head, count)
	ast.WalkVars(r.Body, count)
	if violation && r.Head.Key != nil {
		// The compiler binds an element with references in it to a local
		// in the body; that local is the head only if used nowhere else.
		if v, ok := r.Head.Key.Value.(ast.Var); ok && sc.occurrences[v] == 2 {
			sc.headVar = v
		}
	}
	return sc
}

func (sc *scope) alias(v, from ast.Var) {
	p := sc.strings[from]
	p.allowed++
	p.next = append(p.next, v)
	sc.strings[v] = &printed{sources: p.sources, allowed: 1}
}

// verb is one formatting directive of a sprintf format.
type verb struct {
	plain bool // %v or %s, nothing else
	quote bool // %q, nothing else
	text  string
}

// parseVerbs reads the directives of a Go format string. It refuses
// formats whose arguments cannot be matched to directives one by one.
func parseVerbs(f string) ([]verb, error) {
	var out []verb
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			continue
		}
		j := i + 1
		if j < len(f) && f[j] == '%' {
			i = j
			continue
		}
		for j < len(f) && strings.IndexByte("+-# 0123456789.*[]", f[j]) >= 0 {
			if f[j] == '*' || f[j] == '[' {
				return nil, errors.New("it uses * or an argument index")
			}
			j++
		}
		if j >= len(f) {
			return nil, errors.New("it ends in a lone %")
		}
		r, size := utf8.DecodeRuneInString(f[j:])
		spec := j == i+1
		out = append(out, verb{plain: spec && (r == 'v' || r == 's'), quote: spec && r == 'q', text: f[i : j+size]})
		i = j + size - 1
	}
	return out, nil
}

// constString gives the value of a constant string term.
func constString(t *ast.Term, env map[ast.Var]origin) (string, bool) {
	switch v := t.Value.(type) {
	case ast.String:
		return string(v), true
	case ast.Var:
		if o, ok := env[v]; ok && o.root == rootConst {
			if s, ok := o.value.(ast.String); ok {
				return string(s), true
			}
		}
	}
	return "", false
}

// sprintf handles sprintf(format, [args...], out) in a rule body: out
// becomes a printed string made of the arguments that are printed values;
// the other arguments are read. It reports whether it handled the call.
func (z *analyzer) sprintf(args []*ast.Term, env map[ast.Var]origin, seen map[ast.Var]bool, depth int, sc *scope) bool {
	if len(args) != 3 {
		return false
	}
	out, ok := args[2].Value.(ast.Var)
	if !ok || seen[out] {
		return false
	}
	arr, ok := args[1].Value.(*ast.Array)
	if !ok {
		return false
	}
	format, ok := constString(args[0], env)
	if !ok {
		z.refused(arr, env, "with a format that is not a constant")
		return false
	}
	verbs, err := parseVerbs(format)
	if err == nil && len(verbs) < arr.Len() {
		// Extra arguments are printed with their types (%!(EXTRA ...)).
		err = fmt.Errorf("has fewer verbs (%d) than arguments (%d)", len(verbs), arr.Len())
	}
	if err != nil {
		z.refused(arr, env, "with a format that "+strings.TrimPrefix(err.Error(), "it "))
		return false
	}
	p := &printed{allowed: 1}
	for i := 0; i < arr.Len(); i++ {
		el, vb := arr.Elem(i), verbs[i]
		if v, ok := el.Value.(ast.Var); ok && sc.strings[v] != nil {
			if vb.plain || vb.quote {
				q := sc.strings[v]
				q.allowed++
				q.next = append(q.next, out)
				for _, s := range q.sources {
					s.quote = s.quote || vb.quote
					p.sources = append(p.sources, s)
				}
			}
			continue // not accounted for otherwise: q stays in the key
		}
		if o, ok := z.resolve(el, env, depth); ok && o.exact && o.root != rootConst {
			if vb.plain || vb.quote {
				p.sources = append(p.sources, source{o: o, quote: vb.quote, where: z.where()})
				continue
			}
			z.note(o, "is printed with "+vb.text+" in "+z.where())
		}
		z.walk(el, env, depth)
	}
	sc.strings[out] = p
	return true
}

// concat handles concat(separator, [parts...], out) with a constant
// separator and a literal array whose parts are constant strings, printed
// values and printed strings: out is a printed string, as sprintf("%s%s")
// of the parts would be (seccomp's annotation keys,
// concat("", [prefix, name])). The engine puts a placeholder only where
// the real value is a string, which concat takes as it is. It reports
// whether it handled the call; when it does not, nothing is recorded.
func (z *analyzer) concat(args []*ast.Term, env map[ast.Var]origin, seen map[ast.Var]bool, depth int, sc *scope) bool {
	if len(args) != 3 {
		return false
	}
	out, ok := args[2].Value.(ast.Var)
	if !ok || seen[out] {
		return false
	}
	if _, ok := constString(args[0], env); !ok {
		return false
	}
	arr, ok := args[1].Value.(*ast.Array)
	if !ok {
		return false
	}
	var strs []*printed
	var srcs []source
	for i := 0; i < arr.Len(); i++ {
		el := arr.Elem(i)
		if v, ok := el.Value.(ast.Var); ok && sc.strings[v] != nil {
			strs = append(strs, sc.strings[v])
			continue
		}
		if _, ok := constString(el, env); ok {
			continue
		}
		var o origin
		switch x := el.Value.(type) {
		case ast.Var:
			o, ok = env[x]
		case ast.Ref:
			ok = x.IsGround()
			if ok {
				o, ok = z.resolve(el, env, depth)
			}
		default:
			ok = false
		}
		switch {
		case !ok || !o.exact:
			return false
		case o.root == rootConst:
			if _, isStr := o.value.(ast.String); !isStr {
				return false
			}
		default:
			srcs = append(srcs, source{o: o, where: z.where()})
		}
	}
	p := &printed{allowed: 1, sources: srcs}
	for _, q := range strs {
		q.allowed++
		q.next = append(q.next, out)
		p.sources = append(p.sources, q.sources...)
	}
	sc.strings[out] = p
	return true
}

// refused notes, for Why, the printed values of a sprintf that cannot
// leave the key.
func (z *analyzer) refused(arr *ast.Array, env map[ast.Var]origin, why string) {
	arr.Foreach(func(el *ast.Term) {
		var o origin
		ok := false
		switch v := el.Value.(type) {
		case ast.Var:
			o, ok = env[v]
		case ast.Ref:
			if v[0].Equal(ast.InputRootDocument) && v.IsGround() {
				o, ok = origin{root: Input, path: v[1:], exact: true}, true
			}
		}
		if ok && o.exact && o.root != rootConst {
			z.note(o, "is printed "+why+" in "+z.where())
		}
	})
}

// element handles the violation head's element: msg and the values of
// details are sinks for printed values; everything else is read.
func (z *analyzer) element(t *ast.Term, env map[ast.Var]origin, depth int, sc *scope) {
	obj, ok := t.Value.(ast.Object)
	if !ok {
		z.walk(t, env, depth)
		return
	}
	obj.Foreach(func(k, v *ast.Term) {
		z.walk(k, env, depth)
		switch {
		case k.Equal(ast.StringTerm("msg")):
			z.sink(v, env, depth, sc)
		case k.Equal(ast.StringTerm("details")):
			d, ok := v.Value.(ast.Object)
			if !ok {
				z.walk(v, env, depth)
				return
			}
			d.Foreach(func(dk, dv *ast.Term) {
				z.walk(dk, env, depth)
				z.sink(dv, env, depth, sc)
			})
		default:
			z.walk(v, env, depth)
		}
	})
}

// sink takes a value placed as is into msg or details.
func (z *analyzer) sink(t *ast.Term, env map[ast.Var]origin, depth int, sc *scope) {
	if v, ok := t.Value.(ast.Var); ok && sc.strings[v] != nil {
		sc.strings[v].allowed++
		return
	}
	if o, ok := z.resolve(t, env, depth); ok && o.exact && o.root != rootConst {
		z.messages = append(z.messages, source{o: o, where: z.where()})
		return
	}
	z.walk(t, env, depth)
}

// settle ends a rule body: printed strings used only as allowed give their
// sources to the messages (or, for the function's value ret, to the
// caller); any other use puts their sources back into the key.
func (z *analyzer) settle(sc *scope, ret ast.Var, hasRet bool) []source {
	state := map[ast.Var]int{} // 0 unknown, 1 clean, 2 not
	var clean func(v ast.Var) bool
	clean = func(v ast.Var) bool {
		switch state[v] {
		case 1:
			return true
		case 2:
			return false
		}
		state[v] = 2 // cycles are not clean
		p := sc.strings[v]
		if p.allowed != sc.occurrences[v] {
			return false
		}
		for _, n := range p.next {
			if !clean(n) {
				return false
			}
		}
		state[v] = 1
		return true
	}
	vars := make([]ast.Var, 0, len(sc.strings))
	for v := range sc.strings {
		vars = append(vars, v)
	}
	sort.Slice(vars, func(i, j int) bool { return vars[i] < vars[j] })
	var out []source
	for _, v := range vars {
		p := sc.strings[v]
		switch {
		case !clean(v):
			z.refuse(p.sources, "the message it is printed into is used in a condition or passed on")
		case hasRet && v == ret:
			out = p.sources
		default:
			// Clean strings that reach no sink still need their values
			// defined: as messages, the engine checks that at run time.
			z.messages = append(z.messages, p.sources...)
		}
	}
	return out
}

// refuse puts printed values back into the key.
func (z *analyzer) refuse(srcs []source, why string) {
	for _, s := range srcs {
		z.reads = append(z.reads, read{root: s.o.root, path: s.o.path, o: s.o, where: s.where})
		z.note(s.o, "is printed in "+s.where+", but "+why)
	}
}

// note records a reason for Why about a value that stays in the key.
func (z *analyzer) note(o origin, what string) {
	z.why = append(z.why, rootName(o.root)+PathString(o.path)+" "+what+": it stays in the memo key")
}

func rootName(r Root) string {
	if r == Node {
		return "node"
	}
	return "input"
}

// result settles the paths: reads become the key, printed values that no
// read covers become Messages.
func (z *analyzer) result() *Result {
	var input, node []read
	for _, r := range z.reads {
		if r.root == Input {
			input = append(input, r)
		} else {
			node = append(node, r)
		}
	}
	a := &Result{InventoryOther: z.inv, OtherNodes: z.allNodes, Nondeterministic: z.nondet}
	var why []string
	observed := func(rs []read) bool {
		for _, r := range rs {
			if observes(r.o, NodeNamePath) {
				return true
			}
		}
		return false
	}
	// A printed value some read lies below is read whole; one that holds
	// the node name (input.review.object.spec, printed) or that needs the
	// candidate node replaced while other nodes are read is read too.
	msgs := z.messages
	for changed := true; changed; {
		changed = false
		var keep []source
		for _, m := range msgs {
			reads := &input
			if m.o.root == Node {
				reads = &node
			}
			paths := readPaths(*reads)
			if m.o.root == Node {
				paths = append(paths, z.exists...)
			}
			isName := m.o.root == Input && len(m.o.path) == len(NodeNamePath) && PrefixRelated(m.o.path, NodeNamePath)
			switch {
			case covers(unconditionalPaths(*reads), m.o.path):
				// A conditional read keys the value only where its
				// condition holds: the printed value is read (related).
				continue
			case related(paths, m.o.path),
				m.o.root == Input && related(z.helperRaw, m.o.path), // a helper must see it (helper.go)
				m.o.root == Input && !isName && PrefixRelated(m.o.path, NodeNamePath),
				z.allNodes && (m.o.root == Node || isName):
				// The candidate is replaced by evaluating with a one-Node
				// data.inventory.cluster.v1.Node: a template reading other
				// Nodes would see them gone. Other kinds are untouched.
				if z.allNodes && (m.o.root == Node || isName) {
					why = append(why, rootName(m.o.root)+PathString(m.o.path)+" is printed in "+m.where+", but the template reads Nodes other than the candidate, so the candidate node cannot be replaced: it stays in the memo key")
				}
				*reads = append(*reads, read{root: m.o.root, path: m.o.path, o: m.o, where: m.where})
				changed = true
				continue
			}
			keep = append(keep, m)
		}
		msgs = keep
	}
	a.NodeNameObserved = observed(input)
	if a.NodeNameObserved {
		for _, r := range input {
			if observes(r.o, NodeNamePath) {
				why = append(why, "input"+PathString(r.path)+" holds the candidate's name and is read in "+r.where+": evaluated per (pod, node)")
			}
		}
		for _, m := range msgs {
			input = append(input, read{root: m.o.root, path: m.o.path, o: m.o, where: m.where})
			if m.o.root == Node {
				node = append(node, read{root: m.o.root, path: m.o.path, o: m.o, where: m.where})
			}
		}
		msgs = nil
	}
	a.InputPaths = dropDeterminedHelpers(minimizePaths(keyPaths(input), true))
	a.NodePaths = minimizePaths(readPaths(node), false)
	for _, p := range minimizePaths(z.exists, false) {
		if !covers(a.NodePaths, p) {
			a.NodeExists = append(a.NodeExists, p)
		}
	}
	a.Messages, a.NodeNameMessage, a.NodeNameQuote = mergeMessages(msgs, z.absentPaths())
	for _, r := range input {
		if related(uniquePodPaths, r.path) && r.where != "" {
			why = append(why, "input"+PathString(r.path)+" (unique to each pod) is read in "+r.where+r.o.because)
		}
	}
	for _, r := range node {
		if related(uniqueNodePaths, r.path) && r.where != "" {
			why = append(why, "node"+PathString(r.path)+" (unique to each node) is read in "+r.where+r.o.because)
		}
	}
	a.Why = dedupe(append(z.why, why...))
	a.DistinctKeys = z.distinctKeys()
	return a
}

// distinctKeys are the list maps' key paths, one group per map, in a
// stable order.
func (z *analyzer) distinctKeys() [][][]*ast.Term {
	names := make([]string, 0, len(z.distinct))
	for name := range z.distinct {
		names = append(names, name)
	}
	sort.Strings(names)
	var out [][][]*ast.Term
	for _, name := range names {
		out = append(out, z.distinct[name])
	}
	return out
}

// keyPaths are the reads' key paths: a conditional read's path begins
// with its condition (When).
func keyPaths(rs []read) [][]*ast.Term {
	out := make([][]*ast.Term, len(rs))
	for i, r := range rs {
		out[i] = r.path
		if r.when != nil {
			out[i] = append([]*ast.Term{r.when}, r.path...)
		}
	}
	return out
}

// unconditionalPaths are the paths of the reads made whatever the review.
func unconditionalPaths(rs []read) [][]*ast.Term {
	var out [][]*ast.Term
	for _, r := range rs {
		if r.when == nil {
			out = append(out, r.path)
		}
	}
	return out
}

func readPaths(rs []read) [][]*ast.Term {
	out := make([][]*ast.Term, len(rs))
	for i, r := range rs {
		out[i] = r.path
	}
	return out
}

// mergeMessages folds the printed values into one entry per path, in a
// stable order, the node's name apart; absent gives the objects a path's
// value must not be a key of (lookupkey.go).
func mergeMessages(srcs []source, absent map[string][][]*ast.Term) (msgs []MessagePath, nodeName, nodeNameQuote bool) {
	byKey := map[string]int{}
	for _, s := range srcs {
		if s.o.root == Input && len(s.o.path) == len(NodeNamePath) && PrefixRelated(s.o.path, NodeNamePath) {
			nodeName = true
			nodeNameQuote = nodeNameQuote || s.quote
			continue
		}
		k := rootName(s.o.root) + PathString(s.o.path)
		if i, ok := byKey[k]; ok {
			msgs[i].Quote = msgs[i].Quote || s.quote
			continue
		}
		byKey[k] = len(msgs)
		msgs = append(msgs, MessagePath{Root: s.o.root, Path: s.o.path, Quote: s.quote, Absent: absent[k]})
	}
	sort.Slice(msgs, func(i, j int) bool {
		if msgs[i].Root != msgs[j].Root {
			return msgs[i].Root < msgs[j].Root
		}
		return PathString(msgs[i].Path) < PathString(msgs[j].Path)
	})
	return msgs, nodeName, nodeNameQuote
}

func dedupe(ss []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
