package opa_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// printingPolicies name the pod and the node in their messages in the ways
// users write them: sprintf with %v, %s and %q, an alias, a helper,
// details, spec.nodeName printed.
const printingPolicies = `
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8sprintpool}
spec:
  crd: {spec: {names: {kind: K8sPrintPool}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8sprintpool
        violation[{"msg": msg, "details": {"node": node.metadata.name, "pod": input.review.object.metadata.name}}] {
          node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
          node.metadata.labels.pool == "blocked"
          pod := input.review.object
          msg := sprintf("pod %v may not use node %s (%q)", [pod.metadata.name, node.metadata.name, input.review.object.spec.nodeName])
        }
        violation[{"msg": msg}] {
          node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
          node.metadata.labels.pool == "blocked"
          msg := name_msg(input.review.object.metadata.name)
        }
        name_msg(n) = m { m := sprintf("%v", [n]) }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sPrintPool
metadata: {name: print-pool}
`

func printingEngine(t testing.TB, opts opa.Options, nodeNames []string) *opa.Engine {
	t.Helper()
	return printingEngineOf(t, opts, nodeNames, printingPolicies)
}

func printingEngineOf(t testing.TB, opts opa.Options, nodeNames []string, policies string) *opa.Engine {
	t.Helper()
	objs, err := readObjects(strings.NewReader(policies))
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, opts)
	apply(t, e, objs...)
	var nodes []*unstructured.Unstructured
	for i, n := range nodeNames {
		nodes = append(nodes, node(n, map[string]string{"pool": []string{"blocked", "open", "blocked"}[i%3]}))
	}
	apply(t, e, nodes...)
	return e
}

func placementMessages(t testing.TB, e *opa.Engine, podName any, cands []opa.Candidate) []string {
	t.Helper()
	p := pod("default", "x")
	md := p["metadata"].(map[string]any)
	if podName == nil {
		delete(md, "name")
	} else {
		md["name"] = podName
	}
	return violationsOf(t, e, p, cands)
}

// TestPrintedNamesMemoIsExact runs pods with odd names over nodes with odd
// names through an engine with the memo and one without: the answers must
// be byte-identical, and the memo must evaluate once per node class, not
// once per pod or per node.
func TestPrintedNamesMemoIsExact(t *testing.T) {
	nodeNames := []string{"n-1", "n-2", "n-3", `n"q`, `n\b`, "n-%v", "nü-日本", "n-4", "n-5"}
	var cands []opa.Candidate
	for _, n := range nodeNames {
		cands = append(cands, opa.Candidate{Name: n})
	}
	memo := printingEngine(t, opa.Options{}, nodeNames)
	exact := printingEngine(t, opa.Options{DisableMemo: true}, nodeNames)
	podNames := []any{"web-1", "web-2", `we"b`, `we\b`, "we%vb", "%!s(MISSING)", "ünï 日本 🚀", "", nil, 42, "n-1", "<&>\u2028", strings.Repeat("x", 200)}
	before := memo.Stats().Evaluations
	for _, n := range podNames {
		got, want := placementMessages(t, memo, n, cands), placementMessages(t, exact, n, cands)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("pod name %#v:\n memo    %q\n no memo %q", n, got, want)
		}
	}
	// Names that are strings and print as themselves under %q share one
	// evaluation per node class (blocked, open); the others (quotes,
	// backslashes, non-strings, missing) are evaluated as they are.
	evals := memo.Stats().Evaluations - before
	if evals > 2*uint64(len(podNames))+uint64(len(nodeNames))*4 {
		t.Errorf("%d evaluations for %d pods on %d nodes: the printed names are not left out of the key", evals, len(podNames), len(nodeNames))
	}
	before = memo.Stats().Evaluations
	for i := range 50 {
		placementMessages(t, memo, fmt.Sprintf("replica-%d", i), cands)
	}
	if evals := memo.Stats().Evaluations - before; evals != 0 {
		t.Errorf("50 more replicas ran %d evaluations, want 0 (their names are only printed)", evals)
	}
}

