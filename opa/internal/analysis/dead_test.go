package analysis

import "testing"

// isExempt is the library's helper (lib.exempt_container), in Rego v1.
const isExempt = `
is_exempt(container) if {
	exempt_images := object.get(object.get(input, "parameters", {}), "exemptImages", [])
	img := container.image
	exemption := exempt_images[_]
	_matches_exemption(img, exemption)
}
_matches_exemption(img, exemption) if {
	not endswith(exemption, "*")
	exemption == img
}
_matches_exemption(img, exemption) if {
	endswith(exemption, "*")
	startswith(img, trim_suffix(exemption, "*"))
}
`

// TestDeadBodies: a body that iterates a constant empty collection after
// harmless expressions never succeeds, so its reads leave the key; with
// the constant not empty, or with a call before it, they stay.
func TestDeadBodies(t *testing.T) {
	privileged := "violation contains {\"msg\": msg} if {\nc := " + containers + "[_]\nnot is_exempt(c)\nc.securityContext.privileged\nmsg := sprintf(\"%v\", [c.name])\n}" + isExempt
	cases := []struct {
		name, rego, params string
		reads              []string
	}{
		{
			name: "no exemptImages: the image decides nothing", rego: privileged, params: `{}`,
			reads: []string{containers + "[_].(count)", containers + "[_].securityContext.privileged", containers + "[_].name (message only)"},
		},
		{
			name: "exemptImages given: the image decides", rego: privileged, params: `{"exemptImages": ["safe/*"]}`,
			reads: []string{containers + "[_].(count)", containers + "[_].(is_exempt(_) on .image)", containers + "[_].securityContext.privileged", containers + "[_].name (message only)"},
		},
		{
			name:   "a call before the empty iteration may fail: kept",
			rego:   "violation contains {\"msg\": \"x\"} if {\nf(input.review.object.spec.hostNetwork)\n}\nf(x) if {\ny := g(x)\nitems := object.get(input.parameters, \"items\", [])\nitems[_] == y\n}\ng(x) := 1 if x\ng(x) := 2 if x",
			params: `{}`,
			reads:  []string{"input.review.object.spec.hostNetwork.(f(_) on (whole))"},
		},
		{
			name:   "an empty constant object, looked up",
			rego:   "violation contains {\"msg\": \"x\"} if {\nm := object.get(input.parameters, \"allowed\", {})\nv := input.review.object.metadata.labels.team\nm[v]\n}",
			params: `{}`,
			reads:  nil,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkReads(t, analyze(t, tc.rego, tc.params), tc.reads)
		})
	}
}
