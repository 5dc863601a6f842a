package cel

import (
	"reflect"
	"strings"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/gatekeeper"
)

// TestMemberships checks which uses of a list of values a test kept are
// read through the test's helper (membership.go), and that any other
// reads the values whole: the key paths that reach an image.
func TestMemberships(t *testing.T) {
	const (
		exemptTest = `c.image in variables.explicit || variables.prefixes.exists(p, string(c.image).startsWith(p))`
		helper     = "(exempt(_) on (whole))"
	)
	common := []gatekeeper.CELNamed{
		{Name: "containers", Expression: `has(variables.anyObject.spec.containers) ? variables.anyObject.spec.containers : []`},
		{Name: "initContainers", Expression: `has(variables.anyObject.spec.initContainers) ? variables.anyObject.spec.initContainers : []`},
		{Name: "all", Expression: `variables.containers + variables.initContainers`},
		{Name: "prefixes", Expression: `!has(variables.params.exemptImages) ? [] : variables.params.exemptImages.filter(i, i.endsWith("*")).map(i, i.replace("*", ""))`},
		{Name: "explicit", Expression: `!has(variables.params.exemptImages) ? [] : variables.params.exemptImages.filter(i, !i.endsWith("*"))`},
	}
	withExempt := func(exempt string) []gatekeeper.CELNamed {
		return append(append([]gatekeeper.CELNamed(nil), common...), gatekeeper.CELNamed{Name: "exempt", Expression: exempt})
	}
	library := withExempt(`(variables.containers + variables.initContainers).filter(c, ` + exemptTest + `).map(c, c.image)`)
	bothLists := []string{
		".review.object.spec.containers[_].image." + helper, ".review.object.spec.initContainers[_].image." + helper,
		".review.oldObject.spec.containers[_].image." + helper, ".review.oldObject.spec.initContainers[_].image." + helper,
	}
	// The ephemeral containers' images are read (when a container's body
	// runs), and the list's own values whole.
	innerEphemeral := []string{
		"(if .review.object.spec.containers[_] or .review.oldObject.spec.containers[_]) .review.object.spec.ephemeralContainers[_].image",
		".review.object.spec.containers[_].image", ".review.object.spec.initContainers[_].image",
		".review.oldObject.spec.containers[_].image", ".review.oldObject.spec.initContainers[_].image",
	}
	tests := []struct {
		name       string
		vars       []gatekeeper.CELNamed
		validation string
		images     []string
	}{{
		name: "the library's shape, through a variable that concatenates the same parts",
		vars: library, validation: `variables.all.all(c, !(c.image in variables.exempt) || c.name != "x")`,
		images: bothLists,
	}, {
		name: "a part of the range: its elements are the list's",
		vars: library, validation: `variables.containers.all(c, c.image in variables.exempt)`,
		images: bothLists,
	}, {
		name: "map with a test (three arguments)",
		vars: withExempt(`(variables.containers + variables.initContainers).map(c, ` + exemptTest + `, c.image)`), validation: `variables.containers.all(c, c.image in variables.exempt)`,
		images: bothLists,
	}, {
		name: "elements of another list: the values whole",
		vars: library, validation: `object.spec.ephemeralContainers.all(c, c.image in variables.exempt)`,
		images: []string{
			".review.object.spec.containers[_].image", ".review.object.spec.ephemeralContainers[_].image", ".review.object.spec.initContainers[_].image",
			".review.oldObject.spec.containers[_].image", ".review.oldObject.spec.initContainers[_].image",
		},
	}, {
		name: "the list used elsewhere too: the values whole",
		vars: library, validation: `variables.containers.all(c, c.image in variables.exempt) && variables.exempt.join(",") != "x"`,
		images: []string{
			".review.object.spec.containers[_].image", ".review.object.spec.initContainers[_].image",
			".review.oldObject.spec.containers[_].image", ".review.oldObject.spec.initContainers[_].image",
		},
	}, {
		name: "a test that reads the review is no helper",
		vars: withExempt(`variables.containers.filter(c, c.image == object.metadata.name).map(c, c.image)`), validation: `variables.containers.all(c, c.image in variables.exempt)`,
		images: []string{".review.object.spec.containers[_].image", ".review.oldObject.spec.containers[_].image"},
	}, {
		name: "a test that reads more of the element is no helper",
		vars: withExempt(`variables.containers.filter(c, c.name == "a").map(c, c.image)`), validation: `variables.containers.all(c, c.image in variables.exempt)`,
		images: []string{".review.object.spec.containers[_].image", ".review.oldObject.spec.containers[_].image"},
	}, {
		name: "a test that reads the Constraint (params) is no helper",
		vars: withExempt(`variables.containers.filter(c, c.image in params.spec.parameters.exemptImages).map(c, c.image)`), validation: `variables.containers.all(c, c.image in variables.exempt)`,
		images: []string{".review.object.spec.containers[_].image", ".review.oldObject.spec.containers[_].image"},
	}, {
		name: "a name bound again by an inner comprehension over another list: the values whole",
		vars: library, validation: `variables.containers.all(c, object.spec.ephemeralContainers.all(c, c.image in variables.exempt))`,
		images: innerEphemeral,
	}, {
		name: "a name bound again as a two-variable comprehension's value: the values whole",
		vars: library, validation: `variables.containers.all(c, object.spec.ephemeralContainers.all(i, c, c.image in variables.exempt))`,
		images: innerEphemeral,
	}, {
		name:       "an element of a range that a comprehension's variable reaches: the values whole",
		vars:       withExempt(`object.spec.containers.filter(c, c.image in variables.explicit).map(c, c.image)`),
		validation: `[object.spec].all(s, s.containers.all(c, c.image in variables.exempt))`,
		images:     []string{".review.object.spec.containers[_].image"},
	}}
	d := New()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := gatekeeper.CELSource{Variables: tc.vars, Validations: []gatekeeper.CELValidation{{Expression: tc.validation}}}
			p, err := d.CompileTemplate(&gatekeeper.Template{Name: "t", Kind: "T", Engine: Engine, CEL: &src, FailurePolicy: gatekeeper.FailurePolicyFail})
			if err != nil {
				t.Fatal(err)
			}
			var images []string
			for _, r := range p.Analyze(nil).InputPaths {
				if s := analysis.PathString(r); strings.Contains(s, ".image") && !strings.HasSuffix(s, "(shape)") {
					images = append(images, s)
				}
			}
			if !reflect.DeepEqual(images, tc.images) {
				t.Errorf("image reads\n %q\nwant\n %q", images, tc.images)
			}
		})
	}
}

