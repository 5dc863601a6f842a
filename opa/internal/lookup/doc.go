// Package lookup reads the values at the analysis's paths
// (analysis.Result): a memo key is the values at a constraint's input
// paths, and those paths hold markers (analysis.When, Each, EachWhere,
// Len, Keys) that say how to read what is below them. A path is compiled
// once into a plan, its markers parsed, and the plan reads any number of
// values: the engine keeps a plan for each key path of each constraint, so
// that a request's lookups parse nothing and allocate only the arrays they
// return. Input and At compile on the fly for the paths read once.
//
// ReadIndex and Differ say which plans a change between two reviews can
// move: the engine takes the others' values from a workload's previous
// pod (reads.go).
//
// It knows nothing of constraints, the memo or a request: it reads values.
package lookup
