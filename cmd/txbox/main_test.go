package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store/mysql"
)

// TestMain lets the test binary act as the txbox command: a child process
// started with TXBOX_TEST_RUN_MAIN=1 runs main with its own arguments, so
// the subprocess tests need no separate `go build`.
func TestMain(m *testing.M) {
	if os.Getenv("TXBOX_TEST_RUN_MAIN") == "1" {
		main()
		return
	}
	goleak.VerifyTestMain(testenv.RunThen(m, storeharness.CloseShared))
}

// runInProcess runs a command line in this process and returns its exit
// code, stdout and stderr.
func runInProcess(t testing.TB, environ []string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	lookup := map[string]string{}
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		lookup[k] = v
	}
	e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, environ: environ, getenv: func(k string) string { return lookup[k] }}
	code := run(context.Background(), e, args)
	return code, stdout.String(), stderr.String()
}

// startRelay runs `txbox relay` with args in this process until stop,
// which cancels it as SIGTERM does and returns its exit code (failing the
// test if it does not stop within 20s); done receives the code if it
// exits before. Its stderr (the logs) can be read
// meanwhile.
func startRelay(t testing.TB, args ...string) (stderr *testenv.LogBuffer, done <-chan int, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stderr = &testenv.LogBuffer{}
	exited := make(chan int, 1)
	go func() {
		e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: stderr, getenv: func(string) string { return "" }}
		exited <- run(ctx, e, append([]string{"relay"}, args...))
	}()
	return stderr, exited, func() int {
		t.Helper()
		cancel()
		select {
		case code := <-exited:
			return code
		case <-time.After(20 * time.Second):
			t.Fatal("relay did not stop within 20s")
			return -1
		}
	}
}

func TestHelpAndUsage(t *testing.T) {
	t.Parallel()
	if code, _, errOut := runInProcess(t, nil); code != exitUsage || !strings.Contains(errOut, "Commands:") {
		t.Errorf("no arguments: code %d, stderr %q", code, errOut)
	}
	if code, _, errOut := runInProcess(t, nil, "frobnicate"); code != exitUsage || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: code %d, stderr %q", code, errOut)
	}
	for _, c := range commands {
		code, _, errOut := runInProcess(t, nil, c.name, "--help")
		if code != exitOK || !strings.Contains(errOut, "Usage: txbox "+c.name) {
			t.Errorf("%s --help: code %d, stderr %q", c.name, code, errOut)
		}
	}
	if code, _, errOut := runInProcess(t, nil, "relay", "--no-such-flag"); code != exitUsage || !strings.Contains(errOut, "flag provided but not defined") {
		t.Errorf("bad flag: code %d, stderr %q", code, errOut)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	code, out, _ := runInProcess(t, nil, "version")
	if code != exitOK || !strings.HasPrefix(out, "txbox ") || !strings.Contains(out, "go1.") {
		t.Fatalf("version: code %d, out %q", code, out)
	}
}

func TestBadConfigExitsTwoWithKeyPath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct{ yaml, want string }{
		{"senders: { main: { type: natz } }\n", `senders.main.type: unknown sender type "natz"`},
		{"senders: { main: { type: nats } }\nevents:\n  order-created:\n    polling: { min-delay: 5s, max-delay: 1s }\n", "bad.yaml:4: events.order-created.polling.max-delay: must be ≥ min-delay"},
		{"defaults: { lease: 5 }\n", "defaults.lease: must be a duration"},
	} {
		path := dir + "/bad.yaml"
		if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := runInProcess(t, nil, "relay", "--config", path)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("relay with %q: code %d, stderr %q; want 2 and %q", tc.yaml, code, errOut, tc.want)
		}
	}
	code, _, errOut := runInProcess(t, []string{"TXBOX_DEFAULTS_BATCH_SIZE=0"}, "migrate", "--dsn", dir+"/x.db")
	if code != exitUsage || !strings.Contains(errOut, "environment variable TXBOX_DEFAULTS_BATCH_SIZE: defaults.batch-size: must be between 1 and 10000") {
		t.Errorf("env override: code %d, stderr %q", code, errOut)
	}
	code, _, errOut = runInProcess(t, nil, "relay", "--dsn", dir+"/x.db")
	if code != exitUsage || !strings.Contains(errOut, "no configuration file found") || !strings.Contains(errOut, "names a sender") || !strings.Contains(errOut, "--config FILE") {
		t.Errorf("relay without senders: code %d, stderr %q", code, errOut)
	}
}

