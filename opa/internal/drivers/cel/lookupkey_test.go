package cel

import (
	"reflect"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/analysis"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/gatekeeper"
)

// TestLookupKeys checks which values a lookup's key is built from are
// printed (with the objects the engine checks at run time: Absent) and
// which are read.
func TestLookupKeys(t *testing.T) {
	const prefix = `"container.seccomp.security.alpha.kubernetes.io/" + `
	tests := []struct {
		name       string
		validation string
		printed    map[string][]string // printed path: the objects it is looked up in
		names      bool                // the names are read
	}{{
		name:       "membership in the annotations, through anyObject",
		validation: `variables.anyObject.spec.containers.all(c, !((` + prefix + `c.name) in variables.anyObject.metadata.annotations))`,
		printed:    map[string][]string{".review.object.spec.containers[_].name": {".review.object.metadata.annotations", ".review.oldObject.metadata.annotations"}},
	}, {
		name:       "an index",
		validation: `object.spec.containers.all(c, !has(object.metadata.annotations) || object.metadata.annotations[?(` + prefix + `c.name)].orValue("") != "x")`,
		printed:    map[string][]string{".review.object.spec.containers[_].name": {".review.object.metadata.annotations"}},
	}, {
		name:       "a key transformed before the lookup: read",
		validation: `object.spec.containers.all(c, !(c.name.lowerAscii() in object.metadata.annotations))`,
		names:      true,
	}, {
		name:       "a lookup in each container's own map: read",
		validation: `object.spec.containers.all(c, !(c.name in c.env))`,
		names:      true,
	}, {
		name:       "a name also compared: read",
		validation: `object.spec.containers.all(c, !(c.name in object.metadata.annotations) && c.name != "x")`,
		names:      true,
	}}
	d := New()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := gatekeeper.CELSource{Validations: []gatekeeper.CELValidation{{Expression: tc.validation}}}
			p, err := d.CompileTemplate(&gatekeeper.Template{Name: "t", Kind: "T", Engine: Engine, CEL: &src, FailurePolicy: gatekeeper.FailurePolicyFail})
			if err != nil {
				t.Fatal(err)
			}
			a := p.Analyze(nil)
			printed := map[string][]string{}
			for _, m := range a.Messages {
				var in []string
				for _, o := range m.Absent {
					in = append(in, analysis.PathString(o))
				}
				printed[analysis.PathString(m.Path)] = in
			}
			names := false
			for _, r := range a.InputPaths {
				if s := analysis.PathString(r); s == ".review.object.spec.containers[_].name" {
					names = true
				}
			}
			if tc.printed == nil {
				tc.printed = map[string][]string{}
			}
			if !reflect.DeepEqual(printed, tc.printed) || names != tc.names {
				t.Errorf("printed %v, names read %v; want %v, %v (reads %v)", printed, names, tc.printed, tc.names, a.InputPaths)
			}
		})
	}
}
