package orders_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox/internal/natstest"
	"github.com/txbox/txbox/internal/testenv"
)

// TestOrdersSystem runs the example as a user would: the producer, the
// consumer, two relays from txbox.yaml and the traffic generator, each its
// own process. One relay is SIGKILLed half way. Then it checks the books:
// every order the producer holds reached the consumer's analytics at its
// last version, with exactly one applied event per version (no doubles,
// none missing), and no order that rolled back reached it at all.
func TestOrdersSystem(t *testing.T) {
	t.Parallel()
	bin := buildSystem(t)
	db, err := sql.Open("pgx", testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	run := strings.ToLower(testenv.UniqueName("orders"))
	schema, stream, prefix := run, strings.ToUpper(run), run
	t.Cleanup(func() { _, _ = db.Exec(`DROP SCHEMA IF EXISTS "` + schema + `" CASCADE`) })
	t.Cleanup(func() { deleteStream(stream) })

	producer := start(t, "producer", bin, nil, "producer", "-dsn", testenv.PostgresURL, "-schema", schema, "-listen", "127.0.0.1:0")
	addr := producer.waitLog(t, regexp.MustCompile(`msg="producer listening" addr=(\S+)`))
	relayArgs := []string{"relay", "--config", "txbox.yaml",
		"--set", "database.schema=" + schema,
		"--set", "senders.main.provision-stream=" + stream,
		"--set", "senders.main.provision-subjects=" + prefix + ".>",
		"--set", "defaults.route.subject=" + prefix + ".{event_type}",
		"--set", "defaults.lease=5s",
		"--set", "relay.recover-interval=1s",
	}
	env := []string{"TXBOX_DATABASE_DSN=" + testenv.PostgresURL, "TXBOX_SENDERS_MAIN_URL=" + testenv.NATSURL}
	victim := start(t, "relay-1", bin, env, "txbox", relayArgs...)
	survivor := start(t, "relay-2", bin, env, "txbox", relayArgs...)
	consumer := start(t, "consumer", bin, nil, "consumer", "-dsn", testenv.PostgresURL, "-schema", schema, "-nats", testenv.NATSURL,
		"-stream", stream, "-subjects", prefix+".>", "-name", run)

	duration := 20 * time.Second
	gen := exec.Command(filepath.Join(bin, "loadgen"), "-producer", "http://"+addr, "-rate", "150",
		"-duration", duration.String(), "-fail", "0.1")
	var genOut, genErr bytes.Buffer
	gen.Stdout, gen.Stderr = &genOut, &genErr
	if err := gen.Start(); err != nil {
		t.Fatal(err)
	}
	// SIGKILL the first relay mid-run, once 300 orders (a fifth of a run on
	// a quiet machine, a few seconds of traffic on a loaded one) reached
	// the analytics through the relays.
	testenv.WaitForEvery(t, duration+30*time.Second, 50*time.Millisecond, "analytics rows before the kill", func() bool {
		running(t, producer, victim, survivor, consumer)
		return count(t, db, schema, "order_analytics") >= 300
	})
	victim.kill(t)
	// JetStream drops what the surviving relay sends again within its
	// duplicate window (Nats-Msg-Id); a consumer crash or an expired
	// window would not. Play that part: publish the stream's first
	// messages again without the header, so the inbox has to drop them.
	replayed := replay(t, stream, 100)
	if err := gen.Wait(); err != nil {
		t.Fatalf("loadgen: %v\n%s", err, tail(genErr.String()))
	}
	var summary map[string]int64
	if err := json.Unmarshal(genOut.Bytes(), &summary); err != nil {
		t.Fatalf("loadgen summary %q: %v", genOut.String(), err)
	}
	t.Logf("loadgen: %v", summary)
	if summary["created"] == 0 || summary["updated"] == 0 || summary["failed_on_purpose"] == 0 {
		t.Fatalf("the traffic did not exercise creates, updates and failures: %v", summary)
	}

	// The killed relay's batches come back after its 5s lease.
	var diff []string
	if !testenv.Within(90*time.Second, 500*time.Millisecond, func() bool {
		running(t, producer, survivor, consumer)
		diff = books(t, db, schema)
		return len(diff) == 0
	}) {
		t.Fatalf("books do not balance after 90s:\n%s", strings.Join(diff, "\n"))
	}
	var orders, events int
	if err := db.QueryRow(`SELECT count(*), coalesce(sum(version), 0) FROM "`+schema+`".orders`).Scan(&orders, &events); err != nil {
		t.Fatal(err)
	}
	t.Logf("books balance: %d orders, %d events, each applied once; %d replayed", orders, events, replayed)
	testenv.WaitFor(t, 10*time.Second, "the consumer's tally", func() bool {
		m := regexp.MustCompile(`duplicates_dropped=(\d+)`).FindAllStringSubmatch(consumer.output(), -1)
		return len(m) > 0 && m[len(m)-1][1] != "0"
	})
	if int64(orders) < summary["created"] {
		t.Errorf("producer holds %d orders, loadgen created %d", orders, summary["created"])
	}
	// Run as the README says, the relay must not tell a newcomer that
	// its pool is too small for its lock claims: txbox.yaml
	// lists the producer's types, so the pool is sized for them.
	if out := survivor.output(); strings.Contains(out, "lock_budget") {
		t.Errorf("the relay warns about its connection pool with the shipped txbox.yaml:\n%s", tail(out))
	}
}

// books lists the differences between the producer's orders and the
// consumer's analytics; empty when they balance.
func books(t *testing.T, db *sql.DB, schema string) []string {
	t.Helper()
	rows, err := db.Query(fmt.Sprintf(`
		SELECT coalesce(o.id, a.order_id), o.version, a.version, a.events_applied,
		       o.status IS DISTINCT FROM a.status OR o.total_cents IS DISTINCT FROM a.total_cents
		FROM %[1]q.orders o FULL JOIN %[1]q.order_analytics a ON a.order_id = o.id
		WHERE o.id IS NULL OR a.order_id IS NULL OR a.version <> o.version OR a.events_applied <> o.version
		   OR o.status IS DISTINCT FROM a.status OR o.total_cents IS DISTINCT FROM a.total_cents
		ORDER BY 1 LIMIT 5`, schema))
	if err != nil {
		if strings.Contains(err.Error(), "does not exist") {
			return []string{"tables not created yet"}
		}
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id int64
		var pv, av, applied sql.NullInt64
		var differs sql.NullBool
		if err := rows.Scan(&id, &pv, &av, &applied, &differs); err != nil {
			t.Fatal(err)
		}
		switch {
		case !pv.Valid:
			t.Fatalf("order %d reached the analytics but is not in the producer: a rolled-back event was delivered", id)
		case applied.Int64 > pv.Int64:
			t.Fatalf("order %d: %d events applied for %d versions: a duplicate had an effect", id, applied.Int64, pv.Int64)
		}
		out = append(out, fmt.Sprintf("order %d: producer v%d, analytics v%d with %d applied", id, pv.Int64, av.Int64, applied.Int64))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func count(t *testing.T, db *sql.DB, schema, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(fmt.Sprintf(`SELECT count(*) FROM %q.%q`, schema, table)).Scan(&n); err != nil {
		return 0 // not created yet
	}
	return n
}

// buildSystem builds the example's three commands and txbox once per run.
func buildSystem(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+string(os.PathSeparator),
		"./producer", "./consumer", "./loadgen", "../../cmd/txbox")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

// process is one of the system's commands, its output kept for the
// failure message and for waitLog.
type process struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

// start runs one command of the system with extra environment env.
func start(t *testing.T, name, bin string, env []string, command string, args ...string) *process {
	t.Helper()
	p := &process{name: name, cmd: exec.Command(filepath.Join(bin, command), args...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	r, w := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
	}()
	go func() {
		_ = p.cmd.Wait()
		_ = w.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", p.name, tail(p.output()))
		}
	})
	return p
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *process) waitLog(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	var m []string
	testenv.WaitFor(t, 30*time.Second, p.name+" to log "+re.String(), func() bool {
		m = re.FindStringSubmatch(p.output())
		return m != nil
	})
	return m[1]
}

// running fails the test when one of procs has exited.
func running(t *testing.T, procs ...*process) {
	t.Helper()
	for _, p := range procs {
		select {
		case <-p.done:
			t.Fatalf("%s exited: %v", p.name, p.cmd.ProcessState)
		default:
		}
	}
}

func (p *process) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

func tail(s string) string {
	if len(s) > 4000 {
		return "…" + s[len(s)-4000:]
	}
	return s
}

// replay publishes the first n messages of the stream again, without
// Nats-Msg-Id, and returns how many it published.
func replay(t *testing.T, stream string, n int) int {
	t.Helper()
	ctx := context.Background()
	js := natstest.JetStream(t, testenv.NATSURL)
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(n, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	replayed := 0
	for m := range batch.Messages() {
		out := natsgo.NewMsg(m.Subject())
		out.Data = m.Data()
		for k, v := range m.Headers() {
			if k != natsgo.MsgIdHdr {
				out.Header[k] = v
			}
		}
		if _, err := js.PublishMsg(ctx, out); err != nil {
			t.Fatal(err)
		}
		replayed++
	}
	if replayed == 0 {
		t.Fatal("nothing in the stream to replay")
	}
	return replayed
}

func deleteStream(name string) {
	nc, err := natsgo.Connect(testenv.NATSURL)
	if err != nil {
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	_ = js.DeleteStream(context.Background(), name)
}
