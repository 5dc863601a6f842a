// Package verdict is what a constraint's evaluation on one review yields
// and how its messages are made: Gatekeeper's reading of a violation set
// (Results: elements without msg dropped, details defaulted, duplicates
// collapsed, in a stable order), the deny messages of a node, and the
// placeholders by which one evaluation's messages serve every value they
// only print.
//
// Values that only reach messages (analysis.MessagePath) are evaluated as
// placeholders and put back afterwards. A placeholder is
// "opaph<process token>_<index>_": the token is random per process, so no
// pod or node can carry one; the index names one path in the engine's
// registry, so that one placeholder review serves every constraint that
// prints the same paths. Placeholders are letters, digits and '_': %v, %s,
// %q and JSON leave them as they are.
//
// It knows nothing of the memo, the store or a request: the engine keeps
// Results in its memo and fills their placeholders per node.
package verdict