// FuzzPrintedNames checks the memo against no memo on arbitrary pod and
// node names.
func FuzzPrintedNames(f *testing.F) {
	for _, s := range [][2]string{{"web-1", "n-1"}, {`a"b`, `c\d`}, {"%v", "%q"}, {"", "x"}, {"ü", "日本"}, {"same", "same"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, podName, nodeName string) {
		if nodeName == "" {
			return
		}
		nodes := []string{nodeName, nodeName + "-2", "fixed"}
		cands := []opa.Candidate{{Name: nodes[0]}, {Name: nodes[1]}, {Name: nodes[2]}}
		memo := printingEngine(t, opa.Options{}, nodes)
		exact := printingEngine(t, opa.Options{DisableMemo: true}, nodes)
		for _, n := range []string{podName, podName + "x", podName} {
			got, want := placementMessages(t, memo, n, cands), placementMessages(t, exact, n, cands)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("pod %q nodes %q:\n memo    %q\n no memo %q", n, nodes, got, want)
			}
		}
	})
}

// TestPrintedValueBehindAnArray: a printed node value reached through an
// array (status.addresses[0]) cannot hold a placeholder; it stays in the
// key, so nodes of one pool never share each other's addresses.
func TestPrintedValueBehindAnArray(t *testing.T) {
	objs, err := readObjects(strings.NewReader(`
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8saddress}
spec:
  crd: {spec: {names: {kind: K8sAddress}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8saddress
        violation[{"msg": msg}] {
          node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
          node.metadata.labels.pool == "blocked"
          msg := sprintf("blocked at %v", [node.status.addresses[0].address])
        }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sAddress
metadata: {name: address}
`))
	if err != nil {
		t.Fatal(err)
	}
	build := func(opts opa.Options) *opa.Engine {
		e := newEngine(t, opts)
		apply(t, e, objs...)
		for i, ip := range []string{"10.0.0.1", "10.0.0.2"} {
			n := node(fmt.Sprintf("n-%d", i), map[string]string{"pool": "blocked"})
			n.Object["status"] = map[string]any{"addresses": []any{map[string]any{"type": "InternalIP", "address": ip}}}
			apply(t, e, n)
		}
		return e
	}
	cands := []opa.Candidate{{Name: "n-0"}, {Name: "n-1"}}
	got := placementMessages(t, build(opa.Options{}), "p", cands)
	want := placementMessages(t, build(opa.Options{DisableMemo: true}), "p", cands)
	if !reflect.DeepEqual(got, want) || len(got) != 2 || !strings.Contains(got[1], "10.0.0.2") {
		t.Errorf("memo %q, no memo %q", got, want)
	}
}

// severalDefinitionsPolicy prints the pod's name through a function with
// several definitions: "same" and "kind" agree with any name, "odd"'s two
// conflict unless the name is all x (then "NAMEx" == "xNAME").
const severalDefinitionsPolicy = `
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8sseveral}
spec:
  crd: {spec: {names: {kind: K8sSeveral}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8sseveral
        violation[{"msg": msg}] {
          msg := describe(input.review.object)
        }
        describe(o) = m { o.metadata.labels.kind == "a"; m := sprintf("pod %v is a", [o.metadata.name]) }
        describe(o) = m { o.metadata.labels.same == "yes"; m := sprintf("pod %v is a", [o.metadata.name]) }
        describe(o) = m { o.metadata.labels.odd == "yes"; m := sprintf("%vx", [o.metadata.name]) }
        describe(o) = m { o.metadata.labels.odd == "yes"; m := sprintf("x%v", [o.metadata.name]) }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sSeveral
metadata: {name: several}
`

