package consumetest

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store/postgres"
)

// Pipeline is the whole path on PostgreSQL, for end-to-end tests:
// business transactions publish through the outbox, a real relay delivers
// to a broker, an adapter feeds the inbox, and the handler writes an effect
// row through the inbox transaction in the same database.
type Pipeline struct {
	Schema string
	Store  *postgres.Driver
	Inbox  *inbox.Inbox

	pool *pgxpool.Pool
	pub  *outbox.Publisher

	inbox.NopHook

	mu          sync.Mutex
	committed   []txbox.ID
	rolledBack  []txbox.ID
	results     map[inbox.Result]int
	redelivered int
	seen        map[txbox.ID]int
}

// OnHandled implements inbox.Hook: it counts results for the oracle's
// log line, and the messages whose handler started per event id.
func (p *Pipeline) OnHandled(e inbox.HandledEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.results[e.Result]++
	if e.Delivery.IsRedelivery() {
		p.redelivered++
	}
	p.seen[e.ID]++
}

// Redelivered returns how many messages the inbox saw with the broker's
// redelivery flag set or a delivery count above 1.
func (p *Pipeline) Redelivered() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.redelivered
}

// Seen returns how many times the inbox settled a message of id (every
// result, duplicates included).
func (p *Pipeline) Seen(id txbox.ID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[id]
}

// Results returns how many deliveries the inbox reported per result.
func (p *Pipeline) Results() map[inbox.Result]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[inbox.Result]int, len(p.results))
	for k, v := range p.results {
		out[k] = v
	}
	return out
}

// E2EEvents is the number of events of an end-to-end test: 2000, or 10000
// with TXBOX_CHAOS set.
func E2EEvents() int {
	if os.Getenv("TXBOX_CHAOS") != "" {
		return 10_000
	}
	return 2000
}

// E2ETimeout bounds waiting for delivery: 2 minutes, 10 with TXBOX_CHAOS
// set (10,000 events through a one-at-a-time consumer under -race on a
// shared 2-core machine).
func E2ETimeout() time.Duration {
	if os.Getenv("TXBOX_CHAOS") != "" {
		return 10 * time.Minute
	}
	return 2 * time.Minute
}

