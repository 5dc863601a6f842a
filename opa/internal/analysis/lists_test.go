package analysis

import (
	"slices"
	"strings"
	"testing"
)

const (
	containers = "input.review.object.spec.containers"
	inits      = "input.review.object.spec.initContainers"
	// listSet is the library's set over two lists.
	listSet = "\ninput_containers contains c if { c := input.review.object.spec.containers[_] }\ninput_containers contains c if { c := input.review.object.spec.initContainers[_] }\n"
	// filteredSet is the library's set of the containers a condition keeps
	// (proc-mount, selinux, host-network-ports).
	filteredSet = "\ninput_containers contains c if {\nc := input.review.object.spec.containers[_]\nnot startswith(c.image, \"safe/\")\n}\n" +
		"input_containers contains c if {\nc := input.review.object.spec.initContainers[_]\nc.securityContext.procMount != null\n}\n"
	// listMap is seccomp v2's object of the containers by name.
	// hostPathSet is host-filesystem's set of the host-path volumes.
	hostPathSet = "\nhp contains v if {\nv := input.review.object.spec.volumes[_]\nhas_field(v, \"hostPath\")\n}\nhas_field(object, field) := true if { object[field] }\n"
	listMap     = "\ninput_containers[c.name] := c if { c := input.review.object.spec.containers[_] }\ninput_containers[c.name] := c if { c := input.review.object.spec.initContainers[_] }\n"
)

