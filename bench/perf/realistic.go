package perf

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ActionAnnotation sets a constraint's action at this enforcement point
// (the service's documented annotation; Gatekeeper ignores it).
const ActionAnnotation = "opa-scheduler-extender/enforcement-action"

// RealisticPlacementTemplates is the number of placement templates in
// testdata/realistic.
const RealisticPlacementTemplates = 5

// RealisticSourcePrefix starts the Source of the realistic set's
// placement policies ("realistic/tenant-nodes").
const RealisticSourcePrefix = "realistic/"

// LoadRealistic reads the realistic policy set: what a cluster that runs
// Gatekeeper's whole library and adds its own placement rules looks like
// to this service. Every library template, each with one sample
// constraint (as LoadAll loads them), every such constraint made warn
// here by the ActionAnnotation (Gatekeeper's own action is left as
// shipped; the templates are not touched), plus the five placement
// templates of testdata/realistic, written the way users write them:
// their messages name the node and the pod (three deny, two warn).
func LoadRealistic(d Dirs) ([]Policy, error) {
	if err := d.checkLibrary(); err != nil {
		return nil, err
	}
	lib, err := libraryAll(d)
	if err != nil {
		return nil, err
	}
	for i := range lib {
		for j, c := range lib[i].Constraints {
			c = c.DeepCopy()
			anns := c.GetAnnotations()
			if anns == nil {
				anns = map[string]string{}
			}
			anns[ActionAnnotation] = "warn"
			c.SetAnnotations(anns)
			lib[i].Constraints[j] = c
		}
	}
	pl, err := realisticPolicies(d)
	if err != nil {
		return nil, err
	}
	return append(lib, pl...), nil
}

// IsRealisticPlacement reports whether p is one of the realistic set's
// own placement templates (not the library's).
func IsRealisticPlacement(p Policy) bool { return strings.HasPrefix(p.Source, RealisticSourcePrefix) }

func realisticPolicies(d Dirs) ([]Policy, error) {
	tmpls, err := filepath.Glob(filepath.Join(d.Realistic, "*", "template.yaml"))
	if err != nil {
		return nil, err
	}
	if len(tmpls) != RealisticPlacementTemplates {
		abs, _ := filepath.Abs(d.Realistic)
		return nil, fmt.Errorf("want the %d placement templates of the realistic set in %s/*/template.yaml (bench/testdata/realistic; set -realistic), found %d",
			RealisticPlacementTemplates, abs, len(tmpls))
	}
	return folderPolicies(tmpls, RealisticSourcePrefix)
}

// checkLibrary is the library half of Check.
func (d Dirs) checkLibrary() error {
	if fi, err := os.Stat(filepath.Join(d.Library, "pod-security-policy")); err != nil || !fi.IsDir() {
		abs, _ := filepath.Abs(d.Library)
		return fmt.Errorf("gatekeeper-library not found at %s (expected the shared/ folder beside the repository clone, i.e. ../../shared/gatekeeper-library/library from bench/; set -library): %v", abs, err)
	}
	return nil
}

// LibraryTemplates counts the library's templates (library/*/*/template.yaml).
func LibraryTemplates(d Dirs) (int, error) {
	tmpls, err := filepath.Glob(filepath.Join(d.Library, "*", "*", "template.yaml"))
	return len(tmpls), err
}
