package source

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// ReadObjects decodes every document of a multi-document YAML (or JSON)
// stream. Empty documents are skipped; a document that does not parse, or
// has no apiVersion or kind, is an error naming its position.
func ReadObjects(r io.Reader) ([]*unstructured.Unstructured, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var out []*unstructured.Unstructured
	for i := 1; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var content map[string]any
		if err := yaml.Unmarshal(doc, &content); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(content) == 0 {
			continue // only comments
		}
		u := &unstructured.Unstructured{Object: content}
		if u.GetAPIVersion() == "" || u.GetKind() == "" {
			return nil, fmt.Errorf("document %d: apiVersion and kind are required", i)
		}
		out = append(out, u)
	}
}

// ReadFile reads the objects of one YAML file.
func ReadFile(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	objs, err := ReadObjects(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return objs, nil
}

// ReadPath reads the objects of a YAML file, or of every YAML and JSON
// file below a folder as the policy folder finds them (links followed,
// hidden entries and testdata folders skipped); Suite documents are left
// out.
func ReadPath(path string) ([]*unstructured.Unstructured, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	files := []string{path}
	if info.IsDir() {
		if files, err = yamlFiles(path); err != nil {
			return nil, fmt.Errorf("scan %s: %w", path, err)
		}
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		objs, err := ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			if o.GetKind() != "Suite" {
				out = append(out, o)
			}
		}
	}
	return out, nil
}
