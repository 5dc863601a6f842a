package source

import (
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// agreeWithYAML fails t when decodeBlockYAML reads doc and its value is
// not sigs.k8s.io/yaml's, and says whether it read it.
func agreeWithYAML(t testing.TB, doc []byte) bool {
	t.Helper()
	got, ok := decodeBlockYAML(doc)
	if !ok {
		return false
	}
	var want any
	if err := yaml.Unmarshal(doc, &want); err != nil {
		t.Fatalf("the fast path read a document sigs.k8s.io/yaml refuses (%v):\n%s", err, doc)
	}
	if !reflect.DeepEqual(any(got), want) {
		t.Fatalf("values differ for\n%s\nfast path: %#v\nsigs.k8s.io/yaml: %#v", doc, got, want)
	}
	return true
}

func TestBlockYAMLAgrees(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  string
		fast bool // read by the fast path (else left to sigs.k8s.io/yaml)
	}{
		{"flat mapping", "apiVersion: v1\nkind: Node\n", true},
		{"nested mappings", "a:\n  b:\n    c: d\n  e: f\ng: h\n", true},
		{"sequence at the key's indentation", "a:\n- p\n- q\nb: z\n", true},
		{"indented sequence", "a:\n  - p\n  - q\n", true},
		{"sequence of mappings", "items:\n- name: a\n  port: 80\n- name: b\n  args:\n  - --v\n  - \"2\"\n", true},
		{"dash alone", "a:\n-\n  b: c\n-\n- d\n", true},
		{"empty collections", "a: {}\nb: []\n", true},
		{"null forms", "a:\nb: null\nc: ~\nd: Null\ne: NULL\n", true},
		{"booleans", "a: true\nb: false\n", true},
		{"integers", "a: 0\nb: 42\nc: -7\nd: 123456789012345678\n", true},
		{"quantities and addresses", "cpu: 3890m\nmemory: 15326696Ki\nip: 10.16.0.4\ncidr: 10.64.0.0/24\nv: 1.28.3\n", true},
		{"urls and colons", "a: unix:///run/containerd/containerd.sock\nb: aws:///zone-a/i-0a7\nc: nginx:1.25\n", true},
		{"quoted", "a: \"0\"\nb: 'x: y'\nc: 'it''s'\nd: \"tab\\there \\\"q\\\" \\u00e9\"\ne: '{\"k\":\"v\"}'\n", true},
		{"comments and blanks", "# head\na: b\n\n  # indented comment\nc: d\n", true},
		{"root indented (a list item)", "  apiVersion: v1\n  kind: Node\n", true},
		{"extra spaces after the colon", "a:    b\n", true},
		{"plain with inner spaces", "message: kubelet is posting ready status\n", true},
		{"managed fields' keys", "f:status:\n  .: {}\n  k:{\"type\":\"Ready\"}:\n    f:message: {}\n", true},

		{"other booleans", "a: yes\n", false},
		{"True", "a: True\n", false},
		{"float", "a: 1.5\n", false},
		{"octal-looking", "a: 010\n", false},
		{"hex", "a: 0x1F\n", false},
		{"minus zero", "a: -0\n", false},
		{"underscored int", "a: 1_000\n", false},
		{"timestamp", "a: 2025-03-01T09:00:08Z\n", false},
		{"infinity", "a: .inf\n", false},
		{"big int", "a: 1234567890123456789\n", false},
		{"block scalar", "a: |\n  text\n", false},
		{"folded plain scalar", "a: long\n  continued\n", false},
		{"folded quoted scalar", "a: \"long\n  continued\"\n", false},
		{"trailing comment", "a: b # c\n", false},
		{"anchor", "a: &x b\nc: *x\n", false},
		{"tag", "a: !!str 1\n", false},
		{"flow mapping", "a: {b: c}\n", false},
		{"flow sequence", "a: [b]\n", false},
		{"quoted key", "\"a\": b\n", false},
		{"numeric key", "1: b\n", false},
		{"boolean key", "true: b\n", false},
		{"duplicate key", "a: b\na: c\n", false},
		{"tab", "a:\tb\n", false},
		{"non-ASCII", "a: é\n", false},
		{"CRLF", "a: b\r\nc: d\r\n", false},
		{"document marker", "---\na: b\n", false},
		{"directive", "%YAML 1.1\n---\na: b\n", false},
		{"nested sequence", "a:\n- - b\n", false},
		{"root sequence", "- a\n", false},
		{"root scalar", "a\n", false},
		{"bad indentation", "a:\n    b: c\n  d: e\n", false},
		{"mapping value not allowed", "a: b: c\n", false},
		{"scalar on the next line", "a:\n  b\n", false},
		{"only comments", "# nothing\n", false},
		{"unknown escape", "a: \"\\x41\"\n", false},
		{"surrogate escape", "a: \"\\ud800\"\n", false},
		{"trailing space", "a: b \n", false},
		{"key past 1000 bytes", strings.Repeat("k", 1001) + ": v\n", false},
		{"dash without space", "a: --v\n", true},
		{"dash alone as a value", "a: -\n", false},
		{"as deep as maxBlockDepth", nestedDoc(maxBlockDepth - 1), true},
		{"deeper than maxBlockDepth", nestedDoc(maxBlockDepth), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := agreeWithYAML(t, []byte(tc.doc)); got != tc.fast {
				t.Errorf("read by the fast path: %v, want %v", got, tc.fast)
			}
		})
	}
}

