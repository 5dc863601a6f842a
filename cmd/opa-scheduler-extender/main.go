// Command opa-scheduler-extender is a kube-scheduler extender that decides
// placement with Gatekeeper policies. It only wires packages together: the
// engine (opa), its sources (opa/source) and the HTTP service (server).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const usage = `opa-scheduler-extender: a kube-scheduler extender that decides placement with Gatekeeper policies.

Usage:
  opa-scheduler-extender [serve] [flags]   run the extender (the default command)
  opa-scheduler-extender verify PATH...    run Gatekeeper suite.yaml tests against the engine

Run "opa-scheduler-extender serve --help" or "opa-scheduler-extender verify --help" for flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

func run(ctx context.Context, args []string) int {
	cmd := "serve"
	if len(args) > 0 && (args[0] == "serve" || args[0] == "verify" || args[0] == "help") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "verify":
		return runVerify(ctx, args, os.Stdout, os.Stderr)
	case "help":
		fmt.Print(usage)
		return 0
	}
	return runServe(ctx, args, os.Stderr)
}
