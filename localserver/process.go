package localserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// ErrNotInstalled is wrapped by the errors Start functions return when a binary they need is
// not on this machine, so callers can tell "install it" apart from "it failed".
var ErrNotInstalled = errors.New("not installed")

// startTimeout bounds a start when the caller's context has no deadline: a server that is
// not ready by then is not going to be.
const startTimeout = time.Minute

// stopTimeout is how long a server gets to shut down cleanly before it is killed.
const stopTimeout = 30 * time.Second

// findBinary looks name up on PATH, then in the given glob directories, preferring the
// highest version number found in the path (Debian keeps /usr/lib/postgresql/15/bin off PATH).
func findBinary(name string, globs ...string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	var found []string
	for _, g := range globs {
		matches, _ := filepath.Glob(filepath.Join(g, name))
		found = append(found, matches...)
	}
	if len(found) == 0 {
		where := "PATH"
		for _, g := range globs {
			where += " or " + g
		}
		return "", fmt.Errorf("%s: %w (looked in %s)", name, ErrNotInstalled, where)
	}
	sort.Slice(found, func(i, j int) bool { return versionOf(found[i]) > versionOf(found[j]) })
	return found[0], nil
}

// versionOf reads the version directory of /usr/lib/postgresql/<version>/bin/<name>.
func versionOf(path string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(filepath.Dir(path))), 64)
	return v
}

// freePort asks the kernel for a free port. Another process may take it before the server
// binds it; the Start functions retry when a server exits during startup.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// makeDir returns dir, creating it if needed; an empty dir means a new temporary one.
// created reports whether the caller should remove it when done.
func makeDir(dir, pattern string) (path string, created bool, err error) {
	if dir == "" {
		dir, err = os.MkdirTemp("", pattern)
		return dir, err == nil, err
	}
	if _, err := os.Stat(dir); err == nil {
		return dir, false, nil
	}
	return dir, true, os.MkdirAll(dir, 0o700)
}

// process is a server we started and own. Its exit is watched, so that a server that dies
// during startup fails fast with the end of its log instead of a timeout.
type process struct {
	name    string
	cmd     *exec.Cmd
	tail    *tailWriter
	done    chan struct{} // closed when the process has exited
	waitErr error         // valid once done is closed
	stopSig syscall.Signal
	stopMu  sync.Mutex
	killed  bool // by kill: its exit status is no failure
}

// startProcess runs bin with args in dir, its output copied to log. stopSig is the signal
// that shuts it down cleanly; it is also sent if this process dies first.
func startProcess(bin string, args []string, dir string, cred *syscall.Credential, stopSig syscall.Signal, log io.Writer) (*process, error) {
	return startProcessWith(bin, args, dir, nil, cred, stopSig, log)
}

// startProcessEnv is startProcess with env added to this process's environment.
func startProcessEnv(bin string, args []string, dir string, env []string, stopSig syscall.Signal, log io.Writer) (*process, error) {
	return startProcessWith(bin, args, dir, env, nil, stopSig, log)
}

func startProcessWith(bin string, args []string, dir string, env []string, cred *syscall.Credential, stopSig syscall.Signal, log io.Writer) (*process, error) {
	tail := &tailWriter{}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout = io.MultiWriter(log, tail)
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: stopSig}
	// The output copier finishes when every holder of the pipe exits; do not hang on one
	// that escaped.
	cmd.WaitDelay = stopTimeout
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", filepath.Base(bin), err)
	}
	p := &process{name: filepath.Base(bin), cmd: cmd, tail: tail, done: make(chan struct{}), stopSig: stopSig}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// errExited marks a server that exited while we waited for it to become ready, the one
// startup failure worth retrying on another port.
var errExited = errors.New("exited during startup")

// waitReady polls ready until it succeeds, the process exits or ctx ends.
func (p *process) waitReady(ctx context.Context, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for {
		err := ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s %w (%v); its output ends with:\n%s", p.name, errExited, p.waitErr, p.tail)
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %v (last check: %v); its output ends with:\n%s", p.name, ctx.Err(), err, p.tail)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop sends the clean-shutdown signal and waits, killing the process if it takes longer
// than stopTimeout. Calling it again returns the same result.
func (p *process) stop() error {
	p.stopMu.Lock()
	defer p.stopMu.Unlock()
	select {
	case <-p.done:
		if p.killed {
			return nil
		}
		return p.waitErr
	default:
	}
	_ = p.cmd.Process.Signal(p.stopSig)
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within %s and was killed", p.name, stopTimeout)
	}
	if p.waitErr != nil {
		return fmt.Errorf("stop %s: %w; its output ends with:\n%s", p.name, p.waitErr, p.tail)
	}
	return nil
}

// kill ends the process at once (SIGKILL), as a crash would, and waits for its exit.
func (p *process) kill() error {
	p.stopMu.Lock()
	defer p.stopMu.Unlock()
	select {
	case <-p.done:
		return fmt.Errorf("%s is not running", p.name)
	default:
	}
	p.killed = true
	if err := p.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill %s: %w", p.name, err)
	}
	<-p.done
	return nil
}

// tailWriter keeps the last few KiB written to it, for error messages.
type tailWriter struct {
	mu  sync.Mutex
	buf []byte
}

const tailSize = 4 << 10

func (w *tailWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	if len(w.buf) > tailSize {
		w.buf = append(w.buf[:0], w.buf[len(w.buf)-tailSize:]...)
	}
	return len(b), nil
}

func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}
