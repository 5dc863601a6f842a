package analysis

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// compileTemplate compiles rego (Rego v1) as the module of template K.
func compileTemplate(t *testing.T, rego string) (*ast.Compiler, []*ast.Rule) {
	t.Helper()
	src := "package templates.K.template\n" + rego
	m, err := ast.ParseModuleWithOpts("t.rego", src, ast.ParserOptions{RegoVersion: ast.RegoV1})
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	c := ast.NewCompiler()
	c.Compile(map[string]*ast.Module{"t.rego": m})
	if c.Failed() {
		t.Fatalf("compile: %v", c.Errors)
	}
	return c, c.Modules["t.rego"].Rules
}

// analyze compiles rego as template K and analyses it.
func analyze(t *testing.T, rego string, params string) *Result {
	t.Helper()
	c, rules := compileTemplate(t, rego)
	var pv ast.Value
	if params != "" {
		pv = ast.MustParseTerm(params).Value
	}
	root := ast.MustParseRef("data.templates.K")
	return Analyze(c, rules, root, pv)
}

const nodeRef = `node := data.inventory.cluster.v1.Node[input.review.object.spec.nodeName]`

// nodeRule is a violation rule that binds the candidate node, then body.
func nodeRule(body string) string {
	return "violation contains {\"msg\": msg} if {\n" + nodeRef + "\n" + body + "\n}"
}

