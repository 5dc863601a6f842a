// Package policyset is the policy set a request reads: the templates in
// force, each with its code compiled by its engine's driver, and the
// constraints bound to them (a Snapshot, immutable once built, which the
// engine installs atomically with its store commit). Binding a constraint
// checks its parameters against the template's schema, runs the analysis
// with them as constants, and prepares what its memo key reads: the input
// paths (numbered in the engine's Registry, so that a request reads each
// once for every constraint), the helpers that stand in the key for what
// they read, the printed paths and their placeholders, and the inventory
// kinds whose generations key its verdicts.
//
// It knows neither requests nor the memo's contents, the store nor HTTP:
// the engine (package opa) stages changes, asks for a Snapshot and keys,
// evaluates and answers with it.
package policyset
