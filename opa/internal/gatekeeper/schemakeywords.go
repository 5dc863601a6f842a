package gatekeeper

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/netip"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// The value keywords of OpenAPI v3 as the API server checks a CRD's
// structural schema, one function each, applied in a list to every value
// (after its type is checked). Each returns nil when its keyword is absent.
// (Set in init: the composition keywords check values with checkValue,
// which reads this list.)
var valueChecks []func(s map[string]any, v any, path string) error

func init() {
	valueChecks = []func(s map[string]any, v any, path string) error{
		checkEnum,
		checkPattern,
		checkLength,
		checkFormat,
		checkBounds,
		checkMultipleOf,
		checkItemCount,
		checkUniqueItems,
		checkPropertyCount,
		checkAllOf,
		checkAnyOf,
		checkOneOf,
		checkNot,
	}
}

func checkEnum(s map[string]any, v any, path string) error {
	enum, ok := s["enum"].([]any)
	if !ok || len(enum) == 0 {
		return nil
	}
	vb, _ := json.Marshal(v)
	for _, e := range enum {
		if eb, _ := json.Marshal(e); string(eb) == string(vb) {
			return nil
		}
	}
	return fmt.Errorf("%s: %s is not one of %s", path, vb, mustJSON(enum))
}

func checkPattern(s map[string]any, v any, path string) error {
	p, ok := s["pattern"].(string)
	str, isString := v.(string)
	if !ok || !isString {
		return nil
	}
	re, err := regexp.Compile(p)
	if err != nil {
		return fmt.Errorf("%s: the schema's pattern %q does not compile: %v", path, p, err)
	}
	if !re.MatchString(str) {
		return fmt.Errorf("%s: %q does not match %q", path, str, p)
	}
	return nil
}

func checkLength(s map[string]any, v any, path string) error {
	str, ok := v.(string)
	if !ok {
		return nil
	}
	n := float64(utf8.RuneCountInString(str))
	if lim, ok := number(s["minLength"]); ok && n < lim {
		return fmt.Errorf("%s: %q is shorter than %v characters", path, str, lim)
	}
	if lim, ok := number(s["maxLength"]); ok && n > lim {
		return fmt.Errorf("%s: %q is longer than %v characters", path, str, lim)
	}
	return nil
}

