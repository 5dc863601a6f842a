package gen

import (
	"fmt"
	"math/rand/v2"
)

// CEL generates CEL expressions over a pod review: object (the Pod, with
// spec.nodeName the candidate), variables.anyObject, namespaceObject,
// variables.params (the Constraint's parameters) and the template's own
// variables, with Gatekeeper v3.23's Kubernetes CEL libraries. Not safe
// for concurrent use.
type CEL struct {
	exprGen
}

// NewCEL is a generator seeded with seed.
func NewCEL(seed uint64) *CEL {
	return &CEL{exprGen{r: rand.New(rand.NewPCG(seed, 0x63656c67656e)), rules: celRules, varPrefix: "variables."}}
}

var celRules = map[Type][]rule{
	Bool: {
		{form: "bool literal", fmt: "true"},
		{form: "bool literal", fmt: "false"},
		{form: "has", fmt: "has(object.metadata.labels)"},
		{form: "has", fmt: "has(object.spec.hostNetwork)"},
		{form: "has", fmt: "has(object.spec.priorityClassName)"},
		{form: "has on a map", kids: []Type{StringMap}, fmt: "has(%s.team)"},
		{form: "has on a container", kids: []Type{Container}, fmt: "has(%s.ports)"},
		{form: "has on a container", kids: []Type{Container}, fmt: "has(%s.securityContext.privileged)"},
		{form: "field", fmt: "object.spec.hostNetwork"},
		{form: "field", kids: []Type{Container}, fmt: "%s.securityContext.privileged"},
		{form: "optional select", kids: []Type{Container}, fmt: "%s.?securityContext.?privileged.orValue(false)"},
		{form: "optional hasValue", fmt: "object.spec.?hostNetwork.hasValue()"},
		{form: "string ==", kids: []Type{String, String}, fmt: "%s == %s"},
		{form: "string !=", kids: []Type{String, String}, fmt: "%s != %s"},
		{form: "int <", kids: []Type{Int, Int}, fmt: "%s < %s"},
		{form: "int >=", kids: []Type{Int, Int}, fmt: "%s >= %s"},
		{form: "int ==", kids: []Type{Int, Int}, fmt: "%s == %s"},
		{form: "in list", kids: []Type{String, StringList}, fmt: "%s in %s"},
		{form: "in map", kids: []Type{String, StringMap}, fmt: "%s in %s"},
		{form: "startsWith", kids: []Type{String, String}, fmt: "%s.startsWith(%s)"},
		{form: "node placement", kids: []Type{String}, fmt: "!object.spec.nodeName.startsWith(%s)"},
		{form: "node placement", kids: []Type{StringMap}, fmt: "object.spec.nodeName in %s"},
		{form: "node placement", kids: []Type{StringList}, fmt: "object.spec.nodeName in %s"},
		{form: "endsWith", kids: []Type{String, String}, fmt: "%s.endsWith(%s)"},
		{form: "contains", kids: []Type{String, String}, fmt: "%s.contains(%s)"},
		{form: "matches", kids: []Type{String}, fmt: `%s.matches("^(gpu|spot)-[0-9]+$")`},
		{form: "not", kids: []Type{Bool}, fmt: "!(%s)"},
		{form: "and", kids: []Type{Bool, Bool}, fmt: "(%s && %s)"},
		{form: "or", kids: []Type{Bool, Bool}, fmt: "(%s || %s)"},
		{form: "conditional", kids: []Type{Bool, Bool, Bool}, fmt: "(%s ? %s : %s)"},
		{form: "all", kids: []Type{ContainerList, Bool}, fmt: "%s.all($1, %s)", bind: []Type{Container}, bindFrom: 1},
		{form: "exists", kids: []Type{ContainerList, Bool}, fmt: "%s.exists($1, %s)", bind: []Type{Container}, bindFrom: 1},
		{form: "exists_one", kids: []Type{ContainerList, Bool}, fmt: "%s.exists_one($1, %s)", bind: []Type{Container}, bindFrom: 1},
		{form: "all", kids: []Type{StringList, Bool}, fmt: "%s.all($1, %s)", bind: []Type{String}, bindFrom: 1},
		{form: "exists", kids: []Type{PortList, Bool}, fmt: "%s.exists($1, %s)", bind: []Type{Port}, bindFrom: 1},
		{form: "all over map keys", kids: []Type{StringMap, Bool}, fmt: "%s.all($1, %s)", bind: []Type{String}, bindFrom: 1},
		{form: "two-variable all over a map", kids: []Type{StringMap, Bool}, fmt: "%s.all($1, $2, %s)", bind: []Type{String, String}, bindFrom: 1},
		{form: "two-variable exists over a map", kids: []Type{StringMap, Bool}, fmt: "%s.exists($1, $2, %s)", bind: []Type{String, String}, bindFrom: 1},
		{form: "two-variable exists over a list", kids: []Type{ContainerList, Bool}, fmt: "%s.exists($1, $2, %s)", bind: []Type{Int, Container}, bindFrom: 1},
		{form: "isSorted", kids: []Type{StringList}, fmt: "%s.isSorted()"},
		{form: "dyn", kids: []Type{Bool}, fmt: "dyn(%s)"},
	},
	Int: {
		{form: "int literal", fmt: "0"},
		{form: "int literal", fmt: "1"},
		{form: "int literal", fmt: "2"},
		{form: "param", fmt: "variables.params.max"},
		{form: "field", kids: []Type{Port}, fmt: "%s.containerPort"},
		{form: "size", kids: []Type{ContainerList}, fmt: "size(%s)"},
		{form: "size", kids: []Type{StringList}, fmt: "size(%s)"},
		{form: "size", kids: []Type{StringMap}, fmt: "size(%s)"},
		{form: "size", kids: []Type{String}, fmt: "%s.size()"},
		{form: "size", kids: []Type{PortList}, fmt: "%s.size()"},
		{form: "int +", kids: []Type{Int, Int}, fmt: "(%s + %s)"},
		{form: "conditional", kids: []Type{Bool, Int, Int}, fmt: "(%s ? %s : %s)"},
		{form: "list index", kids: []Type{IntList}, fmt: "%s[0]"},
		{form: "sum", kids: []Type{IntList}, fmt: "%s.sum()"},
		{form: "indexOf", kids: []Type{StringList, String}, fmt: "%s.indexOf(%s)"},
		{form: "string indexOf", kids: []Type{String}, fmt: `%s.indexOf("-")`},
		{form: "int()", kids: []Type{String}, fmt: "int(%s)"},
		{form: "dyn", kids: []Type{Int}, fmt: "dyn(%s)"},
	},
	String: {
		{form: "string literal", fmt: `"gpu-"`},
		{form: "string literal", fmt: `"a"`},
		{form: "string literal", fmt: `""`},
		{form: "string literal", fmt: `"team"`},
		{form: "field", fmt: "object.metadata.name"},
		{form: "field", fmt: "object.metadata.namespace"},
		{form: "node name", fmt: "object.spec.nodeName"},
		{form: "node name", fmt: "object.spec.nodeName"},
		{form: "node name", fmt: "variables.anyObject.spec.nodeName"},
		{form: "guarded field", fmt: `(has(object.spec.priorityClassName) ? object.spec.priorityClassName : "none")`},
		{form: "guarded field", kids: []Type{Container}, fmt: `(has(%s.image) ? %[1]s.image : "none")`},
		{form: "field", fmt: "object.spec.priorityClassName"},
		{form: "anyObject", fmt: "variables.anyObject.metadata.name"},
		{form: "namespaceObject", fmt: "namespaceObject.metadata.name"},
		{form: "request", fmt: "request.operation"},
		{form: "param", fmt: "variables.params.prefix"},
		{form: "param", fmt: "variables.params.key"},
		{form: "field", kids: []Type{Container}, fmt: "%s.name"},
		{form: "field", kids: []Type{Container}, fmt: "%s.image"},
		{form: "map index", kids: []Type{StringMap}, fmt: `%s["team"]`},
		{form: "map select", kids: []Type{StringMap}, fmt: "%s.team"},
		{form: "computed key", kids: []Type{StringMap, String}, fmt: "%s[%s]"},
		{form: "optional index", kids: []Type{StringMap}, fmt: `%s[?"team"].orValue("none")`},
		{form: "optional select", fmt: `object.spec.?priorityClassName.orValue("")`},
		{form: "concatenation", kids: []Type{String, String}, fmt: "%s + %s"},
		{form: "string()", kids: []Type{Int}, fmt: "string(%s)"},
		{form: "string()", kids: []Type{Bool}, fmt: "string(%s)"},
		{form: "conditional", kids: []Type{Bool, String, String}, fmt: "(%s ? %s : %s)"},
		{form: "list index", kids: []Type{StringList}, fmt: "%s[0]"},
		{form: "join", kids: []Type{StringList}, fmt: `%s.join(", ")`},
		{form: "lowerAscii", kids: []Type{String}, fmt: "%s.lowerAscii()"},
		{form: "split", kids: []Type{String}, fmt: `%s.split("-")[0]`},
		{form: "dyn", kids: []Type{String}, fmt: "dyn(%s)"},
	},
	StringList: {
		{form: "list literal", fmt: "[]"},
		{form: "list literal", kids: []Type{String, String}, fmt: "[%s, %s]"},
		{form: "param", fmt: "variables.params.names"},
		{form: "map", kids: []Type{ContainerList, String}, fmt: "%s.map($1, %s)", bind: []Type{Container}, bindFrom: 1},
		{form: "map with filter", kids: []Type{ContainerList, Bool, String}, fmt: "%s.map($1, %s, %s)", bind: []Type{Container}, bindFrom: 1},
		{form: "filter", kids: []Type{StringList, Bool}, fmt: "%s.filter($1, %s)", bind: []Type{String}, bindFrom: 1},
		// A map's iteration order is Go's, random on both sides: a list
		// made from one is sorted before its order can show.
		{form: "map over map keys", kids: []Type{StringMap, String}, fmt: "%s.map($1, %s).sort()", bind: []Type{String}, bindFrom: 1},
		{form: "transformList", kids: []Type{StringMap, String}, fmt: "%s.transformList($1, $2, %s).sort()", bind: []Type{String, String}, bindFrom: 1},
		{form: "list concatenation", kids: []Type{StringList, StringList}, fmt: "(%s + %s)"},
		{form: "split", kids: []Type{String}, fmt: `%s.split("-")`},
		{form: "conditional", kids: []Type{Bool, StringList, StringList}, fmt: "(%s ? %s : %s)"},
	},
	IntList: {
		{form: "list literal", kids: []Type{Int, Int}, fmt: "[%s, %s]"},
		{form: "map", kids: []Type{PortList}, fmt: "%s.map($1, $1.containerPort)", bind: []Type{Port}, bindFrom: 1},
		{form: "map", kids: []Type{ContainerList, Int}, fmt: "%s.map($1, %s)", bind: []Type{Container}, bindFrom: 1},
	},
	StringMap: {
		{form: "map literal", fmt: "{}"},
		{form: "field", fmt: "object.metadata.labels"},
		{form: "field", fmt: "object.metadata.annotations"},
		{form: "namespaceObject", fmt: "namespaceObject.metadata.labels"},
		{form: "optional select", fmt: "object.metadata.?labels.orValue({})"},
		{form: "map literal", kids: []Type{String}, fmt: `{"team": %s}`},
		{form: "map literal", kids: []Type{String}, fmt: `{"node": %s}`},
		{form: "transformMap", kids: []Type{StringMap, String}, fmt: "%s.transformMap($1, $2, %s)", bind: []Type{String, String}, bindFrom: 1},
	},
	Container: {
		{form: "list index", kids: []Type{ContainerList}, fmt: "%s[0]"},
	},
	ContainerList: {
		{form: "field", fmt: "object.spec.containers"},
		{form: "field", fmt: "object.spec.initContainers"},
		{form: "anyObject", fmt: "variables.anyObject.spec.containers"},
		{form: "optional select", fmt: "object.spec.?initContainers.orValue([])"},
		{form: "filter", kids: []Type{ContainerList, Bool}, fmt: "%s.filter($1, %s)", bind: []Type{Container}, bindFrom: 1},
		{form: "list concatenation", kids: []Type{ContainerList, ContainerList}, fmt: "(%s + %s)"},
	},
	Port: {
		{form: "list index", kids: []Type{PortList}, fmt: "%s[0]"},
	},
	PortList: {
		{form: "field", kids: []Type{Container}, fmt: "%s.ports"},
		{form: "optional select", kids: []Type{Container}, fmt: "%s.?ports.orValue([])"},
	},
}

