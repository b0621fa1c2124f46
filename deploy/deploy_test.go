// Package deploy_test runs the deployment files of deploy/ as written:
// the systemd unit's commands as an unprivileged user against the files
// its install script lays out, and the Kubernetes manifest's containers
// in order, against the local PostgreSQL and NATS.
package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	yaml "go.yaml.in/yaml/v3"

	"github.com/txbox/txbox/config"
	"github.com/txbox/txbox/internal/testenv"
)

// repoRoot is the repository's root, seen from this package.
const repoRoot = ".."

// buildTxbox builds cmd/txbox into a fresh directory everyone can read and
// returns the binary's path.
func buildTxbox(t *testing.T) string {
	t.Helper()
	dir := sharedTempDir(t)
	bin := filepath.Join(dir, "txbox")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/txbox")
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/txbox: %v\n%s", err, out)
	}
	return bin
}

// sharedTempDir returns a new directory under the system's temporary
// directory with mode 0755, so that an unprivileged user can reach what
// is inside (t.TempDir's directories are private to root).
func sharedTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "txbox-deploy-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// requireRoot fails the test unless it runs as root, which it needs to run
// commands as another user; outside CI it skips instead.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("this test runs commands as an unprivileged user and must run as root")
	}
	t.Skip("needs root to run commands as an unprivileged user")
}

// unit is the [Service] section of a systemd unit: each key's values in
// order.
type unit map[string][]string

func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := unit{}
	section := ""
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]":
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s: not a key=value line: %q", path, line)
			}
			u[k] = append(u[k], v)
		}
	}
	return u
}

// one returns the single value of key, failing the test when there is
// not exactly one.
func (u unit) one(t *testing.T, key string) string {
	t.Helper()
	if len(u[key]) != 1 {
		t.Fatalf("unit: %s has %d values, want 1: %q", key, len(u[key]), u[key])
	}
	return u[key][0]
}

// envFile reads KEY=VALUE lines the way systemd's EnvironmentFile= does
// for simple files: comments and blank lines skipped, a value in single
// or double quotes unquoted, no expansion.
func envFile(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: not KEY=VALUE: %q", path, line)
		}
		if len(v) >= 2 && (v[0] == '\'' || v[0] == '"') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		env = append(env, k+"="+v)
	}
	return env
}

// asUser returns a command that runs argv as uid:gid with exactly env,
// in dir.
func asUser(ctx context.Context, uid, gid uint32, dir string, env []string, argv []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, NoSetGroups: true}}
	return cmd
}

// servingAddr matches the relay's log line naming its health listener,
// in the text and the JSON log formats.
var servingAddr = regexp.MustCompile(`serving"?.*?"?addr"?[=:]"?(127\.0\.0\.1:\d+)`)

