package analysis

import (
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// exemptLib is the library's is_exempt, as it ships.
const exemptLib = "\nis_exempt(container) if {\nexempt_images := object.get(object.get(input, \"parameters\", {}), \"exemptImages\", [])\nimg := container.image\nexemption := exempt_images[_]\n_matches_exemption(img, exemption)\n}\n" +
	"_matches_exemption(img, exemption) if {\nnot endswith(exemption, \"*\")\nexemption == img\n}\n" +
	"_matches_exemption(img, exemption) if {\nendswith(exemption, \"*\")\nprefix := trim_suffix(exemption, \"*\")\nstartswith(img, prefix)\n}\n"

// TestAnalyzeHelpers: a truth test of a function on one value of the
// review reads the function's answer on it (Helper), when the function
// reads nothing else; anything else reads the function's reads as before.
func TestAnalyzeHelpers(t *testing.T) {
	privileged := "violation contains {\"msg\": msg} if {\nc := " + containers + "[_]\nnot is_exempt(c)\nc.securityContext.privileged\nmsg := sprintf(\"%v\", [c.name])\n}" + exemptLib
	cases := []struct {
		name, rego, params string
		reads              []string
	}{
		{
			name: "is_exempt with exemptImages: its answer, not the image", rego: privileged, params: `{"exemptImages": ["safe/*"]}`,
			reads: []string{containers + "[_].(count)", containers + "[_].(is_exempt(_) on .image)", containers + "[_].securityContext.privileged", containers + "[_].name (message only)"},
		},
		{
			name: "through the library's set of lists, each list its own", params: `{"exemptImages": ["safe/*"]}`,
			rego: "violation contains {\"msg\": msg} if {\nc := input_containers[_]\nnot is_exempt(c)\nc.securityContext.privileged\nmsg := sprintf(\"%v\", [c.name])\n}" + listSet + exemptLib,
			reads: []string{containers + "[_].(count)", containers + "[_].(is_exempt(_) on .image)", containers + "[_].securityContext.privileged", containers + "[_].name (message only)",
				inits + "[_].(count)", inits + "[_].(is_exempt(_) on .image)", inits + "[_].securityContext.privileged", inits + "[_].name (message only)"},
		},
		{
			name: "in a list set's condition (host-network-ports)", params: `{"exemptImages": ["safe/*"]}`,
			rego:  "violation contains {\"msg\": \"x\"} if {\ninput_containers[_].ports[_].hostPort > 10\n}\ninput_containers contains c if {\nc := " + containers + "[_]\nnot is_exempt(c)\n}" + exemptLib,
			reads: []string{containers + "[_].(count)", containers + "[_].(is_exempt(_) on .image)", containers + "[_].ports[_].(count)", containers + "[_].ports[_].hostPort"},
		},
		{
			name:  "a constant argument is part of the call",
			rego:  "violation contains {\"msg\": \"x\"} if {\nc := " + containers + "[_]\nhas_prefix(c, \"debug/\")\n}\nhas_prefix(c, p) if startswith(c.image, p)",
			reads: []string{containers + "[_].(count)", containers + "[_].(has_prefix(_, \"debug/\") on .image)"},
		},
		{
			name: "a printed value the function reads is keyed: the function sees the real one, and the keyed image decides its answer", params: `{"exemptImages": ["safe/*"]}`,
			rego:  "violation contains {\"msg\": msg} if {\nc := " + containers + "[_]\nnot is_exempt(c)\nmsg := sprintf(\"%v\", [c.image])\n}" + exemptLib,
			reads: []string{containers + "[_].(count)", containers + "[_].image"},
		},
		{
			name: "an image read in the template's own condition decides is_exempt's answer (allowedrepos)", params: `{"exemptImages": ["safe/*"]}`,
			rego:  "violation contains {\"msg\": msg} if {\nc := " + containers + "[_]\nnot is_exempt(c)\nnot startswith(c.image, \"ok/\")\nmsg := sprintf(\"%v %v\", [c.name, c.image])\n}" + exemptLib,
			reads: []string{containers + "[_].(count)", containers + "[_].image", containers + "[_].name (message only)"},
		},
		{
			name: "the whole element keyed decides any helper on it", params: `{"exemptImages": ["safe/*"]}`,
			rego:  "violation contains {\"msg\": \"x\"} if {\nc := " + containers + "[_]\nnot is_exempt(c)\nc == {\"image\": \"x\"}\n}" + exemptLib,
			reads: []string{containers + "[_]"},
		},
		{
			name: "a helper reading more than the keyed values keeps its answer", params: `{"exemptImages": ["safe/*"]}`,
			rego:  "violation contains {\"msg\": \"x\"} if {\nc := " + containers + "[_]\nnot ok(c)\nnot startswith(c.image, \"ok/\")\n}\nok(c) if { startswith(c.image, \"safe/\"); c.securityContext.runAsNonRoot }",
			reads: []string{containers + "[_].(count)", containers + "[_].(ok(_) on .image, .securityContext.runAsNonRoot)", containers + "[_].image"},
		},
		{
			name: "an image keyed only in other lists' elements does not decide this list's helper", params: `{"exemptImages": ["safe/*"]}`,
			rego:  "violation contains {\"msg\": \"x\"} if {\nc := " + containers + "[_]\nnot is_exempt(c)\n}\nviolation contains {\"msg\": \"y\"} if {\nstartswith(" + inits + "[_].image, \"bad/\")\n}" + exemptLib,
			reads: []string{containers + "[_].(count)", containers + "[_].(is_exempt(_) on .image)", inits + "[_].(count)", inits + "[_].image"},
		},
		{
			name: "a helper on a field that may be absent keeps its answer: whether it is called is not keyed", params: `{"exemptImages": ["safe/*"]}`,
			rego:  "violation contains {\"msg\": \"x\"} if {\nc := " + containers + "[_]\nnot root(c.securityContext)\nc.securityContext.runAsUser == 0\n}\nroot(s) if s.runAsUser == 0",
			reads: []string{containers + "[_].(count)", containers + "[_].securityContext.(root(_) on .runAsUser)", containers + "[_].securityContext.runAsUser"},
		},
		{
			name:  "a function that reads input itself, even at the argument's path, is read as it is",
			rego:  "violation contains {\"msg\": \"x\"} if {\nnot mounted(input.review.object.spec)\n}\nmounted(spec) if spec.automount\nmounted(spec) if {\n\"/token\" == " + containers + "[_].volumeMounts[_].mountPath\n}",
			reads: []string{"input.review.object.spec.automount", containers + "[_].(count)", containers + "[_].volumeMounts[_].(count)", containers + "[_].volumeMounts[_].mountPath"},
		},
		{
			name:  "a function that refers to a rule of the template that reads input is read as it is",
			rego:  "violation contains {\"msg\": \"x\"} if {\nc := " + containers + "[_]\nnot ok(c)\n}\nok(c) if {\nstartswith(c.image, \"safe/\")\ncount(team) > 0\n}\nteam contains v if {\nsome k, v in input.review.object.metadata.labels\nstartswith(k, \"team\")\n}",
			reads: []string{containers + "[_].(count)", containers + "[_].image", "input.review.object.metadata.labels"},
		},
		{
			name:  "a function that refers to a rule that is an input path (an alias) is read as it is",
			rego:  "violation contains {\"msg\": \"x\"} if {\nc := " + containers + "[_]\nnot ok(c)\n}\nok(c) if {\nstartswith(c.image, \"safe/\")\nhostnet\n}\nhostnet if {\ns := input.review.object.spec\ns.hostNetwork == true\n}",
			reads: []string{containers + "[_].(count)", containers + "[_].image", "input.review.object.spec.hostNetwork"},
		},
		{
			name:  "a function that reads the node is read as it is",
			rego:  "violation contains {\"msg\": \"x\"} if {\nc := " + containers + "[_]\nnot fits(c)\n}\nfits(c) if {\nnode := data.inventory.cluster.v1.Node[input.review.object.spec.nodeName]\nnode.metadata.labels.arch == c.arch\n}",
			reads: []string{containers + "[_].(count)", containers + "[_].arch", "node.metadata.labels.arch"},
		},
		{
			name:  "a value bound from the call is no truth test",
			rego:  "violation contains {\"msg\": \"x\"} if {\nc := " + containers + "[_]\nx := tag(c)\nx == \"latest\"\n}\ntag(c) := t if { parts := split(c.image, \":\"); t := parts[1] }",
			reads: []string{containers + "[_].(count)", containers + "[_].image"},
		},
		{
			name:  "two values of the review as arguments: read as they are",
			rego:  "violation contains {\"msg\": \"x\"} if {\nc := " + containers + "[_]\nnot same(c, input.review.object.metadata)\n}\nsame(c, m) if c.name == m.name",
			reads: []string{containers + "[_].(count)", containers + "[_].name", "input.review.object.metadata.name"},
		},
		{
			name:  "a truth test inside the function is read with it, not apart",
			rego:  "violation contains {\"msg\": \"x\"} if {\nc := " + containers + "[_]\nnot ok(c)\n}\nok(c) if { not bad(c) }\nbad(c) if startswith(c.image, \"bad/\")",
			reads: []string{containers + "[_].(count)", containers + "[_].(ok(_) on .image)"},
		},
		{
			name:  "a function whose value is a printed string, tested for truth: its answer too",
			rego:  "violation contains {\"msg\": msg} if {\nc := " + containers + "[_]\nnot is_safe(c)\nmsg := sprintf(\"%v\", [c.name])\n}\nis_safe(c) := sprintf(\"%v\", [c.image])",
			reads: []string{containers + "[_].(count)", containers + "[_].(is_safe(_) on .image)", containers + "[_].name (message only)"},
		},
		{
			name:  "the pod's whole spec, which holds the node's name, as the argument: read as it is",
			rego:  "violation contains {\"msg\": \"x\"} if {\nnot ok(input.review.object.spec)\n}\nok(s) if { s[k] == \"x\" }",
			reads: []string{"input.review.object.spec"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkReads(t, analyze(t, tc.rego, tc.params), tc.reads)
		})
	}
}

// TestHelperTerm: a Helper reads back as it was made and renders as
// documented.
func TestHelperTerm(t *testing.T) {
	fn := ast.MustParseRef("data.x.lib.is_exempt")
	reads := [][]*ast.Term{{ast.StringTerm("image")}, {ast.StringTerm("ports"), Each, ast.StringTerm("hostPort")}}
	h := Helper(fn, []*ast.Term{argMarker, ast.StringTerm("k")}, reads)
	got, ok := HelperOf(h)
	if !ok || !got.Func.Equal(fn) || len(got.Args) != 2 || !IsArg(got.Args[0]) || IsArg(got.Args[1]) || len(got.Reads) != 2 || PathString(got.Reads[1]) != ".ports[_].hostPort" {
		t.Fatalf("HelperOf(%v) = %+v, %v", h, got, ok)
	}
	if s := PathString([]*ast.Term{ast.StringTerm("c"), h}); s != `.c.(is_exempt(_, "k") on .image, .ports[_].hostPort)` {
		t.Errorf("PathString = %s", s)
	}
	if _, ok := HelperOf(Each); ok || IsHelper(ast.StringTerm("x")) {
		t.Error("other terms read as Helpers")
	}
}
