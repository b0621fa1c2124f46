package testenv

import (
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestProcess is the test binary run again as a second OS process, for a
// test that needs one: a relay or consumer to signal or kill, a second
// client of the same database.
type TestProcess struct {
	Cmd *exec.Cmd
	// Stdin writes to the child's standard input; a child that never
	// reads it is not affected.
	Stdin io.WriteCloser
	// Stdout reads the child's standard output, the lines by which it
	// reports what it did.
	Stdout io.ReadCloser
	// Stderr collects the child's standard error, for the message of a
	// test that fails because of it; read it after Cmd.Wait.
	Stderr *strings.Builder
}

// StartTestProcess starts the test binary again running only the test
// named run (an exact name, anchored), with env ("KEY=value") added to
// this process's environment. It fails t when the child cannot start.
// The caller waits for the child, or kills it.
func StartTestProcess(t testing.TB, run string, env ...string) *TestProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &TestProcess{Cmd: cmd, Stdin: stdin, Stdout: stdout, Stderr: &strings.Builder{}}
	cmd.Stderr = p.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return p
}
