package perf

import (
	"fmt"
	"path/filepath"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/source"
)

// Dirs are the folders the policies come from.
type Dirs struct {
	// Library is gatekeeper-library's library/ folder (the shared/ folder
	// beside the repository clone: ../../shared/gatekeeper-library/library
	// from bench/).
	Library string
	// Examples is the repository's deploy/examples (../deploy/examples from
	// bench/).
	Examples string
	// Realistic holds the placement templates of the realistic set
	// (testdata/realistic from bench/).
	Realistic string
}

// DefaultDirs resolves the folders relative to the bench/ directory.
func DefaultDirs(benchDir string) Dirs {
	return Dirs{
		Library:   filepath.Join(benchDir, "..", "..", "shared", "gatekeeper-library", "library"),
		Examples:  filepath.Join(benchDir, "..", "deploy", "examples"),
		Realistic: filepath.Join(benchDir, "testdata", "realistic"),
	}
}

// Check fails with a message that says what is missing and where it was
// looked for.
func (d Dirs) Check() error {
	if err := d.checkLibrary(); err != nil {
		return err
	}
	tmpls, _ := filepath.Glob(filepath.Join(d.Examples, "*", "template.yaml"))
	if len(tmpls) != 4 {
		abs, _ := filepath.Abs(d.Examples)
		return fmt.Errorf("want the 4 placement templates in %s/*/template.yaml, found %d", abs, len(tmpls))
	}
	return nil
}

// Policy is one ConstraintTemplate with the constraints loaded for it.
type Policy struct {
	// Source names where it came from: "general/allowedrepos" or
	// "examples/tenant-isolation".
	Source      string
	Template    *unstructured.Unstructured
	Constraints []*unstructured.Unstructured
}

// LibrarySample names a library template and the sample whose
// constraint.yaml is loaded with it.
type LibrarySample struct{ Dir, Sample string }

// MixLibrary is the library part of the load generator's policy mix: 16 of
// the library's Pod templates, a Pod Security baseline plus image and
// resource hygiene, each with one of its sample constraints as shipped
// (two of them, allowedrepos and disallowedtags, only match namespace
// "default"). With the four placement examples that makes 20 constraints.
var MixLibrary = []LibrarySample{
	{"general/allowedrepos", "repo-must-be-openpolicyagent"},
	{"general/disallowedrepos", "repo-must-not-be-k8s-gcr-io"},
	{"general/disallowedtags", "container-image-must-not-have-latest-tag"},
	{"general/containerlimits", "container-must-have-limits"},
	{"general/containerrequests", "container-must-have-requests"},
	{"general/requiredprobes", "must-have-probes"},
	{"pod-security-policy/privileged-containers", "psp-privileged-container"},
	{"pod-security-policy/host-namespaces", "psp-host-namespace"},
	{"pod-security-policy/host-network-ports", "psp-host-network-ports"},
	{"pod-security-policy/host-filesystem", "psp-host-filesystem"},
	{"pod-security-policy/capabilities", "psp-capabilities-baseline"},
	{"pod-security-policy/allow-privilege-escalation", "psp-allow-privilege-escalation-container"},
	{"pod-security-policy/proc-mount", "psp-proc-mount"},
	{"pod-security-policy/seccompv2", "psp-seccomp-baseline"},
	{"pod-security-policy/forbidden-sysctls", "psp-forbidden-sysctls"},
	{"pod-security-policy/volumes", "psp-volume-types"},
}

// Policy set names.
const (
	SetMix = "mix" // MixLibrary + the 4 examples: 20 constraints
	SetAll = "all" // every library template + the 4 examples, one sample constraint each
	// SetRealistic is every library template with one sample constraint,
	// each constraint warn at this enforcement point, plus the five
	// placement templates of testdata/realistic (see LoadRealistic).
	SetRealistic = "realistic"
)

// PolicySets are the policy set names LoadSet knows.
var PolicySets = []string{SetMix, SetAll, SetRealistic}

// LoadSet reads the named policy set.
func LoadSet(d Dirs, set string) ([]Policy, error) {
	switch set {
	case SetMix:
		return LoadMix(d)
	case SetAll:
		return LoadAll(d)
	case SetRealistic:
		return LoadRealistic(d)
	}
	return nil, fmt.Errorf("unknown policy set %q (want %q, %q or %q)", set, SetMix, SetAll, SetRealistic)
}

// LoadExtra reads policies laid out as the examples are (each folder's
// template.yaml and constraint.yaml) below dir, to add to a set: for
// example testdata/inventory-readers, templates that read inventory
// objects besides the candidate node.
func LoadExtra(dir string) ([]Policy, error) {
	tmpls, err := filepath.Glob(filepath.Join(dir, "*", "template.yaml"))
	if err != nil {
		return nil, err
	}
	if len(tmpls) == 0 {
		return nil, fmt.Errorf("no */template.yaml below %s", dir)
	}
	return folderPolicies(tmpls, "extra/")
}

