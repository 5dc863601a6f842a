package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// process is one control-plane subprocess. It is always stopped through its
// own PID (never a process group or a name).
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error
}

func startProcess(name, bin string, args []string, logPath string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cluster: %s log: %w", name, err)
	}
	fmt.Fprintf(logf, "=== %s: starting %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	// If the test binary dies without running its cleanups, take the child
	// with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("cluster: starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		fmt.Fprintf(logf, "=== %s: %s (pid %d) exited: %v\n", time.Now().Format(time.RFC3339Nano), name, cmd.Process.Pid, p.waitErr)
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process id.
func (p *process) Pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		if p.waitErr == nil {
			return true, errors.New("exited with status 0")
		}
		return true, p.waitErr
	default:
		return false, nil
	}
}

// stop sends SIGTERM (or SIGKILL when grace is 0), waits up to grace, then
// SIGKILLs and waits for the process to be reaped.
func (p *process) stop(grace time.Duration) {
	if done, _ := p.exited(); done {
		return
	}
	if grace <= 0 {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	} else {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			return
		case <-time.After(grace):
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	<-p.done
}

// logTail returns the last n lines of a log file.
func logTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 4*n {
			lines = append(lines[:0], lines[len(lines)-n:]...)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
