package cluster

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// The ConstraintTemplate CRD, verbatim from the constraint framework module
// version that gatekeeper v3.23.1 requires.
//
//go:embed crds/templates.gatekeeper.sh_constrainttemplates.yaml
var constraintTemplateCRDYAML []byte

// Gatekeeper v3.23.1's match CRD (pkg/target/matchcrd_constant.go); its
// embeddedMatch property is the schema of spec.match in every constraint CRD.
//
//go:embed crds/gatekeeper-match.yaml
var gatekeeperMatchCRDYAML []byte

const (
	// TemplatesGroup is the API group of ConstraintTemplates.
	TemplatesGroup = "templates.gatekeeper.sh"
	// ConstraintsGroup is the API group of constraints.
	ConstraintsGroup = "constraints.gatekeeper.sh"
	// ConstraintTemplateCRDName is the name of the ConstraintTemplate CRD.
	ConstraintTemplateCRDName = "constrainttemplates.templates.gatekeeper.sh"
)

// ConstraintTemplateGVR is the storage version (v1) of ConstraintTemplates;
// v1beta1 and v1alpha1 are served too.
var ConstraintTemplateGVR = schema.GroupVersionResource{Group: TemplatesGroup, Version: "v1", Resource: "constrainttemplates"}

// ConstraintGVR is the resource of constraints of a template kind, at the
// storage version Gatekeeper uses (v1beta1; v1alpha1 is served too).
func ConstraintGVR(kind string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: ConstraintsGroup, Version: "v1beta1", Resource: strings.ToLower(kind)}
}

// ConstraintTemplateCRD decodes the embedded ConstraintTemplate CRD.
func ConstraintTemplateCRD() (*apiextensionsv1.CustomResourceDefinition, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(constraintTemplateCRDYAML, crd); err != nil {
		return nil, fmt.Errorf("cluster: decoding the ConstraintTemplate CRD: %w", err)
	}
	return crd, nil
}

