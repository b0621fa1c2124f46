package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/natstest"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store/postgres"
)

// child returns a command that runs this test binary as the txbox command
// (see TestMain).
func child(t *testing.T, ctx context.Context, args ...string) (*exec.Cmd, *testenv.LogBuffer, *testenv.LogBuffer) {
	t.Helper()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "TXBOX_TEST_RUN_MAIN=1")
	var stdout, stderr testenv.LogBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	return cmd, &stdout, &stderr
}

// testStream creates a JetStream stream of the test's own, in memory,
// capturing subj.>, for a fresh subject prefix subj; it is deleted when
// the test ends.
func testStream(t *testing.T, ctx context.Context) (jetstream.Stream, string) {
	t.Helper()
	js := natstest.JetStream(t, testenv.NATSURL)
	subj := testenv.UniqueName("cli")
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: strings.ToUpper(subj), Subjects: []string{subj + ".>"}, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), strings.ToUpper(subj)) })
	return stream, subj
}

// startChild starts cmd; the channel receives its Wait result.
func startChild(t *testing.T, cmd *exec.Cmd) <-chan error {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return exited
}

// sigterm stops the relay process cmd with SIGTERM and fails the test
// unless it exits 0 within wait; exited receives its Wait result.
func sigterm(t *testing.T, cmd *exec.Cmd, exited <-chan error, wait time.Duration, stderr *testenv.LogBuffer) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("relay exited with %v after SIGTERM\nstderr: %s", err, stderr)
		}
	case <-time.After(wait):
		_ = cmd.Process.Kill()
		t.Fatalf("relay did not stop within %s of SIGTERM\nstderr: %s", wait, stderr)
	}
}