// NewPipeline creates a schema with txbox's tables and an effect table,
// dropped when t ends, and an inbox named consumer on it.
func NewPipeline(t testing.TB, consumer string) *Pipeline {
	t.Helper()
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	schema := testenv.UniqueName("inbox_e2e_")
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	admin.Close()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 12
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		pool.Close()
	})
	d, err := postgres.New(pool, postgres.Config{Schema: schema, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE "+pgx.Identifier{schema, "effect"}.Sanitize()+" (event_id uuid NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE "+pgx.Identifier{schema, "orders"}.Sanitize()+" (id bigserial PRIMARY KEY, note text)"); err != nil {
		t.Fatal(err)
	}
	p := &Pipeline{Schema: schema, Store: d, pool: pool, results: map[inbox.Result]int{}, seen: map[txbox.ID]int{}}
	in, err := inbox.New(d, inbox.Config{Consumer: consumer, Hook: p})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := outbox.NewPublisher(d, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p.Inbox, p.pub = in, pub
	return p
}

// AttachPipeline opens the pipeline whose schema another process (the
// parent test) created, for a child process: same tables, an inbox named
// consumer, nothing dropped when t ends.
func AttachPipeline(t testing.TB, schema, consumer string) *Pipeline {
	t.Helper()
	pool := storeharness.PostgresPool(t, 8)
	d, err := postgres.New(pool, postgres.Config{Schema: schema, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	p := &Pipeline{Schema: schema, Store: d, pool: pool, results: map[inbox.Result]int{}, seen: map[txbox.ID]int{}}
	if p.Inbox, err = inbox.New(d, inbox.Config{Consumer: consumer, Hook: p}); err != nil {
		t.Fatal(err)
	}
	return p
}

// Handler writes one effect row through the inbox's pgx transaction.
func (p *Pipeline) Handler(ctx context.Context, tx any, m inbox.Message) error {
	ptx, err := postgres.PgxTx(tx)
	if err != nil {
		return err
	}
	_, err = ptx.Exec(ctx, "INSERT INTO "+pgx.Identifier{p.Schema, "effect"}.Sanitize()+" (event_id) VALUES ($1)", m.ID)
	return err
}

// Publish runs n business transactions of perTx events of eventType: each
// inserts an order row and publishes its events in the same transaction;
// every rollbackEvery-th transaction (0 = none) rolls back instead.
func (p *Pipeline) Publish(t testing.TB, eventType string, n, perTx, rollbackEvery int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i++ {
		tx, err := p.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+pgx.Identifier{p.Schema, "orders"}.Sanitize()+" (note) VALUES ($1)", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
		evs := make([]txbox.Event, perTx)
		for j := range evs {
			evs[j] = txbox.Event{Type: eventType, Key: fmt.Sprintf("order-%d", i), Payload: []byte(fmt.Sprintf(`{"order":%d,"line":%d}`, i, j))}
		}
		ids, err := p.pub.Publish(ctx, tx, evs...)
		if err != nil {
			t.Fatal(err)
		}
		rollback := rollbackEvery > 0 && i%rollbackEvery == rollbackEvery-1
		if rollback {
			err = tx.Rollback(ctx)
		} else {
			err = tx.Commit(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		p.mu.Lock()
		if rollback {
			p.rolledBack = append(p.rolledBack, ids...)
		} else {
			p.committed = append(p.committed, ids...)
		}
		p.mu.Unlock()
	}
}

// Committed returns the ids of committed events so far.
func (p *Pipeline) Committed() []txbox.ID {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]txbox.ID(nil), p.committed...)
}

// relayConfig is the relay configuration of the end-to-end tests: every
// type through s to route, fast polling and recovery, retention 0.
func relayConfig(d *postgres.Driver, s sender.Sender, route sender.Route, lease time.Duration) relay.Config {
	retention := time.Duration(0)
	return relay.Config{
		Store:   d,
		Senders: map[string]sender.Sender{"broker": s},
		Defaults: relay.EventSettings{
			Route:         &route,
			Polling:       &relay.PollingSettings{MinDelay: new(10 * time.Millisecond), MaxDelay: new(200 * time.Millisecond)},
			Backoff:       &relay.BackoffSettings{Delay: new(100 * time.Millisecond), Multiplier: new(2.0), Max: new(time.Second)},
			Retention:     &retention,
			LeaseDuration: &lease,
		},
		DiscoverInterval:   100 * time.Millisecond,
		RecoverInterval:    100 * time.Millisecond,
		DeadLetterInterval: 100 * time.Millisecond,
		Circuit:            relay.CircuitConfig{CoolDown: 100 * time.Millisecond, MaxCoolDown: 500 * time.Millisecond},
		Logger:             slog.New(slog.DiscardHandler),
	}
}

// StartRelay starts a relay delivering every type through s to route
// (with "{event_type}" expanded). The returned stop function stops it
// within timeout; a tiny timeout abandons in-flight batches (their leases
// expire after lease and they are delivered again).
func (p *Pipeline) StartRelay(t testing.TB, s sender.Sender, route sender.Route, lease time.Duration) (stop func(timeout time.Duration)) {
	t.Helper()
	return p.StartTenantRelay(t, "", s, route, lease)
}

// StartTenantRelay is StartRelay for a relay that serves the pipeline's
// schema as tenant (relay.Config.Tenant): its messages carry the
// txbox-tenant header. An empty tenant is StartRelay.
func (p *Pipeline) StartTenantRelay(t testing.TB, tenant string, s sender.Sender, route sender.Route, lease time.Duration) (stop func(timeout time.Duration)) {
	t.Helper()
	cfg := relayConfig(p.Store, s, route, lease)
	cfg.Tenant = tenant
	r, err := relay.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func(timeout time.Duration) {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			_ = r.Stop(ctx)
		})
	}
	t.Cleanup(func() { stop(30 * time.Second) })
	return stop
}

// Environment of a relay child process.
const (
	childEnv       = "TXBOX_CONSUMETEST_RELAY_CHILD"
	childSchemaEnv = "TXBOX_CONSUMETEST_SCHEMA"
	childReady     = "consumetest-relay-ready"
	// ChildLease is the relay lease in child processes: a killed child's
	// claimed rows are delivered again this long after the kill. It bounds
	// how long holdUntilHandled may hold a batch (the send ends at 90% of
	// it): 2s was shorter than a loaded machine's consumer took to handle
	// a batch's first event, and the kill tests then waited in vain.
	ChildLease = 4 * time.Second
)

// RelayChild is the body of a child process started by
// StartRelayProcess: it runs a relay on the parent's schema with the
// sender and route newSender builds (from the environment the parent
// passed) until it is killed. In a normal test run it returns at once.
func RelayChild(t *testing.T, newSender func(getenv func(string) string) (sender.Sender, sender.Route)) {
	if os.Getenv(childEnv) != "1" {
		return
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 6
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	d, err := postgres.New(pool, postgres.Config{Schema: os.Getenv(childSchemaEnv), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s, route := newSender(os.Getenv)
	s = holdUntilHandled{Sender: s, pool: pool, effects: pgx.Identifier{os.Getenv(childSchemaEnv), "effect"}.Sanitize()}
	r, err := relay.New(relayConfig(d, s, route, ChildLease))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	fmt.Println(childReady)
	select {} // until SIGKILL
}

// holdUntilHandled holds each acknowledged batch until the consumer has
// handled one of its events (at most 10s), before the relay may mark it
// done: the window in which a SIGKILL makes the next relay send the batch
// again, opened for certain however slow the consumer is (a fixed delay
// lost that race on a loaded machine: every event was handled after its
// row was finished, and WaitDeliveredNotFinished never saw one).
// handledDwell is how long holdUntilHandled keeps a batch after one of
// its events was handled.
const handledDwell = 300 * time.Millisecond

type holdUntilHandled struct {
	sender.Sender
	pool    *pgxpool.Pool
	effects string
}

func (h holdUntilHandled) Send(ctx context.Context, msgs []*sender.Message) error {
	err := h.Sender.Send(ctx, msgs)
	ids := make([]txbox.ID, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var handled bool
		if qerr := h.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+h.effects+" WHERE event_id = ANY($1))", ids).Scan(&handled); qerr != nil {
			break
		}
		if handled {
			// Hold on a little longer: the window in which the event is
			// handled and its row still in process must outlast a poll
			// of WaitDeliveredNotFinished on a loaded machine.
			t := time.NewTimer(handledDwell)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			break
		}
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return err
}

// StartRelayProcess re-executes the test binary to run testName, which
// must call RelayChild, as a relay process on this pipeline's schema, with
// env added to its environment. It returns once the relay runs; kill sends
// SIGKILL (as a crash would) and waits for the process. The process is
// killed when t ends.
func (p *Pipeline) StartRelayProcess(t testing.TB, testName string, env map[string]string) (kill func()) {
	t.Helper()
	vars := []string{childEnv + "=1", childSchemaEnv + "=" + p.Schema}
	for k, v := range env {
		vars = append(vars, k+"="+v)
	}
	child := testenv.StartTestProcess(t, testName, vars...)
	cmd, out, stderr := child.Cmd, child.Stdout, child.Stderr
	var once sync.Once
	kill = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
		})
	}
	t.Cleanup(kill)
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			if !ok && sc.Text() == childReady {
				ok = true
				ready <- true
			}
		}
		if !ok {
			ready <- false
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			kill()
			t.Fatalf("relay process exited before it was ready; stderr:\n%s", stderr.String())
		}
	case <-time.After(60 * time.Second):
		kill()
		t.Fatalf("relay process not ready within 60s; stderr:\n%s", stderr.String())
	}
	return kill
}