func TestAnalyze(t *testing.T) {
	cases := []struct {
		name   string
		rego   string
		params string
		// reads is Describe(): key paths, then printed paths.
		reads []string
		class Class
	}{
		{
			name:  "pod name printed, node label read",
			rego:  "violation contains {\"msg\": msg} if {\n" + nodeRef + "\nnode.metadata.labels.tenant != \"a\"\nmsg := sprintf(\"pod %v may not run here\", [input.review.object.metadata.name])\n}",
			reads: []string{`node.metadata.labels.tenant`, `input.review.object.metadata.name (message only)`},
			class: PerPodNodeClass,
		},
		{
			name:  "node name printed through an alias and in details",
			rego:  "violation contains {\"msg\": msg, \"details\": {\"node\": node.metadata.name}} if {\n" + nodeRef + "\nnode.metadata.labels.spot\nn := node.metadata\nmsg := sprintf(\"node %s is spot\", [n.name])\n}",
			reads: []string{`node.metadata.labels.spot (defined)`, `node.metadata.name (message only)`},
			class: PerPodNodeClass,
		},
		{
			name:  "spec.nodeName printed",
			rego:  "violation contains {\"msg\": msg} if {\n" + nodeRef + "\nnode.metadata.labels.x == \"y\"\nmsg := sprintf(\"%v on %v\", [input.review.object.metadata.name, input.review.object.spec.nodeName])\n}",
			reads: []string{`node.metadata.labels.x`, `input.review.object.metadata.name (message only)`, `input.review.object.spec.nodeName (message only)`},
			class: PerPodNodeClass,
		},
		{
			name:  "pod name in a condition",
			rego:  "violation contains {\"msg\": msg} if {\nstartswith(input.review.object.metadata.name, \"web\")\nmsg := sprintf(\"%v\", [input.review.object.metadata.name])\n}",
			reads: []string{`input.review.object.metadata.name`},
			class: PerPodEach,
		},
		{
			name:  "message used in a condition",
			rego:  "violation contains {\"msg\": msg} if {\nmsg := sprintf(\"%v\", [input.review.object.metadata.name])\ncount(msg) > 3\n}",
			reads: []string{`input.review.object.metadata.name`},
			class: PerPodEach,
		},
		{
			name:  "width verb",
			rego:  "violation contains {\"msg\": msg} if {\nmsg := sprintf(\"%10v\", [input.review.object.metadata.name])\n}",
			reads: []string{`input.review.object.metadata.name`},
			class: PerPodEach,
		},
		{
			name:  "%d verb",
			rego:  "violation contains {\"msg\": msg} if {\nmsg := sprintf(\"%d\", [input.review.object.metadata.name])\n}",
			reads: []string{`input.review.object.metadata.name`},
			class: PerPodEach,
		},
		{
			name:  "argument index",
			rego:  "violation contains {\"msg\": msg} if {\nmsg := sprintf(\"%[1]v\", [input.review.object.metadata.name])\n}",
			reads: []string{`input.review.object.metadata.name`},
			class: PerPodEach,
		},
		{
			name:  "%q is allowed, marked",
			rego:  "violation contains {\"msg\": msg} if {\nmsg := sprintf(\"%q\", [input.review.object.metadata.name])\n}",
			reads: []string{`input.review.object.metadata.name (message only)`},
			class: PerPodClass,
		},
		{
			name:   "format from the parameters",
			rego:   "violation contains {\"msg\": msg} if {\nmsg := sprintf(input.parameters.format, [input.review.object.metadata.name])\n}",
			params: `{"format": "pod %v"}`,
			reads:  []string{`input.review.object.metadata.name (message only)`},
			class:  PerPodClass,
		},
		{
			name:  "format computed from constants",
			rego:  "violation contains {\"msg\": msg} if {\nf := concat(\"\", [\"%\", \"v\"])\nmsg := sprintf(f, [input.review.object.metadata.name])\n}",
			reads: []string{`input.review.object.metadata.name (message only)`},
			class: PerPodClass,
		},
		{
			name:  "format not constant",
			rego:  "violation contains {\"msg\": msg} if {\nf := concat(\"\", [\"%\", input.review.object.metadata.annotations.verb])\nmsg := sprintf(f, [input.review.object.metadata.name])\n}",
			reads: []string{`input.review.object.metadata.annotations.verb`, `input.review.object.metadata.name`},
			class: PerPodEach,
		},
		{
			name:  "single-definition helper builds the message",
			rego:  "violation contains {\"msg\": msg} if {\nmsg := pod_msg(input.review.object)\n}\npod_msg(o) := m if { m := sprintf(\"pod %v\", [o.metadata.name]) }",
			reads: []string{`input.review.object.metadata.name (message only)`},
			class: PerPodClass,
		},
		{
			name:  "multi-definition helper",
			rego:  "violation contains {\"msg\": msg} if {\nmsg := pod_msg(input.review.object)\n}\npod_msg(o) := m if { o.spec.a; m := sprintf(\"pod %v\", [o.metadata.name]) }\npod_msg(o) := m if { not o.spec.a; m := sprintf(\"pod %v!\", [o.metadata.name]) }",
			reads: []string{`input.review.object.metadata.name (message only)`, `input.review.object.spec.a`},
			class: PerPodClass,
		},
		{
			name: "multi-definition helper in a template that reads the node",
			rego: "violation contains {\"msg\": msg} if {\n" + nodeRef + "\nnode.spec.unschedulable\nmsg := pod_msg(input.review.object)\n}\n" +
				"pod_msg(o) := m if { o.spec.a; m := sprintf(\"pod %v\", [o.metadata.name]) }\npod_msg(o) := m if { not o.spec.a; m := sprintf(\"pod %v!\", [o.metadata.name]) }",
			reads: []string{`input.review.object.metadata.name`, `input.review.object.spec.a`, `node.spec.unschedulable (defined)`},
			class: PerPodEachNodeClass,
		},
		{
			name:  "multi-definition helper whose value is compared",
			rego:  "violation contains {\"msg\": \"x\"} if {\npod_msg(input.review.object) == \"pod a\"\n}\npod_msg(o) := m if { o.spec.a; m := sprintf(\"pod %v\", [o.metadata.name]) }\npod_msg(o) := m if { not o.spec.a; m := sprintf(\"pod %v!\", [o.metadata.name]) }",
			reads: []string{`input.review.object.metadata.name`, `input.review.object.spec.a`},
			class: PerPodEach,
		},
		{
			name:  "upper of the name",
			rego:  "violation contains {\"msg\": msg} if {\nmsg := upper(input.review.object.metadata.name)\n}",
			reads: []string{`input.review.object.metadata.name`},
			class: PerPodEach,
		},
		{
			name:  "name placed as msg",
			rego:  "violation contains {\"msg\": input.review.object.metadata.name} if {\ninput.review.object.spec.hostNetwork\n}",
			reads: []string{`input.review.object.spec.hostNetwork`, `input.review.object.metadata.name (message only)`},
			class: PerPodClass,
		},
		{
			name:  "name as a details key",
			rego:  "violation contains {\"msg\": \"x\", \"details\": {input.review.object.metadata.name: 1}} if { true }",
			reads: []string{`input.review.object.metadata.name`},
			class: PerPodEach,
		},
		{
			name:  "name in a set",
			rego:  "violation contains {\"msg\": msg} if {\ns := {input.review.object.metadata.name}\ncount(s) == 1\nmsg := sprintf(\"%v\", [input.review.object.metadata.name])\n}",
			reads: []string{`input.review.object.metadata.name`},
			class: PerPodEach,
		},
		{
			name:  "pod name compared with node name",
			rego:  "violation contains {\"msg\": msg} if {\n" + nodeRef + "\ninput.review.object.metadata.name == node.metadata.name\nmsg := sprintf(\"%v %v\", [input.review.object.metadata.name, node.metadata.name])\n}",
			reads: []string{`input.review.object.metadata.name`, `node.metadata.name`},
			class: PerPodNode,
		},
		{
			name:  "spec printed whole holds the node name",
			rego:  "violation contains {\"msg\": msg} if {\nmsg := sprintf(\"%v\", [input.review.object.spec])\n}",
			reads: []string{`input.review.object.spec`},
			class: PerPodNode,
		},
		{
			name:  "literal argument bound: has_field(spec, \"securityContext\")",
			rego:  "violation contains {\"msg\": \"x\"} if {\nspec := input.review.object.spec\nnot has_field(spec, \"securityContext\")\n}\nhas_field(o, f) if { o[f] }",
			reads: []string{"input.review.object.spec.(has_field(_, \"securityContext\") on .securityContext)"},
			class: PerPodClass,
		},
		{
			name:   "wildcard parameter reads nothing",
			rego:   "violation contains {\"msg\": \"x\"} if {\nallowed(input.review.object.spec)\n}\nallowed(_) if { input.parameters.any }",
			params: `{"any": true}`,
			reads:  nil,
			class:  PerPodClass,
		},
		{
			name:  "node name read in a condition",
			rego:  "violation contains {\"msg\": \"x\"} if {\nstartswith(input.review.object.spec.nodeName, \"gpu-\")\n}",
			reads: []string{`input.review.object.spec.nodeName`},
			class: PerPodNode,
		},
		{
			name:  "other inventory read keeps the printed node name",
			rego:  "violation contains {\"msg\": msg} if {\n" + nodeRef + "\ncount(data.inventory.cluster.v1.Node) > 1\nmsg := sprintf(\"%v\", [node.metadata.name])\n}",
			reads: []string{`node.metadata.name`, `data.inventory (a change of the kinds it reads)`},
			class: PerPodClassNode,
		},
		{
			name:  "alias rule printed (replicalimits' object_name)",
			rego:  "object_name := input.review.object.metadata.name\nviolation contains {\"msg\": msg} if {\ninput.review.object.spec.replicas > 3\nmsg := sprintf(\"%v\", [object_name])\n}",
			reads: []string{`input.review.object.spec.replicas`, `input.review.object.metadata.name (message only)`},
			class: PerPodClass,
		},
		{
			name:   "object.get on the whole input's parameters",
			rego:   "violation contains {\"msg\": \"x\"} if {\nobject.get(input, [\"parameters\", \"strict\"], false)\ninput.review.object.spec.hostPID\n}",
			params: `{"strict": true}`,
			reads:  []string{`input.review.object.spec.hostPID`},
			class:  PerPodClass,
		},
		// A printed value as part of a lookup key into an input object
		// (AppArmor's container annotations, lookupkey.go): the object is
		// read whole, the value stays a message with an Absent condition.
		{
			name: "lookup key built from a printed value: bound, negated, in a function",
			rego: `violation contains {"msg": msg} if {
c := input.review.object.spec.containers[_]
not allowed(input.review.object, c)
msg := sprintf("container %v", [c.name])
}
allowed(pod, c) if profile(pod, c) == "ok"
profile(pod, c) := out if {
out := pod.metadata.annotations[sprintf("apparmor/%v", [c.name])]
}
profile(pod, c) := "default" if {
not pod.metadata.annotations[sprintf("apparmor/%v", [c.name])]
}`,
			reads: []string{`input.review.object.metadata.annotations`, `input.review.object.spec.containers[_].(count)`, `input.review.object.spec.containers[_].name (message only, unless a key of input.review.object.metadata.annotations holds it)`},
			class: PerPodClass,
		},
		{
			name:  "lookup key built from a printed value, also read",
			rego:  "violation contains {\"msg\": msg} if {\nk := sprintf(\"a/%v\", [input.review.object.metadata.name])\ninput.review.object.metadata.annotations[k]\nstartswith(input.review.object.metadata.name, \"x\")\nmsg := sprintf(\"%v\", [input.review.object.metadata.name])\n}",
			reads: []string{`input.review.object.metadata.annotations.(keys)`, `input.review.object.metadata.name`},
			class: PerPodEach,
		},
		{
			name:  "lookup key into a node object stays read",
			rego:  "violation contains {\"msg\": msg} if {\n" + nodeRef + "\nk := sprintf(\"a/%v\", [input.review.object.metadata.name])\nnode.metadata.labels[k]\nmsg := sprintf(\"%v\", [input.review.object.metadata.name])\n}",
			reads: []string{`node.metadata.labels`, `input.review.object.metadata.name`},
			class: PerPodNode,
		},
		{
			name:  "lookup key into a local object stays read",
			rego:  "violation contains {\"msg\": msg} if {\nobj := {\"a/x\": true}\nk := sprintf(\"a/%v\", [input.review.object.metadata.name])\nobj[k]\nmsg := sprintf(\"%v\", [input.review.object.metadata.name])\n}",
			reads: []string{`input.review.object.metadata.name`},
			class: PerPodEach,
		},
		{
			name:  "lookup key made of a value inside the object stays read",
			rego:  "violation contains {\"msg\": msg} if {\nk := sprintf(\"a/%v\", [input.review.object.metadata.annotations.owner])\ninput.review.object.metadata.annotations[k]\nmsg := \"x\"\n}",
			reads: []string{`input.review.object.metadata.annotations.(keys)`, `input.review.object.metadata.annotations.owner`},
			class: PerPodClass,
		},
		// Seccomp's shape: the key built by concat in a function, passed to
		// another, printed into the value of a definition that requires it.
		{
			name:  "lookup key built by concat, passed on, printed in a head that requires it",
			rego:  seccompShape("has_annotation(key)\nprofile := input.review.object.metadata.annotations[key]", "\"\""),
			reads: []string{`input.review.object.metadata.annotations`, `input.review.object.spec.containers[_].(count)`, `input.review.object.spec.containers[_].name (message only, unless a key of input.review.object.metadata.annotations holds it)`},
			class: PerPodClass,
		},
		{
			name:  "lookup key printed in a head that does not require it stays read",
			rego:  seccompShape("profile := \"x\"", "\"\""),
			reads: []string{`input.review.object.metadata.annotations.(keys)`, `input.review.object.spec.containers[_].(count)`, `input.review.object.spec.containers[_].name`},
			class: PerPodClass,
		},
		{
			name:  "lookup key passed to a function that compares it stays read",
			rego:  seccompShape("check(key)\nprofile := input.review.object.metadata.annotations[key]", "\"\""),
			reads: []string{`input.review.object.metadata.annotations`, `input.review.object.spec.containers[_].(count)`, `input.review.object.spec.containers[_].name`},
			class: PerPodClass,
		},
		{
			name:  "lookup key also passed to a builtin in a body that requires it stays read",
			rego:  seccompShape("count(key) > 3\nhas_annotation(key)\nprofile := input.review.object.metadata.annotations[key]", "\"\""),
			reads: []string{`input.review.object.metadata.annotations`, `input.review.object.spec.containers[_].(count)`, `input.review.object.spec.containers[_].name`},
			class: PerPodClass,
		},
		{
			name:  "concat with a separator that is not a constant stays read",
			rego:  seccompShape("has_annotation(key)\nprofile := input.review.object.metadata.annotations[key]", "input.parameters.sep"),
			reads: []string{`input.parameters.sep`, `input.review.object.metadata.annotations.(keys)`, `input.review.object.metadata.annotations[_]`, `input.review.object.spec.containers[_].(count)`, `input.review.object.spec.containers[_].name`},
			class: PerPodClass,
		},
		{
			name:  "missing value stays defined: printed but unused",
			rego:  "violation contains {\"msg\": \"x\"} if {\n_ := sprintf(\"%v\", [input.review.object.metadata.name])\n}",
			reads: []string{`input.review.object.metadata.name (message only)`},
			class: PerPodClass,
		},
		// Constants of the constraint (consts.go): a lookup by a key
		// computed from the parameters reads that key only (its value,
		// when the key is one of several: fanOut).
		{
			name:   "parameter as a key, negated, printed",
			rego:   nodeRule("not node.metadata.labels[input.parameters.label]\nmsg := sprintf(\"node %v lacks label %v\", [node.metadata.name, input.parameters.label])"),
			params: `{"label": "zone"}`,
			reads:  []string{`node.metadata.labels.zone (defined)`, `node.metadata.name (message only)`},
			class:  PerPodNodeClass,
		},
		{
			name:   "parameter as a key, value compared with a parameter",
			rego:   nodeRule("value := node.metadata.labels[input.parameters.label]\nvalue != input.parameters.value\nmsg := \"x\""),
			params: `{"label": "zone", "value": "a"}`,
			reads:  []string{`node.metadata.labels.zone`},
			class:  PerPodNodeClass,
		},
		{
			name:   "parameter as a key into the review",
			rego:   "violation contains {\"msg\": \"x\"} if {\nnot input.review.object.metadata.labels[input.parameters.key]\n}",
			params: `{"key": "team"}`,
			reads:  []string{`input.review.object.metadata.labels.team`},
			class:  PerPodClass,
		},
		{
			name:   "parameter as object.get's key",
			rego:   nodeRule("object.get(node.metadata.labels, input.parameters.k, \"none\") == \"x\"\nmsg := \"x\""),
			params: `{"k": "zone"}`,
			reads:  []string{`node.metadata.labels.zone`},
			class:  PerPodNodeClass,
		},
		{
			name:   "parameter bound to a variable first",
			rego:   nodeRule("key := input.parameters.label\nnot node.metadata.labels[key]\nmsg := \"x\""),
			params: `{"label": "zone"}`,
			reads:  []string{`node.metadata.labels.zone (defined)`},
			class:  PerPodNodeClass,
		},
		{
			name:   "parameter list iterated",
			rego:   nodeRule("l := input.parameters.labels[_]\nnot node.metadata.labels[l]\nmsg := \"x\""),
			params: `{"labels": ["a", "b"]}`,
			reads:  []string{`node.metadata.labels.a`, `node.metadata.labels.b`},
			class:  PerPodNodeClass,
		},
		{
			name:   "parameter list of objects: a field of each element",
			rego:   nodeRule("l := input.parameters.labels[_]\nnode.metadata.labels[l.key] != l.value\nmsg := \"x\""),
			params: `{"labels": [{"key": "a", "value": "1"}, {"key": "b", "value": "2"}]}`,
			reads:  []string{`node.metadata.labels.a`, `node.metadata.labels.b`},
			class:  PerPodNodeClass,
		},
		{
			name:   "parameter list iterated, keys into the review",
			rego:   "violation contains {\"msg\": \"x\"} if {\nl := input.parameters.labels[_]\nnot input.review.object.metadata.labels[l]\n}",
			params: `{"labels": ["a", "b"]}`,
			reads:  []string{`input.review.object.metadata.labels.a`, `input.review.object.metadata.labels.b`},
			class:  PerPodClass,
		},
		{
			name:   "parameter object: some key, value in it",
			rego:   nodeRule("some k, want in input.parameters.labels\nnode.metadata.labels[k] != want\nmsg := \"x\""),
			params: `{"labels": {"a": "1", "b": "2"}}`,
			reads:  []string{`node.metadata.labels.a`, `node.metadata.labels.b`},
			class:  PerPodNodeClass,
		},
		{
			name:   "every over a parameter list",
			rego:   nodeRule("every l in input.parameters.labels { node.metadata.labels[l] }\nmsg := \"x\""),
			params: `{"labels": ["a", "b"]}`,
			reads:  []string{`node.metadata.labels.a`, `node.metadata.labels.b`},
			class:  PerPodNodeClass,
		},
		{
			name:   "parameter passed to a function as the key",
			rego:   nodeRule("not has_label(node, input.parameters.label)\nmsg := \"x\"") + "\nhas_label(n, k) if { n.metadata.labels[k] }",
			params: `{"label": "zone"}`,
			reads:  []string{`node.metadata.labels.zone (defined)`},
			class:  PerPodNodeClass,
		},
		{
			name:   "parameter list passed to a function",
			rego:   nodeRule("not all_labels(node, input.parameters.labels)\nmsg := \"x\"") + "\nall_labels(n, ls) if { every l in ls { n.metadata.labels[l] } }",
			params: `{"labels": ["a", "b"]}`,
			reads:  []string{`node.metadata.labels.a`, `node.metadata.labels.b`},
			class:  PerPodNodeClass,
		},
		{
			name:   "rule with a default",
			rego:   nodeRule("not node.metadata.labels[label]\nmsg := \"x\"") + "\ndefault label := \"zone\"\nlabel := input.parameters.label",
			params: `{"label": "rack"}`,
			reads:  []string{`node.metadata.labels.rack`, `node.metadata.labels.zone`},
			class:  PerPodNodeClass,
		},
		{
			name:   "rule with a default, the parameter not given",
			rego:   nodeRule("not node.metadata.labels[label]\nmsg := \"x\"") + "\ndefault label := \"zone\"\nlabel := input.parameters.label",
			params: `{}`,
			reads:  []string{`node.metadata.labels.zone (defined)`},
			class:  PerPodNodeClass,
		},
		{
			name:   "iterating an empty parameter list decides nothing",
			rego:   nodeRule("p := input.parameters.pairs[_]\nnode.metadata.labels[p.key] != p.value\nmsg := \"x\""),
			params: `{"pairs": []}`,
			reads:  nil,
			class:  PerPodClass,
		},
		{
			name:   "partial set rule of parameters",
			rego:   nodeRule("l := labels[_]\nnot node.metadata.labels[l]\nmsg := \"x\"") + "\nlabels contains l if { l := input.parameters.labels[_] }",
			params: `{"labels": ["a", "b"]}`,
			reads:  []string{`node.metadata.labels.a`, `node.metadata.labels.b`},
			class:  PerPodNodeClass,
		},
		{
			name:   "comprehension of parameters",
			rego:   nodeRule("required := {l | l := input.parameters.labels[_].key}\nsome l in required\nnot node.metadata.labels[l]\nmsg := \"x\""),
			params: `{"labels": [{"key": "a"}, {"key": "b"}]}`,
			reads:  []string{`node.metadata.labels.a`, `node.metadata.labels.b`},
			class:  PerPodNodeClass,
		},
		{
			name:   "key built by builtins of parameters",
			rego:   nodeRule("k := concat(\"/\", [lower(input.parameters.prefix), \"zone\"])\nnot node.metadata.labels[k]\nmsg := \"x\""),
			params: `{"prefix": "Example.COM"}`,
			reads:  []string{`node.metadata.labels["example.com/zone"] (defined)`},
			class:  PerPodNodeClass,
		},
		{
			name:   "object.get by each key of a parameter list",
			rego:   nodeRule("l := input.parameters.labels[_]\nobject.get(node.metadata.labels, l, \"\") == \"x\"\nmsg := \"x\""),
			params: `{"labels": ["a", "b"]}`,
			reads:  []string{`node.metadata.labels.a`, `node.metadata.labels.b`},
			class:  PerPodNodeClass,
		},
		{
			name:   "parameter that is a number",
			rego:   nodeRule("not node.metadata.labels[input.parameters.label]\nmsg := \"x\""),
			params: `{"label": 3}`,
			reads:  []string{`node.metadata.labels[3] (defined)`},
			class:  PerPodNodeClass,
		},
		// What falls back: the whole object is read.
		{
			name:   "parameter that is an object: read whole",
			rego:   nodeRule("not node.metadata.labels[input.parameters.label]\nmsg := \"x\""),
			params: `{"label": {"a": 1}}`,
			reads:  []string{`node.metadata.labels`},
			class:  PerPodClassNode,
		},
		{
			name:   "missing parameter: read whole",
			rego:   nodeRule("not node.metadata.labels[input.parameters.label]\nmsg := \"x\""),
			params: `{}`,
			reads:  []string{`node.metadata.labels`},
			class:  PerPodClassNode,
		},
		{
			name:   "parameter that is a boolean: read whole",
			rego:   nodeRule("not node.metadata.labels[input.parameters.label]\nmsg := \"x\""),
			params: `{"label": true}`,
			reads:  []string{`node.metadata.labels`},
			class:  PerPodClassNode,
		},
		{
			name:   "parameter list with an object in it: read whole",
			rego:   nodeRule("l := input.parameters.labels[_]\nnot node.metadata.labels[l]\nmsg := \"x\""),
			params: `{"labels": ["a", {"b": 1}]}`,
			reads:  []string{`node.metadata.labels`},
			class:  PerPodClassNode,
		},
		{
			name:   "parameter list longer than the keys read one by one: read whole",
			rego:   nodeRule("l := input.parameters.labels[_]\nnot node.metadata.labels[l]\nmsg := \"x\""),
			params: `{"labels": ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q"]}`,
			reads:  []string{`node.metadata.labels`},
			class:  PerPodClassNode,
		},
		{
			name:  "template alone: the parameter is read",
			rego:  nodeRule("not node.metadata.labels[input.parameters.label]\nmsg := \"x\""),
			reads: []string{`input.parameters.label`, `node.metadata.labels`},
			class: PerPodClassNode,
		},
		{
			name:   "rule of a parameter that also tests the review is no constant",
			rego:   nodeRule("not node.metadata.labels[label]\nmsg := \"x\"") + "\nlabel := input.parameters.label if { input.review.object.metadata.labels.x }",
			params: `{"label": "zone"}`,
			reads:  []string{`input.review.object.metadata.labels.x`, `node.metadata.labels`},
			class:  PerPodClassNode,
		},
		{
			name:   "key from the review, not a parameter",
			rego:   nodeRule("not node.metadata.labels[input.review.object.metadata.labels.want]\nmsg := \"x\""),
			params: `{"label": "zone"}`,
			reads:  []string{`input.review.object.metadata.labels.want`, `node.metadata.labels`},
			class:  PerPodClassNode,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := analyze(t, tc.rego, tc.params)
			got := a.Describe()
			want := tc.reads
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("reads:\n got  %q\n want %q\nwhy: %s", got, want, strings.Join(a.Why, "\n"))
			}
			if c := a.Classify(); c != tc.class {
				t.Errorf("class %q, want %q; why: %s", c, tc.class, strings.Join(a.Why, "\n"))
			}
			several := strings.HasPrefix(tc.name, "multi-definition") && a.PerPod() && len(a.Messages) > 0
			if a.PrintedThroughSeveral != several {
				t.Errorf("PrintedThroughSeveral = %v, want %v", a.PrintedThroughSeveral, several)
			}
		})
	}
}

