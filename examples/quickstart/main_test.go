package main

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox/internal/natstest"
	"github.com/txbox/txbox/internal/testenv"
)

// TestMain runs the command itself when a test starts this binary as a
// child, so that the tests see its real exit status.
func TestMain(m *testing.M) {
	if os.Getenv("QUICKSTART_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// quickstart runs the command as a child process on a schema of its own,
// with the subject template prefix.{event_type}, and returns its output
// and exit status.
func quickstart(t *testing.T, prefix string) (string, error) {
	t.Helper()
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	testenv.RequireTCP(t, "NATS", strings.TrimPrefix(testenv.NATSURL, "nats://"))
	db, err := sql.Open("pgx", testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	schema := testenv.PostgresSchema(t, db)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-dsn", testenv.PostgresURLWithSchema(schema), "-nats", testenv.NATSURL,
		"-subject", prefix+".{event_type}", "-timeout", "1m")
	cmd.Env = append(os.Environ(), "QUICKSTART_RUN_MAIN=1")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

var publishedID = regexp.MustCompile(`published event (\S+)`)

// TestQuickstartDelivers: with a stream binding the subject, the command
// exits 0 once JetStream stored the event, and the stream holds it.
func TestQuickstartDelivers(t *testing.T) {
	t.Parallel()
	prefix := testenv.UniqueName("qs")
	js := natstest.JetStream(t, testenv.NATSURL)
	ctx := context.Background()
	name := strings.ToUpper(prefix)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ".>"}, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })

	out, err := quickstart(t, prefix)
	if err != nil {
		t.Fatalf("quickstart with a stream: %v\n%s", err, out)
	}
	m := publishedID.FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "delivered: JetStream stored the event") {
		t.Fatalf("quickstart's output names no published and delivered event:\n%s", out)
	}
	msg, err := stream.GetLastMsgForSubject(ctx, prefix+".order-created")
	if err != nil {
		t.Fatalf("the stream holds no event although quickstart said it was delivered: %v\n%s", err, out)
	}
	if got := msg.Header.Get("Nats-Msg-Id"); got != m[1] {
		t.Fatalf("the stream's message is event %q, quickstart published %q", got, m[1])
	}
	// A newcomer reads any warning as their mistake: the
	// example sizes its pool for the in-process relay's lock claims.
	if strings.Contains(out, "WARN") {
		t.Fatalf("quickstart logs a warning:\n%s", out)
	}
}

// TestQuickstartFailsWithoutStream: with no stream binding the subject,
// the command exits 1 and says why.
func TestQuickstartFailsWithoutStream(t *testing.T) {
	t.Parallel()
	out, err := quickstart(t, testenv.UniqueName("qs"))
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("quickstart without a stream: %v, want exit status 1\n%s", err, out)
	}
	if !strings.Contains(out, "not delivered: ") || !strings.Contains(out, "no stream bound to the subject") {
		t.Fatalf("quickstart without a stream exited 1 without the reason:\n%s", out)
	}
}
