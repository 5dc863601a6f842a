package perf

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// The service as it ships: the opa-scheduler-extender binary run as its
// own process in folder mode, on a policy folder written from a policy
// set (bench/cmd/footprint measures its memory, bench/cmd/loadgen its
// latency with -service).

// WritePolicyDir writes one file per template with its constraints, the
// namespaces in one file and the nodes in files of 250, made one at a time.
func WritePolicyDir(dir string, ps []Policy, size NodeSize, nodes int) error {
	if err := writePolicies(dir, ps); err != nil {
		return err
	}
	_, err := WriteNodeFolder(dir, size, nodes, 250)
	return err
}

func writePolicies(dir string, ps []Policy) error {
	for i, p := range ps {
		objs := append([]*unstructured.Unstructured{p.Template}, p.Constraints...)
		if err := writeYAML(filepath.Join(dir, "policies", fmt.Sprintf("%03d.yaml", i)), objs); err != nil {
			return err
		}
	}
	return writeYAML(filepath.Join(dir, "inventory", "namespaces.yaml"), Namespaces())
}

// WritePolicyDirLayout is WritePolicyDir with the Nodes laid out perFile
// to a file (0: all in one file, as `kubectl get nodes -o yaml` writes
// them), and the NodeFolder that rewrites them.
func WritePolicyDirLayout(dir string, ps []Policy, size NodeSize, nodes, perFile int) (*NodeFolder, error) {
	if err := writePolicies(dir, ps); err != nil {
		return nil, err
	}
	return WriteNodeFolder(dir, size, nodes, perFile)
}

// NodeFolder is the Nodes of a policy folder, perFile to a file (0: one
// file, a `kind: List` in YAML as kubectl writes it), which Update
// rewrites as a living cluster changes them.
type NodeFolder struct {
	dir     string
	size    NodeSize
	nodes   int
	perFile int
	kind    ChurnKind
	mu      sync.Mutex
	updates map[int]int // node -> the update its file holds
	// ahead are files rendered before the run (Prerender), in the order
	// Update will write them; rendered counts the updates that found none.
	ahead    []renderedFile
	rendered int
}

// renderedFile is a file's content for one Update: the file of the
// nodes' first, with each node at its update number.
type renderedFile struct {
	key     string // fmt of the nodes and updates Update receives
	first   int
	content []byte
}

