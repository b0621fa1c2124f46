package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/relay/relaytest"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// bundle is what most engine tests need: a migrated PostgreSQL store in a
// fresh schema and a recording sender.
type bundle struct {
	pool   *pgxpool.Pool
	store  *postgres.Driver
	schema string
	sender *testSender
	// claim is the claim mode start gives every type (eachClaim); empty:
	// the default.
	claim txbox.ClaimMode
}

// eachClaim runs fn once per claim mode, each in a parallel subtest with
// its own bundle whose relays use that mode: the guarantees a test checks
// hold in both.
func eachClaim(t *testing.T, fn func(t *testing.T, b *bundle)) {
	t.Helper()
	for _, c := range []txbox.ClaimMode{txbox.ClaimLease, txbox.ClaimLock} {
		t.Run(string(c), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.claim = c
			fn(t, b)
		})
	}
}

func setup(t *testing.T) *bundle {
	t.Helper()
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	ctx := context.Background()
	pool := storeharness.PostgresPool(t, 8)
	schema := testenv.UniqueName("t_")
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The pool is closed after this (cleanups run last-in first-out).
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	})
	d, err := postgres.New(pool, postgres.Config{Schema: schema, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return &bundle{pool: pool, store: d, schema: schema, sender: newTestSender()}
}

func quietLogger() *slog.Logger {
	if os.Getenv("TXBOX_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(discard{}, nil))
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// publish inserts events of type typ in one committed transaction and
// returns their ids.
func (b *bundle) publish(t *testing.T, typ string, n int, mod func(i int, ev *txbox.Event)) []txbox.ID {
	t.Helper()
	ctx := context.Background()
	evs := make([]*txbox.Event, n)
	ids := make([]txbox.ID, n)
	for i := range evs {
		evs[i] = &txbox.Event{ID: txbox.NewID(), Type: typ, Payload: fmt.Appendf(nil, `{"n":%d}`, i)}
		if mod != nil {
			mod(i, evs[i])
		}
		ids[i] = evs[i].ID
	}
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := b.store.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: evs}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return ids
}

// count runs a COUNT(*) style query against the outbox table of the
// bundle's schema; where is the predicate.
func (b *bundle) count(t *testing.T, table, where string, args ...any) int {
	t.Helper()
	var n int
	q := fmt.Sprintf("SELECT count(*) FROM %s.txbox_%s WHERE %s", b.schema, table, where)
	if err := b.pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// startWakeOnly starts a relay on b that polls the type "orders" only and,
// after its first empty poll, an hour later: within a test, only a wake-up
// delivers. It returns once that first poll is done, so that what the test
// publishes next waits for a wake-up.
func (b *bundle) startWakeOnly(t *testing.T) *relay.Relay {
	t.Helper()
	r := b.start(t, func(c *relay.Config) {
		c.Defaults.Polling = &relay.PollingSettings{MinDelay: new(time.Hour), MaxDelay: new(time.Hour)}
		c.Events = map[string]relay.EventSettings{"orders": {}}
		c.DiscoverInterval = -1
	})
	testenv.WaitFor(t, 5*time.Second, "first empty poll", func() bool {
		h := r.Health()
		return len(h.Types) == 1 && !h.Types[0].LastPoll.IsZero()
	})
	return r
}

// start runs a relay with fast test settings, adjusted by mod, and stops
// it when the test ends.
func (b *bundle) start(t *testing.T, mod func(*relay.Config)) *relay.Relay {
	t.Helper()
	cfg := fastConfig(b.store, map[string]sender.Sender{"test": b.sender})
	if b.claim != "" {
		cfg.Defaults.Claim = &b.claim
	}
	if mod != nil {
		mod(&cfg)
	}
	return relaytest.Start(t, cfg)
}

func fastConfig(d store.Driver, senders map[string]sender.Sender) relay.Config {
	return relay.Config{
		Store:   d,
		Senders: senders,
		Defaults: relay.EventSettings{
			// Processed rows are kept so that the tests can read the
			// books from the table (the default deletes them on ack).
			Retention: new(time.Hour),
			Polling:   &relay.PollingSettings{MinDelay: new(10 * time.Millisecond), MaxDelay: new(100 * time.Millisecond)},
			Backoff:   &relay.BackoffSettings{Delay: new(50 * time.Millisecond), Multiplier: new(2.0), Max: new(time.Second)},
		},
		DiscoverInterval:   50 * time.Millisecond,
		RecoverInterval:    50 * time.Millisecond,
		DeadLetterInterval: 50 * time.Millisecond,
		Circuit:            relay.CircuitConfig{CoolDown: 50 * time.Millisecond, MaxCoolDown: 200 * time.Millisecond},
		Cleanup:            relay.CleanupConfig{Interval: 50 * time.Millisecond, MaxInterval: 200 * time.Millisecond},
		Logger:             quietLogger(),
	}
}

// delivery is one message the test sender saw, with when.
type delivery struct {
	msg *sender.Message
	at  time.Time
}

// testSender records every message it is given. behave decides the
// outcome of each Send; nil acks everything.
type testSender struct {
	mu     sync.Mutex
	got    []delivery
	behave func(ctx context.Context, msgs []*sender.Message) error
	sends  int
}

func newTestSender() *testSender { return &testSender{} }

func (s *testSender) setBehave(f func(ctx context.Context, msgs []*sender.Message) error) {
	s.mu.Lock()
	s.behave = f
	s.mu.Unlock()
}

func (s *testSender) Send(ctx context.Context, msgs []*sender.Message) error {
	s.mu.Lock()
	f := s.behave
	s.sends++
	now := time.Now()
	for _, m := range msgs {
		s.got = append(s.got, delivery{m, now})
	}
	s.mu.Unlock()
	if f == nil {
		return nil
	}
	return f(ctx, msgs)
}

func (s *testSender) Close(context.Context) error { return nil }

// deliveries returns what was delivered for id.
func (s *testSender) deliveries(id txbox.ID) []delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []delivery
	for _, d := range s.got {
		if d.msg.ID == id {
			out = append(out, d)
		}
	}
	return out
}

// distinct returns the number of distinct ids seen and the total number
// of deliveries.
func (s *testSender) distinct() (ids, total int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[txbox.ID]bool{}
	for _, d := range s.got {
		seen[d.msg.ID] = true
	}
	return len(seen), len(s.got)
}

func (s *testSender) ids() []txbox.ID {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]txbox.ID, 0, len(s.got))
	for _, d := range s.got {
		out = append(out, d.msg.ID)
	}
	return out
}

func containsAll(have []txbox.ID, want []txbox.ID) bool {
	set := make(map[txbox.ID]bool, len(have))
	for _, id := range have {
		set[id] = true
	}
	return !slices.ContainsFunc(want, func(id txbox.ID) bool { return !set[id] })
}

// order names, in the order of their first delivery, which of a and b
// were delivered: "k3 k4" when a came first.
func (s *testSender) order(a, b txbox.ID) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, d := range s.got {
		switch {
		case d.msg.ID == a && !slices.Contains(out, "k3"):
			out = append(out, "k3")
		case d.msg.ID == b && !slices.Contains(out, "k4"):
			out = append(out, "k4")
		}
	}
	return strings.Join(out, " ")
}
