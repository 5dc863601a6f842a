package policyset

import (
	"sync/atomic"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/lookup"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/verdict"
)

// Registry is what every policy set of one engine numbers alike, so that
// a constraint bound anew keeps the numbers of the paths it shares with
// others: the input paths of memo keys, the printed paths' placeholders,
// and the owners of constraints' and helpers' answers in the memos. Its
// helper owners belong to the engine's write lock; the rest is safe for
// concurrent use.
type Registry struct {
	// keyPaths numbers the input paths of memo keys.
	keyPaths     verdict.PathIndex
	Placeholders *verdict.Placeholders
	// owners gives each constraint's and each helper's answers their
	// owner in the memos.
	owners atomic.Uint64
	// helperOwners are the helper memo's owners by helper identity.
	helperOwners map[string]uint64
	// Lookup are the tables the plans of the policy sets share.
	Lookup *lookup.Tables
}

// NewRegistry is an empty registry, with placeholders of its own.
func NewRegistry() *Registry {
	return &Registry{Placeholders: verdict.NewPlaceholders(), Lookup: lookup.NewTables()}
}

// helperOwner is the helper memo's owner of the helpers named identity,
// given at the first of them. The table belongs to the engine's write
// lock; the engine
// keeps in it only the identities its constraints use, so that owners of
// removed helpers are not kept (their answers age out of the memo).
func (reg *Registry) helperOwner(identity string) uint64 {
	if owner, ok := reg.helperOwners[identity]; ok {
		return owner
	}
	owner := reg.owners.Add(1)
	if reg.helperOwners == nil {
		reg.helperOwners = map[string]uint64{}
	}
	reg.helperOwners[identity] = owner
	return owner
}

// keepHelperOwners forgets the helper owners that no constraint of snap
// uses.
func (reg *Registry) keepHelperOwners(snap *Snapshot) {
	used := make(map[string]uint64, len(reg.helperOwners))
	for _, bc := range snap.Constraints {
		for _, h := range bc.KeyHelpers {
			if h != nil {
				used[h.identity] = h.Owner
			}
		}
	}
	reg.helperOwners = used
}
