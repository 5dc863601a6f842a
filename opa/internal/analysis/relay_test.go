package analysis

import "testing"

// relaySites are the library's two references to general_violation.
const relaySites = "violation contains {\"msg\": msg} if { general_violation[{\"msg\": msg, \"field\": \"containers\"}] }\n" +
	"violation contains {\"msg\": msg} if { general_violation[{\"msg\": msg, \"field\": \"initContainers\"}] }\n"

// relayRule is the library's relay: the list named by the head.
const relayRule = "general_violation contains {\"msg\": msg, \"field\": field} if {\n" +
	"c := input.review.object.spec[field][_]\nnot c.resources.limits.cpu\nmsg := sprintf(\"container <%v> has no cpu limit\", [c.name])\n}\n"

// TestRelays: a partial set rule that the violation rule reads only
// through patterns binding its head (the library's general_violation) is
// analysed once per pattern, its head's variables bound to the pattern's
// constants; any other use of it reads as before.
func TestRelays(t *testing.T) {
	// bothLists is what the library's shape reads: each list element-wise.
	bothLists := []string{containers + "[_].(count)", containers + "[_].resources.limits.cpu", containers + "[_].name (message only)",
		inits + "[_].(count)", inits + "[_].resources.limits.cpu", inits + "[_].name (message only)"}
	cases := []struct {
		name, rego string
		reads      []string
	}{
		{
			name:  "the library's shape: each list element-wise, the name only printed",
			rego:  relaySites + relayRule,
			reads: bothLists,
		},
		{
			name:  "one pattern only: the other list is never read",
			rego:  "violation contains {\"msg\": msg} if { general_violation[{\"msg\": msg, \"field\": \"containers\"}] }\n" + relayRule,
			reads: []string{containers + "[_].(count)", containers + "[_].resources.limits.cpu", containers + "[_].name (message only)"},
		},
		{
			name:  "a definition whose head cannot unify with a pattern is not read for it",
			rego:  relaySites + relayRule + "general_violation contains {\"msg\": \"host network\", \"field\": \"hostNetwork\"} if { input.review.object.spec.hostNetwork }\n",
			reads: bothLists,
		},
		{
			name:  "the message used in a condition by the caller: the name is keyed",
			rego:  "violation contains {\"msg\": msg} if {\ngeneral_violation[{\"msg\": msg, \"field\": \"containers\"}]\nnot startswith(msg, \"container <debug\")\n}\n" + relayRule,
			reads: []string{containers + "[_].(count)", containers + "[_].resources.limits.cpu", containers + "[_].name"},
		},
		{
			name:  "a pattern with a variable for the list: every key of spec, which holds the node's name",
			rego:  "violation contains {\"msg\": msg} if { general_violation[{\"msg\": msg, \"field\": f}] }\n" + relayRule,
			reads: []string{"input.review.object.spec"},
		},
		{
			name:  "the relay also counted: read alone",
			rego:  relaySites + relayRule + "violation contains {\"msg\": \"many\"} if { count(general_violation) > 3 }\n",
			reads: []string{"input.review.object.spec"},
		},
		{
			name:  "the relay also read by a function: read alone",
			rego:  relaySites + relayRule + "violation contains {\"msg\": \"x\"} if { has_any(1) }\nhas_any(_) if { general_violation[_] }\n",
			reads: []string{"input.review.object.spec"},
		},
		{
			name:  "a pattern with a composite value: read alone",
			rego:  "violation contains {\"msg\": msg} if { general_violation[{\"msg\": msg, \"field\": [\"containers\"]}] }\n" + relayRule,
			reads: []string{"input.review.object.spec"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkReads(t, analyze(t, tc.rego, ""), tc.reads)
		})
	}
}