// WriteNodeFolder writes the Nodes under dir/inventory.
func WriteNodeFolder(dir string, size NodeSize, nodes, perFile int) (*NodeFolder, error) {
	f := &NodeFolder{dir: filepath.Join(dir, "inventory"), size: size, nodes: nodes, perFile: perFile, kind: ChurnHeartbeat, updates: map[int]int{}}
	if perFile <= 0 {
		return f, f.writeList()
	}
	for first := 0; first < nodes; first += perFile {
		if err := f.writeFile(first); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// SetKind sets what Update changes.
func (f *NodeFolder) SetKind(k ChurnKind) { f.kind = k }

// PerFile is how many Nodes one file holds (0: all, in one file).
func (f *NodeFolder) PerFile() int { return f.perFile }

// Update rewrites the files of the nodes given with each at its update
// number (and their other nodes as they were), each through a hidden
// temporary file renamed over it, so that the folder never holds a
// half-written file. The one-file layout is not rewritten per update: 49
// MB for a heartbeat is no cluster's way.
func (f *NodeFolder) Update(_ context.Context, nodes, updates []int) error {
	if f.perFile <= 0 {
		return errors.New("the one-file layout is measured still: node updates need files of a few Nodes (-node-files)")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	files := map[int]bool{}
	for j, i := range nodes {
		f.updates[i] = updates[j]
		files[i-i%f.perFile] = true
	}
	if len(f.ahead) > 0 && f.ahead[0].key == fmt.Sprint(nodes, updates) && len(files) == 1 {
		r := f.ahead[0]
		f.ahead = f.ahead[1:]
		return f.replaceFile(r.first, r.content)
	}
	f.rendered += len(nodes)
	for first := range files {
		if err := f.writeFile(first); err != nil {
			return err
		}
	}
	return nil
}

// Prerender renders, before the run, the files of the Updates to come
// (Churn.Plan), so that the writes cost the writer a rename: rendering 10
// kubelet-sized Nodes in YAML takes about 11 ms and 6.6 MB of garbage,
// work that happens outside the measured server in a cluster (kubectl, a
// sync tool) and would otherwise be timed into the load generator's own
// latencies. The files are the bytes Update would render.
func (f *NodeFolder) Prerender(nodes, updates [][]int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	at := maps.Clone(f.updates)
	f.ahead = f.ahead[:0]
	for w := range nodes {
		firsts := map[int]bool{}
		for j, i := range nodes[w] {
			at[i] = updates[w][j]
			firsts[i-i%f.perFile] = true
		}
		if len(firsts) != 1 {
			return fmt.Errorf("write %d spans %d files: Prerender takes a file per write (Churn.Batch = -node-files)", w, len(firsts))
		}
		first := nodes[w][0] - nodes[w][0]%f.perFile
		content, err := f.render(first, at)
		if err != nil {
			return err
		}
		f.ahead = append(f.ahead, renderedFile{key: fmt.Sprint(nodes[w], updates[w]), first: first, content: content})
	}
	return nil
}

// Rendered is how many Node updates Update rendered itself, during the
// run, for want of a prerendered file.
func (f *NodeFolder) Rendered() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rendered
}

func (f *NodeFolder) writeFile(first int) error {
	content, err := f.render(first, f.updates)
	if err != nil {
		return err
	}
	return f.replaceFile(first, content)
}

// render is the file of the nodes from first, each at its update in
// updates, in YAML as `kubectl get -o yaml` writes each (block YAML, keys
// sorted), one document each.
func (f *NodeFolder) render(first int, updates map[int]int) ([]byte, error) {
	var objs []*unstructured.Unstructured
	for i := first; i < min(first+f.perFile, f.nodes); i++ {
		objs = append(objs, f.size.UpdatedNode(i, updates[i], f.kind))
	}
	return renderDocuments(objs, func(o any) ([]byte, error) { return yaml.Marshal(o) })
}

// replaceFile writes the file of the nodes from first through a hidden
// temporary file renamed over it.
func (f *NodeFolder) replaceFile(first int, content []byte) error {
	name := fmt.Sprintf("nodes-%05d.yaml", first)
	tmp := filepath.Join(f.dir, "."+name+".tmp")
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(tmp, content, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(f.dir, name))
}

// writeList writes every Node into one file, as `kubectl get nodes -o
// yaml > nodes.yaml` does: a v1 List of the items, in YAML.
func (f *NodeFolder) writeList() error {
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		return err
	}
	out, err := os.Create(filepath.Join(f.dir, "nodes.yaml"))
	if err != nil {
		return err
	}
	w := bufio.NewWriter(out)
	fmt.Fprintln(w, "apiVersion: v1\nitems:")
	for i := range f.nodes {
		y, err := yaml.Marshal(f.size.Node(i).Object)
		if err != nil {
			out.Close()
			return fmt.Errorf("node %d: %w", i, err)
		}
		// An item of the list: "- " before its first line, two spaces
		// before the others.
		for j, line := range bytes.Split(bytes.TrimSuffix(y, []byte("\n")), []byte("\n")) {
			if j == 0 {
				w.WriteString("- ")
			} else {
				w.WriteString("  ")
			}
			w.Write(line)
			w.WriteByte('\n')
		}
	}
	fmt.Fprintln(w, "kind: List\nmetadata:\n  resourceVersion: \"\"")
	if err := w.Flush(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// writeYAML writes objects as a multi-document YAML file (each document in
// JSON, which is YAML).
func writeYAML(path string, objs []*unstructured.Unstructured) error {
	return writeDocuments(path, objs, json.Marshal)
}

// writeDocuments writes objects as a multi-document YAML file, each
// document as encode writes it.
func writeDocuments(path string, objs []*unstructured.Unstructured, encode func(any) ([]byte, error)) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := renderDocuments(objs, encode)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, b, 0o644)
}

// renderDocuments encodes objects one document each, each after "---".
func renderDocuments(objs []*unstructured.Unstructured, encode func(any) ([]byte, error)) ([]byte, error) {
	var b bytes.Buffer
	for _, o := range objs {
		doc, err := encode(o.Object)
		if err != nil {
			return nil, err
		}
		b.WriteString("---\n")
		b.Write(doc)
		if len(doc) == 0 || doc[len(doc)-1] != '\n' {
			b.WriteByte('\n')
		}
	}
	return b.Bytes(), nil
}

// Service is a running opa-scheduler-extender process.
type Service struct {
	// Base is its HTTP base URL.
	Base string
	cmd  *exec.Cmd
	gc   *gcTrace
}

// StartService runs bin in folder mode on dir (no cluster), listening on a
// free loopback port, with pprof enabled and warnings only in its log
// (written to stderr); extra flags follow those. The process runs with
// GODEBUG=gctrace=1 added to the environment's: its collections are timed
// (Collections), their lines kept out of the log.
func StartService(bin, dir string, extra ...string) (*Service, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	args := append([]string{"serve", "--policy-dir", dir, "--no-cluster", "--listen", addr, "--enable-pprof", "--log-level", "warn"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "GODEBUG="+withGCTrace(os.Getenv("GODEBUG")))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	return &Service{Base: "http://" + addr, cmd: cmd, gc: readGCTrace(stderr, os.Stderr, time.Now)}, nil
}

// withGCTrace is a GODEBUG value with gctrace=1 added to godebug's
// settings (the last setting of a name wins).
func withGCTrace(godebug string) string {
	if godebug == "" {
		return "gctrace=1"
	}
	return godebug + ",gctrace=1"
}

// Collections are the service's collections so far, in the order they
// ended.
func (s *Service) Collections() []GCWindow { return s.gc.Windows() }

// Pid is the process's.
func (s *Service) Pid() int { return s.cmd.Process.Pid }

// Stop kills the process and waits for it.
func (s *Service) Stop() {
	_ = s.cmd.Process.Kill()
	<-s.gc.done // Wait closes the pipe: its reader first
	_ = s.cmd.Wait()
}

// WaitLoaded waits until the service is ready and holds every node.
func (s *Service) WaitLoaded(nodes int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var st struct {
			Inventory map[string]int `json:"inventory"`
		}
		ready, err := GetStatus(s.Base + "/readyz")
		if err == nil && ready == http.StatusOK {
			err = GetJSON(s.Base+"/debug/policies", &st)
		}
		if err == nil && ready == http.StatusOK && st.Inventory["v1/Node"] == nodes {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the service did not load %d nodes within %s (readyz %d, nodes %d, %v)", nodes, timeout, ready, st.Inventory["v1/Node"], err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Scrape reads the samples of a Prometheus text exposition: unlabelled
// ones by name, labelled ones by their whole series text
// (`name{label="value"}`).
func Scrape(url string) (map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}

// GetStatus is the HTTP status of a GET of url, its body read and dropped.
func GetStatus(url string) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// GetJSON decodes the JSON answer to a GET of url into v.
func GetJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// Memory reads the service's VmRSS as it is, forces a GC (the heap
// profile endpoint with gc=1) and reads its heap from /metrics.
func (s *Service) Memory() (Memory, error) {
	base, pid := s.Base, s.Pid()
	status, err := pidStatus(pid)
	if err != nil {
		return Memory{}, err
	}
	if code, err := GetStatus(base + "/debug/pprof/heap?gc=1"); err != nil || code != http.StatusOK {
		return Memory{}, fmt.Errorf("force a GC through /debug/pprof/heap?gc=1: HTTP %d, %v", code, err)
	}
	metrics, err := Scrape(base + "/metrics")
	if err != nil {
		return Memory{}, err
	}
	mib := func(v float64) float64 { return float64(int(v/(1<<20)*10+0.5)) / 10 }
	return Memory{RSSMiB: status["VmRSS"], PeakRSSMiB: status["VmHWM"],
		HeapLiveMiB: mib(metrics["go_memstats_heap_alloc_bytes"]), HeapInuseMiB: mib(metrics["go_memstats_heap_inuse_bytes"]),
		GoSysMiB: mib(metrics["go_memstats_sys_bytes"]), ReleasedRSSMiB: -1}, nil
}

// pidStatus reads the Vm* lines of /proc/PID/status, in MiB.
func pidStatus(pid int) (map[string]float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		f := strings.Fields(v)
		if !ok || !strings.HasPrefix(k, "Vm") || len(f) != 2 || f[1] != "kB" {
			continue
		}
		kib, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("/proc/%d/status %s: %w", pid, k, err)
		}
		out[k] = float64(int(kib/1024*10+0.5)) / 10
	}
	return out, nil
}
