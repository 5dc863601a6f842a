package cluster

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// MainModulePath is the module path of the service (the repository root).
const MainModulePath = "github.com/opa-scheduler-extender/opa-scheduler-extender"

// ExtenderPackage is the service's main package in the main module.
const ExtenderPackage = "./cmd/opa-scheduler-extender"

// BuildExtender builds the service, `go build -o dir/opa-scheduler-extender
// ./cmd/opa-scheduler-extender` in the main module (two levels above
// bench/e2e), and returns the binary's path. It always builds (whatever
// E2E_SKIP_BUILD says: the service is what is under test); with a warm
// build cache that is a few seconds.
func BuildExtender(t testing.TB, dir string) (string, error) {
	t.Helper()
	goBin, root, err := mainModule()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "opa-scheduler-extender")
	start := time.Now()
	cmd := exec.Command(goBin, "build", "-o", bin, ExtenderPackage)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("cluster: %s build -o %s %s (in %s) failed: %v\n%s", goBin, bin, ExtenderPackage, root, err, out.String())
	}
	t.Logf("cluster: built %s in %s", bin, time.Since(start).Round(time.Millisecond))
	return bin, nil
}

// mainModule finds the go command and the main module's folder (two
// levels above bench/e2e), checking its go.mod.
func mainModule() (goBin, root string, err error) {
	if goBin, err = findGo(); err != nil {
		return "", "", err
	}
	e2e, err := moduleRoot(goBin)
	if err != nil {
		return "", "", err
	}
	root = filepath.Clean(filepath.Join(e2e, "..", ".."))
	if b, err := os.ReadFile(filepath.Join(root, "go.mod")); err != nil || !bytes.Contains(b, []byte("module "+MainModulePath+"\n")) {
		return "", "", fmt.Errorf("cluster: %s is not the main module %s (go.mod: %v)", root, MainModulePath, err)
	}
	return goBin, root, nil
}

// PluginSchedulerModule is the folder, under the main module, of the
// plugin build (kube-scheduler with the OPAGatekeeper plugin), a Go module
// of its own.
const PluginSchedulerModule = "cmd/opa-kube-scheduler"

// BuildPluginScheduler builds the plugin build as its README says, `go
// build -o dir/opa-kube-scheduler .` in cmd/opa-kube-scheduler, once per
// test process and directory, and returns the binary's path. Like
// BuildExtender it ignores E2E_SKIP_BUILD: it is what is under test.
func BuildPluginScheduler(t testing.TB, dir string) (string, error) {
	t.Helper()
	pluginBuildMu.Lock()
	defer pluginBuildMu.Unlock()
	bin := filepath.Join(dir, "opa-kube-scheduler")
	if err, ok := pluginBuilt[bin]; ok {
		return bin, err
	}
	goBin, root, err := mainModule()
	if err != nil {
		return "", err
	}
	src := filepath.Join(root, PluginSchedulerModule)
	start := time.Now()
	cmd := exec.Command(goBin, "build", "-o", bin, ".")
	cmd.Dir = src
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		err = fmt.Errorf("cluster: %s build -o %s . (in %s) failed: %v\n%s", goBin, bin, src, err, out.String())
		pluginBuilt[bin] = err
		return "", err
	}
	pluginBuilt[bin] = nil
	t.Logf("cluster: built %s in %s", bin, time.Since(start).Round(time.Millisecond))
	return bin, nil
}

var (
	pluginBuildMu sync.Mutex
	pluginBuilt   = map[string]error{}
)

// Process is a subprocess started by StartProcess: like the control
// plane's processes it logs to Cluster.LogDir, gets SIGKILL if the test
// binary dies, and is stopped through its own PID.
type Process struct {
	// LogPath is the file its stdout and stderr go to.
	LogPath string
	p       *process
	once    sync.Once
}

// StartProcess starts bin with args, logging to LogDir/<name>-<n>.log, and
// registers a t.Cleanup that stops it (SIGTERM, SIGKILL after 5 s) and,
// if the test failed, prints the last lines of its log.
func (c *Cluster) StartProcess(t testing.TB, name, bin string, args ...string) (*Process, error) {
	t.Helper()
	c.mu.Lock()
	c.procSeq++
	seq := c.procSeq
	c.mu.Unlock()
	logPath := filepath.Join(c.LogDir, fmt.Sprintf("%s-%d.log", sanitize(name), seq))
	p, err := startProcess(name, bin, args, logPath)
	if err != nil {
		return nil, err
	}
	proc := &Process{LogPath: logPath, p: p}
	t.Logf("cluster: started %s (pid %d): %s %s", name, p.Pid(), bin, strings.Join(args, " "))
	t.Cleanup(func() {
		proc.Stop()
		if t.Failed() {
			t.Logf("cluster: last lines of %s:\n%s", logPath, logTail(logPath, 40))
		}
	})
	return proc, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.p.Pid() }

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) { return p.p.exited() }

// Stop sends SIGTERM, SIGKILL after 5 s, and waits for the process to be
// reaped (idempotent).
func (p *Process) Stop() { p.once.Do(func() { p.p.stop(5 * time.Second) }) }

// LogTail returns the last n lines of the process's log.
func (p *Process) LogTail(n int) string { return logTail(p.LogPath, n) }
