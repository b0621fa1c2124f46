package mysql

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
)

func openSQL(dsn string) (*sql.DB, error) { return sql.Open("mysql", dsn) }

// newDatabase creates a fresh database and returns its name and a DSN.
func newDatabase(t testing.TB) (name, dsn string) {
	t.Helper()
	return testenv.MySQLDatabase(t, openSQL, "")
}

// setup returns a migrated driver opened with Open on a fresh database.
func setup(t testing.TB) *Driver {
	t.Helper()
	d, _ := setupDSN(t)
	return d
}

// setupDSN is setup that also returns the database's DSN.
func setupDSN(t testing.TB) (*Driver, string) {
	t.Helper()
	_, dsn := newDatabase(t)
	d, err := Open(dsn, Config{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return d, dsn
}

// publish inserts events in one committed transaction and returns them.
func publish(t testing.TB, d *Driver, events ...*txbox.Event) []*txbox.Event {
	t.Helper()
	ctx := context.Background()
	for _, ev := range events {
		if ev.ID == (txbox.ID{}) {
			ev.ID = txbox.NewID()
		}
	}
	tx, err := d.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: events}); err != nil {
		tx.Rollback()
		t.Fatalf("OutboxInsert: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return events
}

// claimN claims up to limit rows of typ with a minute's lease and fails t
// unless it got want.
func claimN(t testing.TB, d *Driver, typ string, limit, want int) []*store.OutboxRow {
	t.Helper()
	rows, err := d.OutboxClaim(context.Background(), &store.OutboxClaimParams{EventType: typ, Limit: limit, LeaseDuration: time.Minute})
	if err != nil || len(rows) != want {
		t.Fatalf("claim of %s: %d rows, %v; want %d", typ, len(rows), err, want)
	}
	return rows
}

// events makes n events of one type with small distinct payloads.
func events(typ string, n int) []*txbox.Event {
	out := make([]*txbox.Event, n)
	for i := range out {
		out[i] = &txbox.Event{ID: txbox.NewID(), Type: typ, Payload: []byte{byte(i), byte(i >> 8)}}
	}
	return out
}

// statusOf reads one row's status and attempts straight from the table.
func statusOf(t testing.TB, d *Driver, id txbox.ID) (status string, attempts int) {
	t.Helper()
	err := d.DB().QueryRow("SELECT status, attempts FROM "+d.qOutbox+" WHERE id = ?", id.String()).Scan(&status, &attempts)
	if err == sql.ErrNoRows {
		return "", 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return status, attempts
}

// testenvDSNWithoutDatabase is the server's DSN naming no database.
func testenvDSNWithoutDatabase() string { return testenv.MySQLDSN }
