package gatekeeper

import (
	"strings"
	"testing"
)

func TestSchemaKeywords(t *testing.T) {
	obj := func(props map[string]any) map[string]any {
		return map[string]any{"type": "object", "properties": props}
	}
	for _, tc := range []struct {
		name   string
		schema map[string]any
		params map[string]any
		err    string // substring; empty: accepted
	}{
		{"pattern ok", obj(map[string]any{"k": map[string]any{"type": "string", "pattern": "^[a-z]+$"}}), map[string]any{"k": "abc"}, ""},
		{"pattern refused", obj(map[string]any{"k": map[string]any{"type": "string", "pattern": "^[a-z]+$"}}), map[string]any{"k": "aB"}, `spec.parameters.k: "aB" does not match "^[a-z]+$"`},
		{"pattern that does not compile", obj(map[string]any{"k": map[string]any{"type": "string", "pattern": "("}}), map[string]any{"k": "a"}, "does not compile"},
		{"minLength", obj(map[string]any{"k": map[string]any{"type": "string", "minLength": 2}}), map[string]any{"k": "é"}, "shorter than 2"},
		{"maxLength counts characters", obj(map[string]any{"k": map[string]any{"type": "string", "maxLength": 2}}), map[string]any{"k": "éé"}, ""},
		{"maxLength", obj(map[string]any{"k": map[string]any{"type": "string", "maxLength": 2}}), map[string]any{"k": "abc"}, "longer than 2"},
		{"minimum", obj(map[string]any{"n": map[string]any{"type": "integer", "minimum": 1}}), map[string]any{"n": 0}, "below the minimum 1"},
		{"exclusiveMaximum", obj(map[string]any{"n": map[string]any{"type": "number", "maximum": 10, "exclusiveMaximum": true}}), map[string]any{"n": 10.0}, "above the maximum 10"},
		{"maximum inclusive", obj(map[string]any{"n": map[string]any{"type": "number", "maximum": 10}}), map[string]any{"n": 10}, ""},
		{"multipleOf", obj(map[string]any{"n": map[string]any{"type": "integer", "multipleOf": 5}}), map[string]any{"n": 12}, "not a multiple of 5"},
		{"minItems", obj(map[string]any{"a": map[string]any{"type": "array", "minItems": 1, "items": map[string]any{"type": "string"}}}), map[string]any{"a": []any{}}, "at least 1 wanted"},
		{"maxItems", obj(map[string]any{"a": map[string]any{"type": "array", "maxItems": 1}}), map[string]any{"a": []any{"x", "y"}}, "at most 1 allowed"},
		{"uniqueItems", obj(map[string]any{"a": map[string]any{"type": "array", "uniqueItems": true}}), map[string]any{"a": []any{"x", "y", "x"}}, `spec.parameters.a[2]: "x" is a duplicate`},
		{"maxProperties", obj(map[string]any{"m": map[string]any{"type": "object", "maxProperties": 1, "additionalProperties": map[string]any{"type": "string"}}}), map[string]any{"m": map[string]any{"a": "1", "b": "2"}}, "at most 1 allowed"},
		{"format ipv4", obj(map[string]any{"ip": map[string]any{"type": "string", "format": "ipv4"}}), map[string]any{"ip": "10.0.0.256"}, "not a valid ipv4"},
		{"format date-time", obj(map[string]any{"t": map[string]any{"type": "string", "format": "date-time"}}), map[string]any{"t": "2026-12-01T10:00:00Z"}, ""},
		{"format cidr", obj(map[string]any{"c": map[string]any{"type": "string", "format": "cidr"}}), map[string]any{"c": "10.0.0.0/33"}, "not a valid cidr"},
		{"anyOf", obj(map[string]any{"v": map[string]any{"anyOf": []any{map[string]any{"type": "integer"}, map[string]any{"type": "string", "pattern": "^[0-9]+%$"}}}}), map[string]any{"v": "50%"}, ""},
		{"anyOf none", obj(map[string]any{"v": map[string]any{"anyOf": []any{map[string]any{"type": "integer"}, map[string]any{"type": "string", "pattern": "^[0-9]+%$"}}}}), map[string]any{"v": "half"}, "matches none of anyOf"},
		{"oneOf two", obj(map[string]any{"v": map[string]any{"oneOf": []any{map[string]any{"type": "integer"}, map[string]any{"type": "number"}}}}), map[string]any{"v": 3}, "matches 2 of oneOf's 2"},
		{"allOf", obj(map[string]any{"v": map[string]any{"type": "string", "allOf": []any{map[string]any{"minLength": 2}, map[string]any{"pattern": "^a"}}}}), map[string]any{"v": "ba"}, "does not match"},
		{"not", obj(map[string]any{"v": map[string]any{"type": "string", "not": map[string]any{"enum": []any{"root"}}}}), map[string]any{"v": "root"}, "matches the schema under not"},
		{"keywords inside items", obj(map[string]any{"a": map[string]any{"type": "array", "items": map[string]any{"type": "string", "pattern": "^x"}}}), map[string]any{"a": []any{"x1", "y2"}}, "spec.parameters.a[1]"},
		{"enum still", obj(map[string]any{"e": map[string]any{"type": "string", "enum": []any{"a"}}}), map[string]any{"e": "b"}, `"b" is not one of ["a"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := CheckParameters(tc.schema, tc.params, false)
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v, want %q", err, tc.err)
			}
		})
	}
}

func TestUnsupportedSchemaRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		schema map[string]any
		want   string // substring; empty: supported
	}{
		{"CEL rules", map[string]any{"type": "object", "properties": map[string]any{"r": map[string]any{"type": "object",
			"x-kubernetes-validations": []any{map[string]any{"rule": "self.a < self.b"}}}}}, "openAPIV3Schema.r: x-kubernetes-validations (CEL rules)"},
		{"unknown format", map[string]any{"type": "object", "properties": map[string]any{"e": map[string]any{"type": "string", "format": "email"}}}, `openAPIV3Schema.e: format "email"`},
		{"inside items", map[string]any{"type": "array", "items": map[string]any{"type": "string", "format": "isbn"}}, `openAPIV3Schema.items: format "isbn"`},
		{"inside oneOf", map[string]any{"oneOf": []any{map[string]any{"$ref": "#/x"}}}, "openAPIV3Schema.oneOf[0]: $ref"},
		{"a default that looks like a schema", map[string]any{"type": "object", "default": map[string]any{"format": "email"}}, ""},
		{"known formats", map[string]any{"type": "object", "properties": map[string]any{"t": map[string]any{"type": "string", "format": "date-time"}}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := unsupportedSchemaError(tc.schema)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}
