package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// TestParkedWatch: one connection watches three parked tenants' schemas.
// A notification wakes its tenant at once; a row inserted without one
// (plain SQL, no trigger) wakes it at the next sweep; a row due in an
// hour wakes nobody; an unwatched tenant is not woken; a schema dropped
// under the watch wakes its tenant (whose relay then reports it) while
// the others are still swept; a killed connection is replaced and its
// LISTENs restored.
func TestParkedWatch(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := storeharness.PostgresAdmin(t)
	drivers := map[string]*postgres.Driver{}
	for _, k := range []string{"a", "b", "c"} {
		drivers[k] = storeharness.PostgresDriver(t)
	}
	cc, err := pgx.ParseConfig(testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	app := fmt.Sprintf("txbox-parked-test-%d", time.Now().UnixNano())
	cc.RuntimeParams["application_name"] = app
	wakes := make(chan string, 1000)
	w, err := postgres.NewParkedWatch(postgres.ParkedWatchConfig{ConnConfig: cc, Interval: time.Second, Wake: func(k string) { wakes <- k }})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()
	defer func() { stop(); <-done }()
	for k, d := range drivers {
		pt := postgres.ParkedTables{Key: k, Schema: d.Tables().Schema, Cleanup: true, OutboxTTL: time.Hour, DeadLetterTTL: time.Hour, AuditTTL: time.Hour}
		if err := w.Watch(ctx, pt); err != nil {
			t.Fatalf("watch %s: %v", k, err)
		}
	}
	if n := w.Watched(); n != 3 {
		t.Fatalf("Watched() = %d, want 3", n)
	}
	expectNoWake(t, wakes, 2500*time.Millisecond, "empty tables")

	publish(t, ctx, drivers["b"])
	expectWake(t, wakes, "b", 900*time.Millisecond, "notification") // well before a sweep could
	exec(t, ctx, admin, fmt.Sprintf(`DELETE FROM %q.txbox_outbox`, drivers["b"].Tables().Schema))
	drain(wakes)

	// An hour ahead: outside the sweep's horizon. Then a row without a
	// notification, due now.
	exec(t, ctx, admin, fmt.Sprintf(`INSERT INTO %q.txbox_outbox (event_type, payload, due_at) VALUES ('later', '\x00', now() + interval '1 hour')`, drivers["a"].Tables().Schema))
	expectNoWake(t, wakes, 2500*time.Millisecond, "a row due in an hour")
	exec(t, ctx, admin, fmt.Sprintf(`INSERT INTO %q.txbox_outbox (event_type, payload) VALUES ('plain', '\x00')`, drivers["c"].Tables().Schema))
	expectWake(t, wakes, "c", 3*time.Second, "sweep")
	exec(t, ctx, admin, fmt.Sprintf(`DELETE FROM %q.txbox_outbox`, drivers["c"].Tables().Schema))
	drain(wakes)

	w.Unwatch("b")
	publish(t, ctx, drivers["b"])
	exec(t, ctx, admin, fmt.Sprintf(`DELETE FROM %q.txbox_outbox`, drivers["b"].Tables().Schema))
	expectNoWake(t, wakes, 2500*time.Millisecond, "an unwatched tenant")

	exec(t, ctx, admin, fmt.Sprintf(`ALTER TABLE %q.txbox_outbox RENAME TO gone`, drivers["c"].Tables().Schema))
	exec(t, ctx, admin, fmt.Sprintf(`UPDATE %q.txbox_outbox SET due_at = now()`, drivers["a"].Tables().Schema))
	got := map[string]bool{}
	deadline := time.After(5 * time.Second)
	for !got["a"] || !got["c"] {
		select {
		case k := <-wakes:
			got[k] = true
		case <-deadline:
			t.Fatalf("after c's table went and a's row fell due, the sweeps woke %v, want a and c", got)
		}
	}
	exec(t, ctx, admin, fmt.Sprintf(`ALTER TABLE %q.gone RENAME TO txbox_outbox`, drivers["c"].Tables().Schema))
	exec(t, ctx, admin, fmt.Sprintf(`DELETE FROM %q.txbox_outbox`, drivers["a"].Tables().Schema))
	drain(wakes)
	if e := w.Err(); e != "" {
		t.Fatalf("Err() = %q after sweeps that ran", e)
	}

	exec(t, ctx, admin, fmt.Sprintf(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '%s'`, app))
	testenv.WaitFor(t, 10*time.Second, "the watch to reconnect", func() bool {
		var n int
		err := admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n)
		return err == nil && n == 1 && w.Err() == ""
	})
	drain(wakes)
	publish(t, ctx, drivers["a"])
	expectWake(t, wakes, "a", 900*time.Millisecond, "notification after a reconnect")
}

func publish(t *testing.T, ctx context.Context, d *postgres.Driver) {
	t.Helper()
	tx, err := d.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	ev := &txbox.Event{ID: txbox.NewID(), Type: "parked.test"}
	if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{ev}, Notify: true}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

func exec(t *testing.T, ctx context.Context, db *sql.DB, q string) {
	t.Helper()
	if _, err := db.ExecContext(ctx, q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func expectWake(t *testing.T, wakes <-chan string, want string, within time.Duration, why string) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case k := <-wakes:
			if k == want {
				return
			}
			t.Fatalf("%s: woke %s, want %s", why, k, want)
		case <-deadline:
			t.Fatalf("%s: %s not woken within %s", why, want, within)
		}
	}
}

func expectNoWake(t *testing.T, wakes <-chan string, for_ time.Duration, why string) {
	t.Helper()
	select {
	case k := <-wakes:
		t.Fatalf("%s: woke %s", why, k)
	case <-time.After(for_):
	}
}

func drain(wakes <-chan string) {
	for {
		select {
		case <-wakes:
		default:
			return
		}
	}
}
