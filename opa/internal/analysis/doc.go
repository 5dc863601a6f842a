// Package analysis decides, once per compiled ConstraintTemplate (and once
// more per constraint, with its parameters known), what a template's
// verdict can depend on. Its Result is the memo key of the engine: two
// reviews that agree on every path it lists get the same verdict.
//
// It owns the static reading of compiled Rego: aliases, helper functions,
// constants from parameters, the candidate node, and the values that only
// flow into a violation's message. It does not evaluate anything, hold
// values or know the engine: it is a leaf package (OPA's ast only) that the
// engine in package opa calls when it compiles templates and binds
// constraints.
//
// The contract: a Result over-approximates, never under-approximates.
//
//   - every reference rooted at input, or at a variable bound to one
//     (x := input.a.b, possibly through a chain of such aliases), records
//     its longest ground prefix;
//   - a variable that is used whole (passed to a builtin, compared,
//     returned) records its whole origin;
//   - data.inventory.cluster["v1"].Node[<the pod's nodeName>] is the
//     candidate node: reads below it are recorded as node paths, so nodes
//     that agree on those paths share verdicts whatever their names;
//   - any other read of data.inventory sets InventoryOther; a `with` on
//     input or data widens to the whole input and the inventory;
//   - arguments flow into user functions: the function's body is analysed
//     with its parameters bound to the arguments' origins (literal
//     arguments as constants), so a helper such as has_field(spec,
//     "securityContext") records spec.securityContext only;
//   - the constraint's parameters, and what the template computes from
//     them alone, are constants (consts.go): a reference through
//     input.parameters, a variable bound to one, a template rule of
//     constants (with several definitions, else or a default: one of
//     their values; a partial set rule or a comprehension of them: a
//     collection of their values), an element or key iterated from a
//     constant collection (`l := input.parameters.labels[_]`, then
//     `l.key`; `some k, v in input.parameters.labels`; `every`), and a
//     few string builtins of constants (concat, sprintf with %v and %s,
//     lower, upper, trim_prefix, trim_suffix, trim_space; constcall.go).
//     A lookup by a constant key that is a string or a number reads that
//     key only (node.metadata.labels[input.parameters.label] reads
//     node.metadata.labels["<the parameter>"]), by a key that is one of
//     at most 16 such constants each of them (fanOut), and by any other
//     key (an object, a boolean, a missing parameter, a constant the
//     analysis does not compute) the whole object, Why then saying what
//     the key is; a rule definition that reads the review is no
//     constant;
//   - object.get(x, k, default) reads x.k for a constant key k (each of
//     its values);
//   - templates that call nondeterministic builtins are never memoised;
//   - a value whose only use is to be printed into a violation's msg or
//     placed as is into its details (Messages) is not part of the key: see
//     flow.go for the rules that make this sound, and what falls back;
//     printed with %q (Quote, NodeNameQuote), the candidate's name and
//     node paths included, it leaves the key like %v, and the engine puts
//     a placeholder only where the real value is a string that
//     strconv.Quote prints as "value": exactly the strings for which the
//     message filled in is Rego's sprintf("%q") of the real value;
//   - Guards (guard.go) are the tests of the review against constants that
//     every violation rule begins with: a review failing one of each rule
//     has an empty violation set, so the engine need not evaluate it;
//   - a read through a list element (`c := input.review.object.spec.containers[_]`,
//     then `c.image`) records the list's length and the path below each
//     element (Each), so that `c.name`, only printed, can leave the key; the
//     library's sets over several lists (input_containers), filtered or
//     not, are followed into each list, the set's key bound to the element
//     as Rego binds it, and so are objects of the containers by name
//     (`input_containers[c.name] = c`, seccomp v2), whose keys the engine
//     checks distinct at run time (DistinctKeys; lists.go);
//   - lists inside an element are read element by element too (a
//     container's ports or mounts: nested Each); a value compared with a
//     list set's elements forks per list like a binding (listCompare); the
//     bindings in a comprehension's body make elements, the variables it
//     shares with the rule around it being bound there (comprehension),
//     and what the body and head read of an element after a truth test on
//     it (`c.securityContext.privileged`, `== true`, `has_field`, or a
//     function of the element alone made of such tests) is read for the
//     elements that pass it only (EachWhere; guardElements): the names in
//     `{sprintf("container %v is privileged", [c.name]) | c :=
//     containers[_]; privileged(c)}` of the privileged containers;
//   - a truth test `x[k]` reads the keys of x whose values hold (Keys): the
//     volume types of `{x | volumes[_][x]}`, not the volumes' names;
//   - a list set whose definitions only test fields of the element
//     (`has_field(v, "hostPath")`) is read for its members only
//     (EachWhere), and what a body reads after binding a member is read
//     only for a review whose list has one (When, conditional reads);
//     functions are analysed apart, parameters unbound, only when no call
//     analysed them in place (functionsApart), so that their reads carry
//     their calls' conditions;
//   - a body that iterates a constant empty collection (the library's
//     is_exempt with no exemptImages) after harmless expressions never
//     succeeds: its reads are dropped (dead.go), and so does one that
//     iterates a parameter that is an empty collection;
//   - a call of a template's function used as a truth test (`not
//     is_exempt(c)`) on one value of the review, the other arguments
//     constant, whose body reads nothing but that value (through its
//     parameter, not from input) and constants, reads the function's
//     answer on that value (Helper, helper.go), not what the function
//     reads of it: the engine evaluates the function alone, memoised on
//     those reads, so a new image keys the same verdict as an old one when
//     is_exempt answers the same; a printed value the function reads stays
//     in the key, so that the function sees the real value; and a Helper
//     on a list's element whose reads other key paths hold raw (allowed
//     repositories compare the image themselves) is left out, its answer
//     decided by them (dropDeterminedHelpers);
//   - a Helper's answer depends, besides its value, on the code its
//     function runs and the constraint's parameters it reads:
//     HelperDependencies (identity.go) names both, the template's
//     namespace left out, so that templates shipping the same lib (the
//     library's is_exempt) share the answers where their parameters agree;
//   - a partial set rule that the violation rule reads only through
//     patterns binding its head (the library's
//     general_violation[{"msg": msg, "field": "containers"}]) is analysed
//     once per pattern, with the head's variables bound to its constants,
//     so that spec[field][_] is one list, element-wise (relay.go);
//   - concat with a constant separator prints its parts as sprintf's
//     %s does, and a printed string passed to a template function stays
//     one in it (flow.go, userCall);
//   - a printed value that a lookup key into a review object is built
//     from (AppArmor's
//     `pod.metadata.annotations[sprintf("...%v", [container.name])]`,
//     seccomp's has_annotation(concat("", [prefix, name]))) stays a
//     message, with the object read and a run-time condition: no key of
//     the object holds the value; a rule head built only when such a
//     lookup succeeds may hold strings made of it (lookupkey.go).
//
// MessagePath.Helpers serves CEL's analysis: a printed value whose memo
// key holds a Helper's answer on it gets a placeholder only when the
// Helper answers alike for the placeholder. The Rego analysis reads such
// a value (a Helper there takes the element, not the printed value).
//
// Known imprecisions, each costing evaluations, never verdicts: a list
// iterated through a variable key of an object that nothing binds
// (`spec[field][_]` alone) is read whole; a printed value in a set that is
// counted or sorted (the realistic mix's privileged pool joins its
// sorted reasons) is read; a helper that also reads input itself
// (automount's mountServiceAccountToken(spec), which reads
// input_containers), or whose value is bound rather than tested, is read
// as it is.
package analysis
