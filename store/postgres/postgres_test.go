package postgres_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func claimAll(t *testing.T, d *postgres.Driver, typ string) []*store.OutboxRow {
	t.Helper()
	rows, err := d.OutboxClaim(context.Background(), &store.OutboxClaimParams{EventType: typ, Limit: 1000, LeaseDuration: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// ormTx stands for an ORM transaction (sqlx.Tx, bun.Tx): ExecContext and
// Commit, no pgx or database/sql type.
type ormTx struct{ tx *sql.Tx }

func (o ormTx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return o.tx.ExecContext(ctx, q, args...)
}
func (o ormTx) Commit() error { return o.tx.Commit() }

// execOnly has ExecContext but no Commit: it could be a *sql.DB wrapper,
// which would autocommit.
type execOnly struct{ db *sql.DB }

func (e execOnly) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return e.db.ExecContext(ctx, q, args...)
}

func TestInsertThroughDatabaseSQLAndORM(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	d := open(t)
	db, err := sql.Open("pgx", testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(2)
	t.Cleanup(func() { db.Close() })

	mk := func(typ string) *txbox.Event {
		return &txbox.Event{
			ID:        txbox.NewID(),
			Type:      typ,
			Key:       `k"\{},NULL`,
			Payload:   []byte{0, 1, 2, '\\', '"', 0xff},
			Headers:   map[string]string{`q"`: `a\b`, "u": "名前"},
			NotBefore: time.Now().Add(-time.Second),
		}
	}
	for _, c := range []struct {
		name string
		wrap func(*sql.Tx) any
	}{
		{"*sql.Tx", func(tx *sql.Tx) any { return tx }},
		{"ORM tx", func(tx *sql.Tx) any { return ormTx{tx} }},
	} {
		typ := "std-" + strings.ReplaceAll(strings.Trim(c.name, "*"), " ", "-")
		typ = strings.ReplaceAll(typ, ".", "-")
		// A batch (array statement) and a single event (scalar statement).
		one := mk(typ)
		one.NotBefore = time.Time{}
		evs := []*txbox.Event{mk(typ), mk(typ), {ID: txbox.NewID(), Type: typ}, one}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.OutboxInsert(ctx, c.wrap(tx), &store.OutboxInsertParams{Events: evs[:3], Notify: true}); err != nil {
			t.Fatalf("%s: insert: %v", c.name, err)
		}
		if err := d.OutboxInsert(ctx, c.wrap(tx), &store.OutboxInsertParams{Events: evs[3:], Notify: true}); err != nil {
			t.Fatalf("%s: insert one: %v", c.name, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		rows := claimAll(t, d, typ)
		if len(rows) != len(evs) {
			t.Fatalf("%s: claimed %d, want %d", c.name, len(rows), len(evs))
		}
		for _, r := range rows {
			var want *txbox.Event
			for _, ev := range evs {
				if ev.ID == r.ID {
					want = ev
				}
			}
			if want == nil || r.Key != want.Key || !bytes.Equal(r.Payload, want.Payload) || len(r.Headers) != len(want.Headers) {
				t.Fatalf("%s: row %+v does not round-trip %+v", c.name, r, want)
			}
			for k, v := range want.Headers {
				if r.Headers[k] != v {
					t.Fatalf("%s: header %q = %q, want %q", c.name, k, r.Headers[k], v)
				}
			}
		}
	}

	p := &store.OutboxInsertParams{Events: []*txbox.Event{mk("refused")}}
	for name, tx := range map[string]any{"*sql.DB": db, "pool": d.Pool(), "exec only": execOnly{db}, "nil *sql.Tx": (*sql.Tx)(nil)} {
		if err := d.OutboxInsert(ctx, tx, p); !errors.Is(err, txbox.ErrNoTransaction) {
			t.Errorf("insert through %s: %v, want ErrNoTransaction", name, err)
		}
	}
	var unsupported *txbox.UnsupportedTxError
	if err := d.OutboxInsert(ctx, struct{ X int }{}, p); !errors.As(err, &unsupported) || unsupported.Dialect != "postgres" {
		t.Errorf("insert through a struct: %v, want *txbox.UnsupportedTxError", err)
	}
	if rows := claimAll(t, d, "refused"); len(rows) != 0 {
		t.Fatalf("refused inserts wrote %d rows", len(rows))
	}
}

func TestPlainSQLProducer(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	d := open(t)
	q := `INSERT INTO ` + d.Tables().Schema + `.txbox_outbox (event_type, payload) VALUES ('order-created', '{"id":42}')`
	for range 2 {
		if _, err := d.Pool().Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	rows := claimAll(t, d, "order-created")
	if len(rows) != 2 {
		t.Fatalf("claimed %d plain-SQL rows, want 2", len(rows))
	}
	for _, r := range rows {
		if r.ID.Version() != 7 || string(r.Payload) != `{"id":42}` || r.Attempts != 0 || len(r.Headers) != 0 {
			t.Fatalf("plain-SQL row %+v: want a UUIDv7 id and defaults", r)
		}
	}
	if bytes.Compare(rows[0].ID[:], rows[1].ID[:]) >= 0 {
		t.Fatal("SQL-generated ids are not increasing")
	}
	// The table rejects a hostile event type from plain SQL too.
	_, err := d.Pool().Exec(ctx, `INSERT INTO `+d.Tables().Schema+`.txbox_outbox (event_type, payload) VALUES ($1, '')`, `x"; DROP TABLE t;--`)
	if err == nil {
		t.Fatal("a hostile event type passed the table's check constraint")
	}
}

func TestSchemaVersionAndMigrationFiles(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	d := open(t)
	migs, err := postgres.Migrations("", "")
	if err != nil {
		t.Fatal(err)
	}
	v, err := d.SchemaVersion(ctx)
	if err != nil || len(migs) < 3 || v != len(migs) {
		t.Fatalf("schema version = %d, %v, %d migrations; want the last migration, at least 3", v, err, len(migs))
	}
	// `txbox migrate get` writes the rendered default for goose /
	// golang-migrate users: every step with its revert, no placeholder
	// left (TestPlainMigrationsUpDown applies them).
	dir := writeMigrations(t, "")
	for _, m := range migs {
		for _, f := range []struct{ suffix, want string }{{".up.sql", m.SQL}, {".down.sql", m.Down}} {
			path := filepath.Join(dir, pad(m.Version)+"_"+m.Name+f.suffix)
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != f.want || strings.TrimSpace(f.want) == "" {
				t.Fatalf("%s is not migration %d's %s", path, m.Version, f.suffix)
			}
			if strings.Contains(f.want, "{{") || strings.Contains(f.want, "txbox:restore") {
				t.Fatalf("unrendered placeholder in %s", path)
			}
		}
	}
	if _, err := postgres.Migrations(`x"; DROP TABLE t;--`, ""); !errors.Is(err, txbox.ErrInvalidIdentifier) {
		t.Fatalf("hostile schema: %v", err)
	}
	if _, err := postgres.New(d.Pool(), postgres.Config{Schema: "bad schema"}); !errors.Is(err, txbox.ErrInvalidIdentifier) {
		t.Fatalf("hostile schema in New: %v", err)
	}
	// A database migrated by a newer build is refused, not downgraded.
	if _, err := d.Pool().Exec(ctx, `INSERT INTO `+d.Tables().Schema+`.txbox_schema_version (version, name) VALUES (99, 'future')`); err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("migrate on a newer schema: %v, want an error saying it is newer", err)
	}
	// A driver on a schema nobody migrated reports it clearly.
	bare, err := postgres.New(d.Pool(), postgres.Config{Schema: "txbox_never_migrated_x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bare.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "x", Limit: 1, LeaseDuration: time.Second}); !errors.Is(err, postgres.ErrNotMigrated) {
		t.Fatalf("claim on an unmigrated schema: %v, want ErrNotMigrated", err)
	}
}

func pad(v int) string { return fmt.Sprintf("%04d", v) }

func TestListenWakesOnCommitOnly(t *testing.T) {
	t.Parallel()
	// Its waits are 20s each, longer than ctxT's minute together: once the
	// listener's context ended, nothing woke the last wait (seen once on a
	// loaded machine, hung until the package's timeout).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	d := open(t)
	wakes := make(chan string, 100)
	lctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.OutboxListen(lctx, func(typ string) { wakes <- typ }) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("OutboxListen returned %v, want context.Canceled", err)
		}
	})

	publish := func(typ string, commit bool) func() {
		tx, err := d.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{{ID: txbox.NewID(), Type: typ}}, Notify: true}); err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			return nil
		}
		// Should the test fail before committing, the open transaction
		// would keep its connection and the pool's Close would wait for
		// it forever; cleanups run last-in first-out, so this one runs
		// before the pool closes.
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		return func() {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// waitFor publishes pings until the listener hears one: it proves the
	// LISTEN is in place without guessing how long connecting takes.
	waitFor := func(ping string) {
		t.Helper()
		end := time.After(20 * time.Second)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		publish(ping, true)
		for {
			select {
			case typ := <-wakes:
				if typ == ping {
					return
				}
			case <-tick.C:
				publish(ping, true)
			case <-end:
				t.Fatalf("no wake-up for %s", ping)
			}
		}
	}
	waitFor("ping")
	drain := func() {
		for {
			select {
			case <-wakes:
			default:
				return
			}
		}
	}
	drain()
	commitFirst := publish("first", false)
	publish("second", true)
	// Pings published by waitFor may still be on their way (drain only
	// takes what has arrived): skip them, never a wake-up for "first".
	deadline := time.After(20 * time.Second)
	for heard := false; !heard; {
		select {
		case typ := <-wakes:
			switch typ {
			case "ping":
			case "second":
				heard = true
			default:
				t.Fatalf("woke for %q before its transaction committed", typ)
			}
		case <-deadline:
			t.Fatal("no wake-up for a committed publish")
		}
	}
	commitFirst()
	select {
	case typ := <-wakes:
		if typ != "first" {
			t.Fatalf("woke for %q, want first", typ)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no wake-up after the commit")
	}

	// A large batch (the COPY path) notifies too, once per type.
	drain()
	bulk := make([]*txbox.Event, 64)
	for i := range bulk {
		bulk[i] = &txbox.Event{ID: txbox.NewID(), Type: "bulk"}
	}
	tx, err := d.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: bulk, Notify: true}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case typ := <-wakes:
		if typ != "bulk" {
			t.Fatalf("woke for %q, want bulk", typ)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no wake-up for a large batch")
	}

	// Kill the listener's connection: it reconnects and hears again.
	var killed int
	err = d.Pool().QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE query LIKE 'LISTEN %' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()`, d.NotifyChannel()).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminated %d listener connections (%v), want 1", killed, err)
	}
	waitFor("after-reconnect")

	// Without Notify nothing is signalled.
	drain()
	tx, err = d.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{{ID: txbox.NewID(), Type: "silent"}}}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The marker comes after the silent insert's commit: had that insert
	// notified, its wake-up would arrive first. Markers are published
	// until one is heard, as waitFor does.
	publish("marker", true)
	end := time.After(20 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for heard := false; !heard; {
		select {
		case typ := <-wakes:
			if typ == "silent" {
				t.Fatal("an insert without Notify woke the relay")
			}
			heard = typ == "marker"
		case <-tick.C:
			publish("marker", true)
		case <-end:
			t.Fatal("no wake-up for the marker")
		}
	}
}

// Batches of 32 and more through a pgx transaction take the COPY path;
// smaller ones, and any batch with a not-before time, the INSERT path. All
// must store the same rows.
func TestInsertPathsAgree(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	d := open(t)
	insert := func(evs []*txbox.Event) error {
		tx, err := d.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: evs, Notify: true}); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	mk := func(typ string, n int, notBefore bool) []*txbox.Event {
		evs := make([]*txbox.Event, n)
		for i := range evs {
			evs[i] = &txbox.Event{ID: txbox.NewID(), Type: typ, Payload: []byte{byte(i), 0}, Headers: map[string]string{"i": fmt.Sprint(i)}}
			if i%2 == 0 {
				evs[i].Key = fmt.Sprint("k", i)
			}
		}
		if notBefore {
			evs[0].NotBefore = time.Now().Add(-time.Hour)
		}
		return evs
	}
	for _, c := range []struct {
		typ       string
		n         int
		notBefore bool
	}{{"copy", 64, false}, {"unnest", 64, true}, {"small", 5, false}, {"one", 1, false}} {
		evs := mk(c.typ, c.n, c.notBefore)
		if err := insert(evs); err != nil {
			t.Fatalf("%s: %v", c.typ, err)
		}
		rows := claimAll(t, d, c.typ)
		if len(rows) != c.n {
			t.Fatalf("%s: claimed %d, want %d", c.typ, len(rows), c.n)
		}
		byID := map[txbox.ID]*store.OutboxRow{}
		for _, r := range rows {
			byID[r.ID] = r
		}
		for _, ev := range evs {
			r := byID[ev.ID]
			if r == nil || r.Key != ev.Key || !bytes.Equal(r.Payload, ev.Payload) || r.Headers["i"] != ev.Headers["i"] {
				t.Fatalf("%s: row %+v does not match %+v", c.typ, r, ev)
			}
		}
		// Keyless events store NULL, not '', on every path: ordering
		// treats NULL as "no key".
		var empty int
		if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM `+d.Tables().Schema+`.txbox_outbox WHERE event_key = ''`).Scan(&empty); err != nil || empty != 0 {
			t.Fatalf("%s: %d rows with an empty key (%v)", c.typ, empty, err)
		}
		// A duplicate id fails the whole batch with ErrDuplicateID.
		dup := mk(c.typ, c.n, c.notBefore)
		dup[len(dup)-1].ID = evs[0].ID
		if err := insert(dup); !errors.Is(err, postgres.ErrDuplicateID) {
			t.Fatalf("%s: duplicate id: %v, want ErrDuplicateID", c.typ, err)
		}
		if rows := claimAll(t, d, c.typ); len(rows) != 0 {
			t.Fatalf("%s: a failed batch left %d rows", c.typ, len(rows))
		}
	}
}