// nestedDoc is n mappings nested under the root mapping.
func nestedDoc(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(strings.Repeat("  ", i) + "a:\n")
	}
	b.WriteString(strings.Repeat("  ", n) + "b: c\n")
	return b.String()
}

// TestBlockYAMLReadsKubectlOutput: what kubectl writes takes the fast
// path, a kubelet's Node and the objects of deploy/examples as
// sigs.k8s.io/yaml writes them, with the values sigs.k8s.io/yaml reads.
func TestBlockYAMLReadsKubectlOutput(t *testing.T) {
	node, err := os.ReadFile(filepath.Join("testdata", "kubelet-node.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !agreeWithYAML(t, node) {
		t.Error("testdata/kubelet-node.yaml: left to sigs.k8s.io/yaml")
	}
	var examples []string
	err = filepath.WalkDir(filepath.Join("..", "..", "deploy", "examples"), func(p string, _ fs.DirEntry, err error) error {
		if strings.HasSuffix(p, ".yaml") {
			examples = append(examples, p)
		}
		return err
	})
	if err != nil || len(examples) == 0 {
		t.Fatalf("deploy/examples: %v (%d files)", err, len(examples))
	}
	read := 0
	for _, f := range examples {
		objs, err := ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			out, err := yaml.Marshal(o.Object) // as kubectl get -o yaml writes it
			if err != nil {
				t.Fatal(err)
			}
			if agreeWithYAML(t, out) {
				read++
			} else if !strings.Contains(string(out), "|") {
				t.Errorf("%s: %s/%s without a block scalar left to sigs.k8s.io/yaml:\n%s", f, o.GetKind(), o.GetName(), out)
			}
		}
	}
	if read == 0 {
		t.Error("no object of deploy/examples took the fast path")
	}
}

// FuzzBlockYAML: whatever the fast path reads, sigs.k8s.io/yaml reads
// alike.
func FuzzBlockYAML(f *testing.F) {
	if node, err := os.ReadFile(filepath.Join("testdata", "kubelet-node.yaml")); err == nil {
		f.Add(node)
	}
	for _, s := range []string{
		"a:\n- b: c\n  d:\n  - 1\n  - -2\n",
		"a: 'x'\nb: \"y\\n\"\nc: {}\nd: []\n",
		"  k: v\n  l:\n  - m\n",
		"a:\n-\n- b\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		agreeWithYAML(t, doc)
	})
}

// BenchmarkDecodeNode: one kubelet-sized Node as kubectl writes it, by the
// fast path and by sigs.k8s.io/yaml.
func BenchmarkDecodeNode(b *testing.B) {
	node, err := os.ReadFile(filepath.Join("testdata", "kubelet-node.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("fast-path", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := decodeBlockYAML(node); !ok {
				b.Fatal("left to sigs.k8s.io/yaml")
			}
		}
	})
	b.Run("sigs.k8s.io-yaml", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var v map[string]any
			if err := yaml.Unmarshal(node, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
}
