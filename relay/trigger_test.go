package relay_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/relay/relaytest"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// A producer that inserts with plain SQL, without txbox's publisher and
// its NOTIFY, wakes the relay through the opt-in trigger
// (docs/schema/postgres.md, "Wake-ups for plain-SQL producers"): with
// polls an hour apart and discovery off, only a wake-up can deliver its
// rows, and one statement wakes the pollers of every type it inserted.
func TestNotifyTriggerWakesRelayForPlainSQLInsert(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, err := postgres.New(b.pool, postgres.Config{Schema: b.schema, NotifyTrigger: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if has, err := d.HasNotifyTrigger(ctx); err != nil || !has {
		t.Fatalf("trigger after Migrate with NotifyTrigger: %v, %v", has, err)
	}
	cfg := fastConfig(d, map[string]sender.Sender{"test": b.sender})
	cfg.Defaults.Polling = &relay.PollingSettings{MinDelay: new(time.Hour), MaxDelay: new(time.Hour)}
	cfg.Events = map[string]relay.EventSettings{"orders": {}, "refunds": {}}
	cfg.DiscoverInterval = -1
	r := relaytest.Start(t, cfg)
	testenv.WaitFor(t, 10*time.Second, "first empty polls", func() bool {
		h := r.Health()
		return len(h.Types) == 2 && !h.Types[0].LastPoll.IsZero() && !h.Types[1].LastPoll.IsZero()
	})
	insert := fmt.Sprintf(`INSERT INTO %s.txbox_outbox (id, event_type, payload) VALUES ($1, 'orders', 'o'), ($2, 'refunds', 'r')`, b.schema)
	// The listener connects asynchronously, so a notification sent before
	// it listens is lost: insert again until one statement's rows arrive.
	testenv.WaitForEvery(t, 20*time.Second, 10*time.Millisecond, "plain-SQL inserts delivered with polls an hour apart (a wake-up)", func() bool {
		order, refund := txbox.NewID(), txbox.NewID()
		if _, err := b.pool.Exec(ctx, insert, order, refund); err != nil {
			t.Fatal(err)
		}
		return testenv.Within(time.Second, 5*time.Millisecond, func() bool {
			return len(b.sender.deliveries(order)) > 0 && len(b.sender.deliveries(refund)) > 0
		})
	})
	// Migrate again leaves the trigger as it is (no second trigger).
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.countTriggers(t); n != 1 {
		t.Errorf("%d triggers on the outbox after a second Migrate, want 1", n)
	}
}

// Without the option Migrate creates no trigger: plain-SQL producers are
// then picked up by polling only.
func TestNoNotifyTriggerWithoutTheOption(t *testing.T) {
	t.Parallel()
	b := setup(t) // migrated without NotifyTrigger
	if has, err := b.store.HasNotifyTrigger(context.Background()); err != nil || has {
		t.Fatalf("trigger without the option: %v, %v", has, err)
	}
	if n := b.countTriggers(t); n != 0 {
		t.Errorf("%d user triggers on the outbox without the option, want 0", n)
	}
}

// countTriggers counts the user-defined triggers on the bundle's outbox.
func (b *bundle) countTriggers(t *testing.T) int {
	t.Helper()
	var n int
	err := b.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal`, b.schema+".txbox_outbox").Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A wake-up that names a type the relay does not poll yet starts its
// poller at once, with discovery backed off to a minute: the first event
// of a new type is delivered within about a second, whether the wake-up
// is an in-process publisher's (before its commit), the Go publisher's
// NOTIFY or the trigger's, and no discovery round runs in between.
func TestWakeUpStartsPollingANewType(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var discoveries atomic.Int64
	r := b.start(t, func(c *relay.Config) {
		c.Defaults.Polling = &relay.PollingSettings{MinDelay: new(time.Hour), MaxDelay: new(time.Hour)}
		c.Events = map[string]relay.EventSettings{"orders": {}}
		c.DiscoverInterval, c.DiscoverMaxInterval = time.Minute, time.Minute
		c.Hooks = append(c.Hooks, maintenanceHook(func(ev relay.MaintenanceEvent) {
			if ev.Job == relay.JobDiscover {
				discoveries.Add(1)
			}
		}))
	})
	testenv.WaitFor(t, 10*time.Second, "the first discovery round and the first poll", func() bool {
		h := r.Health()
		return discoveries.Load() == 1 && len(h.Types) == 1 && !h.Types[0].LastPoll.IsZero()
	})
	ctx := context.Background()
	polled := func(typ string) time.Time {
		for _, th := range r.Health().Types {
			if th.EventType == typ {
				return th.LastPoll
			}
		}
		return time.Time{}
	}
	// picked waits for ev's delivery and returns how long after since it
	// came.
	picked := func(ev txbox.ID, since time.Time) time.Duration {
		t.Helper()
		testenv.WaitFor(t, 5*time.Second, "the new type's first event delivered", func() bool { return len(b.sender.deliveries(ev)) == 1 })
		return b.sender.deliveries(ev)[0].at.Sub(since)
	}

	// An in-process publisher wakes from inside its transaction.
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := &txbox.Event{ID: txbox.NewID(), Type: "fresh-inprocess", Payload: []byte("x")}
	if err := b.store.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{first}}); err != nil {
		t.Fatal(err)
	}
	r.Wake(first.Type)
	testenv.WaitFor(t, 5*time.Second, "the woken new poller's first poll, before the commit", func() bool { return !polled(first.Type).IsZero() })
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("in-process wake before the commit: delivered %v after the commit", picked(first.ID, time.Now()))

	// The Go publisher's NOTIFY. The listener connects asynchronously: a
	// notification sent before it listens is lost, so publish again
	// (each a fresh event of the same new type) until one is delivered.
	var notified time.Duration
	testenv.WaitForEvery(t, 20*time.Second, 200*time.Millisecond, "a new type's event delivered through NOTIFY", func() bool {
		ev := &txbox.Event{ID: txbox.NewID(), Type: "fresh-notify", Payload: []byte("n")}
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.store.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{ev}, Notify: true}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		at := time.Now()
		ok := testenv.Within(time.Second, 5*time.Millisecond, func() bool { return len(b.sender.deliveries(ev.ID)) == 1 })
		if ok {
			notified = b.sender.deliveries(ev.ID)[0].at.Sub(at)
		}
		return ok
	})
	t.Logf("publisher NOTIFY: delivered %v after the commit", notified)

	// The trigger's NOTIFY, for a plain-SQL insert.
	d, err := postgres.New(b.pool, postgres.Config{Schema: b.schema, NotifyTrigger: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	plain := txbox.NewID()
	if _, err := b.pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.txbox_outbox (id, event_type, payload) VALUES ($1, 'fresh-trigger', 't')`, b.schema), plain); err != nil {
		t.Fatal(err)
	}
	t.Logf("trigger NOTIFY: delivered %v after the insert", picked(plain, time.Now()))

	if n := discoveries.Load(); n != 1 {
		t.Errorf("%d discovery rounds, want only the one at start: the new types were not found by wake-ups", n)
	}
}

// maintenanceHook calls its function for every MaintenanceEvent.
type maintenanceHook func(relay.MaintenanceEvent)

func (h maintenanceHook) OnPoll(relay.PollEvent)                  {}
func (h maintenanceHook) OnBatch(relay.BatchEvent)                {}
func (h maintenanceHook) OnCircuit(relay.CircuitEvent)            {}
func (h maintenanceHook) OnMaintenance(ev relay.MaintenanceEvent) { h(ev) }