// TestPrintedThroughSeveralDefinitions: a name printed through a function
// with several definitions leaves the key; where the placeholders make two
// definitions conflict, the pod is judged again with its real name, which
// may not conflict. Answers are those without memo, and replicas (new
// names, no conflict) cost no evaluation.
func TestPrintedThroughSeveralDefinitions(t *testing.T) {
	objs, err := readObjects(strings.NewReader(severalDefinitionsPolicy))
	if err != nil {
		t.Fatal(err)
	}
	build := func(opts opa.Options) *opa.Engine {
		e := newEngine(t, opts)
		apply(t, e, objs...)
		apply(t, e, node("n-1", nil), node("n-2", nil))
		return e
	}
	memo, exact := build(opa.Options{}), build(opa.Options{DisableMemo: true})
	cands := []opa.Candidate{{Name: "n-1"}, {Name: "n-2"}}
	judge := func(e *opa.Engine, name string, labels map[string]any) []string {
		p := pod("default", name)
		p["metadata"].(map[string]any)["labels"] = labels
		res, err := e.Evaluate(context.Background(), opa.PlacementRequest{Pod: p, Candidates: cands})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for i := range res.Nodes {
			for _, x := range res.Violations(i) {
				out = append(out, fmt.Sprintf("%s %q %v", res.Nodes[i].Name, x.Message, x.Error))
			}
		}
		return out
	}
	labelSets := []map[string]any{{"kind": "a"}, {"kind": "a", "same": "yes"}, {"odd": "yes"}, {"odd": "yes", "kind": "a"}, {}}
	names := []string{"web-1", "web-2", "x", "xx", `a"b`, "ü", "%v"}
	conflicts, agreements := 0, 0
	for _, labels := range labelSets {
		for _, n := range names {
			got, want := judge(memo, n, labels), judge(exact, n, labels)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("pod %q labels %v:\n memo    %q\n no memo %q", n, labels, got, want)
			}
			if labels["odd"] != nil {
				if len(want) > 0 && strings.HasSuffix(want[0], "true") {
					conflicts++
				} else {
					agreements++
				}
			}
		}
	}
	if conflicts == 0 || agreements == 0 {
		t.Fatalf("the odd pods had %d conflicts and %d agreements: the test covers neither case", conflicts, agreements)
	}
	before := memo.Stats().Evaluations
	for i := range 20 {
		judge(memo, fmt.Sprintf("replica-%d", i), map[string]any{"kind": "a", "same": "yes"})
	}
	if evals := memo.Stats().Evaluations - before; evals != 0 {
		t.Errorf("20 replicas ran %d evaluations, want 0 (their names are only printed)", evals)
	}
}

// plainRecorder is a PlainWriter that checks what it is told is plain.
type plainRecorder struct {
	strings.Builder
	t      *testing.T
	plains int
}

func (w *plainRecorder) WritePlain(s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			w.t.Errorf("WritePlain(%q): byte %q is not plain", s, c)
		}
	}
	w.plains++
	w.WriteString(s)
}

// deniedBy joins node i's deny violations as DenyMessage is documented to:
// "[<constraint name>] <msg>", with "; ".
func deniedBy(p *opa.Placement, i int) string {
	var parts []string
	for _, v := range p.Violations(i) {
		if v.Action == opa.Deny {
			parts = append(parts, "["+v.Constraint.Name+"] "+v.Message)
		}
	}
	return strings.Join(parts, "; ")
}

// TestWriteDenyMessagePlainParts: a PlainWriter is given as plain only
// text that is (printable ASCII, no quote or backslash), the odd names
// included, and what it is given in all is DenyMessage's text, which is
// the node's deny violations joined, and what an engine without the memo
// (no placeholders, no joined pieces) writes.
func TestWriteDenyMessagePlainParts(t *testing.T) {
	nodeNames := []string{"n-1", `n"q`, `n\b`, "nü-日本", "n-\t", "n-4", "n-5"}
	var cands []opa.Candidate
	for _, n := range nodeNames {
		cands = append(cands, opa.Candidate{Name: n})
	}
	for _, policies := range []string{printingPolicies, onePrintedViolation, onePrintedNodeName} {
		e := printingEngineOf(t, opa.Options{}, nodeNames, policies)
		ref := printingEngineOf(t, opa.Options{DisableMemo: true}, nodeNames, policies)
		checkDenyMessages(t, e, ref, nodeNames, cands)
	}
}