// TestAnalyzeLists: reads through a list element are keyed element by
// element (the list's length, then each element's value at the path), so
// a value printed from an element can leave the key; whatever uses an
// element or the list otherwise keeps the list whole.
func TestAnalyzeLists(t *testing.T) {
	cases := []struct {
		name, rego, params string
		reads              []string
		distinct           string // DistinctKeys, formatted
	}{
		{
			name:  "one field read, the name printed",
			rego:  "violation contains {\"msg\": msg, \"details\": {\"c\": c.name}} if {\nc := " + containers + "[_]\nc.securityContext.privileged\nmsg := sprintf(\"%v is privileged\", [c.name])\n}",
			reads: []string{containers + "[_].(count)", containers + "[_].securityContext.privileged", containers + "[_].name (message only)"},
		},
		{
			name:  "a helper reads below the element",
			rego:  "violation contains {\"msg\": msg} if {\nc := " + containers + "[_]\nnot exempt(c)\nmsg := sprintf(\"%v\", [c.name])\n}\nexempt(x) if startswith(x.image, \"ok/\")",
			reads: []string{containers + "[_].(count)", containers + "[_].(exempt(_) on .image)", containers + "[_].name (message only)"},
		},
		{
			name:  "the name in a condition is keyed",
			rego:  "violation contains {\"msg\": msg} if {\nc := " + containers + "[_]\nstartswith(c.name, \"debug\")\nmsg := sprintf(\"%v\", [c.name])\n}",
			reads: []string{containers + "[_].(count)", containers + "[_].name"},
		},
		{
			name:  "an element used whole",
			rego:  "violation contains {\"msg\": msg} if {\nc := " + containers + "[_]\nx := json.marshal(c)\ncount(x) > 10\nmsg := sprintf(\"%v\", [c.name])\n}",
			reads: []string{containers + "[_]"},
		},
		{
			name:  "iterated twice: the inner list element by element too",
			rego:  "violation contains {\"msg\": msg} if {\nc := " + containers + "[_]\np := c.ports[_]\np.hostPort > 0\nmsg := sprintf(\"%v\", [c.name])\n}",
			reads: []string{containers + "[_].(count)", containers + "[_].ports[_].(count)", containers + "[_].ports[_].hostPort", containers + "[_].name (message only)"},
		},
		{
			name:  "through the library's set of lists",
			rego:  "violation contains {\"msg\": msg} if {\nc := input_containers[_]\nnot c.resources.limits.memory\nmsg := sprintf(\"<%v> has no limit\", [c.name])\n}" + listSet,
			reads: []string{containers + "[_].(count)", containers + "[_].resources.limits.memory", containers + "[_].name (message only)", inits + "[_].(count)", inits + "[_].resources.limits.memory", inits + "[_].name (message only)"},
		},
		{
			name:     "through a map of the lists by name, the name printed",
			rego:     "violation contains {\"msg\": msg} if {\nc := input_containers[name]\nnot c.securityContext.seccompProfile\nmsg := sprintf(\"%v has no profile\", [name])\n}" + listMap,
			reads:    []string{containers + "[_].(count)", containers + "[_].securityContext.seccompProfile", containers + "[_].name (message only)", inits + "[_].(count)", inits + "[_].securityContext.seccompProfile", inits + "[_].name (message only)"},
			distinct: containers + "[_].name " + inits + "[_].name",
		},
		{
			name:     "through a map of the lists by name, the name in a condition",
			rego:     "violation contains {\"msg\": \"x\"} if {\nc := input_containers[name]\nstartswith(name, \"debug\")\nc.securityContext.privileged\n}" + listMap,
			reads:    []string{containers + "[_].(count)", containers + "[_].securityContext.privileged", containers + "[_].name", inits + "[_].(count)", inits + "[_].securityContext.privileged", inits + "[_].name"},
			distinct: containers + "[_].name " + inits + "[_].name",
		},
		{
			name:  "a map looked up by a bound name: every list whole",
			rego:  "violation contains {\"msg\": \"x\"} if {\nn := input.parameters.name\ninput_containers[n].securityContext.privileged\n}" + listMap,
			reads: []string{"input.parameters.name", containers, inits},
		},
		{
			name:  "the set counted: every list whole",
			rego:  "violation contains {\"msg\": \"too many\"} if {\ncount(input_containers) > 3\n}" + listSet,
			reads: []string{containers, inits},
		},
		{
			name:  "the set's key is its element: a key used is read like the element",
			rego:  "violation contains {\"msg\": msg} if {\nc := input_containers[k]\nk.image == \"x\"\nmsg := sprintf(\"%v\", [c.name])\n}" + listSet,
			reads: []string{containers + "[_].(count)", containers + "[_].image", containers + "[_].name (message only)", inits + "[_].(count)", inits + "[_].image", inits + "[_].name (message only)"},
		},
		{
			name: "a filtered set: each definition's condition is read on its element",
			rego: "violation contains {\"msg\": msg} if {\nc := input_containers[_]\nc.securityContext.privileged\nmsg := sprintf(\"%v\", [c.name])\n}" + filteredSet,
			reads: []string{containers + "[_].(count)", containers + "[_].image", containers + "[_].securityContext.privileged", containers + "[_].name (message only)",
				inits + "[_].(count)", inits + "[_].securityContext.procMount", inits + "[_].securityContext.privileged", inits + "[_].name (message only)"},
		},
		{
			name:  "a filtered set counted: every list whole, and its conditions",
			rego:  "violation contains {\"msg\": \"x\"} if { count(input_containers) > 0 }\ninput_containers contains c if {\nc := " + containers + "[_]\nnot input.review.object.metadata.annotations.skip\n}\n",
			reads: []string{containers, "input.review.object.metadata.annotations.skip"},
		},
		{
			name:  "read on below the set's element: per element, the inner list's elements",
			rego:  "violation contains {\"msg\": msg} if {\np := input_containers[_].ports[_]\np.hostPort > 0\nmsg := \"host port\"\n}" + filteredSet,
			reads: []string{containers + "[_].(count)", containers + "[_].image", containers + "[_].ports[_].(count)", containers + "[_].ports[_].hostPort", inits + "[_].(count)", inits + "[_].securityContext.procMount", inits + "[_].ports[_].(count)", inits + "[_].ports[_].hostPort"},
		},
		{
			name:  "spec iterated: it holds the node's name, so it stays whole",
			rego:  "violation contains {\"msg\": \"x\"} if {\nv := input.review.object.spec[_]\nv == \"bad\"\n}",
			reads: []string{"input.review.object.spec"},
		},
		{
			name:   "a key from a parameter list: each of its values",
			rego:   "violation contains {\"msg\": msg} if {\nc := " + containers + "[_]\nprobe := input.parameters.probes[_]\nnot c[probe]\nmsg := sprintf(\"%v has no %v\", [c.name, probe])\n}",
			params: `{"probes": ["livenessProbe", "readinessProbe"]}`,
			reads:  []string{containers + "[_].(count)", containers + "[_].livenessProbe", containers + "[_].readinessProbe", containers + "[_].name (message only)"},
		},
		{
			name:  "a key from a parameter list not known (the template alone): the element whole",
			rego:  "violation contains {\"msg\": msg} if {\nc := " + containers + "[_]\nprobe := input.parameters.probes[_]\nnot c[probe]\nmsg := sprintf(\"%v has no %v\", [c.name, probe])\n}",
			reads: []string{containers + "[_]", "input.parameters.probes[_]"},
		},
		{
			name:   "an element of a constant object is not the object: its keys are unknown",
			rego:   "violation contains {\"msg\": \"x\"} if {\n" + nodeRef + "\np := input.parameters.obj[_]\nnode.metadata.labels[p.key] == \"y\"\n}",
			params: `{"obj": {"key": "zone", "a": {"key": "rack"}}}`,
			reads:  []string{"node.metadata.labels"},
		},
		{
			name:  "a ground index is a path of its own",
			rego:  "violation contains {\"msg\": msg} if {\n" + containers + "[0].image == \"x\"\nc := " + containers + "[_]\nmsg := sprintf(\"%v\", [c.name])\n}",
			reads: []string{containers + "[0].image", containers + "[_].(count)", containers + "[_].name (message only)"},
		},
		{
			name:  "a constant compared with the set's elements, in a function: element by element (automount)",
			rego:  "violation contains {\"msg\": msg} if {\nmounts(input.review.object.spec)\nmsg := sprintf(\"%v\", [input.review.object.metadata.name])\n}\nmounts(spec) if {\nnot spec.automount\n\"/var/run/token\" == input_containers[_].volumeMounts[_].mountPath\n}" + listSet,
			reads: []string{"input.review.object.spec.automount", containers + "[_].(count)", containers + "[_].volumeMounts[_].(count)", containers + "[_].volumeMounts[_].mountPath", inits + "[_].(count)", inits + "[_].volumeMounts[_].(count)", inits + "[_].volumeMounts[_].mountPath", "input.review.object.metadata.name (message only)"},
		},
		{
			name:  "the set compared with another reference: element by element, and the reference read",
			rego:  "violation contains {\"msg\": \"x\"} if {\ninput.parameters.path == input_containers[_].volumeMounts[_].mountPath\n}" + listSet,
			reads: []string{"input.parameters.path", containers + "[_].(count)", containers + "[_].volumeMounts[_].(count)", containers + "[_].volumeMounts[_].mountPath", inits + "[_].(count)", inits + "[_].volumeMounts[_].(count)", inits + "[_].volumeMounts[_].mountPath"},
		},
		{
			name:  "the set unified with a composite holding a variable: every list whole",
			rego:  "violation contains {\"msg\": \"x\"} if {\n{\"mountPath\": p} = input_containers[_].volumeMounts[_]\nstartswith(p, \"/host\")\n}" + listSet,
			reads: []string{containers, inits},
		},
		{
			name:  "the keys of each element whose values hold (volume types)",
			rego:  "violation contains {\"msg\": msg} if {\nfields := {x | input.review.object.spec.volumes[_][x]; x != \"name\"}\nf := fields[_]\nnot f == \"emptyDir\"\nmsg := sprintf(\"%v uses %v\", [input.review.object.metadata.name, f])\n}",
			reads: []string{"input.review.object.spec.volumes[_].(count)", "input.review.object.spec.volumes[_].(keys)", "input.review.object.metadata.name (message only)"},
		},
		{
			name:  "the keys of an element bound to a variable",
			rego:  "violation contains {\"msg\": \"x\"} if {\nv := input.review.object.spec.volumes[_]\nv[k]\nnot k in {\"name\", \"emptyDir\"}\n}",
			reads: []string{"input.review.object.spec.volumes[_].(count)", "input.review.object.spec.volumes[_].(keys)"},
		},
		{
			name:  "the values of each element, not only their truth: the element whole",
			rego:  "violation contains {\"msg\": \"x\"} if {\nvs := {v | v := input.review.object.spec.volumes[_][x]; x != \"name\"}\ncount(vs) > 2\n}",
			reads: []string{"input.review.object.spec.volumes[_].(count)", "input.review.object.spec.volumes[_][_]"},
		},
		{
			name:  "a comprehension's binding makes an element, read after its test for the elements that pass it (privileged reasons)",
			rego:  "violation contains {\"msg\": \"x\", \"details\": {\"reasons\": r}} if {\nr := {sprintf(\"container %v\", [c.name]) | c := " + containers + "[_]; c.securityContext.privileged}\ncount(r) > 0\n}",
			reads: []string{containers + "[_].(count)", containers + "[_ where .securityContext.privileged].name", containers + "[_].securityContext.privileged"},
		},
		{
			name:  "a comprehension's test through a function of the element: its field tests and == true (the realistic privileged pool)",
			rego:  "violation contains {\"msg\": msg} if {\nr := {sprintf(\"container %v\", [c.name]) | c := " + containers + "[_]; privileged(c)}\ncount(r) > 0\nmsg := concat(\", \", sort(r))\n}\nprivileged(c) if {\nhas_field(c, \"securityContext\")\nc.securityContext.privileged == true\n}\nhas_field(object, field) := true if { object[field] }",
			reads: []string{containers + "[_].(count)", containers + "[_].(privileged(_) on .securityContext)", containers + "[_ where .securityContext, .securityContext.privileged].name"},
		},
		{
			name:  "only the tests it can tell make the filter: startswith is left out, = true kept",
			rego:  "violation contains {\"msg\": \"x\", \"details\": {\"r\": r}} if {\nr := {c.name | c := " + containers + "[_]; startswith(c.image, \"x/\"); c.securityContext.privileged = true}\ncount(r) > 0\n}",
			reads: []string{containers + "[_].(count)", containers + "[_].image", containers + "[_].securityContext.privileged", containers + "[_ where .securityContext.privileged].name"},
		},
		{
			name:  "what is read before the test is read for every element",
			rego:  "violation contains {\"msg\": \"x\", \"details\": {\"r\": r}} if {\nr := {n | c := " + containers + "[_]; n := c.name; c.securityContext.privileged}\ncount(r) > 0\n}",
			reads: []string{containers + "[_].(count)", containers + "[_].name", containers + "[_].securityContext.privileged"},
		},
		{
			name:  "a negated test, == false, a function of two definitions or with a default: no filter",
			rego:  "violation contains {\"msg\": \"x\", \"details\": {\"r\": [a, b, d, f]}} if {\na := {c.name | c := " + containers + "[_]; not c.securityContext.privileged}\nb := {c.image | c := " + containers + "[_]; c.securityContext.privileged == false}\nd := {c.ports | c := " + containers + "[_]; two(c)}\nf := {c.args | c := " + containers + "[_]; dflt(c)}\n}\ntwo(c) if c.securityContext.privileged\ntwo(c) if c.securityContext.runAsRoot\ndefault dflt(_) := false\ndflt(c) if c.securityContext.privileged",
			reads: []string{containers + "[_].(count)", containers + "[_].name", containers + "[_].image", containers + "[_].ports", containers + "[_].args", containers + "[_].securityContext.privileged", containers + "[_].(two(_) on .securityContext.privileged, .securityContext.runAsRoot)"},
		},
		{
			name:  "a comprehension's variable bound outside it is compared: the list's elements whole",
			rego:  "violation contains {\"msg\": \"x\"} if {\nc := " + containers + "[0]\nsame := {1 | c = " + inits + "[_]}\ncount(same) > 0\n}",
			reads: []string{containers + "[0]", inits + "[_]"},
		},
		{
			name:  "a set filtered by field tests: what its elements print or pass on is read for its members only (flexvolume)",
			rego:  "violation contains {\"msg\": msg} if {\nv := flex[_]\nnot v.flexVolume.driver == \"ok\"\nmsg := sprintf(\"%v in %v\", [v, input.review.object.metadata.name])\n}\nflex contains v if {\nv := input.review.object.spec.volumes[_]\nhas_field(v, \"flexVolume\")\n}\nhas_field(object, field) := true if { object[field] }",
			reads: []string{"input.review.object.spec.volumes[_ where .flexVolume]", "input.review.object.spec.volumes[_].(count)", "input.review.object.spec.volumes[_].(has_field(_, \"flexVolume\") on .flexVolume)", "input.review.object.metadata.name (message only)"},
		},
		{
			name:  "a set filtered by a lone field test: the test reads the field, which holds what is read below it",
			rego:  "violation contains {\"msg\": \"x\"} if {\nv := hp[_]\nstartswith(v.hostPath.path, \"/etc\")\n}\nhp contains v if {\nv := input.review.object.spec.volumes[_]\nv.hostPath\n}",
			reads: []string{"input.review.object.spec.volumes[_].(count)", "input.review.object.spec.volumes[_].hostPath"},
		},
		{
			name:  "a set filtered by anything but field tests keeps every element (has_key tests definedness, not truth)",
			rego:  "violation contains {\"msg\": msg} if {\nv := flex[_]\nmsg := sprintf(\"%v\", [v])\n}\nflex contains v if {\nv := input.review.object.spec.volumes[_]\nhas_key(v, \"flexVolume\")\n}\nhas_key(x, k) if { _ = x[k] }",
			reads: []string{"input.review.object.spec.volumes[_]"},
		},
		{
			name: "after a filtered member's binding, reads count only if the list has a member (host-filesystem)",
			rego: "violation contains {\"msg\": msg} if {\nv := hp[_]\nwriteable(v.name)\nmsg := sprintf(\"%v\", [input.review.object.metadata.name])\n}\nwriteable(n) if {\nm := " + containers + "[_].volumeMounts[_]\nm.name == n\nnot m.readOnly\n}" + hostPathSet,
			reads: []string{"input.review.object.spec.volumes[_].(count)", "input.review.object.spec.volumes[_].(has_field(_, \"hostPath\") on .hostPath)",
				"input.review.object.spec.volumes[_ where .hostPath].name (if input.review.object.spec.volumes[_ where .hostPath] has one)",
				containers + "[_].(count) (if input.review.object.spec.volumes[_ where .hostPath] has one)",
				containers + "[_].volumeMounts[_].(count) (if input.review.object.spec.volumes[_ where .hostPath] has one)",
				containers + "[_].volumeMounts[_].name (if input.review.object.spec.volumes[_ where .hostPath] has one)",
				containers + "[_].volumeMounts[_].readOnly (if input.review.object.spec.volumes[_ where .hostPath] has one)",
				"input.review.object.metadata.name (message only)"},
		},
		{
			name: "what is read before the binding, or also elsewhere, is read whatever the pod",
			rego: "violation contains {\"msg\": \"x\"} if {\nnot input.review.object.spec.hostNetwork\nv := hp[_]\nwriteable(v.name)\n}\nviolation contains {\"msg\": \"y\"} if {\nwriteable(\"tmp\")\n}\nwriteable(n) if {\nm := " + containers + "[_].volumeMounts[_]\nm.name == n\nnot m.readOnly\n}" + hostPathSet,
			reads: []string{"input.review.object.spec.hostNetwork", "input.review.object.spec.volumes[_].(count)", "input.review.object.spec.volumes[_].(has_field(_, \"hostPath\") on .hostPath)",
				"input.review.object.spec.volumes[_ where .hostPath].name (if input.review.object.spec.volumes[_ where .hostPath] has one)",
				containers + "[_].(count)", containers + "[_].volumeMounts[_].(count)", containers + "[_].volumeMounts[_].name", containers + "[_].volumeMounts[_].readOnly"},
		},
		{
			name: "a function no call follows is read apart, whatever the pod",
			rego: "violation contains {\"msg\": \"x\"} if {\nv := hp[_]\nf1(v.name)\n}\nf1(n) if f2(n)\nf2(n) if f3(n)\nf3(n) if f4(n)\nf4(n) if f5(n)\nf5(n) if f6(n)\nf6(n) if f7(n)\nf7(n) if f8(n)\nf8(n) if f9(n)\nf9(n) if {\ninput.review.object.spec.containers[_].volumeMounts[_].name == n\n}" + hostPathSet,
			reads: []string{"input.review.object.spec.volumes[_].(count)", "input.review.object.spec.volumes[_].(has_field(_, \"hostPath\") on .hostPath)",
				"input.review.object.spec.volumes[_ where .hostPath].name (if input.review.object.spec.volumes[_ where .hostPath] has one)",
				containers + "[_].(count)", containers + "[_].volumeMounts[_].(count)", containers + "[_].volumeMounts[_].name"},
		},
		{
			name:  "the printed element read at a ground index keeps it keyed",
			rego:  "violation contains {\"msg\": msg} if {\n" + containers + "[0].name == \"x\"\nc := " + containers + "[_]\nmsg := sprintf(\"%v\", [c.name])\n}",
			reads: []string{containers + "[0].name", containers + "[_].(count)", containers + "[_].name"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := analyze(t, tc.rego, tc.params)
			checkReads(t, a, tc.reads)
			var distinct []string
			for _, g := range a.DistinctKeys {
				for _, p := range g {
					distinct = append(distinct, "input"+PathString(p))
				}
			}
			if got := strings.Join(distinct, " "); got != tc.distinct {
				t.Errorf("distinct keys %q, want %q", got, tc.distinct)
			}
		})
	}
}

// checkReads fails t unless a's Describe lists want (in any order).
func checkReads(t *testing.T, a *Result, want []string) {
	t.Helper()
	got, want := a.Describe(), slices.Clone(want)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("reads:\n got  %q\n want %q\nwhy: %s", got, want, strings.Join(a.Why, "\n"))
	}
}