func TestParseVerbs(t *testing.T) {
	cases := []struct {
		format string
		want   string // per verb: p plain, q quote, x other
		err    bool
	}{
		{"%v and %s", "pp", false},
		{"100%% %v", "p", false},
		{"%q", "q", false},
		{"%5v %-v %.2s %+v %#v %d", "xxxxxx", false},
		{"%[1]v", "", true},
		{"%*v", "", true},
		{"trailing %", "", true},
		{"%!", "x", false},
		{"ü %v 日本", "p", false},
	}
	for _, tc := range cases {
		vs, err := parseVerbs(tc.format)
		if (err != nil) != tc.err {
			t.Errorf("%q: err %v, want error %v", tc.format, err, tc.err)
			continue
		}
		var got strings.Builder
		for _, v := range vs {
			switch {
			case v.plain:
				got.WriteByte('p')
			case v.quote:
				got.WriteByte('q')
			default:
				got.WriteByte('x')
			}
		}
		if got.String() != tc.want {
			t.Errorf("%q: verbs %q, want %q", tc.format, got.String(), tc.want)
		}
	}
}

// TestOtherNodes: which inventory reads can reach Nodes other than the
// candidate (the engine then keeps Nodes whole in its store).
func TestOtherNodes(t *testing.T) {
	cases := []struct {
		name, rego string
		want       bool
	}{
		{"candidate only", "violation contains {\"msg\": \"x\"} if {\n" + nodeRef + "\nnode.metadata.labels.a\n}", false},
		{"every node", "violation contains {\"msg\": \"x\"} if {\ncount(data.inventory.cluster.v1.Node) > 3\n}", true},
		{"nodes by a variable", "violation contains {\"msg\": \"x\"} if {\nsome n\ndata.inventory.cluster.v1.Node[n].metadata.labels.a\n}", true},
		{"cluster kinds by variables", "violation contains {\"msg\": \"x\"} if {\nsome gv, k\ndata.inventory.cluster[gv][k]\n}", true},
		{"namespaced objects", "violation contains {\"msg\": \"x\"} if {\nsome ns\ndata.inventory.namespace[ns][\"v1\"].ConfigMap\n}", false},
		{"ingresses", "violation contains {\"msg\": \"x\"} if {\ndata.inventory.cluster[\"networking.k8s.io/v1\"].IngressClass\n}", false},
		{"with on data", "violation contains {\"msg\": \"x\"} if {\nf with data.inventory as {}\n}\nf if { true }", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := analyze(t, tc.rego, "").OtherNodes; got != tc.want {
				t.Errorf("OtherNodes = %v, want %v", got, tc.want)
			}
		})
	}
}

