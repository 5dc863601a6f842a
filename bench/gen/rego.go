package gen

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Rego generates Rego violation rules over a pod review as Gatekeeper's
// Rego driver evaluates them: input.review (the Pod, spec.nodeName the
// candidate, namespaceObject), input.parameters, and data.inventory's
// Nodes and Namespaces; with iteration (some ... in, [_]), every,
// comprehensions, not, with, walk, object.get, helper functions with
// several definitions and else, and messages and details that print what
// the rule read. A Bool here is a statement of a rule body; statements
// are joined with "; ". Not safe for concurrent use.
type Rego struct {
	exprGen
}

// NewRego is a generator seeded with seed.
func NewRego(seed uint64) *Rego {
	return &Rego{exprGen{r: rand.New(rand.NewPCG(seed, 0x7265676f67656e)), rules: regoRules}}
}

// The review, the candidate's Node and the pod's Namespace in the
// inventory, as templates write them.
const (
	regoObject    = "input.review.object"
	regoNode      = `data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]`
	regoNamespace = `data.inventory.cluster["v1"].Namespace[input.review.object.metadata.namespace]`
)

var regoRules = map[Type][]rule{
	Bool: {
		{form: "bool literal", fmt: "true"},
		{form: "string ==", kids: []Type{String, String}, fmt: "%s == %s"},
		{form: "string !=", kids: []Type{String, String}, fmt: "%s != %s"},
		{form: "startswith", kids: []Type{String, String}, fmt: "startswith(%s, %s)"},
		{form: "endswith", kids: []Type{String, String}, fmt: "endswith(%s, %s)"},
		{form: "contains", kids: []Type{String, String}, fmt: "contains(%s, %s)"},
		{form: "regex.match", kids: []Type{String}, fmt: `regex.match("^(gpu|spot)-[0-9]+$", %s)`},
		{form: "number <", kids: []Type{Int, Int}, fmt: "%s < %s"},
		{form: "count >", kids: []Type{ContainerList, Int}, fmt: "count(%s) > %s"},
		{form: "not", kids: []Type{String, String}, fmt: "not %s == %s"},
		{form: "not", kids: []Type{String}, fmt: `not startswith(%s, "gpu-")`},
		{form: "not a field", fmt: "not " + regoObject + ".spec.hostNetwork"},
		{form: "not a field", kids: []Type{Container}, fmt: "not %s.securityContext.privileged"},
		{form: "field", kids: []Type{Container}, fmt: "%s.securityContext.privileged"},
		{form: "field", fmt: regoObject + ".spec.hostNetwork == true"},
		{form: "object.get", kids: []Type{Container}, fmt: `object.get(%s, ["securityContext", "privileged"], false) == true`},
		{form: "in set", kids: []Type{String}, fmt: `%s in {"a", "gpu-", "team", "web"}`},
		{form: "in list", kids: []Type{String, StringList}, fmt: "%s in %s"},
		// A variable declared with some (or every) must be used: `_ = x`
		// uses it when the statement after does not.
		{form: "some in", kids: []Type{ContainerList, Bool}, fmt: "some $1 in %s; _ = $1; %s", bind: []Type{Container}, bindFrom: 1},
		{form: "iteration", kids: []Type{ContainerList, Bool}, fmt: "$1 := %s[_]; %s", bind: []Type{Container}, bindFrom: 1},
		{form: "some key, value in", kids: []Type{StringMap, Bool}, fmt: "some $1, $2 in %s; _ = [$1, $2]; %s", bind: []Type{String, String}, bindFrom: 1},
		{form: "every", kids: []Type{ContainerList, Bool}, fmt: "every $1 in %s { _ = $1; %s }", bind: []Type{Container}, bindFrom: 1},
		{form: "comprehension", kids: []Type{ContainerList, Bool}, fmt: "count([$1 | some $1 in %s; %s]) > 0", bind: []Type{Container}, bindFrom: 1},
		{form: "helper function", kids: []Type{String}, fmt: "gen_allowed(%s)"},
		{form: "else", kids: []Type{String}, fmt: `gen_tier(%s) == "gpu"`},
		// Two definitions that both hold for gpu-0: an evaluation error.
		{form: "conflict", kids: []Type{String}, fmt: `gen_pick(%s) == "a"`},
		{form: "with", kids: []Type{String}, fmt: "gen_node_prefix with input.parameters.prefix as %s"},
		{form: "walk", kids: []Type{String}, fmt: "count([p | walk(" + regoObject + ".metadata, [p, v]); v == %s]) > 0"},
		{form: "inventory", kids: []Type{String}, fmt: regoNode + ".metadata.labels.team == %s"},
		{form: "inventory", fmt: "not " + regoNode},
		{form: "inventory", kids: []Type{String}, fmt: regoNamespace + ".metadata.labels.team == %s"},
		regoPlacementRules[0], regoPlacementRules[1],
		{form: "is_string", kids: []Type{String}, fmt: "is_string(%s)"},
	},
	Int: {
		{form: "number literal", fmt: "0"},
		{form: "number literal", fmt: "1"},
		{form: "number literal", fmt: "2"},
		{form: "param", fmt: "input.parameters.max"},
		{form: "field", kids: []Type{Port}, fmt: "%s.containerPort"},
		{form: "count", kids: []Type{ContainerList}, fmt: "count(%s)"},
		{form: "count", kids: []Type{StringMap}, fmt: "count(%s)"},
		{form: "count", kids: []Type{String}, fmt: "count(%s)"},
		{form: "sum", kids: []Type{PortList}, fmt: "sum([$1.containerPort | some $1 in %s])", bind: []Type{Port}, bindFrom: 1},
		{form: "number +", kids: []Type{Int, Int}, fmt: "(%s + %s)"},
	},
	String: {
		{form: "string literal", fmt: `"gpu-"`},
		{form: "string literal", fmt: `"a"`},
		{form: "string literal", fmt: `""`},
		{form: "string literal", fmt: `"team"`},
		{form: "field", fmt: regoObject + ".metadata.name"},
		{form: "field", fmt: regoObject + ".metadata.namespace"},
		{form: "node name", fmt: regoObject + ".spec.nodeName"},
		{form: "node name", fmt: regoObject + ".spec.nodeName"},
		{form: "field", fmt: regoObject + ".spec.priorityClassName"},
		{form: "param", fmt: "input.parameters.prefix"},
		{form: "param", fmt: "input.parameters.key"},
		{form: "field", kids: []Type{Container}, fmt: "%s.name"},
		{form: "field", kids: []Type{Container}, fmt: "%s.image"},
		{form: "map index", kids: []Type{StringMap}, fmt: "%s.team"},
		{form: "computed key", kids: []Type{StringMap}, fmt: "%s[input.parameters.key]"},
		{form: "object.get", fmt: `object.get(` + regoObject + `.metadata, ["labels", "team"], "none")`},
		{form: "namespaceObject", fmt: "input.review.namespaceObject.metadata.labels.team"},
		{form: "inventory", fmt: regoNode + `.metadata.labels["topology.kubernetes.io/zone"]`},
		{form: "inventory", fmt: regoNamespace + ".metadata.name"},
		{form: "lower", kids: []Type{String}, fmt: "lower(%s)"},
		{form: "concat", kids: []Type{String, String}, fmt: `concat("-", [%s, %s])`},
		{form: "sprintf", kids: []Type{Int}, fmt: `sprintf("%%v", [%s])`},
		{form: "split", kids: []Type{String}, fmt: `split(%s, "-")[0]`},
		{form: "else", kids: []Type{String}, fmt: "gen_tier(%s)"},
		{form: "type_name", kids: []Type{String}, fmt: "type_name(%s)"},
		{form: "list index", kids: []Type{StringList}, fmt: "%s[0]"},
	},
	StringList: {
		{form: "param", fmt: "input.parameters.names"},
		{form: "list literal", kids: []Type{String, String}, fmt: "[%s, %s]"},
		{form: "comprehension", kids: []Type{ContainerList}, fmt: "[$1.name | some $1 in %s]", bind: []Type{Container}, bindFrom: 1},
		{form: "map keys", kids: []Type{StringMap}, fmt: "sort([$1 | some $1, _ in %s])", bind: []Type{String}, bindFrom: 1},
		{form: "split", kids: []Type{String}, fmt: `split(%s, "-")`},
	},
	StringMap: {
		{form: "field", fmt: regoObject + ".metadata.labels"},
		{form: "field", fmt: regoObject + ".metadata.annotations"},
		{form: "namespaceObject", fmt: "input.review.namespaceObject.metadata.labels"},
		{form: "object.get", fmt: "object.get(" + regoObject + `.metadata, "labels", {})`},
		{form: "inventory", fmt: regoNode + ".metadata.labels"},
		{form: "map literal", kids: []Type{String}, fmt: `{"team": %s}`},
	},
	Container: {
		{form: "list index", kids: []Type{ContainerList}, fmt: "%s[0]"},
		{form: "list index", fmt: regoObject + ".spec.containers[0]"},
	},
	ContainerList: {
		{form: "field", fmt: regoObject + ".spec.containers"},
		{form: "field", fmt: regoObject + ".spec.initContainers"},
		{form: "object.get", fmt: "object.get(" + regoObject + `.spec, "initContainers", [])`},
		{form: "comprehension", kids: []Type{ContainerList, Bool}, fmt: "[$1 | some $1 in %s; %s]", bind: []Type{Container}, bindFrom: 1},
	},
	Port: {
		{form: "list index", kids: []Type{PortList}, fmt: "%s[0]"},
		{form: "list index", fmt: regoObject + ".spec.containers[0].ports[0]"},
	},
	PortList: {
		{form: "field", kids: []Type{Container}, fmt: "%s.ports"},
		{form: "object.get", kids: []Type{Container}, fmt: `object.get(%s, "ports", [])`},
	},
}

