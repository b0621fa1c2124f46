package relay_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/relay/relaytest"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
	"github.com/txbox/txbox/store/storetest"
)

// startBackedOff starts a relay on st, delivering to snd, with the
// configured type "orders" and discovery backed off: it looks once, at
// Start, and not again for a minute, so only a wake-up can start the
// poller of a type that appears later within the test. It returns when
// that look has succeeded, with the hook that counts the rounds.
func startBackedOff(t *testing.T, st store.Driver, snd *testSender) (*relay.Relay, *recordingHook) {
	t.Helper()
	hook := &recordingHook{}
	cfg := fastConfig(st, map[string]sender.Sender{"test": snd})
	cfg.Events = map[string]relay.EventSettings{"orders": {}}
	cfg.Hooks = []txbox.RelayHook{hook}
	cfg.DiscoverInterval = time.Minute
	cfg.DiscoverMaxInterval = time.Minute
	r := relaytest.Start(t, cfg)
	// A failed round is retried within a second: wait for one that
	// succeeded, after which the next is a minute away.
	testenv.WaitFor(t, 20*time.Second, "discovery's first successful round", func() bool {
		_, failed := r.Health().JobErrors[txbox.JobDiscover]
		return hook.rounds(txbox.JobDiscover) > 0 && !failed
	})
	return r, hook
}

// countingDriver counts the pending-types looks (discovery's and the
// wake-ups') that reach the PostgreSQL store. It embeds the driver, so
// the relay still finds store.Waker and the lock claim on it.
type countingDriver struct {
	*postgres.Driver
	looks atomic.Int64
	mu    sync.Mutex
	at    []time.Time // when each look began
}

func (d *countingDriver) OutboxPendingTypes(ctx context.Context) ([]string, error) {
	d.mu.Lock()
	d.at = append(d.at, time.Now())
	d.mu.Unlock()
	d.looks.Add(1)
	return d.Driver.OutboxPendingTypes(ctx)
}

// since returns when the looks after the first n began.
func (d *countingDriver) since(n int64) []time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.at[n:])
}

