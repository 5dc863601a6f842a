// Package diff holds the differential test of the opa-scheduler-extender's
// engine against Gatekeeper's constraint framework (the peer in bench/peer):
// the same templates, constraints and inventory in both, a few hundred
// generated pods reviewed on a handful of candidate nodes each, and no
// difference allowed in the violations (constraint, message, details) except
// the intended ones listed in the test. Run it with
//
//	cd bench && go test ./diff/
//
// The package has no non-test code.
package diff
