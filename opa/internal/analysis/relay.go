package analysis

import "github.com/open-policy-agent/opa/v1/ast"

// Relays. Five of Gatekeeper's library templates (container limits,
// requests, ratios, required resources, ephemeral storage) check both
// container lists with one partial set rule whose head names the list:
//
//	violation[{"msg": msg}] { general_violation[{"msg": msg, "field": "containers"}] }
//	violation[{"msg": msg}] { general_violation[{"msg": msg, "field": "initContainers"}] }
//	general_violation[{"msg": msg, "field": field}] {
//	  container := input.review.object.spec[field][_]
//	  ...
//	}
//
// Analysed alone, general_violation iterates every key of spec (which
// holds the candidate's name) and prints msg into its own head: the whole
// spec would be keyed. Such a rule is a relay: every reference to it, in
// the whole template, is a body expression `relay[pattern]` of the
// violation rule, pattern an object with the keys of each definition's
// head, each of its values a scalar constant or a variable. OPA unifies a
// definition's head with the pattern before it evaluates the body
// (topdown's evalOneRulePreUnify: the key is not a plain variable, so the
// set is never evaluated whole), so the body runs with field bound to
// "containers" and to "initContainers" only. A relay is analysed once per
// reference, its head's variables bound to the pattern's constants; a head
// value whose pattern variable only reaches the violation's msg or details
// (occurring nowhere else in the caller) is a sink as the violation's head
// is, so printed values flow through it. Any other reference (the set
// counted, iterated with a plain variable, used by a function or from
// another rule) keeps today's reading: the relay is analysed alone.

// relaySite is one reference to a relay: the constants its pattern binds
// and the head keys whose values only reach the violation's sinks.
type relaySite struct {
	consts map[string]*ast.Term
	sinks  map[string]bool
}

// findRelays maps the path of every relay of rules to its sites, keyed by
// the referencing expression.
func (z *analyzer) findRelays(rules []*ast.Rule) map[*ast.Expr]*relaySite {
	sites := map[*ast.Expr]*relaySite{}
	byRule := map[string][]*ast.Expr{}
	for _, r := range rules {
		if !r.Path().Equal(z.violation) {
			continue
		}
		for _, e := range r.Body {
			path, site, ok := z.relayReference(r, e)
			if ok {
				sites[e] = site
				byRule[path.String()] = append(byRule[path.String()], e)
			}
		}
	}
	for key, exprs := range byRule {
		path := ast.MustParseRef(key)
		if !z.isRelay(path) || countReferences(rules, path) != len(exprs) {
			for _, e := range exprs {
				delete(sites, e)
			}
			continue
		}
		z.relays[key] = true
	}
	return sites
}

// relayReference reads e, in violation rule r, as `relay[pattern]`.
func (z *analyzer) relayReference(r *ast.Rule, e *ast.Expr) (ast.Ref, *relaySite, bool) {
	t, ok := e.Terms.(*ast.Term)
	if !ok || e.Negated || len(e.With) > 0 {
		return nil, nil, false
	}
	ref, ok := t.Value.(ast.Ref)
	if !ok || len(ref) < 2 || !ref.HasPrefix(z.root) || !ref[:len(ref)-1].IsGround() {
		return nil, nil, false
	}
	pattern, ok := ref[len(ref)-1].Value.(ast.Object)
	if !ok {
		return nil, nil, false
	}
	site := &relaySite{consts: map[string]*ast.Term{}, sinks: map[string]bool{}}
	sc := newScope(r, true)
	sinks := violationSinks(r)
	valid := true
	pattern.Foreach(func(k, v *ast.Term) {
		ks, isStr := k.Value.(ast.String)
		switch {
		case !isStr:
			valid = false
		case isScalar(v.Value):
			site.consts[string(ks)] = v
		default:
			pv, isVar := v.Value.(ast.Var)
			if !isVar {
				valid = false
				return
			}
			// The pattern and one sink: the variable goes nowhere else.
			if sinks[pv] == 1 && sc.occurrences[pv] == 2 {
				site.sinks[string(ks)] = true
			}
		}
	})
	return ref[:len(ref)-1], site, valid
}

func isScalar(v ast.Value) bool {
	switch v.(type) {
	case ast.String, ast.Number, ast.Boolean, ast.Null:
		return true
	}
	return false
}

