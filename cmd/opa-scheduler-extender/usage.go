package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
)

// helpColumns is the widest line --help prints.
const helpColumns = 100

// flagUsage is a command's --help: its text, then each flag on a line of its
// own with its description below, wrapped to helpColumns, and its default
// once. The reference with the details is docs/commands.md.
func flagUsage(w io.Writer, text string, fs *pflag.FlagSet) func() {
	return func() {
		fmt.Fprint(w, text)
		printFlags(w, fs)
		fmt.Fprintln(w, "\nEvery flag is described in docs/commands.md.")
	}
}

func printFlags(w io.Writer, fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		name := "  "
		if f.Shorthand != "" {
			name += "-" + f.Shorthand + ", "
		}
		name += "--" + f.Name
		typ, text := pflag.UnquoteUsage(f)
		if typ != "" && f.Value.Type() != "bool" {
			name += " " + typ
		}
		fmt.Fprintln(w, name)
		if d := defaultText(f); d != "" {
			text += " (default " + d + ")"
		}
		for _, line := range wrap(text, helpColumns-8) {
			fmt.Fprintln(w, "        "+line)
		}
	})
}

// defaultText is f's default as --help shows it, or "" for a zero value.
func defaultText(f *pflag.Flag) string {
	switch f.DefValue {
	case "", "false", "0", "0s", "[]":
		return ""
	}
	if f.Value.Type() == "string" {
		return fmt.Sprintf("%q", f.DefValue)
	}
	return f.DefValue
}

// wrap breaks text into lines of at most width columns, at spaces.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	return append(lines, line)
}