// placementRules are validations that the candidate's name decides, in
// part: a node name tested, or a name built from it.
var placementRules = []rule{
	{form: "node placement", kids: []Type{String, Bool}, fmt: "!object.spec.nodeName.startsWith(%s) || %s"},
	{form: "node placement", kids: []Type{StringList}, fmt: "!(object.spec.nodeName in %s)"},
	{form: "node placement", kids: []Type{StringMap, Bool}, fmt: `%s.all($1, $2, !object.spec.nodeName.startsWith($2) || %s)`, bind: []Type{String, String}, bindFrom: 1},
	{form: "node placement", kids: []Type{String}, fmt: `object.spec.nodeName.split("-")[0] != %s`},
	{form: "node placement", kids: []Type{ContainerList}, fmt: `%s.all($1, !has($1.image) || !$1.image.startsWith(object.spec.nodeName.split("-")[0]))`, bind: []Type{Container}, bindFrom: 1},
}

// Template is one generated CEL ConstraintTemplate and its Constraint.
type Template struct {
	Kind            string
	Variables       []Variable
	MatchConditions []*Expr
	Validations     []Validation
	// FailurePolicy is "" (the default), "Fail" or "Ignore".
	FailurePolicy string
	Params        map[string]any
}

// Variable is a template variable.
type Variable struct {
	Name string
	Expr *Expr
}

