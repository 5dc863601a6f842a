package gatekeeper

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

func TestDecodeArgs(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file.yaml")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		raw  string // JSON args; "" is no args at all
		// want, when no error
		check func(t *testing.T, a Args)
		err   string
	}{
		{name: "no args: cluster policies, the extender's enforcement point", check: func(t *testing.T, a Args) {
			if !*a.ClusterPolicies || a.EnforcementPoint != opa.DefaultEnforcementPoint || a.PolicyDir != "" {
				t.Errorf("defaults %+v", a)
			}
		}},
		{name: "a folder turns cluster policies off", raw: `{"policyDir": "` + dir + `"}`, check: func(t *testing.T, a Args) {
			if *a.ClusterPolicies {
				t.Error("clusterPolicies defaulted to true with a policyDir")
			}
		}},
		{name: "a folder and the cluster", raw: `{"policyDir": "` + dir + `", "clusterPolicies": true, "enforcementPoint": "tenant-a", "syncKinds": ["apps/v1/Deployment", "v1/Service"], "policyPollInterval": "1s", "memoMaxBytes": 1048576}`,
			check: func(t *testing.T, a Args) {
				if !*a.ClusterPolicies || a.EnforcementPoint != "tenant-a" || a.PolicyPollInterval.Duration != time.Second || a.MemoMaxBytes != 1<<20 || len(a.SyncKinds) != 2 {
					t.Errorf("args %+v", a)
				}
			}},
		{name: "CEL off, failures ignored", raw: `{"enableK8sNativeValidation": false, "defaultK8sNativeValidationFailurePolicy": "Ignore"}`,
			check: func(t *testing.T, a Args) {
				if a.EnableK8sNativeValidation == nil || *a.EnableK8sNativeValidation || a.DefaultK8sNativeValidationFailurePolicy != "Ignore" {
					t.Errorf("args %+v", a)
				}
			}},
		{name: "unknown failure policy", raw: `{"defaultK8sNativeValidationFailurePolicy": "Sometimes"}`, err: `defaultK8sNativeValidationFailurePolicy "Sometimes": want Fail or Ignore`},
		{name: "missing folder", raw: `{"policyDir": "` + filepath.Join(dir, "nope") + `"}`, err: "policyDir: stat"},
		{name: "a file, not a folder", raw: `{"policyDir": "` + file + `"}`, err: "not a folder"},
		{name: "nothing to enforce", raw: `{"clusterPolicies": false}`, err: "nothing to enforce"},
		{name: "bad kind", raw: `{"syncKinds": ["Deployment"]}`, err: `syncKinds: kind "Deployment": want group/version/Kind`},
		{name: "negative memo", raw: `{"memoMaxResults": -1}`, err: "must not be negative"},
		{name: "bad duration", raw: `{"policyPollInterval": "soon"}`, err: "want a Go duration"},
		{name: "spaces", raw: `{"enforcementPoint": " a "}`, err: "surrounding spaces"},
		{name: "unknown field", raw: `{"policyDirectory": "/x"}`, err: "unknown field"},
		{name: "two errors at once", raw: `{"clusterPolicies": false, "memoMaxBytes": -1}`, err: "nothing to enforce\nmemoMaxBytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var obj runtime.Object
			if tc.raw != "" {
				obj = &runtime.Unknown{Raw: []byte(tc.raw), ContentType: runtime.ContentTypeJSON}
			}
			a, err := decodeArgs(obj)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				if !strings.HasPrefix(err.Error(), Name) && !strings.Contains(err.Error(), Name) {
					t.Errorf("error %q does not name the plugin", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, a)
		})
	}
}
