// Package inventory owns data.inventory: where Gatekeeper's sync puts each
// object in the store (Path), the generations that say whether what the
// store holds changed (the whole inventory's and each kind's), what a
// template's rules can reach of it (ReadsOf), and the Nodes: kept in the
// store cut to what the policy set reads (View) while the whole of each is
// kept aside, deflated (package internal/compact), for the next cut; what
// Nodes hold alike (a zone label, a pool's taints, every key) is one term
// in all of them (shared.go). A
// commit that writes many Nodes stores them as one new Nodes object, so
// that the store's commit, which requests wait for, does not walk every
// Node once per Node written (nodewrites.go). The node index finds each
// generation's Nodes by name, or by the number a request's numbering gives
// the name (index.go).
//
// It knows nothing of templates, constraints, the memo or a request: the
// engine (package opa) says which paths its policy set reads of a Node,
// which numbering its requests use, and calls Inventory with its write
// lock held.
package inventory
