package peer

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	yaml "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ReadObjects reads the YAML documents of a file as gator's
// reader.ReadUnstructureds does: split on "\n---", drop blank and comment
// lines, decode each document with go.yaml.in/yaml/v3, then round-trip it
// through JSON into an Unstructured (integers become int64, other numbers
// float64).
func ReadObjects(path string) ([]*unstructured.Unstructured, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	objs, err := ParseObjects(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return objs, nil
}

// ParseObjects is ReadObjects on bytes.
func ParseObjects(b []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(string(b), "\n---") {
		doc = clean(doc)
		if doc == "" {
			continue
		}
		m := map[string]any{}
		if err := yaml.Unmarshal([]byte(doc), m); err != nil {
			return nil, err
		}
		raw, err := json.Marshal(m)
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{Object: map[string]any{}}
		if err := json.Unmarshal(raw, u); err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

func clean(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		b.WriteString(line)
		b.WriteString("\n")
	}
	return b.String()
}