// TestSubprocessMigratePublishRelay runs `txbox migrate`, `txbox publish`
// and `txbox relay` as real processes against PostgreSQL and NATS
// JetStream, with one more event inserted by plain SQL, then stops the
// relay with SIGTERM and expects a graceful exit 0. The DSN's password
// must appear in none of the processes' output.
func TestSubprocessMigratePublishRelay(t *testing.T) {
	t.Parallel()
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	testenv.RequireTCP(t, "NATS", strings.TrimPrefix(testenv.NATSURL, "nats://"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	admin := storeharness.PostgresAdmin(t)
	schema := testenv.PostgresSchema(t, admin)

	// A stream of its own for this test.
	stream, subj := testStream(t, ctx)

	const canary = "Canary-PW-77z"
	// Tokens of the admin server: canaries too.
	const readCanary, adminCanary = "Canary-read-token-77z-0123", "Canary-admin-token-77z-0123"
	dsn := strings.Replace(testenv.PostgresURL, "postgres@", "postgres:"+canary+"@", 1)
	cfgPath := filepath.Join(t.TempDir(), "txbox.yaml")
	yml := fmt.Sprintf(`
database: { dialect: postgres, schema: %s }
senders:
  main: { type: nats, url: %q }
defaults:
  route: { subject: "%s.{event_type}" }
  polling: { min-delay: 10ms, max-delay: 200ms }
events:
  order-created: { route: { subject: %s.orders.created } }
relay: { discover-interval: 100ms, shutdown-timeout: 15s, heartbeat-interval: 1s }
log: { level: debug }
admin: { enabled: true, listen: "127.0.0.1:0", read-token-env: TXBOX_TEST_READ_TOKEN, admin-token-env: TXBOX_TEST_ADMIN_TOKEN }
`, schema, testenv.NATSURL, subj, subj)
	if err := os.WriteFile(cfgPath, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	var outputs []*testenv.LogBuffer
	runChild := func(args ...string) string {
		t.Helper()
		cmd, stdout, stderr := child(t, ctx, args...)
		cmd.Env = append(cmd.Env, "TXBOX_DATABASE_DSN="+dsn)
		outputs = append(outputs, stdout, stderr)
		if err := cmd.Run(); err != nil {
			t.Fatalf("txbox %v: %v\nstdout: %s\nstderr: %s", args, err, stdout, stderr)
		}
		return stdout.String()
	}

	if out := runChild("migrate", "--config", cfgPath); !strings.Contains(out, "migrated postgres") {
		t.Fatalf("migrate printed %q", out)
	}
	out := runChild("publish", "--config", cfgPath, "--type", "order-created", "--key", "cust-1", "--payload", `{"order":42}`, "--header", "tenant=acme")
	var published struct{ ID string }
	if err := json.Unmarshal([]byte(out), &published); err != nil {
		t.Fatalf("publish printed %q: %v", out, err)
	}
	if _, err := admin.ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s.txbox_outbox (event_type, payload) VALUES ('legacy-ping', 'ping')`, schema)); err != nil {
		t.Fatal(err)
	}

	relayCmd, relayOut, relayErr := child(t, ctx, "relay", "--config", cfgPath)
	relayCmd.Env = append(relayCmd.Env, "TXBOX_DATABASE_DSN="+dsn,
		"TXBOX_TEST_READ_TOKEN="+readCanary, "TXBOX_TEST_ADMIN_TOKEN="+adminCanary)
	outputs = append(outputs, relayOut, relayErr)
	exited := startChild(t, relayCmd)

	// Consume both events from JetStream.
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	type msg struct{ subject, id, typ, tenant, data string }
	got := map[string]msg{}
	defer func() {
		// Runs also when WaitFor fails the test.
		if len(got) < 2 {
			t.Errorf("got %d of 2 events: %+v\nrelay stderr: %s", len(got), got, relayErr)
		}
	}()
	testenv.WaitFor(t, 60*time.Second, "both events on the stream", func() bool {
		batch, err := cons.Fetch(2, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			h := m.Headers()
			got[h.Get(txbox.HeaderEventType)] = msg{m.Subject(), h.Get(txbox.HeaderEventID), h.Get(txbox.HeaderEventType), h.Get("tenant"), string(m.Data())}
			_ = m.Ack()
		}
		select {
		case err := <-exited:
			t.Fatalf("relay exited early: %v\nstderr: %s", err, relayErr)
		default:
		}
		return len(got) >= 2
	})
	if m := got["order-created"]; m.id != published.ID || m.subject != subj+".orders.created" || m.tenant != "acme" || m.data != `{"order":42}` {
		t.Errorf("order-created = %+v, want id %s on %s.orders.created", m, published.ID, subj)
	}
	if m := got["legacy-ping"]; m.subject != subj+".legacy-ping" || m.data != "ping" || m.id == "" {
		t.Errorf("legacy-ping = %+v", m)
	}

	checkAdminServer(t, ctx, relayErr, readCanary, adminCanary)

	// Graceful stop on SIGTERM.
	sigterm(t, relayCmd, exited, 30*time.Second, relayErr)
	if !strings.Contains(relayErr.String(), "relay stopped") {
		t.Errorf("relay log lacks the graceful stop:\n%s", relayErr)
	}
	var rows int
	if err := admin.QueryRowContext(ctx, fmt.Sprintf(`SELECT count(*) FROM %s.txbox_outbox WHERE status <> 'PROCESSED'`, schema)).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("%d outbox rows not processed after the relay stopped", rows)
	}
	var all strings.Builder
	for _, b := range outputs {
		all.WriteString(b.String())
	}
	if all.Len() == 0 {
		t.Fatal("no output captured: the canary check would prove nothing")
	}
	for _, secret := range []string{canary, readCanary, adminCanary} {
		if strings.Contains(all.String(), secret) {
			t.Fatalf("a secret (%s…) leaked into the output:\n%s", secret[:10], all.String())
		}
	}
}

// checkAdminServer finds the admin server's address in the relay's log
// and checks it from outside: the relay's heartbeat is listed, a wrong
// token is a 401, the read token cannot retry (403), the admin token can
// (a dry run here), and a foreign Host is refused.
func checkAdminServer(t *testing.T, ctx context.Context, relayErr *testenv.LogBuffer, readTok, adminTok string) {
	t.Helper()
	addr := adminAddress(t, relayErr)
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("admin server on %q, want loopback", addr)
	}
	call := func(method, path, token, host, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if host != "" {
			req.Host = host
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	testenv.WaitFor(t, 30*time.Second, "the relay's heartbeat in the instances list", func() bool {
		st, body := call("GET", "/api/v1/instances", readTok, "", "")
		return st == http.StatusOK && strings.Contains(body, `"expired":false`)
	})
	for _, c := range []struct {
		method, path, token, host, body string
		want                            int
	}{
		{"GET", "/api/v1/overview", "", "", "", http.StatusUnauthorized},
		{"GET", "/api/v1/overview", "wrong-token-wrong-token", "", "", http.StatusUnauthorized},
		{"GET", "/api/v1/overview", readTok, "", "", http.StatusOK},
		{"POST", "/api/v1/dead-letters/retry", readTok, "", `{"all":true,"dry_run":true}`, http.StatusForbidden},
		{"POST", "/api/v1/dead-letters/retry", adminTok, "", `{"all":true,"dry_run":true}`, http.StatusOK},
		{"GET", "/api/v1/overview", adminTok, "evil.example", "", http.StatusForbidden},
	} {
		if st, body := call(c.method, c.path, c.token, c.host, c.body); st != c.want {
			t.Errorf("%s %s (host %q): %d %s, want %d", c.method, c.path, c.host, st, body, c.want)
		}
	}
}

// TestSubprocessRelayStopsMidBacklog sends SIGTERM while the relay drains a
// backlog: it must exit 0 within its shutdown timeout and leave no row
// IN_PROCESS (every batch finished or released), in both claim modes
// (lock is the default for NATS on PostgreSQL). Processed rows are kept
// (retention) so that the books can be read from the table.
func TestSubprocessRelayStopsMidBacklog(t *testing.T) {
	t.Parallel()
	for _, claim := range []string{"lease", "lock"} {
		t.Run(claim, func(t *testing.T) {
			t.Parallel()
			subprocessRelayStopsMidBacklog(t, claim)
		})
	}
}

func subprocessRelayStopsMidBacklog(t *testing.T, claim string) {
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	testenv.RequireTCP(t, "NATS", strings.TrimPrefix(testenv.NATSURL, "nats://"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := storeharness.PostgresAdmin(t)
	schema := testenv.PostgresSchema(t, admin)
	_, subj := testStream(t, ctx)
	cfgPath := filepath.Join(t.TempDir(), "txbox.yaml")
	yml := fmt.Sprintf(`
database: { dialect: postgres, schema: %s }
senders: { main: { type: nats, url: %q } }
defaults:
  route: { subject: "%s.{event_type}" }
  batch-size: 50
  claim: %s
  retention: 1h
  polling: { min-delay: 1ms, max-delay: 100ms }
relay: { discover-interval: 50ms, shutdown-timeout: 20s }
log: { level: debug }
`, schema, testenv.NATSURL, subj, claim)
	if err := os.WriteFile(cfgPath, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	mig, _, migErr := child(t, ctx, "migrate", "--config", cfgPath, "--dsn", testenv.PostgresURL)
	if err := mig.Run(); err != nil {
		t.Fatalf("migrate: %v: %s", err, migErr)
	}
	const n = 20000
	if _, err := admin.ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s.txbox_outbox (event_type, payload)
		SELECT 'bulk-' || (i %% 4), convert_to('{"i":' || i || '}', 'UTF8') FROM generate_series(1, %d) AS i`, schema, n)); err != nil {
		t.Fatal(err)
	}
	relayCmd, _, relayErr := child(t, ctx, "relay", "--config", cfgPath, "--dsn", testenv.PostgresURL)
	exited := startChild(t, relayCmd)
	count := func(status string) int {
		var c int
		if err := admin.QueryRowContext(ctx, fmt.Sprintf(`SELECT count(*) FROM %s.txbox_outbox WHERE status = $1`, schema), status).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	// Wait until delivery is under way, then stop it mid-backlog.
	delivering := false
	defer func() {
		// Runs also when WaitFor fails the test (the cancelled context
		// then kills the relay).
		if !delivering {
			t.Errorf("relay delivered nothing within 60s: %s", relayErr)
		}
	}()
	testenv.WaitForEvery(t, 60*time.Second, 20*time.Millisecond, "the relay to deliver 500 events", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("relay exited early: %v: %s", err, relayErr)
		default:
		}
		return count("PROCESSED") >= 500
	})
	delivering = true
	stopAt := time.Now()
	sigterm(t, relayCmd, exited, 40*time.Second, relayErr)
	processed, inProcess, pending := count("PROCESSED"), count("IN_PROCESS"), count("PENDING")
	t.Logf("stopped in %s: %d processed, %d pending, %d in process", time.Since(stopAt).Round(time.Millisecond), processed, pending, inProcess)
	if inProcess != 0 {
		logs := relayErr.String()
		t.Errorf("%d rows left IN_PROCESS after a graceful stop; relay log:\n%.20000s", inProcess, logs)
	}
	if processed+pending != n {
		t.Errorf("processed %d + pending %d != %d published", processed, pending, n)
	}
	if pending == 0 {
		t.Logf("the whole backlog drained before SIGTERM landed; the stop was not mid-batch")
	}
}

