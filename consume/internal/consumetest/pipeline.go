package consumetest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
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

	mu         sync.Mutex
	committed  []txbox.ID
	rolledBack []txbox.ID
}

// E2EEvents is the number of events of an end-to-end test: 2000, or 10000
// with TXBOX_CHAOS set.
func E2EEvents() int {
	if os.Getenv("TXBOX_CHAOS") != "" {
		return 10_000
	}
	return 2000
}

// NewPipeline creates a schema with txbox's tables and an effect table,
// dropped when t ends, and an inbox named consumer on it.
func NewPipeline(t testing.TB, consumer string) *Pipeline {
	t.Helper()
	testenv.RequireTCP(t, "PostgreSQL", "127.0.0.1:5432")
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
	in, err := inbox.New(d, inbox.Config{Consumer: consumer})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := outbox.NewPublisher(d, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return &Pipeline{Schema: schema, Store: d, Inbox: in, pool: pool, pub: pub}
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

// StartRelay starts a relay delivering every type through s to route
// (with "{event_type}" expanded). The returned stop function stops it
// within timeout; a tiny timeout abandons in-flight batches, as a crash
// would (their leases expire after lease and they are delivered again).
func (p *Pipeline) StartRelay(t testing.TB, s sender.Sender, route sender.Route, lease time.Duration) (stop func(timeout time.Duration)) {
	t.Helper()
	retention := time.Duration(0)
	cfg := relay.Config{
		Store:   p.Store,
		Senders: map[string]sender.Sender{"broker": s},
		Defaults: relay.EventSettings{
			Route:         &route,
			Polling:       &relay.PollingSettings{MinDelay: 10 * time.Millisecond, MaxDelay: 200 * time.Millisecond},
			Backoff:       &relay.BackoffSettings{Delay: 100 * time.Millisecond, Multiplier: 2, Max: time.Second},
			Retention:     &retention,
			LeaseDuration: &lease,
		},
		DiscoverInterval:   100 * time.Millisecond,
		RecoverInterval:    100 * time.Millisecond,
		DeadLetterInterval: 100 * time.Millisecond,
		Circuit:            relay.CircuitConfig{CoolDown: 100 * time.Millisecond, MaxCoolDown: 500 * time.Millisecond},
		Logger:             slog.New(slog.DiscardHandler),
	}
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
	deadline := time.Now().Add(within)
	for {
		got := p.Effects(t)
		missing := 0
		for _, id := range want {
			if got[id] == 0 {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d committed events have no effect after %s (lost so far)", missing, len(want), within)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition with a deadline
	}
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
	t.Logf("oracle: %d committed, %d rolled back; effects: %d ok, 0 lost, %d duplicated, %d unexpected", len(want), rolled, len(want)-dup, dup, unexpected)
	if dup+unexpected > 0 {
		t.Errorf("effects: %d duplicated, %d unexpected", dup, unexpected)
	}
}
