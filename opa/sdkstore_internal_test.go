package opa

import (
	"context"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
)

// TestSDKStoreTriggersSeeASTValues: a trigger registered through sdkStore
// (as the SDK's plugin manager registers its own) receives the values a
// commit wrote as the store holds them, not converted under the store's
// commit lock; triggers registered on the store itself still get Go
// values.
func TestSDKStoreTriggersSeeASTValues(t *testing.T) {
	ctx := context.Background()
	store := inmem.NewWithOpts(inmem.OptRoundTripOnWrite(false), inmem.OptReturnASTValuesOnRead(true))
	seen := map[string]any{}
	register := func(name string, s storage.Store) {
		txn := storage.NewTransactionOrDie(ctx, store, storage.WriteParams)
		_, err := s.Register(ctx, txn, storage.TriggerConfig{OnCommit: func(_ context.Context, _ storage.Transaction, ev storage.TriggerEvent) {
			for _, d := range ev.Data {
				seen[name] = d.Data
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Commit(ctx, txn); err != nil {
			t.Fatal(err)
		}
	}
	register("through sdkStore", sdkStore{store})
	register("on the store", store)
	value := ast.MustParseTerm(`{"n1": {"metadata": {"name": "n1"}}}`).Value
	if err := storage.WriteOne(ctx, store, storage.AddOp, storage.Path{"nodes"}, value); err != nil {
		t.Fatal(err)
	}
	if got, ok := seen["through sdkStore"].(ast.Value); !ok || got.Compare(value) != 0 {
		t.Errorf("through sdkStore the trigger saw %T %v, want the AST value written", seen["through sdkStore"], seen["through sdkStore"])
	}
	if _, ok := seen["on the store"].(map[string]any); !ok {
		t.Errorf("on the store the trigger saw %T, want Go values", seen["on the store"])
	}
}
