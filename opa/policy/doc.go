// Package policy is the vocabulary shared by every layer of the engine and by
// its front ends: what a violated constraint does at this enforcement point
// (Action), how a constraint is named (ConstraintKey), and the names of
// Gatekeeper's API groups, target and of this service's annotation.
//
// It imports nothing of the project and holds no behaviour: Gatekeeper's
// semantics live in opa/internal/gatekeeper, the engine in opa.
package policy
