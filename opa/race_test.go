//go:build race

package opa_test

const raceEnabled = true
