// Package verify runs Gatekeeper test suites (the `gator verify` format:
// kind Suite, apiVersion test.gatekeeper.sh/v1alpha1) against this
// project's engine, so that scheduling policies are tested the same way as
// admission policies.
//
// It follows gator's semantics (a fresh engine per case with the test's
// template, constraint and the case's inventory; AdmissionReview objects
// reviewed as their request; assertions `violations: yes|no|N` counting
// the violations whose message matches the optional `message` regular
// expression) with one deliberate difference: when the case's inventory
// holds the Namespace of the object under review, the review carries it as
// namespaceObject and namespace, as Gatekeeper's admission webhook does
// (gator passes an empty namespaceObject, {}).
package verify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/source"
)

// Suite is gator's test suite file.
type Suite struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Tests []Test `json:"tests"`
	Skip  bool   `json:"skip"`
}

// Test pairs a template and a constraint with cases.
type Test struct {
	Name       string `json:"name"`
	Template   string `json:"template"`
	Constraint string `json:"constraint"`
	// Expansion is an ExpansionTemplate (gator expands the object before
	// review): not supported, so its cases are skipped, saying why.
	Expansion string `json:"expansion"`
	Cases     []Case `json:"cases"`
	Skip      bool   `json:"skip"`
	// Invalid expects the constraint to be rejected.
	Invalid bool `json:"invalid"`
}

// Case reviews one object.
type Case struct {
	Name       string      `json:"name"`
	Object     string      `json:"object"`
	Inventory  []string    `json:"inventory"`
	Assertions []Assertion `json:"assertions"`
	Skip       bool        `json:"skip"`
}

// Assertion counts violations, optionally only those whose message matches.
type Assertion struct {
	// Violations is a nonnegative integer, "yes" or "no" (YAML 1.1 reads
	// an unquoted yes/no as a boolean, which means the same).
	Violations any     `json:"violations"`
	Message    *string `json:"message"`
}

// GatorEnforcementPoint is gator's enforcement point: the default of
// Options.Engine.EnforcementPoint for a run, so that a constraint counts
// where gator counts it.
const GatorEnforcementPoint = "gator.gatekeeper.sh"

// Options configure a run.
type Options struct {
	// Out receives one line per case and the closing count line.
	Out io.Writer
	// Run, if set, selects cases by "suite/test/case" (a regular expression).
	Run *regexp.Regexp
	// Engine configures the engine of every case; its EnforcementPoint
	// (GatorEnforcementPoint when empty) decides which scoped constraints
	// count.
	Engine opa.Options
}

// Summary counts cases.
type Summary struct {
	Passed, Failed, Skipped int
}

// Run finds every Suite under paths (files, or folders searched
// recursively) and runs it.
func Run(ctx context.Context, paths []string, opts Options) (Summary, error) {
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.Engine.EnforcementPoint == "" {
		opts.Engine.EnforcementPoint = GatorEnforcementPoint
	}
	files, err := findSuites(paths)
	if err != nil {
		return Summary{}, err
	}
	if len(files) == 0 {
		return Summary{}, fmt.Errorf("no Suite found under %s", strings.Join(paths, ", "))
	}
	var sum Summary
	for _, f := range files {
		s, err := readSuite(f)
		if err != nil {
			fmt.Fprintf(opts.Out, "FAIL  %s: %v\n", f, err)
			sum.Failed++
			continue
		}
		runSuite(ctx, f, s, opts, &sum)
	}
	fmt.Fprintf(opts.Out, "%d passed, %d failed, %d skipped\n", sum.Passed, sum.Failed, sum.Skipped)
	return sum, nil
}

