package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is a relay or naive-loop process: a re-exec of this binary, so
// that its CPU time (rusage) belongs to the work measured and to nothing
// else.
type child struct {
	name  string
	cmd   *exec.Cmd
	out   *tail
	done  chan struct{}
	err   error
	state *os.ProcessState
}

// tail keeps the last 16 KiB a child wrote, for error messages, and
// signals when a line containing a marker appears.
type tail struct {
	mu     sync.Mutex
	buf    []byte
	marker string
	seen   chan struct{}
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if t.marker != "" && strings.Contains(string(t.buf), t.marker) {
		close(t.seen)
		t.marker = ""
	}
	if len(t.buf) > 16<<10 {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-16<<10:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}

// childEnv is the environment of a child: the parent's without the TXBOX_
// variables that would override the generated configuration.
func childEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "TXBOX_") && k != "TXBOX_TEST_RUN_MAIN" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// startChild starts exe with args. readyMarker, when not empty, is a
// string the child prints once it is working (the relay's "relay started").
func (o *Options) startChild(name, readyMarker string, args ...string) (*child, error) {
	cmd := exec.Command(o.Exe, args...)
	cmd.Env = childEnv(o.ChildEnv)
	t := &tail{marker: readyMarker, seen: make(chan struct{})}
	if readyMarker == "" {
		close(t.seen)
	}
	cmd.Stdout, cmd.Stderr = t, t
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, o.Exe, err)
	}
	c := &child{name: name, cmd: cmd, out: t, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		c.state = cmd.ProcessState
		close(c.done)
	}()
	return c, nil
}

// ready waits for the child's ready marker.
func (c *child) ready(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.out.seen:
		return nil
	case <-c.done:
		return fmt.Errorf("%s exited before it was ready: %v\n%s", c.name, c.err, c.out)
	case <-t.C:
		return fmt.Errorf("%s not ready after %s:\n%s", c.name, timeout, c.out)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// alive returns an error when the child has exited.
func (c *child) alive() error {
	select {
	case <-c.done:
		return fmt.Errorf("%s exited early: %v\n%s", c.name, c.err, c.out)
	default:
		return nil
	}
}

// stop sends SIGTERM, waits for the exit (SIGKILL after 30 s) and returns
// the child's user + system CPU seconds.
func (c *child) stop() (float64, error) {
	select {
	case <-c.done:
	default:
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(30 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
			return 0, fmt.Errorf("%s did not stop within 30s of SIGTERM; killed\n%s", c.name, c.out)
		}
	}
	cpu := (c.state.UserTime() + c.state.SystemTime()).Seconds()
	var ee *exec.ExitError
	if c.err != nil && !errors.As(c.err, &ee) {
		return cpu, fmt.Errorf("%s: %w", c.name, c.err)
	}
	if c.err != nil {
		return cpu, fmt.Errorf("%s exited with %v:\n%s", c.name, c.err, c.out)
	}
	return cpu, nil
}

// stopAll stops every child and returns their summed CPU seconds and the
// first error.
func stopAll(cs []*child) (float64, error) {
	var total float64
	var first error
	for _, c := range cs {
		cpu, err := c.stop()
		total += cpu
		if first == nil {
			first = err
		}
	}
	return total, first
}
