package gatekeeper

import (
	"github.com/open-policy-agent/opa/v1/ast"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	termObject   = ast.StringTerm("object")
	termSpec     = ast.StringTerm("spec")
	termNodeName = ast.StringTerm("nodeName")
)

// podKindTerm and podResourceTerm are review.kind and review.resource of
// every pod review (values are immutable, so one term serves them all).
var (
	podKindTerm = ast.ObjectTerm(
		ast.Item(ast.StringTerm("group"), ast.StringTerm("")),
		ast.Item(ast.StringTerm("version"), ast.StringTerm("v1")),
		ast.Item(ast.StringTerm("kind"), ast.StringTerm("Pod")))
	podResourceTerm = ast.ObjectTerm(
		ast.Item(ast.StringTerm("group"), ast.StringTerm("")),
		ast.Item(ast.StringTerm("version"), ast.StringTerm("v1")),
		ast.Item(ast.StringTerm("resource"), ast.StringTerm("pods")))
)

// reviewKeys are the review's keys and constant values, made once: every
// request builds a review.
var reviewKeys = struct {
	uid, kind, resource, operation, userInfo, oldObject, options, namespaceObject, name, namespace *ast.Term
	empty, create                                                                                  *ast.Term
}{
	ast.StringTerm("uid"), ast.StringTerm("kind"), ast.StringTerm("resource"), ast.StringTerm("operation"),
	ast.StringTerm("userInfo"), ast.StringTerm("oldObject"), ast.StringTerm("options"), ast.StringTerm("namespaceObject"),
	ast.StringTerm("name"), ast.StringTerm("namespace"), ast.StringTerm(""), ast.StringTerm("CREATE"),
}

// PodReview is the Pod CREATE review a template sees: the
// AdmissionRequest's JSON fields plus namespaceObject. name and namespace
// are left out when empty, as the AdmissionRequest's JSON leaves them out.
func PodReview(pod ast.Object, name, namespace string, userInfo, namespaceObject *ast.Term) ast.Object {
	k := &reviewKeys
	items := make([][2]*ast.Term, 0, 11)
	items = append(items,
		ast.Item(k.uid, k.empty),
		ast.Item(k.kind, podKindTerm),
		ast.Item(k.resource, podResourceTerm),
		ast.Item(k.operation, k.create),
		ast.Item(k.userInfo, userInfo),
		ast.Item(termObject, ast.NewTerm(pod)),
		ast.Item(k.oldObject, ast.InternedNullTerm),
		ast.Item(k.options, ast.InternedNullTerm),
		ast.Item(k.namespaceObject, namespaceObject),
	)
	if name != "" {
		items = append(items, ast.Item(k.name, ast.StringTerm(name)))
	}
	if namespace != "" {
		items = append(items, ast.Item(k.namespace, ast.StringTerm(namespace)))
	}
	return ast.NewObject(items...)
}

// WithNodeName gives review with object.spec.nodeName set to node. Values
// are shared with the review, never copied.
func WithNodeName(review ast.Object, node string) ast.Object {
	var pod ast.Object
	if t := review.Get(termObject); t != nil {
		pod, _ = t.Value.(ast.Object)
	}
	if pod == nil {
		pod = ast.NewObject()
	}
	var spec ast.Object
	if t := pod.Get(termSpec); t != nil {
		spec, _ = t.Value.(ast.Object)
	}
	if spec == nil {
		spec = ast.NewObject()
	}
	obj := ReplaceKey(pod, termSpec, ast.NewTerm(ReplaceKey(spec, termNodeName, ast.StringTerm(node))))
	return ReplaceKey(review, termObject, ast.NewTerm(obj))
}

// ReplaceKey is obj with key set to value, other keys shared.
func ReplaceKey(obj ast.Object, key, value *ast.Term) ast.Object {
	items := make([][2]*ast.Term, 0, obj.Len()+1)
	obj.Foreach(func(k, v *ast.Term) {
		if !k.Equal(key) {
			items = append(items, ast.Item(k, v))
		}
	})
	items = append(items, ast.Item(key, value))
	return ast.NewObject(items...)
}

// WithTypeMeta fills apiVersion and kind when the wire type left them out.
func WithTypeMeta(obj map[string]any, gvk schema.GroupVersionKind) map[string]any {
	if _, ok := obj["kind"]; ok {
		if _, ok := obj["apiVersion"]; ok {
			return obj
		}
	}
	out := make(map[string]any, len(obj)+2)
	for k, v := range obj {
		out[k] = v
	}
	if _, ok := out["apiVersion"]; !ok {
		out["apiVersion"] = gvk.GroupVersion().String()
	}
	if _, ok := out["kind"]; !ok {
		out["kind"] = gvk.Kind
	}
	return out
}

// ObjectMeta reads an object's name, namespace and string labels.
func ObjectMeta(obj map[string]any) (name, namespace string, labels map[string]string) {
	md, _ := obj["metadata"].(map[string]any)
	name, _ = md["name"].(string)
	namespace, _ = md["namespace"].(string)
	if l, ok := md["labels"].(map[string]any); ok {
		labels = make(map[string]string, len(l))
		for k, v := range l {
			if s, ok := v.(string); ok {
				labels[k] = s
			}
		}
	}
	return name, namespace, labels
}
