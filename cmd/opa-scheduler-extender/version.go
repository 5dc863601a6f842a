package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/pflag"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/server"
)

// version is set at build time (-ldflags "-X main.version=v1.2.3", as the
// Dockerfile does); without it the module version Go recorded is used.
var version = ""

// buildInfo describes this binary: version, VCS revision (with "-dirty"
// when built from a modified tree) and Go version.
func buildInfo() server.BuildInfo {
	b := server.BuildInfo{Version: version, GoVersion: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if b.Version == "" {
		b.Version = info.Main.Version // "(devel)" for a plain go build
	}
	var dirty bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && b.Revision != "" {
		b.Revision += "-dirty"
	}
	return b
}

func printVersion(w io.Writer) {
	b := buildInfo()
	rev := b.Revision
	if rev == "" {
		rev = "unknown"
	}
	fmt.Fprintf(w, "opa-scheduler-extender %s (revision %s, %s)\n", b.Version, rev, b.GoVersion)
}

// parseFlags parses args into fs. A flag error is printed with the usage
// (exit code 2): in a pod, a typo must show in the logs, not only as a
// CrashLoopBackOff. --help prints the usage and exits 0. ok is true when
// the command should go on.
func parseFlags(fs *pflag.FlagSet, args []string, stderr io.Writer) (code int, ok bool) {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return 0, true
	case err == pflag.ErrHelp:
		return 0, false // pflag printed the usage
	}
	fmt.Fprintf(stderr, "%s: %v\n\n", fs.Name(), err)
	fs.Usage()
	return 2, false
}