// regoPlacementRules are statements that the candidate decides, in part:
// its name, or its Node's labels in the inventory.
var regoPlacementRules = []rule{
	{form: "node placement", kids: []Type{String}, fmt: "startswith(" + regoObject + ".spec.nodeName, %s)"},
	{form: "node placement", kids: []Type{String}, fmt: regoNode + `.metadata.labels["topology.kubernetes.io/zone"] != %s`},
	{form: "node placement", kids: []Type{String}, fmt: "not " + regoNode + ".metadata.labels.team == %s"},
}

// regoHelpers are the helper rules every generated template carries:
// a function of several definitions, one with else, one whose two
// definitions can conflict, a rule read under with.
const regoHelpers = `
gen_allowed(x) {
	x == "a"
}

gen_allowed(x) {
	startswith(x, "gpu-")
}

gen_tier(n) = "gpu" {
	startswith(n, "gpu-")
} else = "other" {
	true
}

gen_pick(x) = "a" {
	startswith(x, "gpu-")
}

gen_pick(x) = "b" {
	endswith(x, "-0")
}

gen_node_prefix {
	startswith(input.review.object.spec.nodeName, input.parameters.prefix)
}
`

// RegoTemplate is one generated Rego ConstraintTemplate and its
// Constraint: violation rules, each a body of statements, a message and
// details.
type RegoTemplate struct {
	Kind   string
	Rules  []RegoRule
	Params map[string]any
}

