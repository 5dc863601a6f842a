package opa_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// FuzzApply feeds arbitrary YAML to the template compiler and the rest of
// Apply: no panic, no hang, and every refusal is a clear error naming the
// object. Seeds: the example policies and the inventory.
func FuzzApply(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join(examples, "*", "*.yaml"))
	for _, s := range seeds {
		if b, err := os.ReadFile(s); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("apiVersion: templates.gatekeeper.sh/v1\nkind: ConstraintTemplate\nmetadata: {name: x}\nspec: {targets: 3}\n"))
	f.Add([]byte("apiVersion: constraints.gatekeeper.sh/v1beta1\nkind: K\nmetadata: {name: c}\nspec: {match: {kinds: 1}, parameters: [1]}\n"))
	e, err := opa.New(context.Background(), opa.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { e.Close(context.Background()) })
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := readObjects(bytes.NewReader(data))
		if err != nil {
			return
		}
		var changes []opa.Change
		for _, o := range objs {
			changes = append(changes, opa.Change{Object: o})
		}
		for _, err := range e.Apply(context.Background(), changes) {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
		}
		// Whatever was accepted must evaluate without panicking.
		_, _ = e.Evaluate(context.Background(), opa.PlacementRequest{Pod: pod("default", "p"), Candidates: []opa.Candidate{{Name: "n"}}})
	})
}