// TestDeadLetterRetryWakes: a retry sends the listening relay a wake-up
// for each retried type, so that `txbox dlq retry`, another process, is
// delivered at once rather than at the relay's next poll.
func TestDeadLetterRetryWakes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	d := open(t)
	wakes := make(chan string, 100)
	lctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.OutboxListen(lctx, func(typ string) { wakes <- typ }) }()
	t.Cleanup(func() { stop(); <-done })

	// Two dead letters of one type, one of another.
	insert := func(ev *txbox.Event, notify bool) {
		t.Helper()
		tx, err := d.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{ev}, Notify: notify}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var ids []txbox.ID
	for _, typ := range []string{"retry-a", "retry-a", "retry-b"} {
		ev := &txbox.Event{ID: txbox.NewID(), Type: typ}
		insert(ev, false)
		rows, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: typ, Limit: 1, LeaseDuration: time.Minute})
		if err != nil || len(rows) != 1 {
			t.Fatalf("claim %s: %d rows, %v", typ, len(rows), err)
		}
		item := store.OutboxFinishItem{ID: rows[0].ID, LeaseToken: rows[0].LeaseToken, Outcome: store.OutcomeFailed, Error: "no"}
		if _, err := d.OutboxFinish(ctx, &store.OutboxFinishParams{Items: []store.OutboxFinishItem{item}}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ev.ID)
	}
	if n, err := d.DeadLetterMove(ctx, &store.DeadLetterMoveParams{Limit: 10}); err != nil || n != 3 {
		t.Fatalf("dead-letter move: %d, %v", n, err)
	}
	// The listener is in place once a notifying publish reaches it.
	for ready := false; !ready; {
		insert(&txbox.Event{ID: txbox.NewID(), Type: "retry-ping"}, true)
		select {
		case typ := <-wakes:
			ready = typ == "retry-ping"
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("the listener never heard a publish")
		}
	}
	for len(wakes) > 0 {
		<-wakes
	}

	if n, err := d.DeadLetterRetry(ctx, ids); err != nil || n != 3 {
		t.Fatalf("retry: %d, %v", n, err)
	}
	got := map[string]bool{}
	for !got["retry-a"] || !got["retry-b"] {
		select {
		case typ := <-wakes:
			got[typ] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("wake-ups after the retry: %v, want retry-a and retry-b", got)
		}
	}
}