// Validation is one validation: its expression, and a message, a message
// expression, both or neither.
type Validation struct {
	Expr              *Expr
	Message           string
	MessageExpression *Expr
}

// Template is a random template named after i.
func (g *CEL) Template(i int) *Template {
	g.vars, g.scope, g.fresh = map[Type][]string{}, nil, 0
	t := &Template{Kind: fmt.Sprintf("K8sGen%d", i)}
	for v := range g.r.IntN(3) {
		vt := Type(g.r.IntN(int(numTypes)))
		if vt == Container || vt == Port {
			vt = ContainerList
		}
		name := fmt.Sprintf("v%d", v)
		t.Variables = append(t.Variables, Variable{Name: name, Expr: g.Expr(vt, 2+g.r.IntN(2))})
		g.vars[vt] = append(g.vars[vt], name)
	}
	if g.r.IntN(5) == 0 {
		t.MatchConditions = append(t.MatchConditions, g.Expr(Bool, 2))
	}
	for range 1 + g.r.IntN(2) {
		v := Validation{Expr: g.Expr(Bool, 2+g.r.IntN(3))}
		if g.r.IntN(3) == 0 {
			// A placement rule: what the candidate's name decides.
			v.Expr = g.build(pick(g.r, placementRules), Bool, 2+g.r.IntN(2))
		}
		switch g.r.IntN(4) {
		case 1:
			v.Message = "denied by " + t.Kind
		case 2:
			v.MessageExpression = g.message()
		case 3:
			v.Message = "fallback"
			v.MessageExpression = g.message()
		}
		t.Validations = append(t.Validations, v)
	}
	t.FailurePolicy = pick(g.r, []string{"", "", "Fail", "Ignore"})
	t.Params = genParams(g.r)
	return t
}

