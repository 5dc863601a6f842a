package main

import (
	"context"
	"fmt"
	"io"
	"regexp"

	"github.com/spf13/pflag"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/verify"
)

const verifyHelp = `Usage: opa-scheduler-extender verify [flags] PATH...

Runs Gatekeeper test suites (the gator verify format: kind Suite,
apiVersion test.gatekeeper.sh/v1alpha1) against this engine. PATH is a
suite file or a folder searched recursively for suites.

Each case gets a fresh engine with the test's template and constraint and
the case's inventory. As in gator, a constraint scoped away from the
enforcement point (gator's by default) counts no violation. A test whose
constraint is not in force (its kind defined by no template) fails; a test
with an expansion template is skipped, saying so. One difference from
gator: when the case's inventory holds the Namespace of the object under
review, the review carries it as namespaceObject (and namespace), as
Gatekeeper's admission webhook does; gator leaves namespaceObject null.

Prints one line per case and a closing line "N passed, N failed, N skipped";
exits 1 if any case failed.

Flags:
`

func runVerify(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("verify", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	run := fs.String("run", "", "run only the cases whose \"suite/test/case\" matches this regular expression")
	enforcementPoint := fs.String("enforcement-point", verify.GatorEnforcementPoint,
		"the enforcement point whose scopedEnforcementActions say which constraints count")
	var engines engineFlags
	engines.register(fs)
	fs.Usage = flagUsage(stderr, verifyHelp, fs)
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	opts := verify.Options{Out: stdout, Engine: opa.Options{EnforcementPoint: *enforcementPoint}}
	if err := engines.apply(&opts.Engine); err != nil {
		fmt.Fprintf(stderr, "verify: %v\n", err)
		return 2
	}
	if *run != "" {
		re, err := regexp.Compile(*run)
		if err != nil {
			fmt.Fprintf(stderr, "--run: %v\n", err)
			return 2
		}
		opts.Run = re
	}
	sum, err := verify.Run(ctx, fs.Args(), opts)
	if err != nil {
		fmt.Fprintf(stderr, "verify: %v\n", err)
		return 1
	}
	if sum.Failed > 0 {
		return 1
	}
	return 0
}