// onePrintedViolation is one violation per node, printing the pod and the
// node around constant text: the deny message is written from pieces
// joined for the column (verdict.DenyPieces).
const onePrintedViolation = `
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8sprintone}
spec:
  crd: {spec: {names: {kind: K8sPrintOne}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8sprintone
        violation[{"msg": msg}] {
          node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
          node.metadata.labels.pool == "blocked"
          pod := input.review.object
          msg := sprintf("pod %v/%v \"may\" not use node %v (pool %v)", [pod.metadata.namespace, pod.metadata.name, node.metadata.name, node.metadata.labels.pool])
        }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sPrintOne
metadata: {name: print-one}
`

// onePrintedNodeName prints the node's name as the review gives it (the
// pod's spec.nodeName), and as the Node has it (quoted, and as it is),
// and nothing else of the node: the answer writes it from the
// candidate's name, not from the node's printed values.
const onePrintedNodeName = `
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8sprintnodename}
spec:
  crd: {spec: {names: {kind: K8sPrintNodeName}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8sprintnodename
        violation[{"msg": msg}] {
          node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
          node.metadata.labels.pool == "blocked"
          msg := sprintf("pod %v may not run on %v", [input.review.object.metadata.name, input.review.object.spec.nodeName])
        }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sPrintNodeName
metadata: {name: print-node-name}
---
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8sprintnodemetaname}
spec:
  crd: {spec: {names: {kind: K8sPrintNodeMetaName}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8sprintnodemetaname
        violation[{"msg": msg}] {
          node := data.inventory.cluster["v1"].Node[input.review.object.spec.nodeName]
          node.metadata.labels.pool == "blocked"
          msg := sprintf("node %q (%v) is blocked for %v", [node.metadata.name, input.review.object.spec.nodeName, input.review.object.metadata.name])
        }
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sPrintNodeMetaName
metadata: {name: print-node-meta-name}
`

// TestDenyMessageOfANodeSentUnderAnotherName: a Node sent with the
// request whose own name is not its candidate's is printed with its own
// (the inventory's Nodes are held by their names, and their messages take
// the candidate's at hand; a sent Node's are read from it), as the engine
// without the memo prints it.
func TestDenyMessageOfANodeSentUnderAnotherName(t *testing.T) {
	sent := node("n-1-itself", map[string]string{"pool": "blocked"})
	cands := []opa.Candidate{{Name: "n-1", Object: sent.Object}, {Name: "n-2"}}
	for _, policies := range []string{printingPolicies, onePrintedViolation, onePrintedNodeName} {
		e := printingEngineOf(t, opa.Options{}, []string{"n-1", "n-2"}, policies)
		ref := printingEngineOf(t, opa.Options{DisableMemo: true}, []string{"n-1", "n-2"}, policies)
		checkDenyMessages(t, e, ref, []string{"n-1", "n-2"}, cands)
		got, err := e.Evaluate(context.Background(), opa.PlacementRequest{Pod: pod("default", "web-1"), Candidates: cands})
		if err != nil {
			t.Fatal(err)
		}
		if !got.Denied(0) || !strings.Contains(got.DenyMessage(0), "n-1-itself") {
			t.Fatalf("the sent Node's message %q does not print its own name", got.DenyMessage(0))
		}
	}
}