// TestSubprocessConcurrentMigrate: four `txbox migrate` processes started
// at once on an empty schema all succeed, and the migration is recorded
// once.
func TestSubprocessConcurrentMigrate(t *testing.T) {
	t.Parallel()
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := storeharness.PostgresAdmin(t)
	// A schema name nobody created yet: migrate creates it.
	schema := testenv.UniqueName("t_")
	t.Cleanup(func() { _, _ = admin.Exec(`DROP SCHEMA IF EXISTS ` + schema + ` CASCADE`) })
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd, stdout, stderr := child(t, ctx, "migrate", "--dialect", "postgres", "--dsn", testenv.PostgresURL, "--set", "database.schema="+schema)
			if err := cmd.Run(); err != nil || !strings.Contains(stdout.String(), "migrated postgres") {
				errs <- fmt.Sprintf("%v: %s %s", err, stdout, stderr)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	var n int
	if err := admin.QueryRowContext(ctx, `SELECT count(*) FROM `+schema+`.txbox_schema_version`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	migs, err := postgres.Migrations(schema, "")
	if err != nil {
		t.Fatal(err)
	}
	if n != len(migs) {
		t.Errorf("schema_version has %d rows after 4 concurrent runs, want %d", n, len(migs))
	}
}

// TestSubprocessSecondSignalReleases (scenario 17): the
// destination never answers, so a graceful stop would wait for the whole
// shutdown-timeout (60s). A second SIGTERM shortens it: within a couple
// of seconds the sends are cancelled, every claimed row is released
// (PENDING, no attempt counted, none left IN_PROCESS for its 5 minute
// lease) and the command exits 1 saying why.
func TestSubprocessSecondSignalReleases(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	arrived := make(chan struct{}, 100)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Reading the body lets the server notice when the relay gives
		// up on the request.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case arrived <- struct{}{}:
		default:
		}
		select { // never answers
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release) // before srv.Close
	dir := t.TempDir()
	db := filepath.Join(dir, "relay.db")
	cfgPath := filepath.Join(dir, "txbox.yaml")
	yml := fmt.Sprintf(`
database: { dialect: sqlite, dsn: %s }
senders: { hooks: { type: webhook, url: "%s/in", timeout: 5m } }
defaults: { polling: { min-delay: 5ms, max-delay: 50ms } }
relay: { discover-interval: 20ms, shutdown-timeout: 60s }
log: { level: debug }
`, db, srv.URL)
	if err := os.WriteFile(cfgPath, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runInProcess(t, nil, "migrate", "--config", cfgPath); code != exitOK {
		t.Fatalf("migrate: %s", errOut)
	}
	const n = 5
	for i := 0; i < n; i++ {
		if code, _, errOut := runInProcess(t, nil, "publish", "--config", cfgPath, "--type", "slow", "--payload", "{}"); code != exitOK {
			t.Fatalf("publish: %s", errOut)
		}
	}
	relayCmd, _, relayErr := child(t, ctx, "relay", "--config", cfgPath)
	exited := startChild(t, relayCmd)
	select {
	case <-arrived:
	case err := <-exited:
		t.Fatalf("relay exited early: %v: %s", err, relayErr)
	case <-time.After(30 * time.Second):
		_ = relayCmd.Process.Kill()
		t.Fatalf("no request reached the destination within 30s: %s", relayErr)
	}
	if err := relayCmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "graceful stop begun", func() bool { return strings.Contains(relayErr.String(), "relay stopping") })
	select {
	case err := <-exited:
		t.Fatalf("relay exited after one SIGTERM with sends in flight and 60s of grace: %v: %s", err, relayErr)
	default:
	}
	if err := relayCmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	hurried := time.Now()
	var err error
	select {
	case err = <-exited:
	case <-time.After(30 * time.Second):
		_ = relayCmd.Process.Kill()
		t.Fatalf("relay still running 30s after a second SIGTERM: %s", relayErr)
	}
	t.Logf("exited %v after the second signal: %v", time.Since(hurried).Round(time.Millisecond), err)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitFailure {
		t.Errorf("relay ended with %v after a second SIGTERM, want exit status %d: %s", err, exitFailure, relayErr)
	}
	if !strings.Contains(relayErr.String(), "second signal") {
		t.Errorf("relay log does not say why it stopped early:\n%s", relayErr)
	}
	d, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var pending, inProcess, attempts int
	if err := d.QueryRowContext(ctx, `SELECT
		coalesce(sum(status = 'PENDING'), 0), coalesce(sum(status = 'IN_PROCESS'), 0), coalesce(sum(attempts), 0)
		FROM txbox_outbox`).Scan(&pending, &inProcess, &attempts); err != nil {
		t.Fatal(err)
	}
	if inProcess != 0 || pending != n || attempts != 0 {
		t.Errorf("after the second signal: %d pending, %d in process, %d attempts; want %d, 0, 0 (released, not left to the lease)\n%s",
			pending, inProcess, attempts, n, relayErr)
	}
}

// TestSubprocessWALMode runs the daemon in WAL mode (database.source:
// wal): `txbox migrate` creates the publication and the slot, `txbox
// publish` and the SQL function txbox_emit emit events, a plain-SQL
// producer inserts a row; `txbox relay` streams all three to NATS, `txbox
// status` shows the slot, and `txbox migrate --drop-stream` drops it.
func TestSubprocessWALMode(t *testing.T) {
	t.Parallel()
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	testenv.RequireTCP(t, "NATS", strings.TrimPrefix(testenv.NATSURL, "nats://"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := storeharness.PostgresAdmin(t)
	schema := testenv.PostgresSchema(t, admin)
	stream, subj := testStream(t, ctx)
	cfgPath := filepath.Join(t.TempDir(), "txbox.yaml")
	yml := fmt.Sprintf(`
database: { dialect: postgres, schema: %s, source: wal, wal: { sender-timeout: 4s } }
senders:
  main: { type: nats, url: %q }
defaults:
  route: { subject: "%s.{event_type}" }
  polling: { min-delay: 10ms, max-delay: 200ms }
relay: { discover-interval: 100ms, shutdown-timeout: 15s }
`, schema, testenv.NATSURL, subj)
	if err := os.WriteFile(cfgPath, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		cmd, stdout, stderr := child(t, ctx, args...)
		cmd.Env = append(cmd.Env, "TXBOX_DATABASE_DSN="+testenv.PostgresURL)
		if err := cmd.Run(); err != nil {
			t.Fatalf("txbox %v: %v\nstdout: %s\nstderr: %s", args, err, stdout, stderr)
		}
		return stdout.String()
	}
	out := run("migrate", "--config", cfgPath)
	// Registered after the schema's cleanup, so the slot goes first.
	t.Cleanup(func() {
		cmd, stdout, stderr := child(t, context.Background(), "migrate", "--config", cfgPath, "--drop-stream")
		cmd.Env = append(cmd.Env, "TXBOX_DATABASE_DSN="+testenv.PostgresURL)
		if err := cmd.Run(); err != nil {
			t.Errorf("migrate --drop-stream: %v\nstdout: %s\nstderr: %s", err, stdout, stderr)
		}
	})
	if !strings.Contains(out, "replication slot are in place") {
		t.Fatalf("migrate printed %q", out)
	}
	out = run("publish", "--config", cfgPath, "--type", "order-created", "--key", "cust-1", "--payload", `{"order":42}`)
	var published struct{ ID string }
	if err := json.Unmarshal([]byte(out), &published); err != nil {
		t.Fatalf("publish printed %q: %v", out, err)
	}
	var outboxRows int
	if err := admin.QueryRowContext(ctx, fmt.Sprintf(`SELECT count(*) FROM %s.txbox_outbox`, schema)).Scan(&outboxRows); err != nil || outboxRows != 0 {
		t.Fatalf("WAL mode publish wrote %d outbox rows (%v), want none", outboxRows, err)
	}
	if _, err := admin.ExecContext(ctx, fmt.Sprintf(`SELECT %s.txbox_emit('sql-emit', 'k1', 'from sql'::bytea, '{"tenant":"acme"}'::jsonb)`, schema)); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s.txbox_outbox (event_type, payload) VALUES ('legacy-ping', 'ping')`, schema)); err != nil {
		t.Fatal(err)
	}

	relayCmd, _, relayErr := child(t, ctx, "relay", "--config", cfgPath)
	relayCmd.Env = append(relayCmd.Env, "TXBOX_DATABASE_DSN="+testenv.PostgresURL)
	exited := startChild(t, relayCmd)
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	testenv.WaitFor(t, 60*time.Second, "three events on the stream", func() bool {
		batch, err := cons.Fetch(3, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			got[m.Headers().Get(txbox.HeaderEventType)] = m.Headers().Get(txbox.HeaderEventID) + " " + string(m.Data())
			_ = m.Ack()
		}
		select {
		case err := <-exited:
			t.Fatalf("relay exited early: %v\nstderr: %s", err, relayErr)
		default:
		}
		return len(got) >= 3
	})
	if got["order-created"] != published.ID+` {"order":42}` || !strings.HasSuffix(got["sql-emit"], " from sql") || !strings.HasSuffix(got["legacy-ping"], " ping") {
		t.Errorf("delivered %q", got)
	}
	testenv.WaitFor(t, 30*time.Second, "the captured row deleted after the confirm", func() bool {
		var n int
		return admin.QueryRowContext(ctx, fmt.Sprintf(`SELECT count(*) FROM %s.txbox_outbox`, schema)).Scan(&n) == nil && n == 0
	})
	if out := run("config", "check", "--config", cfgPath, "--connect"); !strings.Contains(out, "source: wal: wal_level logical, the slot present and not invalidated") {
		t.Errorf("config check --connect does not report the stream's checks:\n%s", out)
	}
	status := run("status", "--config", cfgPath)
	if !strings.Contains(status, "WAL slot "+schema+"_txbox_slot: streamed by pid") {
		t.Errorf("status does not show the streamed slot:\n%s", status)
	}
	sigterm(t, relayCmd, exited, 30*time.Second, relayErr)
}

// TestSubprocessRelaySurvivesSIGHUP: a relay without tenants logs a
// SIGHUP and runs on (Go's default would exit at once, leaving claimed
// rows to their leases); SIGTERM then stops it gracefully.
func TestSubprocessRelaySurvivesSIGHUP(t *testing.T) {
	t.Parallel()
	testenv.RequireTCP(t, "NATS", strings.TrimPrefix(testenv.NATSURL, "nats://"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "txbox.yaml")
	yml := fmt.Sprintf("database: { dialect: sqlite, dsn: %q }\nsenders: { main: { type: nats, url: %q } }\n", filepath.Join(dir, "o.db"), testenv.NATSURL)
	if err := os.WriteFile(cfgPath, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, _, stderr := child(t, ctx, "relay", "--config", cfgPath, "--migrate")
	exited := startChild(t, cmd)
	testenv.WaitFor(t, 30*time.Second, "relay started", func() bool { return strings.Contains(stderr.String(), "relay started") })
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the SIGHUP logged", func() bool { return strings.Contains(stderr.String(), "SIGHUP: this relay serves no tenants") })
	select {
	case err := <-exited:
		t.Fatalf("relay exited after SIGHUP: %v\n%s", err, stderr)
	case <-time.After(300 * time.Millisecond):
	}
	sigterm(t, cmd, exited, 20*time.Second, stderr)
}