// message is a message expression: usually a sentence that prints what
// the template reads.
func (g *CEL) message() *Expr {
	if g.r.IntN(4) == 0 {
		return g.Expr(String, 2)
	}
	e := &Expr{Form: "message", Type: String, Fmt: `"pod " + %s + " on " + %s + ": " + %s`}
	e.Kids = []*Expr{
		{Form: "field", Type: String, Text: "object.metadata.name"},
		g.Expr(String, 1),
		g.Expr(String, 2),
	}
	return e
}

// Forms counts the expression forms of t.
func (t *Template) Forms(count map[string]int) {
	for _, v := range t.Variables {
		v.Expr.Forms(count)
	}
	for _, m := range t.MatchConditions {
		m.Forms(count)
	}
	for _, v := range t.Validations {
		v.Expr.Forms(count)
		if v.MessageExpression != nil {
			v.MessageExpression.Forms(count)
		}
	}
}

// TemplateKind is t's constraint kind.
func (t *Template) TemplateKind() string { return t.Kind }

// SimplerPolicies is Simpler as Policies.
func (t *Template) SimplerPolicies() []Policy {
	var out []Policy
	for _, s := range t.Simpler() {
		out = append(out, s)
	}
	return out
}

// WithOnInput is false: CEL has no with.
func (t *Template) WithOnInput() bool { return false }