// runRelay starts cmd (a `txbox relay`), waits until its health listener
// answers 200 on every path in paths, then stops it with SIGTERM and
// expects a graceful exit 0.
func runRelay(t *testing.T, cmd *exec.Cmd, paths ...string) {
	t.Helper()
	var out testenv.LogBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-exited
		}
	}()
	var addr string
	testenv.WaitFor(t, 2*time.Minute, "the relay's health listener", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("the relay exited before it served: %v\n%s", err, out.String())
		default:
		}
		if m := servingAddr.FindStringSubmatch(out.String()); m != nil {
			addr = m[1]
			return true
		}
		return false
	})
	for _, path := range paths {
		var last string
		ok := testenv.Within(time.Minute, 50*time.Millisecond, func() bool {
			resp, err := http.Get("http://" + addr + path)
			if err != nil {
				last = err.Error()
				return false
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = fmt.Sprintf("%d %s", resp.StatusCode, body)
			return resp.StatusCode == http.StatusOK
		})
		if !ok {
			t.Fatalf("GET %s: %s\nrelay output:\n%s", path, last, out.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the relay's graceful stop: %v\n%s", err, out.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("the relay did not stop within a minute of SIGTERM\n%s", out.String())
	}
}

// setup is what a test that runs the relay as another user needs: root,
// the services, a deadline, the binary, a schema of its own and a NATS
// stream name and subject prefix of its own.
func setup(t *testing.T) (ctx context.Context, bin, schema, stream, prefix string) {
	t.Helper()
	requireRoot(t)
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	testenv.RequireTCP(t, "NATS", strings.TrimPrefix(testenv.NATSURL, "nats://"))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	bin = buildTxbox(t)
	db, err := sql.Open("pgx", testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	schema = testenv.PostgresSchema(t, db)
	stream, prefix = natsTarget(t)
	return ctx, bin, schema, stream, prefix
}

// natsTarget returns a unique stream name and subject prefix on the local
// NATS, and deletes the stream (which the relay provisions) at the end.
func natsTarget(t *testing.T) (stream, prefix string) {
	t.Helper()
	prefix = testenv.UniqueName("deploy")
	stream = strings.ToUpper(prefix)
	t.Cleanup(func() {
		nc, err := natsgo.Connect(testenv.NATSURL)
		if err != nil {
			return
		}
		defer nc.Close()
		if js, err := jetstream.New(nc); err == nil {
			_ = js.DeleteStream(context.Background(), stream)
		}
	})
	return stream, prefix
}

// TestSystemdUnitRunsAsWritten lays out the files with
// deploy/systemd/install.sh (under a DESTDIR), fills the env file as the
// install steps say, runs `txbox migrate` as root, and then runs the
// unit's ExecStartPre and ExecStart, parsed from the unit file, the way
// systemd would with DynamicUser=yes: as an unprivileged user (nobody),
// with the EnvironmentFile read by root, in the StateDirectory. The check
// must pass and the relay must start, serve /livez and /readyz, and stop
// gracefully.
func TestSystemdUnitRunsAsWritten(t *testing.T) {
	t.Parallel()
	ctx, bin, schema, stream, prefix := setup(t)

	// The user's txbox.yaml, with no secret in it.
	work := sharedTempDir(t)
	yml := fmt.Sprintf(`database: { dialect: postgres, dsn-env: APP_DSN, schema: %s }
senders:
  main: { type: nats, url: %q, provision: true, provision-stream: %s }
defaults:
  sender: main
  route: { subject: "%s.{event_type}" }
health: { listen: "127.0.0.1:0" }
`, schema, testenv.NATSURL, stream, prefix)
	if err := os.WriteFile(filepath.Join(work, "txbox.yaml"), []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}

	// The install steps (the unit's header comment, docs/deploy.md).
	root := sharedTempDir(t)
	install := exec.CommandContext(ctx, filepath.Join(repoRoot, "deploy/systemd/install.sh"), bin, filepath.Join(work, "txbox.yaml"))
	install.Env = append(os.Environ(), "DESTDIR="+root)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("install.sh: %v\n%s", err, out)
	}
	envPath := filepath.Join(root, "etc/txbox/env")
	if fi, err := os.Stat(envPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("install.sh's env file: %v %v, want mode 0600", fi, err)
	}
	f, err := os.OpenFile(envPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "APP_DSN='%s'\n", testenv.PostgresURL)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	u := parseUnit(t, filepath.Join(root, "etc/systemd/system/txbox-relay.service"))
	if u.one(t, "DynamicUser") != "yes" {
		t.Fatalf("the unit no longer uses DynamicUser=yes; this test emulates it")
	}
	// Paths in the unit are absolute; the files live under root.
	staged := func(p string) string {
		if strings.HasPrefix(p, "/") {
			return filepath.Join(root, p)
		}
		return p
	}
	env := append(envFile(t, staged(u.one(t, "EnvironmentFile"))), "PATH=/usr/bin:/bin")
	// ConfigurationDirectory= keeps /etc/<dir> root's with
	// ConfigurationDirectoryMode=; StateDirectory= gives /var/lib/<dir> to
	// the dynamic user.
	confMode, err := strconv.ParseUint(u.one(t, "ConfigurationDirectoryMode"), 8, 32)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "etc", u.one(t, "ConfigurationDirectory")), os.FileMode(confMode)); err != nil {
		t.Fatal(err)
	}
	const nobody = 65534
	state := filepath.Join(root, "var/lib", u.one(t, "StateDirectory"))
	if err := os.MkdirAll(state, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(state, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if wd := u.one(t, "WorkingDirectory"); staged(wd) != state {
		t.Fatalf("WorkingDirectory=%s is not the StateDirectory %s", wd, state)
	}
	argv := func(line string) []string {
		fields := strings.Fields(strings.TrimLeft(line, "-@:+!"))
		for i, f := range fields {
			fields[i] = staged(f)
		}
		return fields
	}

	// `txbox migrate`, once, as root with the env file's variables.
	migrate := exec.CommandContext(ctx, staged("/usr/local/bin/txbox"), "migrate", "--config", staged("/etc/txbox/txbox.yaml"))
	migrate.Env = env
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("txbox migrate: %v\n%s", err, out)
	}

	for _, line := range u["ExecStartPre"] {
		cmd := asUser(ctx, nobody, nobody, state, env, argv(line))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("ExecStartPre=%s as nobody: %v\n%s", line, err, out)
		}
		if !bytes.Contains(out, []byte("valid")) {
			t.Fatalf("ExecStartPre=%s printed no verdict:\n%s", line, out)
		}
	}
	runRelay(t, asUser(ctx, nobody, nobody, state, env, argv(u.one(t, "ExecStart"))), "/livez", "/readyz")
}

