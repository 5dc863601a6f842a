package gatekeeper

import (
	"encoding/json"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// matchSpec is a constraint's spec.match, Gatekeeper's fields.
type matchSpec struct {
	Kinds []struct {
		APIGroups []string `json:"apiGroups"`
		Kinds     []string `json:"kinds"`
	} `json:"kinds"`
	Scope              string                `json:"scope"`
	Namespaces         []string              `json:"namespaces"`
	ExcludedNamespaces []string              `json:"excludedNamespaces"`
	LabelSelector      *metav1.LabelSelector `json:"labelSelector"`
	NamespaceSelector  *metav1.LabelSelector `json:"namespaceSelector"`
	Name               string                `json:"name"`
	Source             string                `json:"source"`
}

// matcher is a compiled spec.match.
type Matcher struct {
	spec              matchSpec
	labelSelector     labels.Selector
	namespaceSelector labels.Selector
}

// matchable is what a matcher looks at: the object under review and its
// Namespace (nil when unknown).
type Matchable struct {
	GVK       schema.GroupVersionKind
	Name      string
	Namespace string
	Labels    map[string]string
	// ns is the object's Namespace: its name and labels.
	NS *NamespaceInfo
	// source is Gatekeeper's source type; reviews here are "Original".
	Source string
}

type NamespaceInfo struct {
	Name   string
	Labels map[string]string
}

func newMatcher(raw any) (*Matcher, error) {
	m := &Matcher{}
	if raw == nil {
		return m, nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&m.spec); err != nil {
		return nil, err
	}
	if m.spec.LabelSelector != nil {
		if m.labelSelector, err = metav1.LabelSelectorAsSelector(m.spec.LabelSelector); err != nil {
			return nil, fmt.Errorf("labelSelector: %w", err)
		}
	}
	if m.spec.NamespaceSelector != nil {
		if m.namespaceSelector, err = metav1.LabelSelectorAsSelector(m.spec.NamespaceSelector); err != nil {
			return nil, fmt.Errorf("namespaceSelector: %w", err)
		}
	}
	switch m.spec.Source {
	case "", "All", "Original", "Generated":
	default:
		return nil, fmt.Errorf("source %q: want All, Original or Generated", m.spec.Source)
	}
	return m, nil
}

// matchFunc is one criterion of spec.match. Like Gatekeeper's, each one
// answers true when its field is unset.
type matchFunc func(m *Matcher, t *Matchable) (bool, error)

// matchers are applied in Gatekeeper's order; the first false or error wins.
var matchers = []matchFunc{
	kindsMatch,
	scopeMatch,
	namespacesMatch,
	excludedNamespacesMatch,
	labelSelectorMatch,
	namespaceSelectorMatch,
	namesMatch,
	sourceMatch,
}

// matches reports whether the constraint applies to t. An error is a
// rejection under the constraint's action (Gatekeeper's autoreject).
func (m *Matcher) Matches(t *Matchable) (bool, error) {
	for _, fn := range matchers {
		ok, err := fn(m, t)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

func isNamespace(t *Matchable) bool { return t.GVK.Group == "" && t.GVK.Kind == "Namespace" }

func kindsMatch(m *Matcher, t *Matchable) (bool, error) {
	if len(m.spec.Kinds) == 0 {
		return true, nil
	}
	for _, k := range m.spec.Kinds {
		if !(len(k.Kinds) == 0 || contains(k.Kinds, "*") || contains(k.Kinds, t.GVK.Kind)) {
			continue
		}
		if len(k.APIGroups) == 0 || contains(k.APIGroups, "*") || contains(k.APIGroups, t.GVK.Group) {
			return true, nil
		}
	}
	return false, nil
}

func scopeMatch(m *Matcher, t *Matchable) (bool, error) {
	hasNamespace := t.Namespace != "" || t.NS != nil
	switch m.spec.Scope {
	case "Cluster":
		return isNamespace(t) || !hasNamespace, nil
	case "Namespaced":
		return !isNamespace(t) && hasNamespace, nil
	}
	return true, nil
}

// namespaceOf is the namespace name the namespace criteria compare, and
// false for a cluster-scoped object that is not a Namespace.
func namespaceOf(t *Matchable) (string, bool) {
	switch {
	case isNamespace(t):
		return t.Name, true
	case t.NS != nil:
		return t.NS.Name, true
	case t.Namespace != "":
		return t.Namespace, true
	}
	return "", false
}

func namespacesMatch(m *Matcher, t *Matchable) (bool, error) {
	if len(m.spec.Namespaces) == 0 {
		return true, nil
	}
	ns, ok := namespaceOf(t)
	if !ok {
		return true, nil
	}
	return anyWildcard(m.spec.Namespaces, ns), nil
}

func excludedNamespacesMatch(m *Matcher, t *Matchable) (bool, error) {
	if len(m.spec.ExcludedNamespaces) == 0 {
		return true, nil
	}
	ns, ok := namespaceOf(t)
	if !ok {
		return true, nil
	}
	return !anyWildcard(m.spec.ExcludedNamespaces, ns), nil
}

func labelSelectorMatch(m *Matcher, t *Matchable) (bool, error) {
	if m.labelSelector == nil {
		return true, nil
	}
	return m.labelSelector.Matches(labels.Set(t.Labels)), nil
}

func namespaceSelectorMatch(m *Matcher, t *Matchable) (bool, error) {
	if m.namespaceSelector == nil {
		return true, nil
	}
	if isNamespace(t) {
		return m.namespaceSelector.Matches(labels.Set(t.Labels)), nil
	}
	if t.NS == nil {
		if t.Namespace == "" {
			// Cluster-scoped objects other than Namespaces always match.
			return true, nil
		}
		return false, fmt.Errorf("namespaceSelector: Namespace %q of the object is not in the inventory", t.Namespace)
	}
	return m.namespaceSelector.Matches(labels.Set(t.NS.Labels)), nil
}

func namesMatch(m *Matcher, t *Matchable) (bool, error) {
	if m.spec.Name == "" {
		return true, nil
	}
	return wildcardMatches(m.spec.Name, t.Name), nil
}

func sourceMatch(m *Matcher, t *Matchable) (bool, error) {
	switch m.spec.Source {
	case "", "All":
		return true, nil
	}
	return m.spec.Source == t.Source, nil
}

func contains(set []string, s string) bool {
	for _, x := range set {
		if x == s {
			return true
		}
	}
	return false
}

func anyWildcard(patterns []string, s string) bool {
	for _, p := range patterns {
		if wildcardMatches(p, s) {
			return true
		}
	}
	return false
}

// wildcardMatches is Gatekeeper's util.Wildcard: an exact name, a prefix
// glob `x*`, a suffix glob `*x`, or `*x*` for a substring.
func wildcardMatches(pattern, s string) bool {
	switch {
	case pattern == "*":
		return true
	case len(pattern) > 1 && strings.HasPrefix(pattern, "*") && strings.HasSuffix(pattern, "*"):
		return strings.Contains(s, pattern[1:len(pattern)-1])
	case strings.HasSuffix(pattern, "*"):
		return strings.HasPrefix(s, strings.TrimSuffix(pattern, "*"))
	case strings.HasPrefix(pattern, "*"):
		return strings.HasSuffix(s, strings.TrimPrefix(pattern, "*"))
	}
	return pattern == s
}
