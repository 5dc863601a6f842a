package verify

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// TestGatekeeperLibrary runs Gatekeeper's own policy library suites: the
// conformance bar (every case must pass, as it does in gator verify), with
// the templates that carry both engines' code on CEL (the default, as in
// Gatekeeper) and on Rego.
func TestGatekeeperLibrary(t *testing.T) {
	lib := filepath.Join("..", "..", "..", "shared", "gatekeeper-library", "library")
	if _, err := os.Stat(lib); err != nil {
		t.Skipf("Gatekeeper library not found beside the repository (%s): %v", lib, err)
	}
	passed := map[string]int{}
	for name, engine := range map[string]opa.Options{"CEL": {}, "Rego": {DisableK8sNativeValidation: true}} {
		var out bytes.Buffer
		sum, err := Run(context.Background(), []string{lib}, Options{Out: &out, Engine: engine})
		if err != nil {
			t.Fatal(err)
		}
		if sum.Failed > 0 || sum.Passed < 200 {
			t.Fatalf("%s: %d passed, %d failed:\n%s", name, sum.Passed, sum.Failed, out.String())
		}
		passed[name] = sum.Passed
		t.Logf("%s: %d passed, %d failed, %d skipped", name, sum.Passed, sum.Failed, sum.Skipped)
	}
	if passed["CEL"] != passed["Rego"] {
		t.Errorf("cases passed: %v, want as many on each engine", passed)
	}
}

func TestExamples(t *testing.T) {
	var out bytes.Buffer
	sum, err := Run(context.Background(), []string{filepath.Join("..", "..", "deploy", "examples")}, Options{Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Failed > 0 || sum.Passed < 15 {
		t.Fatalf("%d passed, %d failed:\n%s", sum.Passed, sum.Failed, out.String())
	}
	if !strings.HasSuffix(out.String(), "passed, 0 failed, 0 skipped\n") {
		t.Errorf("closing line missing:\n%s", out.String())
	}
}

func TestFailingSuiteIsReported(t *testing.T) {
	var out bytes.Buffer
	sum, err := Run(context.Background(), []string{"testdata/bad"}, Options{Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Failed != 2 || sum.Passed != 1 || sum.Skipped != 1 {
		t.Fatalf("summary %+v:\n%s", sum, out.String())
	}
	for _, want := range []string{"FAIL  bad/host-network/expects-none", "got 1 violations", "FAIL  bad/host-network/wrong-message", "SKIP  bad/host-network/skipped"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestRunFilter(t *testing.T) {
	var out bytes.Buffer
	sum, err := Run(context.Background(), []string{"testdata/bad"}, Options{Out: &out, Run: regexp.MustCompile("expects-one$")})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Passed != 1 || sum.Failed != 0 {
		t.Fatalf("summary %+v:\n%s", sum, out.String())
	}
}

func TestNoSuites(t *testing.T) {
	if _, err := Run(context.Background(), []string{"testdata/bad/template.yaml"}, Options{}); err != nil {
		// A file is taken as a suite even without kind: Suite in it; it
		// then fails to parse as one.
		t.Logf("error: %v", err)
	}
	if _, err := Run(context.Background(), []string{t.TempDir()}, Options{}); err == nil {
		t.Fatal("want an error for a folder without suites")
	}
}

func TestAssertionCounts(t *testing.T) {
	vs := []opa.Violation{{Message: "container a is bad"}, {Message: "container b is bad"}, {Message: "init container c"}}
	msg := func(s string) *string { return &s }
	tests := []struct {
		a      Assertion
		wantOK bool
	}{
		{Assertion{}, true},
		{Assertion{Violations: "yes"}, true},
		{Assertion{Violations: true}, true},
		{Assertion{Violations: false}, false},
		{Assertion{Violations: "no", Message: msg("^nothing")}, true},
		{Assertion{Violations: float64(3)}, true},
		{Assertion{Violations: float64(2), Message: msg("^container")}, true},
		{Assertion{Violations: float64(1), Message: msg("^container")}, false},
		{Assertion{Violations: float64(-1)}, false},
		{Assertion{Violations: "maybe"}, false},
		{Assertion{Message: msg("(")}, false},
	}
	for i, tc := range tests {
		if err := tc.a.check(vs); (err == nil) != tc.wantOK {
			t.Errorf("case %d %+v: error = %v", i, tc.a, err)
		}
	}
}

// TestGatorOwnSuite runs Gatekeeper's own gator verify suite as it ships
// (testdata/gator-verify): all six cases pass as in gator, a constraint
// scoped away from gator's enforcement point counting no violation, and
// the expansion cases are skipped, saying why.
func TestGatorOwnSuite(t *testing.T) {
	var out bytes.Buffer
	sum, err := Run(context.Background(), []string{"testdata/gator-verify"}, Options{Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Passed != 6 || sum.Failed != 0 || sum.Skipped != 3 {
		t.Fatalf("%d passed, %d failed, %d skipped; want 6, 0, 3:\n%s", sum.Passed, sum.Failed, sum.Skipped, out.String())
	}
	if !strings.Contains(out.String(), "expansion templates (foo_expansion.yaml) are not supported") {
		t.Errorf("skipped cases do not say why:\n%s", out.String())
	}
	// At this service's enforcement point the scoped constraints count
	// nothing: the cases expecting violations from them fail.
	out.Reset()
	sum, err = Run(context.Background(), []string{"testdata/gator-verify"}, Options{Out: &out, Engine: opa.Options{EnforcementPoint: opa.DefaultEnforcementPoint}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Failed != 1 || !strings.Contains(out.String(), "FAIL  testdata/gator-verify/suite.yaml/foo-is-bar-with-scopedEA/foo-not-bar") {
		t.Errorf("at %s: want the scoped-to-gator case failed:\n%s", opa.DefaultEnforcementPoint, out.String())
	}
}

// TestConstraintNotInForceFails: a constraint whose kind no template
// defines judges nothing; its "no violations" case fails, naming why.
func TestConstraintNotInForceFails(t *testing.T) {
	var out bytes.Buffer
	sum, err := Run(context.Background(), []string{"testdata/typo"}, Options{Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Failed != 1 || !strings.Contains(out.String(), "K8sFooIz/foo-is-bar is not in force: no ConstraintTemplate in force defines kind K8sFooIz") {
		t.Errorf("want the case failed, naming the constraint:\n%s", out.String())
	}
}
