package opa

import (
	"context"

	"github.com/open-policy-agent/opa/v1/storage"
)

// sdkStore is the engine's store as the OPA SDK's plugin manager sees it:
// the triggers registered through it receive the values a commit wrote as
// the store holds them (AST), unconverted.
//
// OPA's in-memory store converts every value a commit wrote into Go values
// for each trigger that does not skip the conversion, with its commit lock
// held, which every request waits for to open its read transaction. The
// plugin manager's trigger asks for the conversion but reads only the
// paths written (wasm resolvers, which this engine never loads, would read
// more); converting the Nodes object of a 5000-Node inventory, written
// whole when a commit re-cuts or writes many Nodes, took 18 ms of the lock
// per commit.
type sdkStore struct{ storage.Store }

var _ storage.Store = sdkStore{}

// Register registers config's trigger on the store, without conversion.
func (s sdkStore) Register(ctx context.Context, txn storage.Transaction, config storage.TriggerConfig) (storage.TriggerHandle, error) {
	config.SkipDataConversion = true
	return s.Store.Register(ctx, txn, config)
}
