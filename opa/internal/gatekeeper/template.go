package gatekeeper

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/format"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/policy"
)

// ErrInvalidTemplate marks a ConstraintTemplate Gatekeeper would refuse.
var ErrInvalidTemplate = errors.New("invalid ConstraintTemplate")

// kindPattern is what a CRD kind may look like; the kind becomes a Rego
// package segment, so nothing else is let through.
var kindPattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*$`)

// Template is a parsed ConstraintTemplate: the code of the engine that
// runs it (Gatekeeper's choice) and its parameter schema. Rego code is
// rewritten and isolated under the template's own namespace.
type Template struct {
	Name       string
	Kind       string
	Generation int64
	// Engine is EngineRego or EngineCEL: the code this template runs.
	Engine string
	// rego is the Rego as given (Rego only): Modules parses it anew.
	rego *regoSource
	// Texts are the rewritten modules as source, for the store, keyed by
	// module id (Rego only).
	Texts map[string][]byte
	// CEL is the K8sNativeValidation code (EngineCEL only).
	CEL *CELSource
	// FailurePolicy is the CEL code's, defaults applied (EngineCEL only).
	FailurePolicy string
	// schema is spec.crd.spec.validation.openAPIV3Schema (may be nil).
	Schema map[string]any
	// legacySchema: v1beta1 and v1alpha1 templates keep unknown parameter
	// fields, as Gatekeeper's legacy schemas do.
	LegacySchema bool
	// source is the object as given, to compare versions.
	ResourceVersion string
}

// queryRef is where the template's violation rule lives once isolated.
func (t *Template) QueryRef() ast.Ref {
	return TemplateRoot(t.Kind).Append(ast.StringTerm("template")).Append(ast.StringTerm("violation"))
}

// templateRoot is the private namespace of one template: data.templates[kind].
func TemplateRoot(kind string) ast.Ref {
	return ast.Ref{ast.DefaultRootDocument, ast.StringTerm("templates"), ast.StringTerm(kind)}
}

// regoSource is the Rego a template's single target carries.
type regoSource struct {
	rego    string
	libs    []string
	version ast.RegoVersion
}

// ParseTemplate reads a ConstraintTemplate (v1, v1beta1 or v1alpha1: the
// fields used here are the same) and the code Gatekeeper would run, with
// its Rego rewritten into isolated modules.
func ParseTemplate(u *unstructured.Unstructured, opts ParseOptions) (*Template, error) {
	name := u.GetName()
	if name == "" {
		return nil, fmt.Errorf("%w: metadata.name is empty", ErrInvalidTemplate)
	}
	kind, _, _ := unstructured.NestedString(u.Object, "spec", "crd", "spec", "names", "kind")
	if kind == "" {
		return nil, fmt.Errorf("%w: spec.crd.spec.names.kind is empty", ErrInvalidTemplate)
	}
	if !kindPattern.MatchString(kind) {
		return nil, fmt.Errorf("%w: kind %q is not a valid CRD kind", ErrInvalidTemplate, kind)
	}
	// Gatekeeper requires the template's name to be its kind in lower case.
	if name != strings.ToLower(kind) {
		return nil, fmt.Errorf("%w: metadata.name %q must be the lower-case kind %q", ErrInvalidTemplate, name, strings.ToLower(kind))
	}
	src, err := templateCode(u, opts)
	if err != nil {
		return nil, err
	}
	rawSchema, _, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "crd", "spec", "validation", "openAPIV3Schema")
	schema, _ := rawSchema.(map[string]any)
	if err := unsupportedSchemaError(schema); err != nil {
		return nil, err
	}
	t := &Template{
		Name:            name,
		Kind:            kind,
		Generation:      u.GetGeneration(),
		Engine:          EngineRego,
		Texts:           map[string][]byte{},
		Schema:          schema,
		LegacySchema:    u.GroupVersionKind().Version != "v1",
		ResourceVersion: u.GetResourceVersion(),
	}
	if src.cel != nil {
		t.Engine, t.CEL, t.FailurePolicy = EngineCEL, src.cel, src.cel.Policy(opts.DefaultFailurePolicy)
		return t, nil
	}
	if err := t.addModules(src.rego); err != nil {
		return nil, err
	}
	return t, nil
}

// templateSource is the code a template runs: its Rego, or its CEL.
type templateSource struct {
	rego regoSource
	cel  *CELSource
}

// templateCode picks the code of the template's only target as Gatekeeper
// picks a driver: K8sNativeValidation first (unless disabled), then Rego.
func templateCode(u *unstructured.Unstructured, opts ParseOptions) (templateSource, error) {
	target, err := onlyTarget(u)
	if err != nil {
		return templateSource{}, err
	}
	codes, _ := target["code"].([]any)
	celAt := -1
	for i, c := range codes {
		if code, ok := c.(map[string]any); ok && code["engine"] == EngineCEL {
			celAt = i
			break
		}
	}
	if celAt >= 0 && !opts.DisableK8sNativeValidation {
		code := codes[celAt].(map[string]any)
		src, err := parseCELSource(code["source"], fmt.Sprintf("spec.targets[0].code[%d].source", celAt))
		if err != nil {
			return templateSource{}, err
		}
		return templateSource{cel: src}, nil
	}
	rego, found, err := targetRego(target)
	switch {
	case err != nil:
		return templateSource{}, err
	case found:
		return templateSource{rego: rego}, nil
	case celAt >= 0:
		return templateSource{}, fmt.Errorf("%w: the target's only code is K8sNativeValidation (CEL), and K8sNativeValidation is disabled (--enable-k8s-native-validation=false)", ErrInvalidTemplate)
	}
	return templateSource{}, fmt.Errorf("%w: the target has no code this engine runs (Rego or K8sNativeValidation)", ErrInvalidTemplate)
}

// onlyTarget is the template's only target, which must be Gatekeeper's
// admission target.
func onlyTarget(u *unstructured.Unstructured) (map[string]any, error) {
	raw, found, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "targets")
	targets, ok := raw.([]any)
	if found && !ok {
		return nil, fmt.Errorf("%w: spec.targets must be a list", ErrInvalidTemplate)
	}
	if !found || len(targets) != 1 {
		return nil, fmt.Errorf("%w: exactly one target is required, found %d", ErrInvalidTemplate, len(targets))
	}
	target, ok := targets[0].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: spec.targets[0] is not an object", ErrInvalidTemplate)
	}
	if name, _ := target["target"].(string); name != policy.TargetName {
		return nil, fmt.Errorf("%w: target %q is not supported (only %s)", ErrInvalidTemplate, name, policy.TargetName)
	}
	return target, nil
}

// targetRego picks the target's Rego: a non-empty `rego` field (Rego v0)
// wins over a `code` entry of engine Rego, whose source is Rego v1 only
// when it says version "v1". found is false when there is none.
func targetRego(target map[string]any) (src regoSource, found bool, err error) {
	if rego, _ := target["rego"].(string); strings.TrimSpace(rego) != "" {
		libs, err := stringList(target["libs"], "spec.targets[0].libs")
		if err != nil {
			return regoSource{}, true, err
		}
		return regoSource{rego: rego, libs: libs, version: ast.RegoV0}, true, nil
	}
	codes, _ := target["code"].([]any)
	for i, c := range codes {
		code, ok := c.(map[string]any)
		if !ok || code["engine"] != EngineRego {
			continue
		}
		source, ok := code["source"].(map[string]any)
		if !ok {
			return regoSource{}, true, fmt.Errorf("%w: spec.targets[0].code[%d].source is not an object", ErrInvalidTemplate, i)
		}
		rego, _ := source["rego"].(string)
		if strings.TrimSpace(rego) == "" {
			return regoSource{}, true, fmt.Errorf("%w: spec.targets[0].code[%d].source.rego is empty", ErrInvalidTemplate, i)
		}
		libs, err := stringList(source["libs"], fmt.Sprintf("spec.targets[0].code[%d].source.libs", i))
		if err != nil {
			return regoSource{}, true, err
		}
		version := ast.RegoV0
		if v, _ := source["version"].(string); v == "v1" {
			version = ast.RegoV1
		}
		return regoSource{rego: rego, libs: libs, version: version}, true, nil
	}
	return regoSource{}, false, nil
}

func stringList(v any, field string) ([]string, error) {
	if v == nil {
		return nil, nil
	}
	items, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: %s is not a list", ErrInvalidTemplate, field)
	}
	out := make([]string, 0, len(items))
	for i, it := range items {
		s, ok := it.(string)
		if !ok {
			return nil, fmt.Errorf("%w: %s[%d] is not a string", ErrInvalidTemplate, field, i)
		}
		out = append(out, s)
	}
	return out, nil
}

// addModules parses, checks and isolates the template's Rego (see
// parseModules), keeping its source and the rewritten modules' texts.
func (t *Template) addModules(src regoSource) error {
	modules, err := parseModules(t.Name, t.Kind, src)
	if err != nil {
		return err
	}
	for id, m := range modules {
		text, err := format.AstWithOpts(m, format.Opts{RegoVersion: src.version, ParserOptions: &ast.ParserOptions{RegoVersion: src.version}})
		if err != nil {
			// The text only documents the module in the store; the
			// compiled AST is what runs.
			text = []byte(m.String())
		}
		t.Texts[id] = text
	}
	t.rego = &src
	return nil
}

// Modules are the template's Rego, rewritten and isolated, keyed by module
// id (the keys of Texts; none for a CEL template), parsed anew at each
// call: the caller may compile them, which changes them. The template
// keeps its source, not the parsed modules, which a compiler copied
// before compiling and which stayed beside its copies: for the realistic
// set's Rego templates 26,000 objects fewer that every garbage collection
// marks (bench/HISTORY.md), for a parse of every Rego template at each
// compile (about 10 ms for that set, when a template changes).
func (t *Template) Modules() (map[string]*ast.Module, error) {
	if t.rego == nil {
		return map[string]*ast.Module{}, nil
	}
	modules, err := parseModules(t.Name, t.Kind, *t.rego)
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", t.Name, err)
	}
	return modules, nil
}

// parseModules parses, checks and isolates a template's Rego: its package
// becomes data.templates[kind].template, its libs move from data.lib.* to
// data.templates[kind].lib.*, and every data.lib reference follows them.
func parseModules(name, kind string, src regoSource) (map[string]*ast.Module, error) {
	opts := ast.ParserOptions{RegoVersion: src.version, ProcessAnnotation: true}
	root := TemplateRoot(kind)
	path := func(id string) string { return "templates/" + name + "/" + id + ".rego" }
	modules := make(map[string]*ast.Module, 1+len(src.libs))

	entry, err := ast.ParseModuleWithOpts(name+"/template.rego", src.rego, opts)
	if err != nil {
		return nil, fmt.Errorf("%w: parse rego: %v", ErrInvalidTemplate, err)
	}
	if entry == nil {
		return nil, fmt.Errorf("%w: rego is empty", ErrInvalidTemplate)
	}
	if !hasRule(entry, "violation") {
		return nil, fmt.Errorf("%w: rego has no violation rule", ErrInvalidTemplate)
	}
	if err := checkRefs(entry); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidTemplate, err)
	}
	entry.Package.Path = root.Append(ast.StringTerm("template"))
	rewriteLibRefs(entry, root)
	modules[path("template")] = entry

	for i, libSrc := range src.libs {
		id := fmt.Sprintf("lib_%d", i)
		lib, err := ast.ParseModuleWithOpts(name+"/"+id+".rego", libSrc, opts)
		if err != nil {
			return nil, fmt.Errorf("%w: parse lib %d: %v", ErrInvalidTemplate, i, err)
		}
		if lib == nil {
			return nil, fmt.Errorf("%w: lib %d is empty", ErrInvalidTemplate, i)
		}
		if !isLibRef(lib.Package.Path) {
			return nil, fmt.Errorf("%w: lib %d: package %v must be under data.lib", ErrInvalidTemplate, i, lib.Package.Path)
		}
		if err := checkRefs(lib); err != nil {
			return nil, fmt.Errorf("%w: lib %d: %v", ErrInvalidTemplate, i, err)
		}
		lib.Package.Path = root.Concat(lib.Package.Path[1:])
		rewriteLibRefs(lib, root)
		modules[path(id)] = lib
	}
	return modules, nil
}

func hasRule(m *ast.Module, name string) bool {
	for _, r := range m.Rules {
		if r.Head.Name.String() == name || (len(r.Head.Reference) > 0 && r.Head.Reference[0].Value.Compare(ast.Var(name)) == 0) {
			return true
		}
	}
	return false
}

// isLibRef reports whether ref is data.lib or below it.
func isLibRef(ref ast.Ref) bool {
	return len(ref) >= 2 && ref[0].Equal(ast.DefaultRootDocument) && ref[1].Equal(ast.StringTerm("lib"))
}

func isInventoryRef(ref ast.Ref) bool {
	return len(ref) >= 2 && ref[0].Equal(ast.DefaultRootDocument) && ref[1].Equal(ast.StringTerm("inventory"))
}

// checkRefs enforces Gatekeeper's rules: the only data a template may read
// is data.lib.* and data.inventory; it may import only data.lib.* and
// future.* (Gatekeeper's rewriter refuses an import of rego.v1).
func checkRefs(m *ast.Module) error {
	for _, imp := range m.Imports {
		ref, ok := imp.Path.Value.(ast.Ref)
		if !ok {
			return fmt.Errorf("import %v is not a reference", imp.Path)
		}
		head := ref[0].Value.String()
		// Gatekeeper's rewriter refuses `import rego.v1` too (v3.23.1).
		switch {
		case head == "future":
		case isLibRef(ref):
		default:
			return fmt.Errorf("import %v is not allowed: only data.lib.* and future.* may be imported", imp.Path)
		}
	}
	var errs []string
	var visit func(x any) bool
	visit = func(x any) bool {
		switch v := x.(type) {
		case ast.Ref:
			if v[0].Equal(ast.DefaultRootDocument) && !isLibRef(v) && !isInventoryRef(v) {
				errs = append(errs, fmt.Sprintf("reference %v is not allowed: only data.lib.* and data.inventory may be read", v))
			}
			for _, t := range v[1:] {
				ast.NewGenericVisitor(visit).Walk(t)
			}
			return true
		case ast.Var:
			if v.Equal(ast.DefaultRootDocument.Value) {
				errs = append(errs, "reading the whole data document is not allowed")
			}
		}
		return false
	}
	for _, r := range m.Rules {
		ast.NewGenericVisitor(visit).Walk(r)
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// rewriteLibRefs points every data.lib.* reference and import of m into the
// template's own namespace.
func rewriteLibRefs(m *ast.Module, root ast.Ref) {
	move := func(ref ast.Ref) ast.Ref {
		if !isLibRef(ref) {
			return ref
		}
		return root.Concat(ref[1:])
	}
	for _, imp := range m.Imports {
		if ref, ok := imp.Path.Value.(ast.Ref); ok && isLibRef(ref) {
			imp.Path = ast.NewTerm(move(ref))
		}
	}
	for _, r := range m.Rules {
		ast.WalkTerms(r, func(t *ast.Term) bool {
			if ref, ok := t.Value.(ast.Ref); ok && isLibRef(ref) {
				t.Value = move(ref)
			}
			return false
		})
	}
}