// formats are the string formats checked, as the API server's (kube-openapi)
// validators read them; a schema naming another one is refused when the
// template is read (unsupportedSchema).
var formats = map[string]func(string) bool{
	"date-time":     func(x string) bool { _, err := time.Parse(time.RFC3339Nano, x); return err == nil },
	"date":          func(x string) bool { _, err := time.Parse(time.DateOnly, x); return err == nil },
	"duration":      func(x string) bool { _, err := time.ParseDuration(x); return err == nil },
	"ipv4":          func(x string) bool { a, err := netip.ParseAddr(x); return err == nil && a.Is4() },
	"ipv6":          func(x string) bool { a, err := netip.ParseAddr(x); return err == nil && a.Is6() },
	"cidr":          func(x string) bool { _, _, err := net.ParseCIDR(x); return err == nil },
	"byte":          func(x string) bool { _, err := base64.StdEncoding.DecodeString(x); return err == nil },
	"uuid":          regexp.MustCompile(`(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$`).MatchString,
	"hostname":      regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`).MatchString,
	"int-or-string": func(string) bool { return true },
	"password":      func(string) bool { return true },
}

func checkFormat(s map[string]any, v any, path string) error {
	f, ok := s["format"].(string)
	str, isString := v.(string)
	if !ok || !isString || f == "" {
		return nil
	}
	if valid := formats[f]; valid != nil && !valid(str) {
		return fmt.Errorf("%s: %q is not a valid %s", path, str, f)
	}
	return nil
}

func checkBounds(s map[string]any, v any, path string) error {
	x, ok := number(v)
	if !ok {
		return nil
	}
	exclusive := func(k string) bool { b, _ := s[k].(bool); return b }
	if lim, ok := number(s["minimum"]); ok && (x < lim || (exclusive("exclusiveMinimum") && x == lim)) {
		return fmt.Errorf("%s: %v is below the minimum %v", path, x, lim)
	}
	if lim, ok := number(s["maximum"]); ok && (x > lim || (exclusive("exclusiveMaximum") && x == lim)) {
		return fmt.Errorf("%s: %v is above the maximum %v", path, x, lim)
	}
	return nil
}

func checkMultipleOf(s map[string]any, v any, path string) error {
	m, ok := number(s["multipleOf"])
	x, isNum := number(v)
	if !ok || !isNum || m == 0 {
		return nil
	}
	if q := x / m; math.Abs(q-math.Round(q)) > 1e-9 {
		return fmt.Errorf("%s: %v is not a multiple of %v", path, x, m)
	}
	return nil
}

func checkItemCount(s map[string]any, v any, path string) error {
	a, ok := v.([]any)
	if !ok {
		return nil
	}
	n := float64(len(a))
	if lim, ok := number(s["minItems"]); ok && n < lim {
		return fmt.Errorf("%s: %d items, at least %v wanted", path, len(a), lim)
	}
	if lim, ok := number(s["maxItems"]); ok && n > lim {
		return fmt.Errorf("%s: %d items, at most %v allowed", path, len(a), lim)
	}
	return nil
}

func checkUniqueItems(s map[string]any, v any, path string) error {
	a, ok := v.([]any)
	if unique, _ := s["uniqueItems"].(bool); !ok || !unique {
		return nil
	}
	seen := map[string]bool{}
	for i, x := range a {
		b, _ := json.Marshal(x)
		if seen[string(b)] {
			return fmt.Errorf("%s[%d]: %s is a duplicate (uniqueItems)", path, i, b)
		}
		seen[string(b)] = true
	}
	return nil
}

func checkPropertyCount(s map[string]any, v any, path string) error {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	n := float64(len(m))
	if lim, ok := number(s["minProperties"]); ok && n < lim {
		return fmt.Errorf("%s: %d fields, at least %v wanted", path, len(m), lim)
	}
	if lim, ok := number(s["maxProperties"]); ok && n > lim {
		return fmt.Errorf("%s: %d fields, at most %v allowed", path, len(m), lim)
	}
	return nil
}

// The composition keywords only validate: in a structural schema they may
// not declare types or fields of their own, so defaults and unknown fields
// are the main schema's business.

func subschemas(s map[string]any, k string) []map[string]any {
	list, _ := s[k].([]any)
	out := make([]map[string]any, 0, len(list))
	for _, x := range list {
		if m, ok := x.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func matches(s map[string]any, v any, path string) error {
	_, err := checkValue(s, v, path, true)
	return err
}

func checkAllOf(s map[string]any, v any, path string) error {
	for _, sub := range subschemas(s, "allOf") {
		if err := matches(sub, v, path); err != nil {
			return err
		}
	}
	return nil
}

func checkAnyOf(s map[string]any, v any, path string) error {
	subs := subschemas(s, "anyOf")
	var first error
	for _, sub := range subs {
		err := matches(sub, v, path)
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	if first != nil {
		return fmt.Errorf("%s: matches none of anyOf (first: %v)", path, first)
	}
	return nil
}

func checkOneOf(s map[string]any, v any, path string) error {
	subs := subschemas(s, "oneOf")
	if len(subs) == 0 {
		return nil
	}
	n := 0
	for _, sub := range subs {
		if matches(sub, v, path) == nil {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("%s: matches %d of oneOf's %d schemas, want exactly one", path, n, len(subs))
	}
	return nil
}

func checkNot(s map[string]any, v any, path string) error {
	sub, ok := s["not"].(map[string]any)
	if ok && matches(sub, v, path) == nil {
		return fmt.Errorf("%s: matches the schema under not", path)
	}
	return nil
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int32:
		return float64(x), true
	case int64:
		return float64(x), true
	case float32:
		return float64(x), true
	case float64:
		return x, true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}

// unsupportedSchema names what a parameters schema asks that this engine
// cannot check, so that the template is refused rather than its
// constraints half-checked: CEL rules (x-kubernetes-validations), string
// formats outside the list above, and references.
func unsupportedSchema(s map[string]any, path string) []string {
	var out []string
	for k, v := range s {
		switch k {
		case "x-kubernetes-validations":
			out = append(out, path+": x-kubernetes-validations (CEL rules)")
		case "$ref":
			out = append(out, path+": $ref")
		case "format":
			if f, _ := v.(string); f != "" && formats[f] == nil {
				out = append(out, fmt.Sprintf("%s: format %q", path, f))
			}
		}
		switch sub := v.(type) {
		case map[string]any:
			if k == "properties" || k == "patternProperties" {
				for name, p := range sub {
					if pm, ok := p.(map[string]any); ok {
						out = append(out, unsupportedSchema(pm, path+"."+name)...)
					}
				}
			} else if k != "default" && k != "enum" && k != "example" {
				out = append(out, unsupportedSchema(sub, path+"."+k)...)
			}
		case []any:
			if k == "allOf" || k == "anyOf" || k == "oneOf" {
				for i, x := range sub {
					if m, ok := x.(map[string]any); ok {
						out = append(out, unsupportedSchema(m, fmt.Sprintf("%s.%s[%d]", path, k, i))...)
					}
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

func unsupportedSchemaError(s map[string]any) error {
	if found := unsupportedSchema(s, "openAPIV3Schema"); len(found) > 0 {
		return fmt.Errorf("%w: the parameters schema uses what this engine cannot check in constraints: %s (the template is refused so that no constraint is half-checked; remove them, or check them with a ValidatingAdmissionPolicy)",
			ErrInvalidTemplate, strings.Join(found, "; "))
	}
	return nil
}
