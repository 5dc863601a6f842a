package source

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// ReadObjects decodes every object of a multi-document YAML (or JSON)
// stream: its documents, and the items of its lists (kind List, as
// `kubectl get -o yaml` writes, or a typed list such as NodeList) one by
// one. Empty documents are skipped; a document or item that does not
// parse, or has no apiVersion or kind, is an error naming its position.
func ReadObjects(r io.Reader) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	pr := newPartReader(bufio.NewReaderSize(r, readBufferSize))
	var items []any // the current document's, until its end says what they are
	for {
		p, err := pr.next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if p.item > 0 {
			v, err := parseItem(p)
			if err != nil {
				return nil, fmt.Errorf("document %d, item %d: %w", p.doc, p.item, err)
			}
			items = append(items, v)
			continue
		}
		env, err := parseDocument(p)
		if err != nil {
			return nil, err
		}
		if env == nil {
			continue
		}
		if list, ok := listItems(env, items); ok {
			for i, v := range list {
				u, why := listItem(env, v)
				if why != "" {
					return nil, fmt.Errorf("document %d, item %d: %s", p.doc, i+1, why)
				}
				out = append(out, u)
			}
		} else {
			if items != nil {
				env["items"] = items
			}
			out = append(out, &unstructured.Unstructured{Object: env})
		}
		items = nil
	}
}

// readBufferSize is the buffer a file is read through.
const readBufferSize = 64 << 10

// parseItem decodes an item cut out of its document: any YAML value (a
// document that is not a list may hold items of any kind).
func parseItem(p part) (any, error) {
	return decodePart[any](p)
}

// decodePart decodes a part's bytes into a T: JSON as JSON, YAML through
// decodeBlockYAML where it takes them (a mapping), else sigs.k8s.io/yaml,
// strictly.
func decodePart[T any](p part) (T, error) {
	var v T
	if p.json {
		err := json.Unmarshal(p.raw, &v)
		return v, err
	}
	if m, ok := decodeBlockYAML(p.raw); ok {
		if v, ok := any(m).(T); ok {
			return v, nil
		}
	}
	// Strict: a key twice in one mapping is an error, never the last one
	// silently kept (two objects written as one document, '---' missing).
	err := yaml.UnmarshalStrict(p.raw, &v)
	return v, err
}

// parseDocument decodes a document (less the items cut out of it): nil
// for an empty one (only comments) that had no items; an error naming
// the document when it does not parse or lacks apiVersion or kind.
func parseDocument(p part) (map[string]any, error) {
	if p.items == 0 && len(bytes.TrimSpace(p.raw)) == 0 {
		return nil, nil
	}
	content, err := decodePart[map[string]any](p)
	if err != nil {
		if strings.Contains(err.Error(), "already set in map") {
			return nil, fmt.Errorf("document %d: a key twice in one mapping (two objects with no '---' between them?): %w", p.doc, err)
		}
		return nil, fmt.Errorf("document %d: %w", p.doc, err)
	}
	if len(content) == 0 && p.items == 0 {
		return nil, nil // only comments
	}
	u := unstructured.Unstructured{Object: content}
	if u.GetAPIVersion() == "" || u.GetKind() == "" {
		return nil, fmt.Errorf("document %d: apiVersion and kind are required", p.doc)
	}
	return content, nil
}

// listItems returns a list's items: those cut out of it, or those still
// in it ("items: [...]"). A document is a list when its kind ends in
// "List" and it has an items array; a kind such as K8sAllowList with no
// items is an object like any other.
func listItems(env map[string]any, cut []any) ([]any, bool) {
	if !isListKind(env) {
		return nil, false
	}
	if cut != nil {
		return cut, true
	}
	items, ok := env["items"].([]any)
	return items, ok
}

func isListKind(env map[string]any) bool {
	kind, _ := env["kind"].(string)
	return strings.HasSuffix(kind, "List")
}

// listItem makes an object of a list's item, or says why it is not one.
// The items of a typed list (NodeList) may leave out their apiVersion and
// kind: they are the list's, less "List".
func listItem(env map[string]any, v any) (*unstructured.Unstructured, string) {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return nil, "not an object"
	}
	u := &unstructured.Unstructured{Object: m}
	apiVersion, kind := itemGVK(env, u.GetAPIVersion(), u.GetKind())
	if apiVersion == "" || kind == "" {
		return nil, "apiVersion and kind are required"
	}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	return u, ""
}

// itemGVK completes an item's apiVersion and kind from its typed list's.
func itemGVK(env map[string]any, apiVersion, kind string) (string, string) {
	listKind, _ := env["kind"].(string)
	if listKind == "List" {
		return apiVersion, kind
	}
	if kind == "" {
		kind = strings.TrimSuffix(listKind, "List")
	}
	if apiVersion == "" {
		apiVersion, _ = env["apiVersion"].(string)
	}
	return apiVersion, kind
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
