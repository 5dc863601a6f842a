package gatekeeper

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/policy"
)

func TestMatch(t *testing.T) {
	podIn := func(ns string, labels map[string]string, nsLabels map[string]string) *Matchable {
		m := &Matchable{GVK: schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, Name: "web-1", Namespace: ns, Labels: labels, Source: "Original"}
		if nsLabels != nil {
			m.NS = &NamespaceInfo{Name: ns, Labels: nsLabels}
		}
		return m
	}
	nsObject := &Matchable{GVK: schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, Name: "kube-system", Labels: map[string]string{"team": "core"}}
	clusterObj := &Matchable{GVK: schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}, Name: "admin"}
	tests := []struct {
		name    string
		match   map[string]any
		target  *Matchable
		want    bool
		wantErr bool
	}{
		{name: "no match block", match: nil, target: podIn("a", nil, nil), want: true},
		{name: "kind listed", match: map[string]any{"kinds": []any{map[string]any{"apiGroups": []any{""}, "kinds": []any{"Pod"}}}}, target: podIn("a", nil, nil), want: true},
		{name: "kind not listed", match: map[string]any{"kinds": []any{map[string]any{"apiGroups": []any{""}, "kinds": []any{"Service"}}}}, target: podIn("a", nil, nil), want: false},
		{name: "group wildcard", match: map[string]any{"kinds": []any{map[string]any{"apiGroups": []any{"*"}, "kinds": []any{"Pod"}}}}, target: podIn("a", nil, nil), want: true},
		{name: "wrong group", match: map[string]any{"kinds": []any{map[string]any{"apiGroups": []any{"apps"}, "kinds": []any{"Pod"}}}}, target: podIn("a", nil, nil), want: false},
		{name: "empty kinds list matches all kinds", match: map[string]any{"kinds": []any{map[string]any{"apiGroups": []any{""}}}}, target: podIn("a", nil, nil), want: true},
		{name: "scope Namespaced", match: map[string]any{"scope": "Namespaced"}, target: podIn("a", nil, nil), want: true},
		{name: "scope Cluster excludes pods", match: map[string]any{"scope": "Cluster"}, target: podIn("a", nil, nil), want: false},
		{name: "scope Cluster includes Namespaces", match: map[string]any{"scope": "Cluster"}, target: nsObject, want: true},
		{name: "namespaces exact", match: map[string]any{"namespaces": []any{"a"}}, target: podIn("a", nil, nil), want: true},
		{name: "namespaces prefix glob", match: map[string]any{"namespaces": []any{"team-*"}}, target: podIn("team-x", nil, nil), want: true},
		{name: "namespaces suffix glob", match: map[string]any{"namespaces": []any{"*-system"}}, target: podIn("kube-system", nil, nil), want: true},
		{name: "namespaces contains glob", match: map[string]any{"namespaces": []any{"*prod*"}}, target: podIn("eu-prod-1", nil, nil), want: true},
		{name: "namespaces miss", match: map[string]any{"namespaces": []any{"b"}}, target: podIn("a", nil, nil), want: false},
		{name: "namespaces ignore cluster objects", match: map[string]any{"namespaces": []any{"b"}}, target: clusterObj, want: true},
		{name: "namespace object matched by its name", match: map[string]any{"namespaces": []any{"kube-*"}}, target: nsObject, want: true},
		{name: "excluded namespace", match: map[string]any{"excludedNamespaces": []any{"kube-*"}}, target: podIn("kube-system", nil, nil), want: false},
		{name: "not excluded", match: map[string]any{"excludedNamespaces": []any{"kube-*"}}, target: podIn("default", nil, nil), want: true},
		{name: "label selector", match: map[string]any{"labelSelector": map[string]any{"matchLabels": map[string]any{"app": "web"}}}, target: podIn("a", map[string]string{"app": "web"}, nil), want: true},
		{name: "label selector expression", match: map[string]any{"labelSelector": map[string]any{"matchExpressions": []any{map[string]any{"key": "app", "operator": "NotIn", "values": []any{"web"}}}}}, target: podIn("a", map[string]string{"app": "web"}, nil), want: false},
		{name: "namespace selector", match: map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"tenant": "x"}}}, target: podIn("a", nil, map[string]string{"tenant": "x"}), want: true},
		{name: "namespace selector miss", match: map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"tenant": "x"}}}, target: podIn("a", nil, map[string]string{"tenant": "y"}), want: false},
		{name: "namespace selector without the namespace is an error", match: map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"tenant": "x"}}}, target: podIn("a", nil, nil), wantErr: true},
		{name: "namespace selector on a Namespace uses its labels", match: map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"team": "core"}}}, target: nsObject, want: true},
		{name: "namespace selector matches cluster objects", match: map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"team": "core"}}}, target: clusterObj, want: true},
		{name: "name glob", match: map[string]any{"name": "web-*"}, target: podIn("a", nil, nil), want: true},
		{name: "name miss", match: map[string]any{"name": "db-*"}, target: podIn("a", nil, nil), want: false},
		{name: "source Generated skips originals", match: map[string]any{"source": "Generated"}, target: podIn("a", nil, nil), want: false},
		{name: "source All", match: map[string]any{"source": "All"}, target: podIn("a", nil, nil), want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := newMatcher(tc.match)
			if err != nil {
				t.Fatal(err)
			}
			got, err := m.Matches(tc.target)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, wantErr %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("matches = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestInvalidMatch(t *testing.T) {
	for name, match := range map[string]any{
		"bad selector operator": map[string]any{"labelSelector": map[string]any{"matchExpressions": []any{map[string]any{"key": "a", "operator": "Near"}}}},
		"bad source":            map[string]any{"source": "Elsewhere"},
		"kinds not a list":      map[string]any{"kinds": "Pod"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := newMatcher(match); err == nil {
				t.Fatal("want an error")
			}
		})
	}
}