// RegoRule is one violation rule.
type RegoRule struct {
	Body []*Expr
	// Message is the String printed after "pod <name>: "; Details, when
	// set, is details.value.
	Message *Expr
	Details *Expr
}

// Template is a random Rego template named after i.
func (g *Rego) Template(i int) *RegoTemplate {
	g.vars, g.scope, g.fresh = nil, nil, 0
	t := &RegoTemplate{Kind: fmt.Sprintf("K8sGenRego%d", i), Params: genParams(g.r)}
	for range 1 + g.r.IntN(2) {
		var rl RegoRule
		for range 1 + g.r.IntN(2) {
			rl.Body = append(rl.Body, g.Expr(Bool, 1+g.r.IntN(3)))
		}
		if g.r.IntN(3) == 0 {
			rl.Body = append(rl.Body, g.build(pick(g.r, regoPlacementRules), Bool, 2))
		}
		rl.Message = g.Expr(String, 1+g.r.IntN(2))
		if g.r.IntN(2) == 0 {
			rl.Details = g.Expr(String, 1)
		}
		t.Rules = append(t.Rules, rl)
	}
	return t
}

// TemplateKind is t's constraint kind.
func (t *RegoTemplate) TemplateKind() string { return t.Kind }

// IteratesMap is false: Rego iterates an object in its keys' order.
func (t *RegoTemplate) IteratesMap() bool { return false }

// WithOnInput reports whether t writes `with input.<path> as`.
func (t *RegoTemplate) WithOnInput() bool {
	forms := map[string]int{}
	t.Forms(forms)
	return forms["with"] > 0
}

// SimplerPolicies is Simpler as Policies.
func (t *RegoTemplate) SimplerPolicies() []Policy {
	var out []Policy
	for _, s := range t.Simpler() {
		out = append(out, s)
	}
	return out
}

