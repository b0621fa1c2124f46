package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox/internal/natstest"
	"github.com/txbox/txbox/internal/testenv"
)

// postgresSchema returns a pool on the test database and a fresh schema in
// it, dropped when the test ends.
func postgresSchema(t *testing.T, ctx context.Context, prefix string) (*pgxpool.Pool, string) {
	t.Helper()
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	pool, err := pgxpool.New(ctx, testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	schema := testenv.UniqueName(prefix)
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	return pool, schema
}

// jetStream connects to the test NATS server; the connection closes when
// the test ends.
func jetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	js := natstest.JetStream(t, testenv.NATSURL)
	return js
}

// memoryStream creates a stream of subj.>, deleted when the test ends.
func memoryStream(t *testing.T, ctx context.Context, js jetstream.JetStream, subj string) jetstream.Stream {
	t.Helper()
	name := strings.ToUpper(subj)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subj + ".>"}, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	return stream
}

// inProcessRelay is `txbox relay` running in this process on a
// configuration that serves health on 127.0.0.1:0.
type inProcessRelay struct {
	// readyz is the URL of its /readyz; log its stderr.
	readyz string
	log    *testenv.LogBuffer
	cancel context.CancelFunc
	done   chan int
}

// startInProcessRelay writes yml, migrates and starts `txbox relay` on it, and
// waits for its health listener. The relay is stopped when the test ends,
// unless stop was called.
func startInProcessRelay(t *testing.T, ctx context.Context, yml string) *inProcessRelay {
	t.Helper()
	cfgPath := filepath.Join(t.TempDir(), "txbox.yaml")
	if err := os.WriteFile(cfgPath, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runInProcess(t, nil, "migrate", "--config", cfgPath); code != exitOK {
		t.Fatalf("migrate: %s", errOut)
	}
	rctx, cancel := context.WithCancel(ctx)
	r := &inProcessRelay{log: &testenv.LogBuffer{}, cancel: cancel, done: make(chan int, 1)}
	go func() {
		e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: r.log, getenv: func(string) string { return "" }}
		r.done <- run(rctx, e, []string{"relay", "--config", cfgPath})
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	r.readyz = "http://" + waitForLogAddr(t, r.log, `msg=serving addr=(\S+) paths="?\[/livez`) + "/readyz"
	return r
}

// stop stops the relay as SIGTERM does and expects exit 0.
func (r *inProcessRelay) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case code := <-r.done:
		r.done <- code // for the cleanup
		if code != exitOK {
			t.Fatalf("relay exited %d: %s", code, r.log)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("relay did not stop within 60s")
	}
}
