package cluster

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ModulePath is the module path of the e2e harness module.
const ModulePath = "github.com/opa-scheduler-extender/opa-scheduler-extender/bench/e2e"

// binaryPackages are the tiny mains under bench/e2e/cmd that Start builds.
var binaryPackages = []string{"./cmd/etcd", "./cmd/kube-apiserver", "./cmd/kube-scheduler"}

var (
	buildMu   sync.Mutex
	buildDone = map[string]error{} // bin dir -> result of the build done by this process
)

// BinDir returns the directory the control-plane binaries are built into:
// opts.BinDir, else $E2E_BIN_DIR, else $TMPDIR/opa-scheduler-extender-e2e-bin.
func BinDir(opts Options) string {
	d := opts.BinDir
	if d == "" {
		d = os.Getenv("E2E_BIN_DIR")
	}
	if d == "" {
		d = filepath.Join(os.TempDir(), "opa-scheduler-extender-e2e-bin")
	}
	if abs, err := filepath.Abs(d); err == nil {
		d = abs
	}
	return d
}

// EnsureBinaries builds etcd, kube-apiserver and kube-scheduler into dir with
// `go build -o dir/ ./cmd/...` run in the e2e module, once per test process
// (a file lock serialises concurrent test binaries of `go test ./...`). The
// build flags never change, so after the first (cold, several minutes) build
// the Go build cache makes this a no-op or a relink.
func EnsureBinaries(t testing.TB, dir string) error {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if err, ok := buildDone[dir]; ok {
		return err
	}
	start := time.Now()
	var err error
	if os.Getenv("E2E_SKIP_BUILD") == "1" {
		err = checkBinaries(dir)
	} else {
		err = buildBinaries(dir)
	}
	buildDone[dir] = err
	if err == nil {
		t.Logf("cluster: control-plane binaries ready in %s (%s)", dir, time.Since(start).Round(time.Millisecond))
	}
	return err
}

func buildBinaries(dir string) error {
	goBin, err := findGo()
	if err != nil {
		return err
	}
	root, err := moduleRoot(goBin)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cluster: creating binary dir: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("cluster: opening build lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("cluster: locking %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)

	args := append([]string{"build", "-o", dir + string(os.PathSeparator)}, binaryPackages...)
	cmd := exec.Command(goBin, args...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("cluster: %s %s (in %s) failed: %v\n%s", goBin, strings.Join(args, " "), root, err, out.String())
	}
	return checkBinaries(dir)
}

func checkBinaries(dir string) error {
	for _, p := range binaryPackages {
		if _, err := os.Stat(filepath.Join(dir, filepath.Base(p))); err != nil {
			return fmt.Errorf("cluster: missing control-plane binary %s: %w", filepath.Base(p), err)
		}
	}
	return nil
}

func findGo() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("cluster: the go command is needed to build kube-apiserver, kube-scheduler and etcd, " +
		"but it is neither on PATH nor in GOROOT/bin; set E2E_BIN_DIR to a directory that already holds the binaries " +
		"and E2E_SKIP_BUILD=1, or install Go")
}

// moduleRoot finds the directory of the e2e module (the one holding cmd/).
func moduleRoot(goBin string) (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		root := filepath.Dir(filepath.Dir(file))
		if isE2EModule(root) {
			return root, nil
		}
	}
	out, err := exec.Command(goBin, "env", "GOMOD").Output()
	if err == nil {
		root := filepath.Dir(strings.TrimSpace(string(out)))
		if isE2EModule(root) {
			return root, nil
		}
	}
	return "", fmt.Errorf("cluster: cannot find the source of module %s (needed to build the control plane); "+
		"run the tests from inside bench/e2e", ModulePath)
}

func isE2EModule(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	return bytes.Contains(b, []byte("module "+ModulePath+"\n"))
}