func findSuites(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !info.IsDir() {
			out = append(out, p)
			continue
		}
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if isSuite(b) {
				out = append(out, path)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Strings(out)
	return out, nil
}

var suiteKind = regexp.MustCompile(`(?m)^kind:\s*["']?Suite["']?\s*$`)

func isSuite(b []byte) bool { return suiteKind.Match(b) }

func readSuite(path string) (*Suite, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s Suite
	if err := yaml.UnmarshalStrict(b, &s); err != nil {
		return nil, fmt.Errorf("parse suite: %w", err)
	}
	if s.Kind != "Suite" {
		return nil, fmt.Errorf("kind is %q, want Suite", s.Kind)
	}
	return &s, nil
}

func runSuite(ctx context.Context, file string, s *Suite, opts Options, sum *Summary) {
	dir := filepath.Dir(file)
	name := s.Metadata.Name
	if name == "" {
		name = file
	}
	for _, t := range s.Tests {
		for _, c := range t.Cases {
			id := name + "/" + t.Name + "/" + c.Name
			if opts.Run != nil && !opts.Run.MatchString(id) {
				continue
			}
			if s.Skip || t.Skip || c.Skip {
				fmt.Fprintf(opts.Out, "SKIP  %s\n", id)
				sum.Skipped++
				continue
			}
			if t.Expansion != "" {
				fmt.Fprintf(opts.Out, "SKIP  %s: expansion templates (%s) are not supported\n", id, t.Expansion)
				sum.Skipped++
				continue
			}
			if err := runCase(ctx, dir, t, c, opts.Engine); err != nil {
				fmt.Fprintf(opts.Out, "FAIL  %s: %v\n", id, err)
				sum.Failed++
				continue
			}
			fmt.Fprintf(opts.Out, "ok    %s\n", id)
			sum.Passed++
		}
		if t.Invalid && len(t.Cases) == 0 {
			id := name + "/" + t.Name
			if err := runInvalid(ctx, dir, t, opts.Engine); err != nil {
				fmt.Fprintf(opts.Out, "FAIL  %s: %v\n", id, err)
				sum.Failed++
			} else {
				fmt.Fprintf(opts.Out, "ok    %s\n", id)
				sum.Passed++
			}
		}
	}
}

// newEngine loads the test's template and constraint into a fresh engine.
func newEngine(ctx context.Context, dir string, t Test, eopts opa.Options) (*opa.Engine, error, error) {
	if t.Template == "" || t.Constraint == "" {
		return nil, nil, errors.New("test needs a template and a constraint")
	}
	tmpl, err := readOne(filepath.Join(dir, t.Template))
	if err != nil {
		return nil, nil, fmt.Errorf("template: %w", err)
	}
	cons, err := readOne(filepath.Join(dir, t.Constraint))
	if err != nil {
		return nil, nil, fmt.Errorf("constraint: %w", err)
	}
	e, err := opa.New(ctx, eopts)
	if err != nil {
		return nil, nil, err
	}
	if errs := e.Apply(ctx, []opa.Change{{Object: tmpl}}); len(errs) > 0 {
		e.Close(ctx)
		return nil, nil, fmt.Errorf("add template: %w", errs[0])
	}
	if errs := e.Apply(ctx, []opa.Change{{Object: cons}}); len(errs) > 0 {
		return e, errs[0], nil
	}
	// A constraint the engine holds but does not enforce (a kind no
	// template defines: a typo) would pass every "no violations" case.
	for _, cs := range e.Status().Constraints {
		if !cs.Active {
			return e, fmt.Errorf("constraint %s/%s is not in force: %s", cs.Kind, cs.Name, cs.Inactive), nil
		}
	}
	return e, nil, nil
}

func runInvalid(ctx context.Context, dir string, t Test, eopts opa.Options) error {
	e, consErr, err := newEngine(ctx, dir, t, eopts)
	if err != nil {
		return err
	}
	defer e.Close(ctx)
	if consErr == nil {
		return errors.New("the constraint was accepted, but the test expects it to be invalid")
	}
	return nil
}

func runCase(ctx context.Context, dir string, t Test, c Case, eopts opa.Options) error {
	if c.Object == "" {
		return errors.New("case must define object")
	}
	if len(c.Assertions) == 0 {
		return errors.New("assertions must be non-empty")
	}
	e, consErr, err := newEngine(ctx, dir, t, eopts)
	if err != nil {
		return err
	}
	defer e.Close(ctx)
	if consErr != nil {
		return fmt.Errorf("add constraint: %w", consErr)
	}
	obj, err := readOne(filepath.Join(dir, c.Object))
	if err != nil {
		return fmt.Errorf("object: %w", err)
	}
	var inventory []*unstructured.Unstructured
	for _, p := range c.Inventory {
		objs, err := source.ReadFile(filepath.Join(dir, p))
		if err != nil {
			return fmt.Errorf("inventory: %w", err)
		}
		inventory = append(inventory, objs...)
	}
	changes := make([]opa.Change, 0, len(inventory))
	for _, o := range inventory {
		changes = append(changes, opa.Change{Object: o})
	}
	if errs := e.Apply(ctx, changes); len(errs) > 0 {
		return fmt.Errorf("add inventory: %w", errs[0])
	}
	req, err := reviewRequest(obj, inventory)
	if err != nil {
		return err
	}
	violations, err := e.Review(ctx, req)
	if err != nil {
		return fmt.Errorf("review: %w", err)
	}
	// As gator: a constraint whose scopedEnforcementActions leave out the
	// enforcement point judges nothing here.
	violations = slices.DeleteFunc(violations, func(v opa.Violation) bool { return v.Action == "" })
	for i, a := range c.Assertions {
		if err := a.check(violations); err != nil {
			return fmt.Errorf("assertion %d: %w", i+1, err)
		}
	}
	return nil
}

func readOne(path string) (*unstructured.Unstructured, error) {
	objs, err := source.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(objs) != 1 {
		return nil, fmt.Errorf("%s defines %d objects, want 1", path, len(objs))
	}
	return objs[0], nil
}

// reviewRequest turns a case's object into a review: an AdmissionReview
// is reviewed as its request, anything else as a plain object.
func reviewRequest(obj *unstructured.Unstructured, inventory []*unstructured.Unstructured) (opa.ReviewRequest, error) {
	if obj.GetKind() == "AdmissionReview" && obj.GroupVersionKind().Group == "admission.k8s.io" {
		return admissionRequest(obj, inventory)
	}
	req := opa.ReviewRequest{Object: obj.Object, Name: obj.GetName(), Namespace: obj.GetNamespace()}
	req.NamespaceObject = findNamespace(inventory, obj.GetNamespace())
	return req, nil
}

func admissionRequest(obj *unstructured.Unstructured, inventory []*unstructured.Unstructured) (opa.ReviewRequest, error) {
	request, ok := obj.Object["request"].(map[string]any)
	if !ok {
		return opa.ReviewRequest{}, errors.New("AdmissionReview has no request")
	}
	object, _ := request["object"].(map[string]any)
	oldObject, _ := request["oldObject"].(map[string]any)
	if object == nil && oldObject == nil {
		return opa.ReviewRequest{}, errors.New(`AdmissionRequest has neither "object" nor "oldObject" to review`)
	}
	operation, _ := request["operation"].(string)
	if operation == "DELETE" && object == nil {
		// Gatekeeper reviews a DELETE's old object as the object.
		object = oldObject
	}
	req := opa.ReviewRequest{Object: object, OldObject: oldObject, Operation: operation, Extra: map[string]any{}}
	if u, ok := request["userInfo"].(map[string]any); ok {
		req.UserInfo = u
	}
	if k, ok := request["kind"].(map[string]any); ok {
		req.Kind = schema.GroupVersionKind{Group: str(k["group"]), Version: str(k["version"]), Kind: str(k["kind"])}
	}
	if r, ok := request["resource"].(map[string]any); ok {
		req.Resource = schema.GroupVersionResource{Group: str(r["group"]), Version: str(r["version"]), Resource: str(r["resource"])}
	}
	req.Name, req.Namespace = str(request["name"]), str(request["namespace"])
	ref := object
	if ref == nil {
		ref = oldObject
	}
	if req.Kind.Kind == "" {
		u := &unstructured.Unstructured{Object: ref}
		req.Kind = u.GroupVersionKind()
	}
	if req.Name == "" {
		req.Name = (&unstructured.Unstructured{Object: ref}).GetName()
	}
	for _, k := range []string{"uid", "subResource", "requestKind", "requestResource", "requestSubResource", "dryRun", "options"} {
		if v, ok := request[k]; ok {
			req.Extra[k] = v
		}
	}
	ns := req.Namespace
	if ns == "" {
		ns = (&unstructured.Unstructured{Object: ref}).GetNamespace()
	}
	req.NamespaceObject = findNamespace(inventory, ns)
	return req, nil
}

func str(v any) string { s, _ := v.(string); return s }

// findNamespace gives the object's Namespace from the case's inventory,
// or {} when there is none: Gatekeeper passes an empty Namespace, which
// Rego sees as an empty object, never null.
func findNamespace(inventory []*unstructured.Unstructured, name string) map[string]any {
	if name != "" {
		for _, o := range inventory {
			if o.GetKind() == "Namespace" && o.GroupVersionKind().Group == "" && o.GetName() == name {
				return o.Object
			}
		}
	}
	return map[string]any{}
}

func (a Assertion) check(violations []opa.Violation) error {
	var re *regexp.Regexp
	if a.Message != nil {
		var err error
		if re, err = regexp.Compile(*a.Message); err != nil {
			return fmt.Errorf("invalid message regular expression: %w", err)
		}
	}
	matching := 0
	var messages []string
	for _, v := range violations {
		messages = append(messages, v.Message)
		if re == nil || re.MatchString(v.Message) {
			matching++
		}
	}
	var want intstr.IntOrString
	switch v := a.Violations.(type) {
	case nil:
		want = intstr.FromString("yes")
	case bool:
		want = intstr.FromString(map[bool]string{true: "yes", false: "no"}[v])
	case string:
		want = intstr.FromString(v)
	case float64:
		if v != float64(int32(v)) {
			return fmt.Errorf("violations: %v is not an integer", v)
		}
		want = intstr.FromInt32(int32(v))
	default:
		return fmt.Errorf(`violations: %v: want a nonnegative integer, "yes" or "no"`, v)
	}
	about := ""
	if a.Message != nil {
		about = fmt.Sprintf(" matching %q", *a.Message)
	}
	switch {
	case want.Type == intstr.Int:
		if want.IntVal < 0 {
			return errors.New(`violations must be a nonnegative integer, "yes" or "no"`)
		}
		if int(want.IntVal) != matching {
			return fmt.Errorf("got %d violations%s, want %d; messages: %q", matching, about, want.IntVal, messages)
		}
	case want.StrVal == "yes":
		if matching == 0 {
			return fmt.Errorf("got no violations%s, want at least one; messages: %q", about, messages)
		}
	case want.StrVal == "no":
		if matching > 0 {
			return fmt.Errorf("got %d violations%s, want none; messages: %q", matching, about, messages)
		}
	default:
		return fmt.Errorf(`violations: %q: want a nonnegative integer, "yes" or "no"`, want.StrVal)
	}
	return nil
}
