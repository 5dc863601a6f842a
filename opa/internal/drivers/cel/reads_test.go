package cel

import (
	"reflect"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/gatekeeper"
)

// TestAnalyze checks what the CEL analysis says a template reads: the
// review paths of its memo key, the paths it only prints, and whether it
// sees the candidate's name.
func TestAnalyze(t *testing.T) {
	tests := []struct {
		name     string
		src      gatekeeper.CELSource
		reads    []string
		printed  []string
		nodeName bool
	}{{
		name:  "containers element by element through a macro",
		src:   gatekeeper.CELSource{Validations: []gatekeeper.CELValidation{{Expression: `object.spec.containers.all(c, !c.image.endsWith(":latest"))`}}},
		reads: []string{".review.object.(shape)", ".review.object.spec.(shape)", ".review.object.spec.containers.(shape)", ".review.object.spec.containers[_].(shape)", ".review.object.spec.containers[_].image"},
	}, {
		name:  "has() reads the shape; a constant key reads one key; and the shapes on the way",
		src:   gatekeeper.CELSource{Validations: []gatekeeper.CELValidation{{Expression: `has(object.metadata.labels) && object.metadata.labels["team"] == "a"`}}},
		reads: []string{".review.object.(shape)", ".review.object.metadata.(shape)", ".review.object.metadata.labels.(shape)", ".review.object.metadata.labels.team"},
	}, {
		// The key is printed, looked up in the labels (lookupkey.go).
		name:    "a key computed at run time reads the whole map",
		src:     gatekeeper.CELSource{Validations: []gatekeeper.CELValidation{{Expression: `object.metadata.labels[object.metadata.namespace] == "x"`}}},
		reads:   []string{".review.object.(shape)", ".review.object.metadata.(shape)", ".review.object.metadata.labels"},
		printed: []string{".review.object.metadata.namespace"},
	}, {
		name: "anyObject and params through variables; a mapped list counted",
		src: gatekeeper.CELSource{
			Variables:   []gatekeeper.CELNamed{{Name: "ports", Expression: `variables.anyObject.spec.containers.map(c, c.ports)`}},
			Validations: []gatekeeper.CELValidation{{Expression: `size(variables.ports) < variables.params.max`}},
		},
		// The mapped list is as long as the containers: their count; each
		// c.ports fails where a container has none, so their shapes too.
		reads: []string{".review.object.(shape)", ".review.object.spec.(shape)", ".review.object.spec.containers.(shape)", ".review.object.spec.containers[_].(shape)",
			".review.object.spec.containers[_].ports.(shape)",
			".review.oldObject.(shape)", ".review.oldObject.spec.(shape)", ".review.oldObject.spec.containers.(shape)", ".review.oldObject.spec.containers[_].(shape)",
			".review.oldObject.spec.containers[_].ports.(shape)", ".review.operation"},
	}, {
		// A map literal's entry fails where its value is missing, even
		// when nothing selects it.
		name:  "a map literal's entries are evaluated whether or not they are read",
		src:   gatekeeper.CELSource{Validations: []gatekeeper.CELValidation{{Expression: `size({"a": object.spec.priorityClassName}) == 1`}}},
		reads: []string{".review.object.(shape)", ".review.object.spec.(shape)", ".review.object.spec.priorityClassName.(shape)"},
	}, {
		// The second variable over a map is its value: the node name.
		name:     "a two-variable comprehension over a map literal reads its values",
		src:      gatekeeper.CELSource{Validations: []gatekeeper.CELValidation{{Expression: `{"node": object.spec.nodeName}.all(k, v, !v.startsWith("gpu-"))`}}},
		reads:    []string{".review.object.(shape)", ".review.object.spec.(shape)", ".review.object.spec.nodeName"},
		nodeName: true,
	}, {
		name: "a printed name is left out of the key",
		src: gatekeeper.CELSource{Validations: []gatekeeper.CELValidation{{
			Expression:        `!has(object.spec.hostNetwork) || !object.spec.hostNetwork`,
			MessageExpression: `"hostNetwork is not allowed, pod: " + variables.anyObject.metadata.name`,
		}}},
		// Through anyObject: oldObject's on a DELETE without object.
		reads:   []string{".review.object.(shape)", ".review.object.metadata.(shape)", ".review.object.spec.(shape)", ".review.object.spec.hostNetwork", ".review.oldObject.metadata.name", ".review.operation"},
		printed: []string{".review.object.metadata.name"},
	}, {
		// As the library's AppArmor template joins its pairs to the
		// containers: the names are compared with each other only.
		name: "names compared with each other are printed while distinct",
		src: gatekeeper.CELSource{
			Variables: []gatekeeper.CELNamed{{Name: "pairs", Expression: `object.spec.containers.map(c, [c.name, has(c.securityContext)])`}},
			Validations: []gatekeeper.CELValidation{{
				Expression: `object.spec.containers.all(c, variables.pairs.exists(p, p[0] == c.name && p[1]))`,
			}},
		},
		reads: []string{".review.object.(shape)", ".review.object.spec.(shape)", ".review.object.spec.containers.(shape)", ".review.object.spec.containers[_].(shape)",
			".review.object.spec.containers[_].securityContext.(shape)"},
		printed: []string{".review.object.spec.containers[_].name (distinct)"},
	}, {
		name: "through anyObject, oldObject's names are read",
		src: gatekeeper.CELSource{Validations: []gatekeeper.CELValidation{{
			Expression: `variables.anyObject.spec.containers.all(c, variables.anyObject.spec.containers.exists(d, d.name != c.name || d.image == "x"))`,
		}}},
		reads: []string{".review.object.(shape)", ".review.object.spec.(shape)", ".review.object.spec.containers.(shape)", ".review.object.spec.containers[_].(shape)", ".review.object.spec.containers[_].image",
			".review.oldObject.(shape)", ".review.oldObject.spec.(shape)", ".review.oldObject.spec.containers.(shape)", ".review.oldObject.spec.containers[_].(shape)", ".review.oldObject.spec.containers[_].image", ".review.oldObject.spec.containers[_].name", ".review.operation"},
		printed: []string{".review.object.spec.containers[_].name (distinct)"},
	}, {
		name: "a name compared with a constant, or with another path, is read",
		src: gatekeeper.CELSource{Validations: []gatekeeper.CELValidation{{
			Expression: `object.spec.containers.all(c, c.name != "istio-proxy") && object.spec.initContainers.all(i, object.spec.containers.all(c, c.name != i.name))`,
		}}},
		reads: []string{".review.object.(shape)", ".review.object.spec.(shape)", ".review.object.spec.containers.(shape)", ".review.object.spec.containers[_].(shape)", ".review.object.spec.containers[_].name",
			".review.object.spec.initContainers.(shape)", ".review.object.spec.initContainers[_].(shape)", ".review.object.spec.initContainers[_].name"},
	}, {
		// Their only origin is a name, yet they may be a constant or a
		// computed value: read.
		name: "a name compared with a value that may be a constant or computed from it is read",
		src: gatekeeper.CELSource{Validations: []gatekeeper.CELValidation{
			{Expression: `object.spec.containers.all(c, object.spec.containers.exists(d, (has(c.image) ? c.name : "main") == d.name))`},
			{Expression: `object.spec.containers.all(c, ["main", c.name].exists(n, n == c.name))`},
			{Expression: `object.spec.containers.all(c, object.spec.containers.exists(d, "x" + c.name == d.name))`},
		}},
		reads: []string{".review.object.(shape)", ".review.object.spec.(shape)", ".review.object.spec.containers.(shape)", ".review.object.spec.containers[_].(shape)",
			".review.object.spec.containers[_].image.(shape)", ".review.object.spec.containers[_].name"},
	}, {
		name: "a printed value also read stays in the key",
		src: gatekeeper.CELSource{Validations: []gatekeeper.CELValidation{{
			Expression:        `object.metadata.name != "x"`,
			MessageExpression: `"pod " + object.metadata.name`,
		}}},
		reads: []string{".review.object.(shape)", ".review.object.metadata.(shape)", ".review.object.metadata.name"},
	}, {
		name: "a value transformed in the message is read",
		src: gatekeeper.CELSource{Validations: []gatekeeper.CELValidation{{
			Expression:        `false`,
			MessageExpression: `"pod " + object.metadata.name.upperAscii()`,
		}}},
		reads: []string{".review.object.(shape)", ".review.object.metadata.(shape)", ".review.object.metadata.name"},
	}, {
		name:     "the candidate's name",
		src:      gatekeeper.CELSource{Validations: []gatekeeper.CELValidation{{Expression: `!object.spec.nodeName.startsWith("gpu-")`}}},
		reads:    []string{".review.object.(shape)", ".review.object.spec.(shape)", ".review.object.spec.nodeName"},
		nodeName: true,
	}, {
		name:     "the whole spec holds the candidate's name",
		src:      gatekeeper.CELSource{Validations: []gatekeeper.CELValidation{{Expression: `object.spec == object.spec`}}},
		reads:    []string{".review.object.(shape)", ".review.object.spec"},
		nodeName: true,
	}, {
		name:  "match conditions, the request and the namespace",
		src:   gatekeeper.CELSource{MatchConditions: []gatekeeper.CELNamed{{Name: "ns", Expression: `request.namespace != "kube-system"`}}, Validations: []gatekeeper.CELValidation{{Expression: `namespaceObject.metadata.labels.env == "prod"`}}},
		reads: []string{".review.namespace", ".review.namespaceObject.(shape)", ".review.namespaceObject.metadata.(shape)", ".review.namespaceObject.metadata.labels.(shape)", ".review.namespaceObject.metadata.labels.env"},
	}, {
		name:  "a comprehension variable shadows a root",
		src:   gatekeeper.CELSource{Validations: []gatekeeper.CELValidation{{Expression: `object.spec.volumes.all(object, has(object.hostPath))`}}},
		reads: []string{".review.object.(shape)", ".review.object.spec.(shape)", ".review.object.spec.volumes.(shape)", ".review.object.spec.volumes[_].(shape)", ".review.object.spec.volumes[_].hostPath.(shape)"},
	}, {
		name: "filter then map: each element's tested and printed fields",
		src: gatekeeper.CELSource{
			Variables: []gatekeeper.CELNamed{
				{Name: "containers", Expression: `has(variables.anyObject.spec.containers) ? variables.anyObject.spec.containers : []`},
				{Name: "bad", Expression: `variables.containers.filter(c, has(c.securityContext) && c.securityContext.privileged).map(c, "privileged: " + c.name)`},
			},
			Validations: []gatekeeper.CELValidation{{Expression: `size(variables.bad) == 0`, MessageExpression: `variables.bad.join(", ")`}},
		},
		// The filter keeps the containers that have the fields it tests:
		// the names printed are theirs (each its own placeholder), the
		// list's count is the containers' and what the test read.
		reads: []string{".review.object.(shape)", ".review.object.spec.(shape)", ".review.object.spec.containers.(shape)",
			".review.object.spec.containers[_ where .securityContext.(shape), .securityContext.privileged].(shape)",
			".review.object.spec.containers[_].(shape)", ".review.object.spec.containers[_].securityContext.(shape)", ".review.object.spec.containers[_].securityContext.privileged",
			".review.oldObject.(shape)", ".review.oldObject.spec.(shape)", ".review.oldObject.spec.containers.(shape)",
			".review.oldObject.spec.containers[_ where .securityContext.(shape), .securityContext.privileged].(shape)", ".review.oldObject.spec.containers[_ where .securityContext.(shape), .securityContext.privileged].name",
			".review.oldObject.spec.containers[_].(shape)", ".review.oldObject.spec.containers[_].securityContext.(shape)", ".review.oldObject.spec.containers[_].securityContext.privileged",
			".review.operation"},
		printed: []string{".review.object.spec.containers[_ where .securityContext.(shape), .securityContext.privileged].name"},
	}, {
		name: "a filtered list counted: the elements' count and what the test read",
		src:  gatekeeper.CELSource{Validations: []gatekeeper.CELValidation{{Expression: `size(object.spec.volumes.filter(v, has(v.hostPath))) == 0`}}},
		reads: []string{".review.object.(shape)", ".review.object.spec.(shape)", ".review.object.spec.volumes.(shape)",
			".review.object.spec.volumes[_].(shape)", ".review.object.spec.volumes[_].hostPath.(shape)"},
	}, {
		name: "a name printed into a list the message joins",
		src: gatekeeper.CELSource{
			Variables:   []gatekeeper.CELNamed{{Name: "bad", Expression: `object.spec.volumes.filter(v, has(v.hostPath)).map(v, "volume " + v.name + " of pod " + object.metadata.name)`}},
			Validations: []gatekeeper.CELValidation{{Expression: `size(variables.bad) == 0`, MessageExpression: `variables.bad.join(", ")`}},
		},
		// The list's size is the volumes' count and what the test read.
		reads: []string{".review.object.(shape)", ".review.object.metadata.(shape)", ".review.object.spec.(shape)", ".review.object.spec.volumes.(shape)",
			".review.object.spec.volumes[_ where .hostPath.(shape)].(shape)",
			".review.object.spec.volumes[_].(shape)", ".review.object.spec.volumes[_].hostPath.(shape)"},
		printed: []string{".review.object.metadata.name", ".review.object.spec.volumes[_ where .hostPath.(shape)].name"},
	}, {
		name: "a body reads the rest of the pod only when its filtered range has an element",
		src: gatekeeper.CELSource{
			Variables:   []gatekeeper.CELNamed{{Name: "volumes", Expression: `has(object.spec.volumes) ? object.spec.volumes.filter(v, has(v.hostPath)) : []`}},
			Validations: []gatekeeper.CELValidation{{Expression: `variables.volumes.all(v, object.spec.containers.all(c, c.volumeMounts.all(m, m.name != v.name)))`}},
		},
		reads: []string{"(if .review.object.spec.volumes[_ where .hostPath.(shape)]) .review.object.spec.containers.(shape)",
			"(if .review.object.spec.volumes[_ where .hostPath.(shape)]) .review.object.spec.containers[_].(shape)",
			"(if .review.object.spec.volumes[_ where .hostPath.(shape)]) .review.object.spec.containers[_].volumeMounts.(shape)",
			"(if .review.object.spec.volumes[_ where .hostPath.(shape)]) .review.object.spec.containers[_].volumeMounts[_].(shape)",
			"(if .review.object.spec.volumes[_ where .hostPath.(shape)]) .review.object.spec.containers[_].volumeMounts[_].name",
			".review.object.(shape)", ".review.object.spec.(shape)", ".review.object.spec.volumes.(shape)",
			".review.object.spec.volumes[_ where .hostPath.(shape)].(shape)", ".review.object.spec.volumes[_ where .hostPath.(shape)].name",
			".review.object.spec.volumes[_].(shape)", ".review.object.spec.volumes[_].hostPath.(shape)"},
	}, {
		name: "through anyObject either object's list is a condition",
		src:  gatekeeper.CELSource{Validations: []gatekeeper.CELValidation{{Expression: `variables.anyObject.spec.volumes.all(v, object.metadata.name != "x")`}}},
		reads: []string{"(if .review.object.spec.volumes[_] or .review.oldObject.spec.volumes[_]) .review.object.metadata.(shape)",
			"(if .review.object.spec.volumes[_] or .review.oldObject.spec.volumes[_]) .review.object.metadata.name",
			".review.object.(shape)", ".review.object.spec.(shape)", ".review.object.spec.volumes.(shape)", ".review.object.spec.volumes[_].(shape)",
			".review.oldObject.(shape)", ".review.oldObject.spec.(shape)", ".review.oldObject.spec.volumes.(shape)", ".review.oldObject.spec.volumes[_].(shape)", ".review.operation"},
	}, {
		// Iterating reads how many elements there are: an empty list's
		// all() is true whatever the body says.
		name:  "a range with elements of its own is no condition",
		src:   gatekeeper.CELSource{Validations: []gatekeeper.CELValidation{{Expression: `(has(object.spec.volumes) ? object.spec.volumes : [1]).all(v, object.metadata.name != "x")`}}},
		reads: []string{".review.object.(shape)", ".review.object.metadata.(shape)", ".review.object.metadata.name", ".review.object.spec.(shape)", ".review.object.spec.volumes.(shape)", ".review.object.spec.volumes[_].(shape)"},
	}, {
		name: "a variable first used in a body is read under no condition",
		src: gatekeeper.CELSource{
			Variables:   []gatekeeper.CELNamed{{Name: "n", Expression: `object.metadata.name`}},
			Validations: []gatekeeper.CELValidation{{Expression: `object.spec.volumes.all(v, variables.n != v.name) && variables.n != "x"`}},
		},
		reads: []string{".review.object.(shape)", ".review.object.metadata.(shape)", ".review.object.metadata.name", ".review.object.spec.(shape)", ".review.object.spec.volumes.(shape)",
			".review.object.spec.volumes[_].(shape)", ".review.object.spec.volumes[_].name"},
	}, {
		name:  "a body that reads nothing of the element: the count",
		src:   gatekeeper.CELSource{Validations: []gatekeeper.CELValidation{{Expression: `object.spec.containers.exists(c, true)`}}},
		reads: []string{".review.object.(shape)", ".review.object.spec.(shape)", ".review.object.spec.containers.(shape)", ".review.object.spec.containers[_].(shape)"},
	}, {
		name: "a name in a pair, printed by position",
		src: gatekeeper.CELSource{
			Variables:   []gatekeeper.CELNamed{{Name: "pairs", Expression: `object.spec.containers.map(c, [c.name, c.image == "x"])`}},
			Validations: []gatekeeper.CELValidation{{Expression: `!variables.pairs.exists(p, p[1])`, MessageExpression: `variables.pairs.map(p, "container " + p[0]).join(", ")`}},
		},
		reads:   []string{".review.object.(shape)", ".review.object.spec.(shape)", ".review.object.spec.containers.(shape)", ".review.object.spec.containers[_].(shape)", ".review.object.spec.containers[_].image"},
		printed: []string{".review.object.spec.containers[_].name"},
	}, {
		name: "a name in a map literal, printed by key",
		src: gatekeeper.CELSource{
			Variables:   []gatekeeper.CELNamed{{Name: "profiles", Expression: `object.spec.containers.map(c, {"container": c.name, "bad": c.image == "x"})`}},
			Validations: []gatekeeper.CELValidation{{Expression: `!variables.profiles.exists(p, p.bad)`, MessageExpression: `variables.profiles.map(p, "container " + p.container).join(", ")`}},
		},
		reads:   []string{".review.object.(shape)", ".review.object.spec.(shape)", ".review.object.spec.containers.(shape)", ".review.object.spec.containers[_].(shape)", ".review.object.spec.containers[_].image"},
		printed: []string{".review.object.spec.containers[_].name"},
	}, {
		name: "a pair's other position is read",
		src: gatekeeper.CELSource{
			Variables:   []gatekeeper.CELNamed{{Name: "pairs", Expression: `object.spec.containers.map(c, [c.name, c.image])`}},
			Validations: []gatekeeper.CELValidation{{Expression: `!variables.pairs.exists(p, p[1] == "x")`, MessageExpression: `variables.pairs.map(p, "container " + p[0]).join(", ")`}},
		},
		reads:   []string{".review.object.(shape)", ".review.object.spec.(shape)", ".review.object.spec.containers.(shape)", ".review.object.spec.containers[_].(shape)", ".review.object.spec.containers[_].image"},
		printed: []string{".review.object.spec.containers[_].name"},
	}, {
		name: "a concatenation's positions are unknown: both read",
		src: gatekeeper.CELSource{
			Variables:   []gatekeeper.CELNamed{{Name: "l", Expression: `[object.metadata.name] + [object.metadata.namespace]`}},
			Validations: []gatekeeper.CELValidation{{Expression: `variables.l[1] != "x"`}},
		},
		reads: []string{".review.object.(shape)", ".review.object.metadata.(shape)", ".review.object.metadata.name", ".review.object.metadata.namespace"},
	}, {
		name: "names printed for all the containers and for those a filter kept: one placeholder each",
		src: gatekeeper.CELSource{
			Variables: []gatekeeper.CELNamed{
				{Name: "all", Expression: `object.spec.containers.map(c, {"n": c.name})`},
				{Name: "kept", Expression: `object.spec.containers.filter(c, has(c.x)).map(c, {"n": c.name})`},
			},
			Validations: []gatekeeper.CELValidation{{Expression: `size(variables.kept) == 0`, MessageExpression: `(variables.all + variables.kept).map(e, e.n).join(", ")`}},
		},
		reads: []string{".review.object.(shape)", ".review.object.spec.(shape)", ".review.object.spec.containers.(shape)", ".review.object.spec.containers[_ where .x.(shape)].(shape)",
			".review.object.spec.containers[_].(shape)", ".review.object.spec.containers[_].x.(shape)"},
		printed: []string{".review.object.spec.containers[_].name"},
	}, {
		name:  "an expression that does not parse reads nothing",
		src:   gatekeeper.CELSource{Validations: []gatekeeper.CELValidation{{Expression: `object.spec.(`}}},
		reads: nil,
	}}
	d := New()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := d.CompileTemplate(&gatekeeper.Template{Name: "t", Kind: "T", Engine: Engine, CEL: &tc.src, FailurePolicy: gatekeeper.FailurePolicyFail})
			if err != nil {
				t.Fatal(err)
			}
			a := p.Analyze(nil)
			var reads, printed []string
			for _, r := range a.InputPaths {
				reads = append(reads, analysis.PathString(r))
			}
			for _, m := range a.Messages {
				s := analysis.PathString(m.Path)
				if m.Distinct {
					s += " (distinct)"
				}
				printed = append(printed, s)
				if !m.Trim || m.Root != analysis.Input {
					t.Errorf("printed path %s: root %v, trim %v", analysis.PathString(m.Path), m.Root, m.Trim)
				}
			}
			if !reflect.DeepEqual(reads, tc.reads) || !reflect.DeepEqual(printed, tc.printed) || a.NodeNameObserved != tc.nodeName {
				t.Errorf("reads %q, printed %q, node name %v;\nwant  %q, %q, %v", reads, printed, a.NodeNameObserved, tc.reads, tc.printed, tc.nodeName)
			}
		})
	}
}
