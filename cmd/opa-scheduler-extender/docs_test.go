package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// repoRoot is the repository, from this package's folder.
const repoRoot = "../.."

// lineBudgets are the longest the user-facing pages may grow.
var lineBudgets = map[string]int{"README.md": 300, "bench/README.md": 400}

// TestHelp holds every command's --help to what users read in a terminal:
// lines of at most helpColumns, each default shown once, and a top-level
// help that lists every command.
func TestHelp(t *testing.T) {
	for name := range commands {
		if !strings.Contains(usage, "opa-scheduler-extender "+name+" ") && !strings.Contains(usage, "opa-scheduler-extender ["+name+"]") {
			t.Errorf("the top-level help does not list %s", name)
		}
	}
	for _, out := range append(helpOutputs(t), usage) {
		for _, line := range strings.Split(out, "\n") {
			if len(line) > helpColumns {
				t.Errorf("help line of %d columns: %q", len(line), line)
			}
		}
	}
	for cmd, out := range flagHelp(t) {
		for flag, text := range out {
			if n := strings.Count(text, "(default "); n > 1 {
				t.Errorf("%s --%s shows %d defaults: %q", cmd, flag, n, text)
			}
		}
	}
}

// TestDocsDescribeEveryFlag: docs/ names every flag of every command as
// `--flag`, so that --help can stay short.
func TestDocsDescribeEveryFlag(t *testing.T) {
	docs := readDocs(t, "docs")
	for cmd, flags := range flagHelp(t) {
		for flag := range flags {
			if !strings.Contains(docs, "`--"+flag+"`") && !strings.Contains(docs, "`--"+flag+" ") && !strings.Contains(docs, "`--"+flag+"=") {
				t.Errorf("%s --%s is not described in docs/ (write it as `--%s`)", cmd, flag, flag)
			}
		}
	}
}

// TestDocsLinks: every relative link of every Markdown page resolves, and
// README.md and bench/README.md stay within their budgets.
func TestDocsLinks(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	var pages []string
	err := filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != repoRoot || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			pages = append(pages, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) < 3 {
		t.Fatalf("found %d Markdown pages under %s", len(pages), repoRoot)
	}
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, page)
		if budget, ok := lineBudgets[filepath.ToSlash(rel)]; ok {
			if n := bytes.Count(b, []byte("\n")); n > budget {
				t.Errorf("%s is %d lines, over its budget of %d", rel, n, budget)
			}
		}
		for _, m := range link.FindAllStringSubmatch(stripCode(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			if _, err := os.Stat(filepath.Join(filepath.Dir(page), target)); err != nil {
				t.Errorf("%s links to %s, which does not exist", rel, m[1])
			}
		}
	}
	for rel := range lineBudgets {
		if !slices.ContainsFunc(pages, func(p string) bool { r, _ := filepath.Rel(repoRoot, p); return filepath.ToSlash(r) == rel }) {
			t.Errorf("%s not found", rel)
		}
	}
}

// stripCode is a Markdown page without its fenced code blocks, whose
// brackets are code, not links.
func stripCode(page string) string {
	var out strings.Builder
	fenced := false
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out.WriteString(line + "\n")
		}
	}
	return out.String()
}

// helpOutputs are the --help of every command that has flags.
func helpOutputs(t *testing.T) []string {
	t.Helper()
	var outs []string
	for _, cmd := range []string{"serve", "verify", "test", "explain"} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), []string{cmd, "--help"}, &stdout, &stderr); code != 0 {
			t.Fatalf("%s --help: exit %d\n%s", cmd, code, stderr.String())
		}
		outs = append(outs, stderr.String())
	}
	return outs
}

// flagHelp is, per command, each flag's help text (its lines joined).
func flagHelp(t *testing.T) map[string]map[string]string {
	t.Helper()
	flagLine := regexp.MustCompile(`^  (?:-\w, )?--([a-z0-9-]+)`)
	out := map[string]map[string]string{}
	for i, help := range helpOutputs(t) {
		cmd := []string{"serve", "verify", "test", "explain"}[i]
		flags := map[string]string{}
		var current string
		for _, line := range strings.Split(help, "\n") {
			if m := flagLine.FindStringSubmatch(line); m != nil {
				current = m[1]
				flags[current] = ""
			} else if current != "" && strings.HasPrefix(line, "        ") {
				flags[current] += strings.TrimSpace(line) + " "
			} else {
				current = ""
			}
		}
		if len(flags) == 0 {
			t.Fatalf("%s --help lists no flags:\n%s", cmd, help)
		}
		out[cmd] = flags
	}
	return out
}

// readDocs is every Markdown page under dir, concatenated.
func readDocs(t *testing.T, dir string) string {
	t.Helper()
	var all strings.Builder
	err := filepath.WalkDir(filepath.Join(repoRoot, dir), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".md") {
			return err
		}
		b, err := os.ReadFile(path)
		all.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return all.String()
}
