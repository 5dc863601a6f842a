package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/source"
)

const testHelp = `Usage: opa-scheduler-extender test [flags] PATH...

Places pods on nodes with policies, all read from files, as gator test does
for admission: PATH is a YAML file or a folder (read as --policy-dir reads
it). ConstraintTemplates, Constraints, Nodes, Namespaces and other
inventory objects are loaded into a fresh engine; every Pod found is judged
on every Node found (or on --node), exactly as the extender's filter and
prioritize would judge it.

Prints one row per (pod, node): the verdict (allowed, denied), the score
prioritize would give, and each violated constraint with its action and
message; -o json prints the same as JSON. Exits 1 when a pod is denied on
some node, 2 when the input cannot be used (a template that does not
compile, a constraint that is refused or whose kind no template defines,
an object that does not parse, no pod, no node, a --node not found).

Flags:
`

// testRow is one (pod, node) judged.
type testRow struct {
	Pod        string          `json:"pod"`
	Node       string          `json:"node"`
	Verdict    string          `json:"verdict"`
	Score      int64           `json:"score"`
	Violations []opa.Violation `json:"violations,omitempty"`
}

func runTest(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	output := fs.StringP("output", "o", "table", "table or json")
	only := fs.StringSlice("node", nil, "judge on these nodes only (repeatable)")
	enforcementPoint := fs.String("enforcement-point", opa.DefaultEnforcementPoint, "this service's name in scopedEnforcementActions")
	var engines engineFlags
	engines.register(fs)
	fs.Usage = flagUsage(stderr, testHelp, fs)
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if fs.NArg() == 0 || (*output != "table" && *output != "json") {
		fs.Usage()
		return 2
	}
	eopts := opa.Options{EnforcementPoint: *enforcementPoint}
	if err := engines.apply(&eopts); err != nil {
		fmt.Fprintf(stderr, "test: %v\n", err)
		return 2
	}
	rows, err := judgeFiles(ctx, fs.Args(), *only, eopts)
	if err != nil {
		fmt.Fprintf(stderr, "test: %v\n", err)
		return 2
	}
	_ = writeRows(stdout, *output, rows)
	for _, r := range rows {
		if r.Verdict == "denied" {
			return 1
		}
	}
	return 0
}

// judgeFiles loads the paths into a fresh engine and judges every pod on
// every node (or on only).
func judgeFiles(ctx context.Context, paths, only []string, eopts opa.Options) ([]testRow, error) {
	var pods, rest []*unstructured.Unstructured
	var nodes []string
	for _, p := range paths {
		objs, err := source.ReadPath(p)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			switch {
			case o.GetAPIVersion() == "v1" && o.GetKind() == "Pod":
				pods = append(pods, o)
			case o.GetAPIVersion() == "v1" && o.GetKind() == "Node":
				nodes = append(nodes, o.GetName())
				rest = append(rest, o)
			default:
				rest = append(rest, o)
			}
		}
	}
	if len(only) > 0 {
		for _, n := range only {
			if !slices.Contains(nodes, n) {
				return nil, fmt.Errorf("--node %s: no Node of that name in %s", n, strings.Join(paths, ", "))
			}
		}
		nodes = only
	}
	if len(pods) == 0 || len(nodes) == 0 {
		return nil, fmt.Errorf("found %d pods and %d nodes in %s: need at least one of each", len(pods), len(nodes), strings.Join(paths, ", "))
	}
	e, err := opa.New(ctx, eopts)
	if err != nil {
		return nil, err
	}
	defer e.Close(ctx)
	changes := make([]opa.Change, len(rest))
	for i, o := range rest {
		changes[i] = opa.Change{Object: o}
	}
	if errs := e.Apply(ctx, changes); len(errs) > 0 {
		return nil, fmt.Errorf("%d objects refused, first: %v", len(errs), errs[0])
	}
	if err := allInForce(e); err != nil {
		return nil, err
	}
	var rows []testRow
	for _, pod := range pods {
		r, err := judge(ctx, e, pod.Object, nodes)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	return rows, nil
}

// allInForce is an error naming each constraint that is not in force (a
// kind no template defines: a typo judges nothing, and would pass every
// pod in silence).
func allInForce(e *opa.Engine) error {
	var out []string
	for _, cs := range e.Status().Constraints {
		if cs.Active {
			continue
		}
		why := cs.Error
		if why == "" {
			why = cs.Inactive
		}
		out = append(out, fmt.Sprintf("constraint %s/%s is not in force: %s", cs.Kind, cs.Name, why))
	}
	if len(out) > 0 {
		return errors.New(strings.Join(out, "; "))
	}
	return nil
}

// judge is one pod on nodes, a row per node, as the extender answers:
// unknown and denied nodes score 0.
func judge(ctx context.Context, e *opa.Engine, pod map[string]any, nodes []string) ([]testRow, error) {
	u := unstructured.Unstructured{Object: pod}
	key := u.GetNamespace() + "/" + u.GetName()
	cands := make([]opa.Candidate, len(nodes))
	for i, n := range nodes {
		cands[i].Name = n
	}
	p, err := e.Evaluate(ctx, opa.PlacementRequest{Pod: pod, Candidates: cands})
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", key, err)
	}
	rows := make([]testRow, 0, len(p.Nodes))
	for i, v := range p.Nodes {
		r := testRow{Pod: key, Node: v.Name, Verdict: "allowed", Score: p.Score(i), Violations: p.Violations(i)}
		switch {
		case v.Unknown:
			r.Verdict, r.Score = "unknown node", 0
		case p.Denied(i):
			r.Verdict, r.Score = "denied", 0
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// writeRows prints rows as a table or as JSON.
func writeRows(w io.Writer, output string, rows []testRow) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	printRows(w, rows)
	return nil
}

func printRows(w io.Writer, rows []testRow) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tNODE\tVERDICT\tSCORE\tCONSTRAINT\tACTION\tMESSAGE")
	for _, r := range rows {
		if len(r.Violations) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t\t\t\n", r.Pod, r.Node, r.Verdict, r.Score)
			continue
		}
		for j, v := range r.Violations {
			pod, node, verdict, score := r.Pod, r.Node, r.Verdict, fmt.Sprint(r.Score)
			if j > 0 {
				pod, node, verdict, score = "", "", "", ""
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", pod, node, verdict, score, v.Constraint, v.Action, v.Message)
		}
	}
	_ = tw.Flush()
}
