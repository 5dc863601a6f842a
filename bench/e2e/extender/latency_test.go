package extender_test

import (
	"context"
	"sort"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/cluster"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e/harness"
)

// TestPolicyChangeLatencyThroughTheAPI measures the time from a Constraint
// update accepted by the API server to the policy generation that every
// later filter answer uses (informer event, batching, compile-free swap).
// It asserts only that each change arrives; the figures are logged.
func TestPolicyChangeLatencyThroughTheAPI(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	tmpl, con := harness.ExamplePolicy(t, "tenant-isolation")
	harness.InstallPolicy(t, c, tmpl, con)
	svc := startService(t, c, serviceOptions{NoNudge: true})
	gvr := cluster.ConstraintGVR(con.GetKind())
	var lat []time.Duration
	for i := 0; i < 10; i++ {
		cur, err := c.Dynamic().Resource(gvr).Get(ctx, con.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_ = unstructured.SetNestedField(cur.Object, []string{"team", "tenant"}[i%2], "spec", "parameters", "labelKey")
		gen := svc.Engine.Stats().PolicyGeneration
		start := time.Now()
		if _, err := c.Dynamic().Resource(gvr).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		for svc.Engine.Stats().PolicyGeneration == gen {
			if time.Since(start) > 10*time.Second {
				t.Fatalf("change %d not applied after 10s", i)
			}
			time.Sleep(time.Millisecond)
		}
		lat = append(lat, time.Since(start))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("constraint update -> new policy in force: median %v, max %v (10 updates)", lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
}
