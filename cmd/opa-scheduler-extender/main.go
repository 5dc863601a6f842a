// Command opa-scheduler-extender is a kube-scheduler extender that decides
// placement with Gatekeeper policies. It only wires packages together: the
// engine (opa), its sources (opa/source) and the HTTP service (server).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

const usage = `opa-scheduler-extender: a kube-scheduler extender that decides placement with Gatekeeper policies.

Usage:
  opa-scheduler-extender [serve] [flags]   run the extender (the default command)
  opa-scheduler-extender verify PATH...    run Gatekeeper suite.yaml tests against the engine
  opa-scheduler-extender test PATH...      judge the pods of some files on their nodes, as gator test does
  opa-scheduler-extender explain --pod NS/NAME   where the cluster's policies let a pod go, node by node
  opa-scheduler-extender version           print the version (also: --version)

Run "opa-scheduler-extender serve --help" or "opa-scheduler-extender verify --help" for flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 {
		switch args[0] {
		case "serve", "verify", "test", "explain", "help", "version":
			cmd, args = args[0], args[1:]
		case "--version", "-version":
			cmd, args = "version", args[1:]
		case "-h", "--help":
			cmd = "help"
		default:
			if !strings.HasPrefix(args[0], "-") {
				fmt.Fprintf(stderr, "opa-scheduler-extender: unknown command %q\n\n%s", args[0], usage)
				return 2
			}
		}
	}
	switch cmd {
	case "verify":
		return runVerify(ctx, args, stdout, stderr)
	case "test":
		return runTest(ctx, args, stdout, stderr)
	case "explain":
		return runExplain(ctx, args, stdout, stderr)
	case "help":
		fmt.Fprint(stderr, usage)
		return 0
	case "version":
		printVersion(stdout)
		return 0
	}
	return runServe(ctx, args, stdout, stderr)
}
