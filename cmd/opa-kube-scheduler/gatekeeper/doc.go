// Package gatekeeper is the OPAGatekeeper Scheduling Framework plugin: the
// project's policy engine (package opa) inside kube-scheduler, judging the
// same Gatekeeper ConstraintTemplates and Constraints as the extender
// without an HTTP hop.
//
// # What it owns
//
//   - The extension points. PreFilter prepares the pod once per cycle
//     (opa.PodQuery: matched against every constraint, judged on those
//     that cannot see the node): a deny among those ends the cycle as
//     UnschedulableAndUnresolvable with the constraint's message; when no
//     matched deny constraint can see the node, the plugin's Filter is
//     skipped. Filter judges nodes on first need, a block of 32 at a time
//     (deny: UnschedulableAndUnresolvable, so preemption never picks a node
//     the policy forbids). When policy denies some nodes of a signed pod but
//     not all, PreFilter also hands out the allowed ones (a
//     PreFilterResult, once per signature), and PostFilter gives a pod that
//     then finds no node the messages of the others, which kube-scheduler
//     appends to its FailedScheduling message (allowed.go; the nodeMessages
//     arg turns the set off). PreScore skips Score when no warn constraint
//     matches; Score is the extender's prioritize score (10 * (W - V) / W)
//     scaled to 0..100. SignPod signs a pod with what decides its verdicts
//     (the engine's memo keys, printed names left out, the policy and
//     inventory generations), so kube-scheduler's opportunistic batching
//     stays on; the same signature shares judged blocks between the cycles
//     of a ReplicaSet's pods (state.go), each cycle's messages naming its
//     own pod (PodQuery.Rebind). Messages, enforcement actions, the action
//     annotation, scoped actions and dry runs are the engine's, so they are
//     exactly the extender's (server/testdata/enforcement.yaml is the
//     shared table).
//   - Where its engine's objects come from: Nodes and Namespaces from the
//     scheduler's own SharedInformerFactory (no second watch), templates,
//     constraints and --sync-kind style extra kinds through the extender's
//     cluster source (package opa/source), or a policy folder (Args).
//   - Requeueing: EventsToRegister (Node added or changed) and, for what
//     the scheduler cannot see, Handle.Activate of the pods it rejected when
//     the policy set changes, when the engine first becomes ready, and when
//     the Namespace of a rejected pod changes (requeue.go).
//   - Its metrics on kube-scheduler's /metrics (metrics.go), and the
//     cluster source's refusal events through kube-scheduler's recorder
//     (events.go).
//
// # What it does not own
//
// Rego, Gatekeeper semantics, memoisation, the inventory (package opa);
// informers for Gatekeeper's objects (package opa/source); scheduling
// itself. It never copies the engine's logic: every verdict, message and
// score comes from opa.Placement.
//
// One engine per profile: each profile's pluginConfig may name its own
// policy folder or enforcement point (a tenant's own policy scope), and
// each engine keeps its own compact copy of the inventory.
package gatekeeper
