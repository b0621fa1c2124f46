package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/relay/relaytest"
	"github.com/txbox/txbox/sender"
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