// TestCandidateNamedTwiceWithANode: a request holds one Node per name,
// as the inventory does. A name given two Nodes that differ in what the
// policy set reads is refused, with the name, by both engines (else one
// candidate would be judged on the other's Node); given the same Node
// twice, or the inventory's again, it is judged alike each time.
func TestCandidateNamedTwiceWithANode(t *testing.T) {
	// The inventory's n-1 is in the blocked pool.
	open := node("n-1", map[string]string{"pool": "open"}).Object
	same := node("n-1", map[string]string{"pool": "blocked", "unread": "x"}).Object
	for _, opts := range []opa.Options{{}, {DisableMemo: true}} {
		e := printingEngineOf(t, opts, []string{"n-1", "n-2"}, onePrintedNodeName)
		for _, cands := range [][]opa.Candidate{
			{{Name: "n-1", Object: open}, {Name: "n-1"}},
			{{Name: "n-1"}, {Name: "n-2"}, {Name: "n-1", Object: open}},
			{{Name: "n-1", Object: open}, {Name: "n-1", Object: same}},
		} {
			_, err := e.Evaluate(context.Background(), opa.PlacementRequest{Pod: pod("default", "web-1"), Candidates: cands})
			if err == nil || !strings.Contains(err.Error(), `"n-1" given twice`) {
				t.Errorf("memo disabled %v, %d candidates: error %v, want n-1 named as given twice", opts.DisableMemo, len(cands), err)
			}
		}
		for _, tc := range []struct {
			cands  []opa.Candidate
			denied bool
		}{
			{[]opa.Candidate{{Name: "n-1"}, {Name: "n-1"}}, true},
			{[]opa.Candidate{{Name: "n-1", Object: same}, {Name: "n-1"}}, true},
			{[]opa.Candidate{{Name: "n-1", Object: open}, {Name: "n-1", Object: open}}, false},
		} {
			got, err := e.Evaluate(context.Background(), opa.PlacementRequest{Pod: pod("default", "web-1"), Candidates: tc.cands})
			if err != nil || len(got.Nodes) != 2 || got.Denied(0) != tc.denied || got.Denied(1) != tc.denied {
				t.Errorf("memo disabled %v: one Node under one name twice: %v, %+v, want denied %v", opts.DisableMemo, err, got, tc.denied)
			}
		}
	}
}

func checkDenyMessages(t *testing.T, e, ref *opa.Engine, nodeNames []string, cands []opa.Candidate) {
	t.Helper()
	for _, podName := range []string{"web-1", `we"b`, "ü"} {
		p := pod("default", podName)
		res, err := e.Evaluate(context.Background(), opa.PlacementRequest{Pod: p, Candidates: cands})
		if err != nil {
			t.Fatal(err)
		}
		want, err := ref.Evaluate(context.Background(), opa.PlacementRequest{Pod: p, Candidates: cands})
		if err != nil {
			t.Fatal(err)
		}
		denied := 0
		for i := range res.Nodes {
			if !res.Denied(i) {
				continue
			}
			denied++
			w := &plainRecorder{t: t}
			res.WriteDenyMessage(w, i)
			if got, want := w.String(), res.DenyMessage(i); got != want {
				t.Errorf("pod %q node %q: wrote %q, DenyMessage is %q", podName, nodeNames[i], got, want)
			}
			if got, want := res.DenyMessage(i), deniedBy(res, i); got != want {
				t.Errorf("pod %q node %q: DenyMessage %q, the deny violations joined %q", podName, nodeNames[i], got, want)
			}
			if got, want := res.DenyMessage(i), want.DenyMessage(i); got != want {
				t.Errorf("pod %q node %q: DenyMessage %q, without the memo %q", podName, nodeNames[i], got, want)
			}
			if w.plains == 0 {
				t.Errorf("pod %q node %q: nothing written as plain text", podName, nodeNames[i])
			}
		}
		if denied == 0 {
			t.Fatalf("pod %q is denied nowhere: the test shows nothing", podName)
		}
	}
}