// TestMembershipPrinted: an image that the exemption test keys and a
// message prints stays printed, gated on the test (MessagePath.Helpers),
// and is not read whole.
func TestMembershipPrinted(t *testing.T) {
	src := gatekeeper.CELSource{
		Variables: []gatekeeper.CELNamed{
			{Name: "explicit", Expression: `!has(variables.params.exemptImages) ? [] : variables.params.exemptImages`},
			{Name: "exempt", Expression: `object.spec.containers.filter(c, c.image in variables.explicit).map(c, c.image)`},
			{Name: "bad", Expression: `object.spec.containers.filter(c, !(c.image in variables.exempt) && c.securityContext.privileged)`},
		},
		Validations: []gatekeeper.CELValidation{{Expression: `size(variables.bad) == 0`, MessageExpression: `variables.bad.map(c, c.image).join(", ")`}},
	}
	p, err := New().CompileTemplate(&gatekeeper.Template{Name: "t", Kind: "T", Engine: Engine, CEL: &src, FailurePolicy: gatekeeper.FailurePolicyFail})
	if err != nil {
		t.Fatal(err)
	}
	a := p.Analyze(nil)
	var got []string
	for _, m := range a.Messages {
		for _, h := range m.Helpers {
			call, _ := analysis.HelperOf(h)
			got = append(got, analysis.PathString(m.Path)+" gated on "+call.Func.String())
		}
	}
	want := []string{`.review.object.spec.containers[_].image gated on variables.exempt`}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("gated printed paths %q, want %q", got, want)
	}
	for _, r := range a.InputPaths {
		if analysis.PathString(r) == ".review.object.spec.containers[_].image" {
			t.Errorf("the image is read whole: %v", a.Describe())
		}
	}
}