// GatekeeperMatchSchema returns the schema Gatekeeper v3.23.1 gives
// spec.match in constraint CRDs.
func GatekeeperMatchSchema() (*apiextensionsv1.JSONSchemaProps, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(gatekeeperMatchCRDYAML, crd); err != nil {
		return nil, fmt.Errorf("cluster: decoding Gatekeeper's match CRD: %w", err)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Schema == nil || crd.Spec.Versions[0].Schema.OpenAPIV3Schema == nil {
		return nil, fmt.Errorf("cluster: Gatekeeper's match CRD has no schema")
	}
	m, ok := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["embeddedMatch"]
	if !ok {
		return nil, fmt.Errorf("cluster: Gatekeeper's match CRD has no embeddedMatch")
	}
	return &m, nil
}

// ConstraintCRD builds the CRD Gatekeeper v3.23.1 generates for a
// ConstraintTemplate of the given kind (frameworks/constraint
// pkg/client/crds CreateSchema + CreateCRD): group constraints.gatekeeper.sh,
// plural and singular the lower-cased kind, cluster-scoped, categories
// constraint/constraints, versions v1beta1 (storage) and v1alpha1, status
// subresource, label gatekeeper.sh/constraint=yes, and a structural schema
// with spec.match (Gatekeeper's match schema), spec.enforcementAction
// (default "deny"), spec.scopedEnforcementActions and spec.parameters,
// status preserving unknown fields.
//
// parameters is the template's spec.crd.spec.validation.openAPIV3Schema as
// Gatekeeper passes it on; nil means {x-kubernetes-preserve-unknown-fields:
// true}, which is what a template with legacySchema: true and no schema gets
// (any parameters are kept). Note that Gatekeeper itself drops the
// parameters property entirely for a v1 template without a schema
// (legacySchema false); use ConstraintCRDForTemplate for exact behaviour.
func ConstraintCRD(kind string, parameters *apiextensionsv1.JSONSchemaProps) (*apiextensionsv1.CustomResourceDefinition, error) {
	if kind == "" {
		return nil, fmt.Errorf("cluster: constraint kind is empty")
	}
	if parameters == nil {
		parameters = &apiextensionsv1.JSONSchemaProps{XPreserveUnknownFields: ptr.To(true)}
	}
	return constraintCRD(kind, parameters, nil)
}

func constraintCRD(kind string, parameters *apiextensionsv1.JSONSchemaProps, labels map[string]string) (*apiextensionsv1.CustomResourceDefinition, error) {
	match, err := GatekeeperMatchSchema()
	if err != nil {
		return nil, err
	}
	deny := apiextensionsv1.JSON{Raw: []byte(`"deny"`)}
	specProps := map[string]apiextensionsv1.JSONSchemaProps{
		"match":             *match,
		"enforcementAction": {Type: "string", Default: &deny},
		"scopedEnforcementActions": {
			Type: "array",
			Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
				Type: "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"action": {Type: "string"},
					"enforcementPoints": {
						Type: "array",
						Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
							Type:       "object",
							Properties: map[string]apiextensionsv1.JSONSchemaProps{"name": {Type: "string"}},
						}},
					},
				},
			}},
		},
	}
	if parameters != nil {
		specProps["parameters"] = *parameters.DeepCopy()
	}
	sch := &apiextensionsv1.JSONSchemaProps{
		Type: "object",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"metadata": {
				Type:       "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{"name": {Type: "string", MaxLength: ptr.To[int64](63)}},
			},
			"spec":   {Type: "object", Properties: specProps},
			"status": {XPreserveUnknownFields: ptr.To(true)},
		},
	}
	columns := []apiextensionsv1.CustomResourceColumnDefinition{
		{Name: "enforcement-action", Description: "Type of enforcement action", JSONPath: ".spec.enforcementAction", Type: "string"},
		{Name: "total-violations", Description: "Total number of violations", JSONPath: ".status.totalViolations", Type: "integer"},
	}
	version := func(name string, storage bool) apiextensionsv1.CustomResourceDefinitionVersion {
		return apiextensionsv1.CustomResourceDefinitionVersion{
			Name:                     name,
			Served:                   true,
			Storage:                  storage,
			Schema:                   &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: sch.DeepCopy()},
			Subresources:             &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
			AdditionalPrinterColumns: append([]apiextensionsv1.CustomResourceColumnDefinition(nil), columns...),
		}
	}
	l := map[string]string{}
	for k, v := range labels {
		l[k] = v
	}
	l["gatekeeper.sh/constraint"] = "yes"
	lower := strings.ToLower(kind)
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: lower + "." + ConstraintsGroup, Labels: l},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: ConstraintsGroup,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Kind:       kind,
				ListKind:   kind + "List",
				Plural:     lower,
				Singular:   lower,
				Categories: []string{"constraint", "constraints"},
			},
			Scope:    apiextensionsv1.ClusterScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{version("v1beta1", true), version("v1alpha1", false)},
		},
	}, nil
}

// ConstraintCRDForTemplate builds the constraint CRD for a ConstraintTemplate
// object (as read from the API server or decoded from YAML) the way
// Gatekeeper does: kind and shortNames from spec.crd.spec.names, parameters
// from spec.crd.spec.validation.openAPIV3Schema, with legacySchema (default
// false for templates.gatekeeper.sh/v1, true for v1beta1/v1alpha1) adding
// x-kubernetes-preserve-unknown-fields to every object in it, and the
// template's labels.
func ConstraintCRDForTemplate(tmpl *unstructured.Unstructured) (*apiextensionsv1.CustomResourceDefinition, error) {
	kind, _, _ := unstructured.NestedString(tmpl.Object, "spec", "crd", "spec", "names", "kind")
	if kind == "" {
		return nil, fmt.Errorf("cluster: ConstraintTemplate %q has no spec.crd.spec.names.kind", tmpl.GetName())
	}
	legacy := !strings.HasSuffix(tmpl.GetAPIVersion(), "/v1")
	if v, found, _ := unstructured.NestedBool(tmpl.Object, "spec", "crd", "spec", "validation", "legacySchema"); found {
		legacy = v
	}
	var params *apiextensionsv1.JSONSchemaProps
	if raw, found, _ := unstructured.NestedMap(tmpl.Object, "spec", "crd", "spec", "validation", "openAPIV3Schema"); found {
		params = &apiextensionsv1.JSONSchemaProps{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, params); err != nil {
			return nil, fmt.Errorf("cluster: ConstraintTemplate %q openAPIV3Schema: %w", tmpl.GetName(), err)
		}
	} else if legacy {
		params = &apiextensionsv1.JSONSchemaProps{}
	}
	if params != nil && legacy {
		addPreserveUnknownFields(params)
	}
	crd, err := constraintCRD(kind, params, tmpl.GetLabels())
	if err != nil {
		return nil, err
	}
	if sn, found, _ := unstructured.NestedStringSlice(tmpl.Object, "spec", "crd", "spec", "names", "shortNames"); found {
		crd.Spec.Names.ShortNames = sn
	}
	return crd, nil
}