// TestSystemdUnitVerifies runs `systemd-analyze verify` on the unit: an
// unknown or misspelt directive fails it. The binary the unit names is
// not installed here, which is the one complaint allowed.
func TestSystemdUnitVerifies(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze is not installed; CI must verify the unit")
		}
		t.Skip("systemd-analyze is not installed")
	}
	cmd := exec.Command("systemd-analyze", "verify", "systemd/txbox-relay.service")
	out, _ := cmd.CombinedOutput()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" || strings.Contains(line, "/usr/local/bin/txbox is not executable") {
			continue
		}
		t.Errorf("systemd-analyze verify: %s", line)
	}
}

// k8sContainer is the part of a Kubernetes container spec the tests read.
type k8sContainer struct {
	Name            string   `yaml:"name"`
	Image           string   `yaml:"image"`
	ImagePullPolicy string   `yaml:"imagePullPolicy"`
	Command         []string `yaml:"command"`
	Args            []string `yaml:"args"`
	Env             []struct {
		Name      string `yaml:"name"`
		ValueFrom struct {
			SecretKeyRef struct {
				Name string `yaml:"name"`
				Key  string `yaml:"key"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
	LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
	VolumeMounts   []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type k8sProbe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

type k8sDoc struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
	Spec       struct {
		Template struct {
			Spec struct {
				SecurityContext struct {
					RunAsUser  uint32 `yaml:"runAsUser"`
					RunAsGroup uint32 `yaml:"runAsGroup"`
				} `yaml:"securityContext"`
				InitContainers []k8sContainer `yaml:"initContainers"`
				Containers     []k8sContainer `yaml:"containers"`
				Volumes        []struct {
					Name      string `yaml:"name"`
					ConfigMap struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// dockerEntrypoint returns the image's ENTRYPOINT from the Dockerfile.
func dockerEntrypoint(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "ENTRYPOINT "); ok {
			var argv []string
			if err := yaml.Unmarshal([]byte(rest), &argv); err != nil {
				t.Fatalf("Dockerfile ENTRYPOINT %s: %v", rest, err)
			}
			return argv
		}
	}
	t.Fatal("the Dockerfile has no ENTRYPOINT")
	return nil
}

// TestKubernetesManifest reads deploy/kubernetes/txbox-relay.yaml and
// checks it against the binary and the configuration it ships: the
// ConfigMap's txbox.yaml loads and validates, the NATS sender provisions
// its stream, the DSN variable the configuration names comes from the
// Secret, the init containers run `config check` and then `migrate`,
// every image suits a locally built one, the probes use the health
// listener's port. Then it runs the containers in order as the pod's user,
// with the ConfigMap as the mounted file and the binary built here as
// the image's /txbox, and GETs the probes' paths from the relay.
func TestKubernetesManifest(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("kubernetes/txbox-relay.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]k8sDoc{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var d k8sDoc
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		docs[d.Kind] = d
	}
	cm, secret, dep := docs["ConfigMap"], docs["Secret"], docs["Deployment"]
	if cm.Metadata.Name == "" || secret.Metadata.Name == "" || dep.Metadata.Name == "" {
		t.Fatalf("want a ConfigMap, a Secret and a Deployment, got %v", docs)
	}
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("want one relay container, got %d", len(pod.Containers))
	}
	relayC := pod.Containers[0]

	// The configuration, as the relay will load it.
	const file = "txbox.yaml"
	yml, ok := cm.Data[file]
	if !ok {
		t.Fatalf("the ConfigMap has no %s", file)
	}
	cfg, err := config.Load(config.Source{Name: file, YAML: []byte(yml)})
	if err != nil {
		t.Fatalf("the ConfigMap's %s: %v", file, err)
	}
	for name, s := range cfg.Senders {
		if s.NATS != nil && !s.NATS.Provision {
			t.Errorf("senders.%s: a NATS sender without provision: true, and no step creates its stream", name)
		}
	}

	// The mounted configuration: the volume is the ConfigMap.
	var mount string
	for _, c := range append(pod.InitContainers, relayC) {
		for _, m := range c.VolumeMounts {
			for _, v := range pod.Volumes {
				if v.Name == m.Name && v.ConfigMap.Name == cm.Metadata.Name {
					if mount != "" && mount != m.MountPath {
						t.Errorf("the ConfigMap is mounted at %s and %s", mount, m.MountPath)
					}
					mount = m.MountPath
				}
			}
		}
	}
	if mount == "" {
		t.Fatal("no container mounts the ConfigMap")
	}
	configPath := mount + "/" + file

	// Every container: a locally built image is found, the DSN variable
	// comes from the Secret, the command reads the mounted file.
	argvOf := func(c k8sContainer) []string {
		argv := c.Command
		if len(argv) == 0 {
			argv = dockerEntrypoint(t)
		}
		return append(append([]string(nil), argv...), c.Args...)
	}
	for _, c := range append(pod.InitContainers, relayC) {
		if c.ImagePullPolicy != "IfNotPresent" && c.ImagePullPolicy != "Never" {
			t.Errorf("container %s: imagePullPolicy %q pulls %s, which a locally built image is not", c.Name, c.ImagePullPolicy, c.Image)
		}
		found := false
		for _, e := range c.Env {
			if e.Name == cfg.Database.DSNEnv {
				found = true
				ref := e.ValueFrom.SecretKeyRef
				if _, ok := secret.StringData[ref.Key]; ref.Name != secret.Metadata.Name || !ok {
					t.Errorf("container %s: %s comes from %s/%s, not a key of the Secret %s", c.Name, e.Name, ref.Name, ref.Key, secret.Metadata.Name)
				}
			}
		}
		if !found {
			t.Errorf("container %s does not set %s, which database.dsn-env names", c.Name, cfg.Database.DSNEnv)
		}
		if argv := strings.Join(argvOf(c), " "); !strings.Contains(argv, "--config "+configPath) {
			t.Errorf("container %s runs %q, not with --config %s", c.Name, argv, configPath)
		}
	}
	var steps []string
	for _, c := range pod.InitContainers {
		steps = append(steps, strings.Join(argvOf(c)[1:], " "))
	}
	if len(steps) != 2 || !strings.HasPrefix(steps[0], "config check ") || !strings.HasPrefix(steps[1], "migrate ") {
		t.Errorf("init containers run %q; want `config check` then `migrate`, as docs/deploy.md says", steps)
	}
	if argv := argvOf(relayC); len(argv) < 2 || argv[1] != "relay" {
		t.Errorf("the relay container runs %q", argv)
	}

	// The probes: the health listener's paths, on its port.
	_, port, found := strings.Cut(cfg.Health.Listen, ":")
	if !found {
		t.Fatalf("health.listen %q has no port", cfg.Health.Listen)
	}
	if relayC.ReadinessProbe == nil || relayC.LivenessProbe == nil {
		t.Fatal("the relay container has no readiness or liveness probe")
	}
	probes := map[string]*k8sProbe{"/readyz": relayC.ReadinessProbe, "/livez": relayC.LivenessProbe}
	for want, p := range probes {
		if p.HTTPGet.Path != want {
			t.Errorf("probe path %q, want %s", p.HTTPGet.Path, want)
		}
		ok := false
		for _, cp := range relayC.Ports {
			if (cp.Name == p.HTTPGet.Port || strconv.Itoa(cp.ContainerPort) == p.HTTPGet.Port) && strconv.Itoa(cp.ContainerPort) == port {
				ok = true
			}
		}
		if !ok {
			t.Errorf("probe %s uses port %q, which is not containerPort %s of health.listen %q", want, p.HTTPGet.Port, port, cfg.Health.Listen)
		}
	}
	if t.Failed() {
		return
	}

	// Run the pod's containers here, as its user.
	ctx, bin, schema, stream, prefix := setup(t)
	dir := sharedTempDir(t)
	if err := os.WriteFile(filepath.Join(dir, file), []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	// What differs from a cluster: the Secret's value, the NATS service's
	// address, a schema, stream and subjects of this test's own, and the
	// health listener on a free loopback port (its port was checked
	// above).
	var senderName string
	for name := range cfg.Senders {
		senderName = name
	}
	local := []string{
		"--set", "database.schema=" + schema,
		"--set", "senders." + senderName + ".url=" + testenv.NATSURL,
		"--set", "senders." + senderName + ".provision-stream=" + stream,
		"--set", "defaults.route.subject=" + prefix + ".{event_type}",
		"--set", "health.listen=127.0.0.1:0",
	}
	env := []string{cfg.Database.DSNEnv + "=" + testenv.PostgresURL}
	uid, gid := pod.SecurityContext.RunAsUser, pod.SecurityContext.RunAsGroup
	container := func(c k8sContainer) *exec.Cmd {
		argv := argvOf(c)
		for i, a := range argv {
			switch {
			case a == "/txbox":
				argv[i] = bin
			case a == configPath:
				argv[i] = filepath.Join(dir, file)
			}
		}
		return asUser(ctx, uid, gid, dir, env, append(argv, local...))
	}
	for _, c := range pod.InitContainers {
		if out, err := container(c).CombinedOutput(); err != nil {
			t.Fatalf("init container %s: %v\n%s", c.Name, err, out)
		}
	}
	runRelay(t, container(relayC), relayC.ReadinessProbe.HTTPGet.Path, relayC.LivenessProbe.HTTPGet.Path)
}
