//go:build e2e

package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/kubetrail/kubetrail/internal/freeport"
)

// Process is a child process the harness started and will stop by its PID. Its PID is also written
// to <out>/pids/<name>.pid so testbed/hack/e2e.sh can stop it if the test binary itself dies.
type Process struct {
	Name    string
	LogPath string
	Cmd     *exec.Cmd
	pidFile string

	done    chan struct{}
	mu      sync.Mutex
	waitErr error
}

// StartProcess starts bin with args, output appended to logPath, in its own process group (so a
// terminal's Ctrl-C reaches the harness, which stops it, rather than killing it mid-test).
func StartProcess(name, logPath, pidDir string, env []string, bin string, args ...string) (*Process, error) {
	return startProcess(name, logPath, pidDir, append(os.Environ(), env...), bin, args...)
}

// StartProcessWithEnv is StartProcess with env as the whole environment: nothing of the test's
// own (no KUBECONFIG, no HOME), as a container starts with only what its pod spec sets.
func StartProcessWithEnv(name, logPath, pidDir string, env []string, bin string, args ...string) (*Process, error) {
	return startProcess(name, logPath, pidDir, env, bin, args...)
}

func startProcess(name, logPath, pidDir string, env []string, bin string, args ...string) (*Process, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s: binary %s: %w", name, bin, err)
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, Cmd: cmd, done: make(chan struct{})}
	if pidDir != "" {
		p.pidFile = filepath.Join(pidDir, name+".pid")
		_ = os.WriteFile(p.pidFile, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
	}
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// PID of the process.
func (p *Process) PID() int { return p.Cmd.Process.Pid }

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return true, p.waitErr
	default:
		return false, nil
	}
}

// Stop sends SIGTERM, waits up to grace, then SIGKILL. Safe to call twice.
func (p *Process) Stop(grace time.Duration) error {
	if p == nil {
		return nil
	}
	defer func() {
		if p.pidFile != "" {
			_ = os.Remove(p.pidFile)
		}
	}()
	if done, _ := p.Exited(); done {
		return nil
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = p.Cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("%s (pid %d) ignored SIGTERM for %s and was killed", p.Name, p.PID(), grace)
}

// LogTail returns the last n lines of the process's log, for error messages.
func (p *Process) LogTail(n int) string {
	return tailFile(p.LogPath, n)
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// FreePort returns a TCP port on 127.0.0.1 nobody listens on right now, below the kernel's
// ephemeral range (freeport.Port).
func FreePort() (int, error) { return freeport.Port() }

// WaitTCP waits until addr accepts connections, p exits, or timeout passes.
func WaitTCP(addr string, p *Process, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return nil
		}
		if p != nil {
			if done, err := p.Exited(); done {
				return fmt.Errorf("%s exited (%v) before listening on %s; log %s:\n%s", p.Name, err, addr, p.LogPath, p.LogTail(20))
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("timed out waiting for " + addr)
}
