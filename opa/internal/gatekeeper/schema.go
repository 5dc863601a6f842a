package gatekeeper

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// checkParameters validates a constraint's spec.parameters against its
// template's openAPIV3Schema and applies the schema's defaults, as the API
// server does for the constraint's CRD before Gatekeeper sees it. It
// covers structural schemas: type, properties, additionalProperties, items,
// required, default, x-kubernetes-preserve-unknown-fields, and the value
// keywords of schemakeywords.go (enum, pattern, lengths, formats, bounds,
// item and field counts, uniqueItems, allOf/anyOf/oneOf/not); templates
// whose schema needs more (CEL rules, other formats) are refused when read. Unknown fields are refused unless
// the schema preserves them (the API server would prune them silently; a
// constraint in a folder has no API server to do that, and a typo in a
// parameter name deserves an error, not a policy that quietly does
// nothing).
func CheckParameters(schema map[string]any, params map[string]any, legacy bool) (map[string]any, error) {
	if schema == nil {
		if len(params) > 0 && !legacy {
			return nil, fmt.Errorf("%w: spec.parameters given, but the template declares no parameters schema", ErrInvalidConstraint)
		}
		return params, nil
	}
	out, err := checkValue(schema, params, "spec.parameters", legacy)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConstraint, err)
	}
	m, _ := out.(map[string]any)
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}

func checkValue(s map[string]any, v any, path string, legacy bool) (any, error) {
	if v == nil {
		return nil, nil
	}
	out, err := checkType(s, v, path, legacy)
	if err != nil {
		return nil, err
	}
	for _, check := range valueChecks {
		if err := check(s, v, path); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// checkType checks v against the schema's type, recursing into objects
// and arrays (where defaults apply), and returns v with its defaults.
func checkType(s map[string]any, v any, path string, legacy bool) (any, error) {
	typ, _ := s["type"].(string)
	switch typ {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: want an object, got %s", path, typeName(v))
		}
		return checkObject(s, m, path, legacy)
	case "array":
		a, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("%s: want an array, got %s", path, typeName(v))
		}
		items, _ := s["items"].(map[string]any)
		if items == nil {
			return a, nil
		}
		out := make([]any, len(a))
		for i, x := range a {
			y, err := checkValue(items, x, fmt.Sprintf("%s[%d]", path, i), legacy)
			if err != nil {
				return nil, err
			}
			out[i] = y
		}
		return out, nil
	case "string":
		if _, ok := v.(string); !ok {
			return nil, fmt.Errorf("%s: want a string, got %s", path, typeName(v))
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return nil, fmt.Errorf("%s: want a boolean, got %s", path, typeName(v))
		}
	case "integer":
		if !isInteger(v) {
			return nil, fmt.Errorf("%s: want an integer, got %s", path, typeName(v))
		}
	case "number":
		if !isNumber(v) {
			return nil, fmt.Errorf("%s: want a number, got %s", path, typeName(v))
		}
	case "":
		if m, ok := v.(map[string]any); ok && (s["properties"] != nil || s["additionalProperties"] != nil) {
			return checkObject(s, m, path, legacy)
		}
	}
	return v, nil
}

func checkObject(s map[string]any, m map[string]any, path string, legacy bool) (any, error) {
	props, _ := s["properties"].(map[string]any)
	preserve, _ := s["x-kubernetes-preserve-unknown-fields"].(bool)
	var additional map[string]any
	additionalAllowed := false
	switch a := s["additionalProperties"].(type) {
	case map[string]any:
		additional = a
	case bool:
		additionalAllowed = a
	}
	out := make(map[string]any, len(m))
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		child := path + "." + k
		if ps, ok := props[k].(map[string]any); ok {
			v, err := checkValue(ps, m[k], child, legacy)
			if err != nil {
				return nil, err
			}
			out[k] = v
			continue
		}
		switch {
		case additional != nil:
			v, err := checkValue(additional, m[k], child, legacy)
			if err != nil {
				return nil, err
			}
			out[k] = v
		case additionalAllowed || preserve || legacy || props == nil:
			out[k] = m[k]
		default:
			return nil, fmt.Errorf("%s: unknown field (the template's schema declares %s)", child, strings.Join(sortedKeys(props), ", "))
		}
	}
	for k, p := range props {
		ps, _ := p.(map[string]any)
		if _, has := out[k]; has || ps == nil {
			continue
		}
		if d, ok := ps["default"]; ok {
			out[k] = d
		}
	}
	if req, ok := s["required"].([]any); ok {
		for _, r := range req {
			if name, _ := r.(string); name != "" {
				if _, has := out[name]; !has {
					return nil, fmt.Errorf("%s.%s: required", path, name)
				}
			}
		}
	}
	return out, nil
}

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func isInteger(v any) bool {
	switch x := v.(type) {
	case int, int32, int64:
		return true
	case float64:
		return x == float64(int64(x))
	case json.Number:
		_, err := x.Int64()
		return err == nil
	}
	return false
}

func isNumber(v any) bool {
	switch v.(type) {
	case int, int32, int64, float32, float64, json.Number:
		return true
	}
	return false
}

func typeName(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	if isNumber(v) {
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