func TestPublishSQLite(t *testing.T) {
	t.Parallel()
	db := t.TempDir() + "/t.db"
	if code, out, errOut := runInProcess(t, nil, "migrate", "--dsn", db); code != exitOK || !strings.Contains(out, "migrated sqlite") {
		t.Fatalf("migrate: %d %q %q", code, out, errOut)
	}
	code, out, errOut := runInProcess(t, nil, "publish", "--dsn", db, "--type", "order-created", "--key", "k", "--payload", "{}", "--header", "a=b", "--not-before", "1m")
	if code != exitOK || !strings.Contains(out, `"type":"order-created"`) {
		t.Fatalf("publish: %d %q %q", code, out, errOut)
	}
	big := t.TempDir() + "/big"
	if err := os.WriteFile(big, make([]byte, 1<<20+1), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--type", "a", "--payload-file", big}, "exceeds the limit of 1048576 bytes"},
		{[]string{"--payload", "x"}, "--type is required"},
		{[]string{"--type", "bad type"}, "invalid event type"},
		{[]string{"--type", "a", "--payload", "x", "--payload-file", "f"}, "not both"},
		{[]string{"--type", "a", "--payload", "x", "--header", "novalue"}, "must be name=value"},
		{[]string{"--type", "a", "--payload", "x", "--not-before", "tomorrow"}, "--not-before"},
		{[]string{"--type", "a"}, "give the payload with --payload TEXT or --payload-file"},
		{[]string{"--type", "a", "--payload", "", "--payload-file", "f"}, "not both"},
	} {
		code, _, errOut := runInProcess(t, nil, append([]string{"publish", "--dsn", db}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("publish %v: code %d, stderr %q, want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestPublishPayloadMustBeGiven: publish without a
// payload flag refuses instead of publishing an empty event; an empty
// payload asked for explicitly is published.
func TestPublishPayloadMustBeGiven(t *testing.T) {
	t.Parallel()
	db := t.TempDir() + "/t.db"
	if code, out, errOut := runInProcess(t, nil, "migrate", "--dsn", db); code != exitOK {
		t.Fatalf("migrate: %d %q %q", code, out, errOut)
	}
	code, _, errOut := runInProcess(t, nil, "publish", "--dsn", db, "--type", "t")
	if code != exitUsage || !strings.Contains(errOut, "--payload ''") {
		t.Errorf("publish without payload: code %d, stderr %q; want 2 and how to publish an empty payload", code, errOut)
	}
	code, out, errOut := runInProcess(t, nil, "publish", "--dsn", db, "--type", "t", "--payload", "")
	if code != exitOK || !strings.Contains(out, `"type":"t"`) {
		t.Fatalf("publish --payload '': code %d, stdout %q, stderr %q", code, out, errOut)
	}
	d, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var n, size int
	if err := d.QueryRow(`SELECT count(*), coalesce(sum(length(payload)), 0) FROM txbox_outbox WHERE event_type = 't'`).Scan(&n, &size); err != nil {
		t.Fatal(err)
	}
	if n != 1 || size != 0 {
		t.Errorf("outbox has %d events of type t with %d payload bytes, want the one explicit empty event", n, size)
	}
}

// TestNoDatabaseRefused: status, dlq and publish with
// no configuration file and no database flag refuse with a clear message
// instead of creating ./txbox.db and failing with "no such table"; an
// explicit sqlite dialect is accepted, and a missing SQLite file is
// refused without being created.
func TestNoDatabaseRefused(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir) // no ./txbox.yaml here, and ./txbox.db would land here
	for _, args := range [][]string{
		{"status"},
		{"dlq", "list"},
		{"publish", "--type", "t", "--payload", "{}"},
	} {
		code, _, errOut := runInProcess(t, nil, args...)
		if code != exitUsage || !strings.Contains(errOut, "no database configured") || !strings.Contains(errOut, "--dialect sqlite") {
			t.Errorf("%v: code %d, stderr %q; want 2 and the no-database message", args, code, errOut)
		}
		if _, err := os.Stat(dir + "/txbox.db"); err == nil {
			t.Fatalf("%v created ./txbox.db", args)
		}
		code, _, errOut = runInProcess(t, nil, append(args, "--dialect", "sqlite")...)
		if code != exitUsage || !strings.Contains(errOut, "./txbox.db does not exist") || !strings.Contains(errOut, "txbox migrate") {
			t.Errorf("%v --dialect sqlite without the file: code %d, stderr %q", args, code, errOut)
		}
		if _, err := os.Stat(dir + "/txbox.db"); err == nil {
			t.Fatalf("%v --dialect sqlite created ./txbox.db", args)
		}
	}
	// The environment names the database as well as a flag does.
	code, _, errOut := runInProcess(t, []string{"TXBOX_DATABASE_DIALECT=sqlite"}, "status")
	if code != exitUsage || !strings.Contains(errOut, "does not exist") {
		t.Errorf("status with TXBOX_DATABASE_DIALECT: code %d, stderr %q", code, errOut)
	}
	if code, out, errOut := runInProcess(t, nil, "migrate", "--dialect", "sqlite"); code != exitOK {
		t.Fatalf("migrate --dialect sqlite: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := runInProcess(t, nil, "status", "--dialect", "sqlite"); code != exitOK || !strings.Contains(out, "dead letters: 0 unresolved") {
		t.Errorf("status --dialect sqlite after migrate: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	// A configuration file that sets no database is not a choice of one.
	if err := os.WriteFile(dir+"/txbox.yaml", []byte("log: { level: warn }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runInProcess(t, nil, "status"); code != exitUsage || !strings.Contains(errOut, "no database configured") {
		t.Errorf("status with a txbox.yaml that names no database: code %d, stderr %q", code, errOut)
	}
}

func TestDemoSQLite(t *testing.T) {
	t.Parallel()
	code, out, errOut := runInProcess(t, nil, "demo", "--duration", "1500ms", "--rate", "100", "--drain-timeout", "2m")
	if code != exitOK {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	assertDemoSummary(t, out)
}

func assertDemoSummary(t *testing.T, out string) {
	t.Helper()
	for _, want := range []string{"publishing", "delivered", "lost                  0", "unexpected            0", "(delivered: 0)", "OK: all "} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "committed events      0\n") {
		t.Errorf("demo committed nothing:\n%s", out)
	}
	var orders, inTable, delivered int
	i := strings.Index(out, "orders committed")
	if i < 0 {
		t.Fatalf("demo output lacks the orders line:\n%s", out)
	}
	if _, err := fmt.Sscanf(out[i:], "orders committed %d (rows in the orders table: %d, order-created events delivered: %d)", &orders, &inTable, &delivered); err != nil {
		t.Fatalf("cannot parse the orders line: %v\n%s", err, out)
	}
	if orders == 0 || orders != inTable || orders != delivered {
		t.Errorf("business data and events disagree: %d committed, %d in table, %d delivered", orders, inTable, delivered)
	}
}

// TestDemoPostgres runs the demo against the local PostgreSQL (LISTEN/NOTIFY
// wake-ups, shared database: the demo's tables must be gone afterwards).
func TestDemoPostgres(t *testing.T) {
	t.Parallel()
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	code, out, errOut := runInProcess(t, nil, "demo", "--duration", "1500ms", "--rate", "100", "--drain-timeout", "2m", "--database-dialect", "postgres", "--dsn", testenv.PostgresURL)
	if code != exitOK {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	assertDemoSummary(t, out)
	i := strings.Index(out, "(tables ")
	if i < 0 {
		t.Fatalf("demo did not name its tables:\n%s", out)
	}
	prefix := strings.TrimSuffix(strings.Fields(out[i+len("(tables "):])[0], "*)")
	db := storeharness.PostgresAdmin(t)
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM information_schema.tables WHERE table_name LIKE $1`, prefix+"%").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 || !strings.HasPrefix(prefix, "demo_") {
		t.Errorf("%d demo tables with prefix %q left behind", n, prefix)
	}
	var left []string
	rows, err := db.Query(`SELECT proname || '(' || pg_get_function_identity_arguments(oid) || ')' FROM pg_proc WHERE proname LIKE $1`, prefix+"%")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var f string
		if err := rows.Scan(&f); err != nil {
			t.Fatal(err)
		}
		left = append(left, f)
	}
	if len(left) != 0 {
		t.Errorf("demo functions with prefix %q left behind: %v", prefix, left)
	}
}

// TestDemoMySQL runs the demo against the local MariaDB, in a database of
// its own.
func TestDemoMySQL(t *testing.T) {
	t.Parallel()
	_, dsn := testenv.MySQLDatabase(t, mysql.OpenDB, "")
	code, out, errOut := runInProcess(t, nil, "demo", "--duration", "1500ms", "--rate", "100", "--drain-timeout", "2m", "--database-dialect", "mysql", "--dsn", dsn)
	if code != exitOK {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	assertDemoSummary(t, out)
}

// TestDemoReReadsStream: when the live consumer misses messages, the demo
// reads the stream again before calling anything lost, and still passes.
func TestDemoReReadsStream(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	e := &env{stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }}
	err := demo(context.Background(), e, demoOptions{duration: time.Second, rate: 100, dialect: "sqlite",
		drainTimeout: time.Second, refresh: 200 * time.Millisecond, dropLiveEvery: 7})
	if err != nil {
		t.Fatalf("demo: %v\n%s\n%s", err, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "re-read the stream: ") {
		t.Fatalf("the dropped messages were not re-read:\n%s", out.String())
	}
	assertDemoSummary(t, out.String())
}

func TestDemoFlagErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--rate", "0"}, "--rate must be between"},
		{[]string{"--duration", "-1s"}, "--duration must be > 0"},
		{[]string{"--database-dialect", "postgres"}, "--dsn is required"},
		{[]string{"--dsn", "x"}, "--dsn is only for postgres and mysql"},
	} {
		code, _, errOut := runInProcess(t, nil, append([]string{"demo"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("demo %v: code %d, stderr %q", tc.args, code, errOut)
		}
	}
}

func TestProgressRendering(t *testing.T) {
	t.Parallel()
	var tty, plain bytes.Buffer
	snap := demoSnapshot{committed: 123456, rolledBack: 12345, delivered: 123450, pending: 6, oldestPending: 1234 * time.Millisecond}
	for _, p := range []*progress{{w: &tty, tty: true, start: time.Now()}, {w: &plain, start: time.Now()}} {
		p.show(snap, true)
		p.show(snap, false)
		p.done()
	}
	if got := strings.Count(tty.String(), "\r\033[K"); got != 2 || strings.Count(tty.String(), "\n") != 1 {
		t.Errorf("terminal output should redraw one line in place, got %q", tty.String())
	}
	for _, l := range strings.Split(tty.String(), "\r\033[K") {
		if n := len(strings.TrimSpace(l)); n >= 80 {
			t.Errorf("terminal line of %d characters would wrap: %q", n, l)
		}
	}
	if strings.Contains(plain.String(), "\033") || strings.Count(plain.String(), "\n") != 2 {
		t.Errorf("plain output should be one line per refresh without escapes, got %q", plain.String())
	}
	if !strings.Contains(plain.String(), "pending     6") || !strings.Contains(plain.String(), "draining") {
		t.Errorf("progress lacks pending count or phase: %q", plain.String())
	}
}

// TestNoConfigurationSaysWhere: migrate and relay run
// with no configuration at all say that no configuration file was found,
// where they looked, and how to give one (--config, TXBOX_CONFIG,
// --dialect/--dsn), and create no ./txbox.db; migrate creates the SQLite
// file when asked (--dialect sqlite); demo still needs nothing.
func TestNoConfigurationSaysWhere(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir) // no ./txbox.yaml here, and ./txbox.db would land here
	for _, args := range [][]string{{"migrate"}, {"relay"}} {
		code, out, errOut := runInProcess(t, nil, args...)
		for _, want := range []string{"no configuration file found", "looked for", filepath.Join(dir, "txbox.yaml"), "--config", "TXBOX_CONFIG"} {
			if code != exitUsage || !strings.Contains(errOut, want) {
				t.Errorf("%v: code %d, stderr %q; want 2 and %q", args, code, errOut, want)
			}
		}
		if strings.Contains(out, "migrated") {
			t.Errorf("%v reports success: %q", args, out)
		}
		if _, err := os.Stat(filepath.Join(dir, "txbox.db")); err == nil {
			t.Fatalf("%v created ./txbox.db", args)
		}
	}
	if code, _, errOut := runInProcess(t, nil, "migrate"); !strings.Contains(errOut, "--dialect") || !strings.Contains(errOut, "--dsn") || code != exitUsage {
		t.Errorf("migrate: no --dialect/--dsn hint: %q", errOut)
	}
	// A sender named by --set, but no database: the relay would create
	// ./txbox.db.
	code, _, errOut := runInProcess(t, nil, "relay", "--set", "senders.main.type=nats")
	if code != exitUsage || !strings.Contains(errOut, "no database configured") || !strings.Contains(errOut, "no configuration file found") {
		t.Errorf("relay with an env sender and no database: code %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "txbox.db")); err == nil {
		t.Fatal("relay created ./txbox.db")
	}
	if code, out, errOut := runInProcess(t, nil, "migrate", "--dialect", "sqlite"); code != exitOK {
		t.Fatalf("migrate --dialect sqlite: %d %q %q", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "txbox.db")); err != nil {
		t.Fatalf("migrate --dialect sqlite did not create ./txbox.db: %v", err)
	}
}
