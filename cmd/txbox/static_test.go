package main

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/internal/testenv"
)

// dockerBuildLine returns the static `go build` command of the Dockerfile
// (the RUN line starting CGO_ENABLED=0) as environment assignments and
// arguments, with the build arguments substituted.
func dockerBuildLine(t *testing.T, vars map[string]string) (env, args []string) {
	t.Helper()
	data, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "RUN CGO_ENABLED=0 ") {
			line = strings.TrimPrefix(l, "RUN ")
		}
	}
	if line == "" {
		t.Fatal("the Dockerfile has no `RUN CGO_ENABLED=0 ... go build` line")
	}
	words := shellWords(os.Expand(line, func(k string) string { return vars[k] }))
	for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
		env = append(env, words[0])
		words = words[1:]
	}
	if len(words) < 2 || words[0] != "go" || words[1] != "build" {
		t.Fatalf("the Dockerfile's build line is not a go build: %q", line)
	}
	return env, words[1:]
}

// shellWords splits s as a shell would for the simple quoting the
// Dockerfile uses: words separated by spaces, double quotes grouping.
func shellWords(s string) []string {
	var out []string
	var cur strings.Builder
	inWord, quoted := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
			inWord = true
		case r == ' ' && !quoted:
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out
}

// TestStaticBuild builds txbox the way the Dockerfile does (its own
// command line, read from the file) and checks that the binary is static
// (no ELF interpreter, no shared libraries: it runs on scratch) and prints
// the revision given as a build argument. When a container engine answers
// it also builds the image and runs `version` in it; otherwise the static
// build is the check (the machine this was written on has the docker
// client but no daemon).
func TestStaticBuild(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("the image is linux; the static check reads ELF")
	}
	const rev = "0123456789abcdef-test"
	env, args := dockerBuildLine(t, map[string]string{"TARGETOS": runtime.GOOS, "TARGETARCH": runtime.GOARCH, "REVISION": rev})
	out := filepath.Join(t.TempDir(), "txbox")
	for i, a := range args {
		if a == "-o" && i+1 < len(args) {
			args[i+1] = out
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = "../.."
	// No VCS stamping, as in the image (its build context has no .git):
	// the revision then comes from the linker flag.
	cmd.Env = append(append(os.Environ(), env...), "GOFLAGS=-buildvcs=false")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v %v: %v\n%s", env, args, err, b)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("the binary has an ELF interpreter: it is dynamically linked and would not run on scratch")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Fatalf("the binary needs shared libraries %v", libs)
	}
	v, err := exec.Command(out, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(v), "txbox ") || !strings.Contains(string(v), "rev "+rev[:12]) {
		t.Fatalf("version: %v %q; want the revision %s", err, v, rev[:12])
	}
	if v2, _ := exec.Command(out, "--version").CombinedOutput(); string(v2) != string(v) {
		t.Errorf("--version %q differs from version %q", v2, v)
	}

	if exec.Command("docker", "info").Run() != nil {
		t.Log("no container engine answers `docker info`: checked the static build only")
		return
	}
	tag := "txbox-test:" + strings.ToLower(testenv.UniqueName("t"))
	build := exec.CommandContext(ctx, "docker", "build", "--build-arg", "REVISION="+rev, "-t", tag, ".")
	build.Dir = "../.."
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, b)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", tag).Run() })
	iv, err := exec.CommandContext(ctx, "docker", "run", "--rm", "--entrypoint", "/txbox", tag, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(iv), "rev "+rev[:12]) {
		t.Fatalf("version in the image: %v %q", err, iv)
	}
	// The entrypoint is the relay: without a configuration file it exits
	// 2 naming the file.
	rc := exec.CommandContext(ctx, "docker", "run", "--rm", tag)
	b, _ := rc.CombinedOutput()
	if rc.ProcessState.ExitCode() != exitUsage || !strings.Contains(string(b), "/etc/txbox/txbox.yaml") {
		t.Fatalf("the image's relay without configuration: exit %d %q", rc.ProcessState.ExitCode(), b)
	}
	u, err := exec.CommandContext(ctx, "docker", "inspect", "--format", "{{.Config.User}}", tag).Output()
	if err != nil || strings.TrimSpace(string(u)) != "65532:65532" {
		t.Fatalf("image user %q, %v; want 65532:65532", u, err)
	}
}