// waitListening waits until a backend of the test database LISTENs on
// d's channel (the last statement of the listener's idle connection).
func waitListening(t *testing.T, b *bundle, d *postgres.Driver) {
	t.Helper()
	listen := "LISTEN " + pgx.Identifier{d.NotifyChannel()}.Sanitize()
	testenv.WaitFor(t, 20*time.Second, "the wake-up listener LISTENs", func() bool {
		var n int
		err := b.pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = $1`, listen).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
}

// TestWakeStartsNewTypeWhileDiscoveryBacksOff is the bar of a new event
// type's first event (docs/concepts.md, "Types nobody configured"): with
// the relay's discovery backed off to a minute, a wake-up naming a type
// that has no poller yet starts one at once, for the Go publisher's
// NOTIFY and for the plain-SQL trigger's. No discovery round runs in
// between: the wake-up's look did it.
func TestWakeStartsNewTypeWhileDiscoveryBacksOff(t *testing.T) {
	t.Parallel()
	for _, via := range []string{"publisher", "trigger"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			d := b.store
			if via == "trigger" {
				var err error
				d, err = postgres.New(b.pool, postgres.Config{Schema: b.schema, NotifyTrigger: true, Logger: quietLogger()})
				if err != nil {
					t.Fatal(err)
				}
				if err := d.Migrate(ctx); err != nil {
					t.Fatal(err)
				}
			}
			r, hook := startBackedOff(t, d, b.sender)
			waitListening(t, b, d)
			rounds := hook.rounds(txbox.JobDiscover)

			id := txbox.NewID()
			if via == "publisher" {
				tx, err := b.pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				publishIn(t, tx, d, txbox.Event{ID: id, Type: "brand.new", Payload: []byte("1")})
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			} else {
				insert := fmt.Sprintf(`INSERT INTO %s.txbox_outbox (id, event_type, payload) VALUES ($1, 'brand.new', '1')`, b.schema)
				if _, err := b.pool.Exec(ctx, insert, id); err != nil {
					t.Fatal(err)
				}
			}
			committed := time.Now()
			// The bar is 1s; the deadline is far from it so that load
			// cannot fail the test, and far below discovery's minute.
			testenv.WaitFor(t, 10*time.Second, "the new type's first event delivered", func() bool { return len(b.sender.deliveries(id)) > 0 })
			t.Logf("first event of a new type delivered %v after its commit", b.sender.deliveries(id)[0].at.Sub(committed))
			if got := hook.rounds(txbox.JobDiscover); got != rounds {
				t.Errorf("%d discovery rounds ran before the delivery, want none (the wake-up delivers it)", got-rounds)
			}
			if !hasPoller(r, "brand.new") {
				t.Errorf("no poller for brand.new in %+v", r.Health().Types)
			}
		})
	}
}

// TestWakeFloodStartsNoPollerWithoutRows: anyone who can connect to the
// database can NOTIFY the relay's channel. A flood of wake-ups naming
// types that have no rows starts no poller, and its looks are coalesced
// and spaced (docs/concepts.md, "Wake-ups"); a real new type named among
// them is still delivered at once.
func TestWakeFloodStartsNoPollerWithoutRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	d := &countingDriver{Driver: b.store}
	r, hook := startBackedOff(t, d, b.sender)
	waitListening(t, b, b.store)
	looks, rounds := d.looks.Load(), hook.rounds(txbox.JobDiscover)

	const flood = 2000
	start := time.Now()
	id := txbox.NewID()
	// One transaction: its notifications (the flood, then the real
	// type's, from the publish statement) arrive together at the commit.
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, 'garbage.' || g) FROM generate_series(1, $2::int) g`, b.store.NotifyChannel(), flood); err != nil {
		t.Fatal(err)
	}
	publishIn(t, tx, b.store, txbox.Event{ID: id, Type: "real.new", Payload: []byte("1")})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the real new type delivered among the flood", func() bool { return len(b.sender.deliveries(id)) > 0 })
	// The garbage names are followed up for a while (an in-process wake-up
	// comes before its commit); wait until a second passes without one.
	// Stopping early would not weaken the check below, which holds at any
	// moment.
	testenv.WaitForEvery(t, 30*time.Second, time.Millisecond, "the wake-up looks stop", func() bool {
		n := d.looks.Load()
		return !testenv.Within(time.Second, 20*time.Millisecond, func() bool { return d.looks.Load() != n })
	})
	elapsed := time.Since(start)
	n := d.looks.Load() - looks
	// Spaced looks: at most one per relay.WakeLookSpacing, plus the one at
	// once. Load only makes fewer.
	if limit := 1 + int64(elapsed/relay.WakeLookSpacing); n > limit || n < 1 {
		t.Errorf("%d wake-up looks in %v for %d notifications, want 1..%d", n, elapsed, flood, limit)
	}
	t.Logf("%d notifications of %d distinct types: %d looks in %v", flood+1, flood+1, n, elapsed)
	h := r.Health()
	if len(h.Types) != 2 || !hasPoller(r, "orders") || !hasPoller(r, "real.new") {
		t.Errorf("%d pollers after the flood, want orders and real.new only", len(h.Types))
	}
	if got := hook.rounds(txbox.JobDiscover); got != rounds {
		t.Errorf("%d discovery rounds during the flood, want none", got-rounds)
	}
}

// TestWakeFollowsAnUnfoundNameUpThenStops: one wake-up naming a type no
// look finds (an in-process wake-up whose transaction never commits) is
// followed up at doubling intervals, never two looks within
// relay.WakeLookSpacing, and not past relay.WakeLookPatience: it costs a
// handful of looks and starts no poller.
func TestWakeFollowsAnUnfoundNameUpThenStops(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d := &countingDriver{Driver: b.store}
	r, hook := startBackedOff(t, d, b.sender)
	// Once its LISTEN is in place the listener asks for one look of its
	// own (store.ReadyWaker: the NOTIFYs before it reached no one); let
	// it and the spacing after it pass, so that only this wake-up's looks
	// are counted, from the first.
	testenv.WaitFor(t, 20*time.Second, "the listener's look once it listens, and its spacing", func() bool {
		at := d.since(0)
		return hook.rounds(txbox.JobDiscoverWake) > 0 && len(at) > 0 && time.Since(at[len(at)-1]) > 2*relay.WakeLookSpacing
	})
	before := d.looks.Load()
	woken := time.Now()
	r.Wake("never.committed")
	// Seeing that the looks stopped means waiting out the patience.
	testenv.WaitForEvery(t, relay.WakeLookPatience+20*time.Second, 100*time.Millisecond, "the follow-ups' patience over",
		func() bool { return time.Since(woken) > relay.WakeLookPatience+time.Second })
	at := d.since(before)
	if len(at) < 2 || len(at) > 6 {
		t.Fatalf("%d looks after one wake-up naming a type without rows, want the look and its follow-ups, 2 to 6: at %v", len(at), offsets(at, woken))
	}
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < relay.WakeLookSpacing {
			t.Errorf("looks %d and %d %v apart, want at least %v", i-1, i, gap, relay.WakeLookSpacing)
		}
	}
	if last := at[len(at)-1].Sub(woken); last > relay.WakeLookPatience {
		t.Errorf("a look %v after the wake-up, past the patience %v", last, relay.WakeLookPatience)
	}
	if hasPoller(r, "never.committed") {
		t.Error("a poller for a type without rows")
	}
	t.Logf("%d looks, at %v after the wake-up", len(at), offsets(at, woken))
}

