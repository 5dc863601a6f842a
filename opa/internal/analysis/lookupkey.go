package analysis

import (
	"github.com/open-policy-agent/opa/v1/ast"
)

// Printed values as lookup keys. Some templates build a key from a value
// they also print and look it up in the review: AppArmor's
//
//	out := pod.metadata.annotations[sprintf("container.apparmor.security.beta.kubernetes.io/%v", [container.name])]
//	not pod.metadata.annotations[sprintf("container.apparmor.security.beta.kubernetes.io/%v", [container.name])]
//
// The lookup's outcome depends on the name, so the name would be read and
// every new container name would be a new class. But a lookup by a string
// that contains the value misses whenever no key of the object contains
// the value: then it misses for the real value and, provided no key
// contains placeholder text either, for the placeholder, and the
// evaluation with the placeholder is the evaluation with the real value.
// So such a use is allowed like a sprintf argument, on two conditions:
//
//   - statically, the object is an exact path below input.review (its
//     value is read: it is in the key), the key is a printed string (every
//     source an input path other than the candidate's name), and it is
//     the first non-ground key of the reference;
//   - at run time, the engine puts a placeholder in the value's place only
//     when no key of the object at each of MessagePath.Absent contains
//     the value (nor placeholder text); otherwise the value is keyed and
//     evaluated as it is.
//
// Each source of the key is checked, whichever gets a placeholder: a key
// built from several printed values misses as soon as one of them appears
// in no key of the object.

// keyedLookup is one such use: the key's sources and the object (a path
// below input).
type keyedLookup struct {
	sources []source
	in      []*ast.Term
}

// lookupKey takes k, the first non-ground key after the ground path of
// object, as a printed string used as a lookup key into object, when that
// is allowed (see above). It reports whether it did.
func (z *analyzer) lookupKey(object origin, k *ast.Term) bool {
	v, ok := k.Value.(ast.Var)
	if !ok || z.sc == nil || object.root != Input || !object.exact || EachAt(object.path) >= 0 ||
		len(object.path) == 0 || !object.path[0].Equal(ast.StringTerm("review")) {
		return false
	}
	p := z.sc.strings[v]
	if p == nil || len(p.sources) == 0 {
		return false
	}
	for _, s := range p.sources {
		if s.o.root != Input || PrefixRelated(s.o.path, NodeNamePath) || PrefixRelated(s.o.path, object.path) {
			return false
		}
	}
	p.allowed++
	z.keyed = append(z.keyed, keyedLookup{sources: p.sources, in: object.path})
	return true
}

// absentPaths gives, for each printed path (by rootName+PathString), the
// objects in whose keys its value must not appear.
func (z *analyzer) absentPaths() map[string][][]*ast.Term {
	if len(z.keyed) == 0 {
		return nil
	}
	out := map[string][][]*ast.Term{}
	seen := map[string]bool{}
	for _, kl := range z.keyed {
		in := PathString(kl.in)
		for _, s := range kl.sources {
			k := rootName(s.o.root) + PathString(s.o.path)
			if seen[k+"\x00"+in] {
				continue
			}
			seen[k+"\x00"+in] = true
			out[k] = append(out[k], kl.in)
		}
	}
	return out
}