// Source is t's Rego module.
func (t *RegoTemplate) Source() string {
	var b strings.Builder
	fmt.Fprintf(&b, "package %s\n\nimport future.keywords.in\nimport future.keywords.every\n", strings.ToLower(t.Kind))
	for _, rl := range t.Rules {
		head, details := `{"msg": msg}`, ""
		if rl.Details != nil {
			head = `{"msg": msg, "details": details}`
			details = fmt.Sprintf("\n\tdetails := {\"node\": input.review.object.spec.nodeName, \"value\": %s}", rl.Details)
		}
		fmt.Fprintf(&b, "\nviolation[%s] {\n", head)
		for _, st := range rl.Body {
			fmt.Fprintf(&b, "\t%s\n", st)
		}
		fmt.Fprintf(&b, "\tmsg := sprintf(\"pod %%v: %%v\", [input.review.object.metadata.name, %s])%s\n}\n", rl.Message, details)
	}
	b.WriteString(regoHelpers)
	return b.String()
}

// Forms counts the expression forms of t.
func (t *RegoTemplate) Forms(count map[string]int) {
	for _, e := range t.exprs() {
		(*e).Forms(count)
	}
}

// Size is how many expression nodes t has.
func (t *RegoTemplate) Size() int {
	n := 0
	for _, e := range t.exprs() {
		n += (*e).Size()
	}
	return n
}

func (t *RegoTemplate) exprs() []**Expr {
	var out []**Expr
	for i := range t.Rules {
		rl := &t.Rules[i]
		for j := range rl.Body {
			out = append(out, &rl.Body[j])
		}
		out = append(out, &rl.Message)
		if rl.Details != nil {
			out = append(out, &rl.Details)
		}
	}
	return out
}

func (t *RegoTemplate) clone() *RegoTemplate {
	c := *t
	c.Rules = make([]RegoRule, len(t.Rules))
	for i, rl := range t.Rules {
		c.Rules[i] = RegoRule{Body: append([]*Expr(nil), rl.Body...), Message: rl.Message, Details: rl.Details}
	}
	return &c
}

// Simpler are the templates one step simpler than t: a rule, a statement
// or the details dropped, or one expression one step simpler.
func (t *RegoTemplate) Simpler() []*RegoTemplate {
	var out []*RegoTemplate
	if len(t.Rules) > 1 {
		for i := range t.Rules {
			c := t.clone()
			c.Rules = append(c.Rules[:i:i], c.Rules[i+1:]...)
			out = append(out, c)
		}
	}
	for i, rl := range t.Rules {
		for j := range rl.Body {
			if len(rl.Body) > 1 {
				c := t.clone()
				c.Rules[i].Body = append(c.Rules[i].Body[:j:j], c.Rules[i].Body[j+1:]...)
				out = append(out, c)
			}
		}
		if rl.Details != nil {
			c := t.clone()
			c.Rules[i].Details = nil
			out = append(out, c)
		}
	}
	return append(out, exprSteps(t, (*RegoTemplate).clone, (*RegoTemplate).exprs)...)
}

// Objects are t's ConstraintTemplate and Constraint.
func (t *RegoTemplate) Objects() (template, constraint map[string]any) {
	template = templateObject(t.Kind, map[string]any{"rego": t.Source()})
	return template, constraintOf(t.Kind, t.Params)
}

// genParams are a Constraint's parameters, each sometimes absent.
func genParams(r *rand.Rand) map[string]any {
	p := map[string]any{}
	if r.IntN(8) != 0 {
		p["prefix"] = pick(r, []string{"gpu-", "cpu-", ""})
	}
	if r.IntN(8) != 0 {
		p["max"] = int64(r.IntN(4))
	}
	if r.IntN(8) != 0 {
		p["key"] = pick(r, []string{"team", "owner", "tier"})
	}
	if r.IntN(8) != 0 {
		p["names"] = []any{pick(r, []string{"a", "web", "nginx:latest"}), "c0"}
	}
	return p
}

// constraintOf is a Constraint of kind matching Pods, with params.
func constraintOf(kind string, params map[string]any) map[string]any {
	return map[string]any{
		"apiVersion": "constraints.gatekeeper.sh/v1beta1",
		"kind":       kind,
		"metadata":   map[string]any{"name": strings.ToLower(kind)},
		"spec": map[string]any{
			"match":      map[string]any{"kinds": []any{map[string]any{"apiGroups": []any{""}, "kinds": []any{"Pod"}}}},
			"parameters": deepCopy(params),
		},
	}
}