// offsets returns each time of at as a duration after t0.
func offsets(at []time.Time, t0 time.Time) []time.Duration {
	out := make([]time.Duration, len(at))
	for i, a := range at {
		out[i] = a.Sub(t0).Round(time.Millisecond)
	}
	return out
}

// TestInProcessWakeStartsNewType: MySQL and SQLite have no NOTIFY; their
// only wake-ups are an in-process publisher's (outbox.Config.OnPublish →
// Relay.Wake), which come before the commit, when the look cannot see the
// row yet. A follow-up look starts the poller once the commit made it
// visible, without waiting for discovery. PostgreSQL runs it too, with
// the publisher's NOTIFY off.
func TestInProcessWakeStartsNewType(t *testing.T) {
	t.Parallel()
	for name, h := range map[string]storetest.Harness{
		"postgres": storeharness.Postgres(), "mysql": storeharness.MySQL(), "sqlite": storeharness.SQLite(),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d, err := h.Open(t, h.NewNamespace(t), "")
			if err != nil {
				t.Fatal(err)
			}
			if err := d.(interface{ Migrate(context.Context) error }).Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			snd := newTestSender()
			r, hook := startBackedOff(t, d, snd)
			rounds := hook.rounds(txbox.JobDiscover)

			pub, err := outbox.NewPublisher(d, outbox.Config{DisableNotify: true, OnPublish: func(types []string) { r.Wake(types...) }})
			if err != nil {
				t.Fatal(err)
			}
			tx := h.Begin(t, d)
			id := txbox.NewID()
			if _, err := pub.Publish(ctx, tx.Native(), txbox.Event{ID: id, Type: "brand.new", Payload: []byte("1")}); err != nil {
				t.Fatal(err)
			}
			// Hold the commit until the wake-up's first look has run: it
			// cannot see the row, so only a follow-up can start the poller.
			testenv.WaitFor(t, 10*time.Second, "the wake-up's look before the commit", func() bool { return hook.rounds(txbox.JobDiscoverWake) > 0 })
			if hasPoller(r, "brand.new") {
				t.Fatal("a poller for brand.new before its row was committed")
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			committed := time.Now()
			testenv.WaitFor(t, 10*time.Second, "the new type's first event delivered", func() bool { return len(snd.deliveries(id)) > 0 })
			t.Logf("first event of a new type delivered %v after its commit", snd.deliveries(id)[0].at.Sub(committed))
			if got := hook.rounds(txbox.JobDiscover); got != rounds {
				t.Errorf("%d discovery rounds ran before the delivery, want none (the wake-up delivers it)", got-rounds)
			}
		})
	}
}

// publishIn publishes ev in tx with the Go publisher, whose NOTIFY is on
// by default.
func publishIn(t *testing.T, tx pgx.Tx, d *postgres.Driver, ev txbox.Event) {
	t.Helper()
	pub, err := outbox.NewPublisher(d, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(context.Background(), tx, ev); err != nil {
		t.Fatal(err)
	}
}

// hasPoller reports whether r polls eventType.
func hasPoller(r *relay.Relay, eventType string) bool {
	for _, th := range r.Health().Types {
		if th.EventType == eventType {
			return true
		}
	}
	return false
}
