// Package compact keeps JSON documents small in memory: each is deflated
// against a dictionary drawn from sample documents of the same kind, so
// that what documents share (a Node's keys, the images and digests most
// Nodes of a cluster hold, condition messages) is not paid for in every
// copy. A Codec's output is bytes the garbage collector never scans.
//
// It owns the encoding only: which documents are kept, where, and when
// they are decoded again belongs to the caller (opa/internal/inventory
// keeps the whole Nodes the store holds cut). It knows nothing of OPA or
// Kubernetes.
//
// A document encoded by a Codec decodes with that Codec only; a Codec never
// changes its dictionary. Documents unlike the samples still round-trip,
// they only shrink less.
package compact