// violationSinks counts, per variable, its places in violation rule r's
// head as msg or as a value of details.
func violationSinks(r *ast.Rule) map[ast.Var]int {
	out := map[ast.Var]int{}
	if r.Head.Key == nil {
		return out
	}
	obj, ok := r.Head.Key.Value.(ast.Object)
	if !ok {
		return out
	}
	obj.Foreach(func(k, v *ast.Term) {
		switch {
		case k.Equal(ast.StringTerm("msg")):
			if pv, ok := v.Value.(ast.Var); ok {
				out[pv]++
			}
		case k.Equal(ast.StringTerm("details")):
			if d, ok := v.Value.(ast.Object); ok {
				d.Foreach(func(_, dv *ast.Term) {
					if pv, ok := dv.Value.(ast.Var); ok {
						out[pv]++
					}
				})
			}
		}
	})
	return out
}

// isRelay checks the relay's definitions: partial set rules whose head is
// an object with string keys.
func (z *analyzer) isRelay(path ast.Ref) bool {
	if path.Equal(z.violation) {
		return false
	}
	rules := z.compiler.GetRulesExact(path)
	if len(rules) == 0 {
		return false
	}
	for _, r := range rules {
		if r.Head.Key == nil || r.Head.Value != nil || len(r.Head.Args) > 0 || r.Default || r.Else != nil {
			return false
		}
		obj, ok := r.Head.Key.Value.(ast.Object)
		if !ok {
			return false
		}
		for _, k := range obj.Keys() {
			if _, isStr := k.Value.(ast.String); !isStr {
				return false
			}
		}
	}
	return true
}

// countReferences counts the references in rules that can reach path:
// those whose ground prefix is related to it (data.templates.K.template
// alone reaches every rule of the package).
func countReferences(rules []*ast.Rule, path ast.Ref) int {
	n := 0
	for _, r := range rules {
		ast.WalkRefs(r, func(ref ast.Ref) bool {
			if !ref[0].Equal(ast.DefaultRootDocument) {
				return false
			}
			prefix := ref
			for i, k := range ref[1:] {
				if !k.IsGround() {
					prefix = ref[:i+1]
					break
				}
			}
			if PrefixRelated(prefix, path) {
				n++
			}
			return false
		})
	}
	return n
}

// relayCall analyses a relay for one of its sites: each definition with
// its head's variables bound to the pattern's constants.
func (z *analyzer) relayCall(path ast.Ref, site *relaySite, depth int) {
	// Relays are referenced from the violation rule's body only, which is
	// analysed at depth 0 and never from itself: no recursion to guard.
	for _, r := range z.compiler.GetRulesExact(path) {
		env := map[ast.Var]origin{}
		matches := true
		r.Head.Key.Value.(ast.Object).Foreach(func(k, v *ast.Term) {
			c, bound := site.consts[string(k.Value.(ast.String))]
			if !bound {
				return
			}
			switch hv := v.Value.(type) {
			case ast.Var:
				if o, dup := env[hv]; dup && o.value.Compare(c.Value) != 0 {
					matches = false // one variable, two constants
				}
				env[hv] = origin{root: rootConst, value: c.Value, exact: true}
			default:
				if v.IsGround() && !v.Equal(c) {
					matches = false // this definition never unifies
				}
			}
		})
		if !matches {
			continue
		}
		at := z.at
		z.site = &relayEntry{rule: r, site: site}
		z.rule(r, env, depth+1)
		z.site, z.at = nil, at
	}
}

// relayEntry hands a relay's site to the ruleOnce that analyses it.
type relayEntry struct {
	rule *ast.Rule
	site *relaySite
}

// relayHead takes a relay's head: values at sink keys are sinks, the
// others (constants bound from the pattern, or values the caller uses)
// are read.
func (z *analyzer) relayHead(t *ast.Term, site *relaySite, env map[ast.Var]origin, depth int, sc *scope) {
	t.Value.(ast.Object).Foreach(func(k, v *ast.Term) {
		if site.sinks[string(k.Value.(ast.String))] {
			z.sink(v, env, depth, sc)
			return
		}
		z.walk(v, env, depth)
	})
}
