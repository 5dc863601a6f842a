package verify

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// FuzzSuite parses arbitrary suite files and checks their assertions
// against nothing: no panic, errors only.
func FuzzSuite(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("..", "..", "deploy", "examples", "*", "suite.yaml"))
	seeds = append(seeds, "testdata/bad/suite.yaml")
	for _, s := range seeds {
		if b, err := os.ReadFile(s); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "suite.yaml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := readSuite(path)
		if err != nil {
			return
		}
		for _, tc := range s.Tests {
			for _, c := range tc.Cases {
				for _, a := range c.Assertions {
					_ = a.check(nil)
				}
			}
		}
		var back Suite
		out, _ := yaml.Marshal(s)
		_ = yaml.Unmarshal(out, &back)
	})
}
