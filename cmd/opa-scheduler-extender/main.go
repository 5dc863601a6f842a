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

const usage = `opa-scheduler-extender: a kube-scheduler extender that decides placement with
Gatekeeper policies.

Usage:
  opa-scheduler-extender [serve] [flags]          run the extender (the default command)
  opa-scheduler-extender verify PATH...           run Gatekeeper suite.yaml tests against the engine
  opa-scheduler-extender test PATH...             judge the pods of some files on their nodes
  opa-scheduler-extender explain --pod NS/NAME    where the cluster's policies let a pod go
  opa-scheduler-extender version                  print the version (also: --version)
  opa-scheduler-extender help                     print this

Run "opa-scheduler-extender COMMAND --help" for a command's flags; docs/commands.md
describes them all.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// command runs one command on its arguments and returns the exit code.
type command func(ctx context.Context, args []string, stdout, stderr io.Writer) int

// commands are the commands by name; usage lists each of them.
var commands = map[string]command{
	"serve":   runServe,
	"verify":  runVerify,
	"test":    runTest,
	"explain": runExplain,
	"version": func(_ context.Context, _ []string, stdout, _ io.Writer) int {
		printVersion(stdout)
		return 0
	},
	"help": func(_ context.Context, _ []string, _, stderr io.Writer) int {
		fmt.Fprint(stderr, usage)
		return 0
	},
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 {
		_, known := commands[args[0]]
		switch {
		case known:
			cmd, args = args[0], args[1:]
		case args[0] == "--version" || args[0] == "-version":
			cmd, args = "version", args[1:]
		case args[0] == "-h" || args[0] == "--help":
			cmd = "help"
		case !strings.HasPrefix(args[0], "-"):
			fmt.Fprintf(stderr, "opa-scheduler-extender: unknown command %q\n\n%s", args[0], usage)
			return 2
		}
	}
	return commands[cmd](ctx, args, stdout, stderr)
}