// seccompShape is the library's seccomp template in small: the key built
// by concat in a function (separator sep), passed to another, printed
// into the value of a definition whose body is required.
func seccompShape(required, sep string) string {
	return fmt.Sprintf(`violation contains {"msg": msg} if {
c := input.review.object.spec.containers[_]
result := get_profile(c)
result.profile != "ok"
msg := sprintf("container %%v: %%v at %%v", [c.name, result.profile, result.location])
}
get_profile(c) := {"profile": profile, "location": location} if {
key := annotation_key(c.name)
%[1]s
location := sprintf("annotation %%v", [key])
}
get_profile(c) := {"profile": "none", "location": "nowhere"} if {
not has_annotation(annotation_key(c.name))
}
annotation_key(name) := k if { k := concat(%[2]s, ["container.seccomp/", name]) }
has_annotation(k) if { input.review.object.metadata.annotations[k] }
check(k) if { startswith(k, "container") }`, required, sep)
}

// TestConstKeyWhy: when a lookup by a key that may be a parameter reads
// the whole of a node object that is unique to each node, Why says what
// the key is.
func TestConstKeyWhy(t *testing.T) {
	lookup := nodeRule("not node.metadata.labels[input.parameters.label]\nmsg := \"x\"")
	cases := []struct{ name, rego, params, want string }{
		{"object", lookup, `{"label": {"a": 1}}`, `its key is a constant that is not a string or a number ({"a": 1})`},
		{"missing", lookup, `{}`, `its key is a constant the analysis does not know`},
		{"template alone", lookup, ``, `its key is input.parameters.label, a constant only once a constraint gives the parameters`},
		{"from the review", nodeRule("not node.metadata.labels[input.review.object.metadata.labels.want]\nmsg := \"x\""), `{}`, `its key comes from input.review.object.metadata.labels.want`},
		{"too many", nodeRule("l := input.parameters.labels[_]\nnot node.metadata.labels[l]\nmsg := \"x\""), `{"labels": ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q"]}`, `its key takes 17 values, more than the 16 read one by one`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := analyze(t, tc.rego, tc.params)
			why := strings.Join(a.Why, "\n")
			if !strings.Contains(why, "node.metadata.labels (unique to each node) is read in") || !strings.Contains(why, tc.want) {
				t.Errorf("why %q, want it to say %q", why, tc.want)
			}
		})
	}
}