// LoadMix reads MixLibrary and the four placement examples.
func LoadMix(d Dirs) ([]Policy, error) {
	if err := d.Check(); err != nil {
		return nil, err
	}
	var out []Policy
	for _, s := range MixLibrary {
		p, err := libraryPolicy(d, s)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	ex, err := examplePolicies(d)
	if err != nil {
		return nil, err
	}
	return append(out, ex...), nil
}

// LoadAll reads every template of the library (49) with one sample
// constraint each (the MixLibrary sample where there is one, else the
// first sample in name order), and the four placement examples.
func LoadAll(d Dirs) ([]Policy, error) {
	if err := d.Check(); err != nil {
		return nil, err
	}
	out, err := libraryAll(d)
	if err != nil {
		return nil, err
	}
	ex, err := examplePolicies(d)
	if err != nil {
		return nil, err
	}
	return append(out, ex...), nil
}

// libraryAll reads every template of the library with one sample
// constraint each, in path order: the library part of LoadAll.
func libraryAll(d Dirs) ([]Policy, error) {
	chosen := map[string]string{}
	for _, s := range MixLibrary {
		chosen[s.Dir] = s.Sample
	}
	tmpls, err := filepath.Glob(filepath.Join(d.Library, "*", "*", "template.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(tmpls)
	var out []Policy
	for _, tf := range tmpls {
		dir := filepath.Dir(tf)
		rel, _ := filepath.Rel(d.Library, dir)
		rel = filepath.ToSlash(rel)
		sample := chosen[rel]
		if sample == "" {
			samples, _ := filepath.Glob(filepath.Join(dir, "samples", "*", "constraint.yaml"))
			if len(samples) == 0 {
				return nil, fmt.Errorf("%s: no sample constraint", rel)
			}
			sort.Strings(samples)
			sample = filepath.Base(filepath.Dir(samples[0]))
		}
		p, err := libraryPolicy(d, LibrarySample{Dir: rel, Sample: sample})
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func libraryPolicy(d Dirs, s LibrarySample) (Policy, error) {
	dir := filepath.Join(d.Library, filepath.FromSlash(s.Dir))
	t, err := readOne(filepath.Join(dir, "template.yaml"))
	if err != nil {
		return Policy{}, err
	}
	c, err := readOne(filepath.Join(dir, "samples", s.Sample, "constraint.yaml"))
	if err != nil {
		return Policy{}, err
	}
	return Policy{Source: s.Dir, Template: t, Constraints: []*unstructured.Unstructured{c}}, nil
}

func examplePolicies(d Dirs) ([]Policy, error) {
	tmpls, err := filepath.Glob(filepath.Join(d.Examples, "*", "template.yaml"))
	if err != nil {
		return nil, err
	}
	return folderPolicies(tmpls, "examples/")
}

// folderPolicies reads policies laid out as the examples are: each
// folder's template.yaml with the constraints of its constraint.yaml (at
// least one), Source the prefix and the folder's name, in path order.
func folderPolicies(templates []string, prefix string) ([]Policy, error) {
	sort.Strings(templates)
	var out []Policy
	for _, tf := range templates {
		dir := filepath.Dir(tf)
		t, err := readOne(tf)
		if err != nil {
			return nil, err
		}
		cons, err := source.ReadFile(filepath.Join(dir, "constraint.yaml"))
		if err != nil {
			return nil, err
		}
		if len(cons) == 0 {
			return nil, fmt.Errorf("%s: no constraint", filepath.Join(dir, "constraint.yaml"))
		}
		out = append(out, Policy{Source: prefix + filepath.Base(dir), Template: t, Constraints: cons})
	}
	return out, nil
}

// readOne reads a file of exactly one object with the service's own YAML
// reader (what --policy-dir uses). This package does not import the
// framework, so that a binary built on it holds what the service holds;
// the peer gets the same objects.
func readOne(path string) (*unstructured.Unstructured, error) {
	objs, err := source.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(objs) != 1 {
		return nil, fmt.Errorf("%s: want one object, found %d", path, len(objs))
	}
	return objs[0], nil
}

// CountConstraints is the number of constraints in ps.
func CountConstraints(ps []Policy) int {
	n := 0
	for _, p := range ps {
		n += len(p.Constraints)
	}
	return n
}

// CountDenyConstraints is the number of constraints in ps that deny here:
// ActionAnnotation's action when it is set, else spec.enforcementAction,
// deny when absent (Gatekeeper's default). It is what DenyConstraints
// finds in force, without an engine, for constraints that use neither
// scoped actions nor enforcement points.
func CountDenyConstraints(ps []Policy) int {
	n := 0
	for _, p := range ps {
		for _, c := range p.Constraints {
			a, found := c.GetAnnotations()[ActionAnnotation]
			if !found {
				a, _, _ = unstructured.NestedString(c.Object, "spec", "enforcementAction")
			}
			if a == "" || a == "deny" {
				n++
			}
		}
	}
	return n
}