// IteratesMap reports whether t has a comprehension over a map: its
// order is Go's map order, random on both sides.
func (t *Template) IteratesMap() bool {
	forms := map[string]int{}
	t.Forms(forms)
	for f := range forms {
		if mapIterating[f] {
			return true
		}
	}
	return false
}

// mapIterating are the forms that iterate a map.
var mapIterating = map[string]bool{
	"all over map keys": true, "two-variable all over a map": true, "two-variable exists over a map": true,
	"map over map keys": true, "transformList": true, "transformMap": true,
}

// Size is how many expression nodes t has.
func (t *Template) Size() int {
	n := 0
	for _, e := range t.exprs() {
		n += (*e).Size()
	}
	return n
}

// exprs are pointers to t's expressions, for the shrinker to replace.
func (t *Template) exprs() []**Expr {
	var out []**Expr
	for i := range t.Variables {
		out = append(out, &t.Variables[i].Expr)
	}
	for i := range t.MatchConditions {
		out = append(out, &t.MatchConditions[i])
	}
	for i := range t.Validations {
		out = append(out, &t.Validations[i].Expr)
		if t.Validations[i].MessageExpression != nil {
			out = append(out, &t.Validations[i].MessageExpression)
		}
	}
	return out
}

// clone is a copy of t whose expression slots can be replaced.
func (t *Template) clone() *Template {
	c := *t
	c.Variables = append([]Variable(nil), t.Variables...)
	c.MatchConditions = append([]*Expr(nil), t.MatchConditions...)
	c.Validations = append([]Validation(nil), t.Validations...)
	return &c
}

// Simpler are the templates one step simpler than t: one validation,
// match condition or message dropped, or one expression one step simpler.
func (t *Template) Simpler() []*Template {
	var out []*Template
	if len(t.Validations) > 1 {
		for i := range t.Validations {
			c := t.clone()
			c.Validations = append(c.Validations[:i:i], c.Validations[i+1:]...)
			out = append(out, c)
		}
	}
	for i := range t.MatchConditions {
		c := t.clone()
		c.MatchConditions = append(c.MatchConditions[:i:i], c.MatchConditions[i+1:]...)
		out = append(out, c)
	}
	for i, v := range t.Validations {
		if v.MessageExpression != nil || v.Message != "" {
			c := t.clone()
			c.Validations[i].MessageExpression, c.Validations[i].Message = nil, ""
			out = append(out, c)
		}
	}
	return append(out, exprSteps(t, (*Template).clone, (*Template).exprs)...)
}

// Objects are t's ConstraintTemplate and Constraint as unstructured
// objects.
func (t *Template) Objects() (template, constraint map[string]any) {
	source := map[string]any{}
	var vars, matches, validations []any
	for _, v := range t.Variables {
		vars = append(vars, map[string]any{"name": v.Name, "expression": v.Expr.String()})
	}
	for i, m := range t.MatchConditions {
		matches = append(matches, map[string]any{"name": fmt.Sprintf("m%d", i), "expression": m.String()})
	}
	for _, v := range t.Validations {
		val := map[string]any{"expression": v.Expr.String()}
		if v.Message != "" {
			val["message"] = v.Message
		}
		if v.MessageExpression != nil {
			val["messageExpression"] = v.MessageExpression.String()
		}
		validations = append(validations, val)
	}
	if vars != nil {
		source["variables"] = vars
	}
	if matches != nil {
		source["matchConditions"] = matches
	}
	source["validations"] = validations
	if t.FailurePolicy != "" {
		source["failurePolicy"] = t.FailurePolicy
	}
	template = templateObject(t.Kind, map[string]any{
		"code": []any{map[string]any{"engine": "K8sNativeValidation", "source": source}},
	})
	constraint = constraintOf(t.Kind, t.Params)
	return template, constraint
}
