package server

import (
	"fmt"
	"strings"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// Policy health is what an operator needs to see without reading logs: a
// template that did not compile, a constraint that is not in force. It is
// reported, not enforced: readiness stays true, because the policies that
// did load are in force and an extender that answers with them is safer
// than one that answers nothing (the scheduler would then place pods with
// no policy at all, or none, depending on ignorable). /readyz says so in
// its warnings; the gauges below count it.

// maxHealthNotes bounds how many problems /readyz lists by name.
const maxHealthNotes = 5

// policyHealth is the readiness check over the policy set: always ready,
// naming every template and constraint that is not in force as it should.
func policyHealth(p interface{ Status() opa.Status }) func() (bool, string) {
	return func() (bool, string) {
		st := p.Status()
		var problems []string
		for _, t := range st.Templates {
			switch t.Health() {
			case opa.HealthError:
				what := "no version in force, its constraints are inactive"
				if t.Active {
					what = "the previous version stays in force"
				}
				problems = append(problems, fmt.Sprintf("template %s refused (%s): %s", t.Name, what, t.Error))
			case opa.HealthInactive:
				problems = append(problems, fmt.Sprintf("template %s not in force", t.Name))
			}
		}
		for _, c := range st.Constraints {
			switch c.Health() {
			case opa.HealthError:
				problems = append(problems, fmt.Sprintf("constraint %s/%s refused: %s", c.Kind, c.Name, c.Error))
			case opa.HealthInactive:
				problems = append(problems, fmt.Sprintf("constraint %s/%s inactive: %s", c.Kind, c.Name, c.Inactive))
			}
		}
		if len(problems) == 0 {
			return true, ""
		}
		shown := problems
		if len(shown) > maxHealthNotes {
			shown = shown[:maxHealthNotes]
		}
		note := strings.Join(shown, "; ")
		if n := len(problems) - len(shown); n > 0 {
			note += fmt.Sprintf("; and %d more", n)
		}
		return true, fmt.Sprintf("%d policy problems (serving with the policies in force; /debug/policies has them all): %s", len(problems), note)
	}
}