// addPreserveUnknownFields mirrors frameworks/constraint pkg/schema
// AddPreserveUnknownFields.
func addPreserveUnknownFields(s *apiextensionsv1.JSONSchemaProps) {
	switch s.Type {
	case "", "object":
		s.XPreserveUnknownFields = ptr.To(true)
	case "array":
		if s.Items == nil || (s.Items.Schema == nil && s.Items.JSONSchemas == nil) {
			s.Items = &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{XPreserveUnknownFields: ptr.To(true)}}
		}
	}
	for k, v := range s.Properties {
		addPreserveUnknownFields(&v)
		s.Properties[k] = v
	}
	if s.Items != nil {
		if s.Items.Schema != nil {
			addPreserveUnknownFields(s.Items.Schema)
		}
		for i := range s.Items.JSONSchemas {
			addPreserveUnknownFields(&s.Items.JSONSchemas[i])
		}
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		addPreserveUnknownFields(s.AdditionalProperties.Schema)
	}
}

// InstallGatekeeperCRDs creates (or updates) the ConstraintTemplate CRD and
// waits until it is Established.
func (c *Cluster) InstallGatekeeperCRDs(ctx context.Context) error {
	crd, err := ConstraintTemplateCRD()
	if err != nil {
		return err
	}
	return c.ApplyCRD(ctx, crd)
}

// CreateConstraintCRD creates (or updates) the constraint CRD for a template
// kind, as ConstraintCRD(kind, nil) builds it, and waits until Established.
func (c *Cluster) CreateConstraintCRD(ctx context.Context, kind string) error {
	return c.CreateConstraintCRDWithParameters(ctx, kind, nil)
}

// CreateConstraintCRDWithParameters is CreateConstraintCRD with the
// template's parameters schema (see ConstraintCRD).
func (c *Cluster) CreateConstraintCRDWithParameters(ctx context.Context, kind string, parameters *apiextensionsv1.JSONSchemaProps) error {
	crd, err := ConstraintCRD(kind, parameters)
	if err != nil {
		return err
	}
	return c.ApplyCRD(ctx, crd)
}

// CreateConstraintCRDForTemplate creates (or updates) the constraint CRD for
// a ConstraintTemplate object (see ConstraintCRDForTemplate) and waits until
// it is Established: what Gatekeeper's template controller would do.
func (c *Cluster) CreateConstraintCRDForTemplate(ctx context.Context, tmpl *unstructured.Unstructured) error {
	crd, err := ConstraintCRDForTemplate(tmpl)
	if err != nil {
		return err
	}
	return c.ApplyCRD(ctx, crd)
}

// ApplyCRD creates crd, or replaces the spec and labels of an existing CRD of
// the same name, then waits until it is Established.
func (c *Cluster) ApplyCRD(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
	start := time.Now()
	crds := c.APIExtensions().ApiextensionsV1().CustomResourceDefinitions()
	_, err := crds.Create(ctx, crd, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		cur, gerr := crds.Get(ctx, crd.Name, metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		cur.Spec = crd.Spec
		cur.Labels = crd.Labels
		_, err = crds.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("cluster: applying CRD %s: %w", crd.Name, err)
	}
	if err := c.WaitForCRDEstablished(ctx, crd.Name); err != nil {
		return err
	}
	c.t.Logf("cluster: CRD %s established in %s", crd.Name, time.Since(start).Round(time.Millisecond))
	return nil
}

// WaitForCRDEstablished waits up to 30s for the CRD's Established condition.
func (c *Cluster) WaitForCRDEstablished(ctx context.Context, name string) error {
	crds := c.APIExtensions().ApiextensionsV1().CustomResourceDefinitions()
	var last *apiextensionsv1.CustomResourceDefinition
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		crd, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = crd
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		if last != nil {
			return fmt.Errorf("cluster: CRD %s not Established: %w (conditions %+v)", name, err, last.Status.Conditions)
		}
		return fmt.Errorf("cluster: CRD %s not Established: %w", name, err)
	}
	return nil
}
