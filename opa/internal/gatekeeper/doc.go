// Package gatekeeper holds Gatekeeper's semantics, as its constraint
// framework and webhook define them: parsing a ConstraintTemplate (its CRD
// kind, parameter schema and Rego, isolated under the template's own
// namespace with Gatekeeper's ref and import rules), parsing a Constraint
// (its enforcement action at this enforcement point, its parameters checked
// against the template's schema) and spec.match.
//
// It knows nothing of the store, the memo, the node inventory or a
// placement request: the engine (package opa) compiles and binds what this
// package parses, and asks Matcher whether an object is in scope.
package gatekeeper