func TestResolveAction(t *testing.T) {
	scoped := func(entries ...any) map[string]any {
		return map[string]any{"enforcementAction": "scoped", "scopedEnforcementActions": entries}
	}
	entry := func(action string, points ...string) any {
		var ps []any
		for _, p := range points {
			ps = append(ps, map[string]any{"name": p})
		}
		return map[string]any{"action": action, "enforcementPoints": ps}
	}
	tests := []struct {
		name       string
		spec       map[string]any
		annotation string
		want       policy.Action
		wantErr    bool
	}{
		{name: "default is deny", spec: map[string]any{}, want: policy.Deny},
		{name: "warn", spec: map[string]any{"enforcementAction": "warn"}, want: policy.Warn},
		{name: "dryrun", spec: map[string]any{"enforcementAction": "dryrun"}, want: policy.DryRun},
		{name: "unknown action", spec: map[string]any{"enforcementAction": "block"}, wantErr: true},
		{name: "scoped to this point", spec: scoped(entry("warn", policy.DefaultEnforcementPoint)), want: policy.Warn},
		{name: "scoped to every point", spec: scoped(entry("deny", "*")), want: policy.Deny},
		{name: "scoped elsewhere only", spec: scoped(entry("deny", "validation.gatekeeper.sh")), want: ""},
		{name: "scoped: strictest wins", spec: scoped(entry("warn", "*"), entry("deny", policy.DefaultEnforcementPoint)), want: policy.Deny},
		{name: "scoped: bad action", spec: scoped(entry("explode", "*")), wantErr: true},
		{name: "annotation overrides spec", spec: map[string]any{"enforcementAction": "dryrun"}, annotation: "warn", want: policy.Warn},
		{name: "annotation overrides scoped", spec: scoped(entry("deny", "validation.gatekeeper.sh")), annotation: "deny", want: policy.Deny},
		{name: "bad annotation", spec: map[string]any{}, annotation: "maybe", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{"spec": tc.spec}}
			if tc.annotation != "" {
				u.SetAnnotations(map[string]string{policy.ActionAnnotation: tc.annotation})
			}
			got, err := resolveAction(u, tc.spec, policy.DefaultEnforcementPoint)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, wantErr %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("action = %q, want %q", got, tc.want)
			}
		})
	}
}
