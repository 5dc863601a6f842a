// Package gen generates what the differential tests (bench/diff) judge on
// both sides: random Gatekeeper ConstraintTemplates written as a user
// could write them (CEL expressions over the review, params and
// variables, with messages that print what they read), their Constraints,
// and pods whose fields are optional, absent, null, empty or of the wrong
// type. Each generated value can be made one step simpler, so that a
// difference found on a large template shrinks to a small case.
//
// It knows nothing of the engine or of Gatekeeper: the test feeds the same
// objects to both and compares.
package gen