// WaitOutboxAtMost polls (every millisecond, to catch a relay mid-drain)
// until at most n rows are left in the outbox table: with retention 0 the
// relay deletes a row when the broker acked it.
func (p *Pipeline) WaitOutboxAtMost(t testing.TB, n int, within time.Duration) {
	t.Helper()
	q := "SELECT count(*) FROM " + pgx.Identifier{p.Schema, p.Store.Tables().Outbox}.Sanitize()
	testenv.WaitForEvery(t, within, time.Millisecond, fmt.Sprintf("at most %d outbox rows left", n), func() bool {
		var left int
		if err := p.pool.QueryRow(context.Background(), q).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left <= n
	})
}

// WaitDeliveredNotFinished polls (every millisecond) until some event
// has an effect while its outbox row is still IN_PROCESS: the broker took
// it and the consumer handled it, but the relay has not marked it done.
// A relay killed right then sends it again.
func (p *Pipeline) WaitDeliveredNotFinished(t testing.TB, within time.Duration) {
	t.Helper()
	q := "SELECT count(*) FROM " + pgx.Identifier{p.Schema, p.Store.Tables().Outbox}.Sanitize() + " o JOIN " +
		pgx.Identifier{p.Schema, "effect"}.Sanitize() + " e ON e.event_id = o.id WHERE o.status = 'IN_PROCESS'"
	testenv.WaitForEvery(t, within, time.Millisecond, "an event handled while its row is still in process", func() bool {
		var n int
		if err := p.pool.QueryRow(context.Background(), q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
}

// Effects returns the effect rows per event id.
func (p *Pipeline) Effects(t testing.TB) map[txbox.ID]int {
	t.Helper()
	rows, err := p.pool.Query(context.Background(), "SELECT event_id, count(*) FROM "+pgx.Identifier{p.Schema, "effect"}.Sanitize()+" GROUP BY event_id")
	if err != nil {
		t.Fatal(err)
	}
	out := map[txbox.ID]int{}
	var id txbox.ID
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error { out[id] = n; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// WaitDelivered polls until every committed event has an effect, then
// applies the oracle: 0 lost, 0 duplicated effects, 0 unexpected (rolled
// back or unknown ids).
func (p *Pipeline) WaitDelivered(t testing.TB, within time.Duration) {
	t.Helper()
	want := p.Committed()
	waitForEffects(t, within, 20*time.Millisecond, "committed events", want, p.Effects)
	got := p.Effects(t)
	wantSet := make(map[txbox.ID]bool, len(want))
	var dup, unexpected int
	for _, id := range want {
		wantSet[id] = true
		if got[id] > 1 {
			dup++
		}
	}
	for id := range got {
		if !wantSet[id] {
			unexpected++
		}
	}
	p.mu.Lock()
	rolled := len(p.rolledBack)
	p.mu.Unlock()
	res := p.Results()
	t.Logf("oracle: %d committed, %d rolled back; effects: %d ok, 0 lost, %d duplicated, %d unexpected; inbox: %d processed, %d duplicates absorbed, %d failed, %d broker redeliveries",
		len(want), rolled, len(want)-dup, dup, unexpected, res[inbox.Processed], res[inbox.Duplicate], res[inbox.Failed], p.Redelivered())
	if dup+unexpected > 0 {
		t.Errorf("effects: %d duplicated, %d unexpected", dup, unexpected)
	}
}
