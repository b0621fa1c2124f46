package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
)

// bundle is what most tests need: a migrated driver on its own file.
type bundle struct {
	d    *Driver
	path string
}

func setup(t testing.TB) *bundle {
	t.Helper()
	path := filepath.Join(t.TempDir(), "txbox.db")
	d := openDriver(t, path, "")
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return &bundle{d: d, path: path}
}

func openDriver(t testing.TB, path, prefix string) *Driver {
	t.Helper()
	d, err := Open(path, Config{TablePrefix: prefix})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func newEvent(typ, key string) *txbox.Event {
	id := txbox.NewID()
	return &txbox.Event{ID: id, Type: typ, Key: key, Payload: []byte("payload-" + id.String()), Headers: map[string]string{"h": "v"}}
}

// publish inserts events in one committed transaction.
func publish(t testing.TB, d *Driver, events ...*txbox.Event) {
	t.Helper()
	ctx := context.Background()
	tx, err := d.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: events}); err != nil {
		tx.Rollback()
		t.Fatalf("insert: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

func claim(t testing.TB, d *Driver, typ string, limit int, lease time.Duration, ordered bool) []*store.OutboxRow {
	t.Helper()
	rows, err := d.OutboxClaim(context.Background(), &store.OutboxClaimParams{EventType: typ, Limit: limit, LeaseDuration: lease, OrderedByKey: ordered})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return rows
}

func finish(t testing.TB, d *Driver, outcome store.Outcome, retryAfter time.Duration, rows ...*store.OutboxRow) *store.OutboxFinishResult {
	t.Helper()
	items := make([]store.OutboxFinishItem, len(rows))
	for i, r := range rows {
		items[i] = store.OutboxFinishItem{ID: r.ID, LeaseToken: r.LeaseToken, Outcome: outcome, RetryAfter: retryAfter, Error: "boom"}
	}
	res, err := d.OutboxFinish(context.Background(), &store.OutboxFinishParams{Items: items})
	if err != nil {
		t.Fatalf("finish: %v", err)
	}
	return res
}

func ids(rows []*store.OutboxRow) []txbox.ID {
	out := make([]txbox.ID, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

// status reads one row's status and attempts straight from the table.
func status(t testing.TB, d *Driver, id txbox.ID) (string, int) {
	t.Helper()
	var s string
	var a int
	err := d.DB().QueryRow(`SELECT status, attempts FROM `+quote(d.tables.Outbox)+` WHERE id = ?`, id.String()).Scan(&s, &a)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0
	}
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	return s, a
}

func TestOpenRejectsBadConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, prefix := range []string{`x"; DROP TABLE t;--`, "a`b", "1abc", "préfixe", string(make([]byte, 300))} {
		if _, err := Open(filepath.Join(dir, "x.db"), Config{TablePrefix: prefix}); !errors.Is(err, txbox.ErrInvalidIdentifier) {
			t.Errorf("prefix %q: got %v, want ErrInvalidIdentifier", prefix, err)
		}
	}
	for _, p := range []string{"", ":memory:", "file:x.db?mode=memory", "app.db?_pragma=query_only(1)"} {
		if _, err := Open(p, Config{}); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("path %q: got %v, want ErrInvalidConfig", p, err)
		}
	}
	if _, err := Open(filepath.Join(dir, "x.db"), Config{BusyTimeout: -time.Second}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("negative busy timeout: got %v", err)
	}
	if _, err := New(nil, Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("New(nil): got %v", err)
	}
}

func TestPathIsNotADSN(t *testing.T) {
	t.Parallel()
	// Characters that mean something in a URI stay part of the name.
	path := filepath.Join(t.TempDir(), "odd #1 100% & x=y.db")
	d := openDriver(t, path, "")
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate on %q: %v", path, err)
	}
	var mode string
	if err := d.DB().QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v; want wal", mode, err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the database file is not at the path given: %v", err)
	}
	var sync, fk, busy int
	if err := d.DB().QueryRow(`SELECT * FROM pragma_synchronous, pragma_foreign_keys, pragma_busy_timeout`).Scan(&sync, &fk, &busy); err != nil {
		t.Fatal(err)
	}
	if sync != 1 || fk != 0 || busy != int(DefaultBusyTimeout.Milliseconds()) {
		t.Fatalf("synchronous=%d foreign_keys=%d busy_timeout=%d; want 1 (NORMAL), 0, %d", sync, fk, busy, DefaultBusyTimeout.Milliseconds())
	}
}

func TestMigrateConcurrentAndIdempotent(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "txbox.db")
	drivers := []*Driver{openDriver(t, path, "app_"), openDriver(t, path, "app_"), openDriver(t, path, "app_")}
	var wg sync.WaitGroup
	errs := make([]error, len(drivers))
	for i, d := range drivers {
		wg.Go(func() { errs[i] = d.Migrate(context.Background()) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("migrate %d: %v", i, err)
		}
	}
	if err := drivers[0].Migrate(context.Background()); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
	// One row per migration: the versions run from 1 with no gap.
	latest := drivers[0].LatestSchemaVersion()
	var n int
	if err := drivers[0].DB().QueryRow(`SELECT count(*) FROM app_schema_version`).Scan(&n); err != nil || n != latest {
		t.Fatalf("schema_version rows = %d, %v; want %d", n, err, latest)
	}
	v, err := drivers[1].SchemaVersion(context.Background())
	if err != nil || v != latest {
		t.Fatalf("SchemaVersion = %d, %v", v, err)
	}
	got := tableNames(t, drivers[0].DB())
	want := []string{"app_audit", "app_dead_letter", "app_inbox", "app_instance", "app_lease", "app_outbox", "app_schema_version"}
	if !slices.Equal(got, want) {
		t.Fatalf("tables = %v, want %v", got, want)
	}
}

func tableNames(t testing.TB, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query(`SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

func TestPublishCommitAndRollback(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	rolled := newEvent("orders", "")
	tx, err := b.d.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{rolled}}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if rows := claim(t, b.d, "orders", 10, time.Minute, false); len(rows) != 0 {
		t.Fatalf("rolled-back event claimed: %v", ids(rows))
	}

	e := newEvent("orders", "k1")
	e.Headers = map[string]string{"a": "1", "traceparent": "00-abc"}
	before := time.Now().Add(-time.Second)
	publish(t, b.d, e)
	rows := claim(t, b.d, "orders", 10, time.Minute, false)
	if len(rows) != 1 {
		t.Fatalf("claimed %d rows, want 1", len(rows))
	}
	r := rows[0]
	if r.ID != e.ID || r.EventType != "orders" || r.Key != "k1" || string(r.Payload) != string(e.Payload) ||
		r.Headers["a"] != "1" || r.Headers["traceparent"] != "00-abc" || len(r.Headers) != 2 || r.Attempts != 0 {
		t.Fatalf("claimed row %+v does not match event %+v", r, e)
	}
	if r.CreatedAt.Before(before) || r.CreatedAt.After(time.Now().Add(time.Second)) {
		t.Fatalf("created_at %s is not around now", r.CreatedAt)
	}
	if r.LeaseToken == (txbox.ID{}) {
		t.Fatal("no lease token")
	}
	if s, _ := status(t, b.d, e.ID); s != store.StatusInProcess {
		t.Fatalf("status %q, want IN_PROCESS", s)
	}
	if rows := claim(t, b.d, "orders", 10, time.Minute, false); len(rows) != 0 {
		t.Fatalf("claimed twice: %v", ids(rows))
	}
}

// ormTx stands for an ORM's transaction: ExecContext and Commit.
type ormTx struct{ tx *sql.Tx }

func (o ormTx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return o.tx.ExecContext(ctx, q, args...)
}
func (o ormTx) Commit() error { return o.tx.Commit() }

func TestInsertTransactionTypes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	params := func() *store.OutboxInsertParams {
		return &store.OutboxInsertParams{Events: []*txbox.Event{newEvent("t", "")}}
	}
	var nilTx *sql.Tx
	conn, err := b.d.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for name, tx := range map[string]any{"nil": nil, "nil *sql.Tx": nilTx, "*sql.DB": b.d.DB()} {
		if err := b.d.OutboxInsert(ctx, tx, params()); !errors.Is(err, txbox.ErrNoTransaction) {
			t.Errorf("%s: got %v, want ErrNoTransaction", name, err)
		}
	}
	for name, tx := range map[string]any{"*sql.Conn": conn, "string": "tx", "int": 1} {
		err := b.d.OutboxInsert(ctx, tx, params())
		var ute *txbox.UnsupportedTxError
		if !errors.As(err, &ute) || !errors.Is(err, txbox.ErrNoTransaction) {
			t.Errorf("%s: got %v, want *UnsupportedTxError", name, err)
		}
	}

	done, err := b.d.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	done.Commit()
	if err := b.d.OutboxInsert(ctx, done, params()); !errors.Is(err, txbox.ErrNoTransaction) {
		t.Errorf("committed tx: got %v, want ErrNoTransaction", err)
	}

	sqltx, err := b.d.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := params()
	if err := b.d.OutboxInsert(ctx, ormTx{sqltx}, p); err != nil {
		t.Fatalf("ORM tx: %v", err)
	}
	if err := sqltx.Commit(); err != nil {
		t.Fatal(err)
	}
	if rows := claim(t, b.d, "t", 10, time.Minute, false); len(rows) != 1 || rows[0].ID != p.Events[0].ID {
		t.Fatalf("ORM-tx event not claimable: %v", ids(rows))
	}

	// Bad params are typed errors, not panics.
	tx, _ := b.d.DB().BeginTx(ctx, nil)
	defer tx.Rollback()
	for name, p := range map[string]*store.OutboxInsertParams{
		"nil params": nil,
		"nil event":  {Events: []*txbox.Event{nil}},
		"zero id":    {Events: []*txbox.Event{{Type: "t"}}},
	} {
		if err := b.d.OutboxInsert(ctx, tx, p); !errors.Is(err, ErrInvalidParams) {
			t.Errorf("%s: got %v, want ErrInvalidParams", name, err)
		}
	}
}

func TestBatchInsertChunksAndClaimOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 1234 // three INSERT statements
	events := make([]*txbox.Event, n)
	for i := range events {
		events[i] = newEvent("batch", "")
		if i%3 == 0 {
			events[i].Payload = nil
			events[i].Headers = nil
		}
	}
	publish(t, b.d, events...)
	var got []txbox.ID
	for {
		rows := claim(t, b.d, "batch", 500, time.Minute, false)
		if len(rows) == 0 {
			break
		}
		if len(rows) > 500 {
			t.Fatalf("claim returned %d > limit", len(rows))
		}
		got = append(got, ids(rows)...)
		for _, r := range rows {
			if r.Payload == nil || r.Headers == nil {
				t.Fatalf("nil payload or headers on %s", r.ID)
			}
		}
	}
	if len(got) != n {
		t.Fatalf("claimed %d, want %d", len(got), n)
	}
	// All rows were due at (nearly) the same instant: within one claim and
	// across claims the order must be (due_at, id), and ids are time
	// ordered, so got must equal the ids sorted by due_at then id.
	var want []txbox.ID
	rows, err := b.d.DB().Query(`SELECT id FROM txbox_outbox ORDER BY due_at, id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		rows.Scan(&s)
		id, _ := txbox.ParseID(s)
		want = append(want, id)
	}
	rows.Close()
	if !slices.Equal(got, want) {
		t.Fatal("claims did not return rows in (due_at, id) order")
	}
}

func TestClaimOrderFollowsDueAt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Inserted first but due later: must come after.
	late := newEvent("due", "")
	late.NotBefore = time.Now().Add(time.Second)
	early := []*txbox.Event{newEvent("due", ""), newEvent("due", "")}
	publish(t, b.d, late)
	publish(t, b.d, early...)
	rows := claim(t, b.d, "due", 10, time.Minute, false)
	// Asserted only when the clock proves the claim ran before NotBefore:
	// on a loaded machine publishing may take longer than any margin.
	if time.Now().Before(late.NotBefore) {
		if len(rows) != 2 || rows[0].ID != early[0].ID || rows[1].ID != early[1].ID {
			t.Fatalf("before NotBefore: claimed %v, want %v", ids(rows), []txbox.ID{early[0].ID, early[1].ID})
		}
	} else {
		// Too late to see the window: all three are due, and claimed.
		if got := ids(rows); len(got) != 3 || !slices.Contains(got, late.ID) || !slices.Contains(got, early[0].ID) || !slices.Contains(got, early[1].ID) {
			t.Fatalf("after NotBefore: claimed %v, want the three events", got)
		}
		return
	}
	testenv.WaitFor(t, 5*time.Second, "the delayed event to become due", func() bool {
		rows = claim(t, b.d, "due", 10, time.Minute, false)
		return len(rows) > 0
	})
	if len(rows) != 1 || rows[0].ID != late.ID {
		t.Fatalf("after NotBefore: claimed %v, want %s", ids(rows), late.ID)
	}
}

func TestClaimValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for name, p := range map[string]*store.OutboxClaimParams{
		"nil":       nil,
		"limit 0":   {EventType: "t", Limit: 0, LeaseDuration: time.Minute},
		"no lease":  {EventType: "t", Limit: 1},
		"bad type":  {EventType: `x"; DROP TABLE txbox_outbox;--`, Limit: 1, LeaseDuration: time.Minute},
		"neg lease": {EventType: "t", Limit: 1, LeaseDuration: -time.Second},
	} {
		if _, err := b.d.OutboxClaim(ctx, p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	var ite *txbox.InvalidEventTypeError
	if _, err := b.d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "a b", Limit: 1, LeaseDuration: time.Second}); !errors.As(err, &ite) {
		t.Errorf("bad type: got %v, want *InvalidEventTypeError", err)
	}
	if got := tableNames(t, b.d.DB()); len(got) != 7 {
		t.Fatalf("tables changed: %v", got)
	}
}

// TestConcurrentClaimExclusive runs 8 claiming goroutines on one Driver and
// 2 on a second Driver on the same file (another process, as far as SQLite
// is concerned), while 4 goroutines keep publishing. Every event must be
// claimed exactly once and no call may fail with SQLITE_BUSY.
func TestConcurrentClaimExclusive(t *testing.T) {
	t.Parallel()
	// Two Drivers in one process: SQLite's busy handler is not fair
	// between their pools, and on a loaded machine a claim waited past the
	// default 10s busy timeout. Exclusivity, not the wait, is under test.
	patient := func(path string) *Driver {
		d, err := Open(path, Config{BusyTimeout: 2 * time.Minute})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	b := &bundle{path: filepath.Join(t.TempDir(), "txbox.db")}
	b.d = patient(b.path)
	if err := b.d.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	other := patient(b.path)
	const publishers, perPublisher, batch = 4, 300, 20
	total := publishers * perPublisher

	var (
		mu      sync.Mutex
		seen    = map[txbox.ID]int{}
		pubWG   sync.WaitGroup
		claimWG sync.WaitGroup
		errs    = make(chan error, 64)
		pubDone = make(chan struct{})
	)
	for p := 0; p < publishers; p++ {
		pubWG.Go(func() {
			for i := 0; i < perPublisher; i += 3 {
				ctx := context.Background()
				tx, err := b.d.DB().BeginTx(ctx, nil)
				if err != nil {
					errs <- err
					return
				}
				evs := []*txbox.Event{newEvent("race", ""), newEvent("race", ""), newEvent("race", "")}
				if err := b.d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: evs}); err != nil {
					tx.Rollback()
					errs <- err
					return
				}
				if err := tx.Commit(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	go func() { pubWG.Wait(); close(pubDone) }()

	claimer := func(d *Driver) {
		ctx := context.Background()
		for {
			rows, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "race", Limit: batch, LeaseDuration: time.Minute})
			if err != nil {
				errs <- err
				return
			}
			if len(rows) == 0 {
				select {
				case <-pubDone:
					// Publishers are done; one more empty claim after
					// that means the table is drained.
					rows, err = d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "race", Limit: batch, LeaseDuration: time.Minute})
					if err != nil {
						errs <- err
						return
					}
					if len(rows) == 0 {
						return
					}
				default:
					time.Sleep(time.Millisecond) // idle poll
					continue
				}
			}
			mu.Lock()
			for _, r := range rows {
				seen[r.ID]++
			}
			mu.Unlock()
			items := make([]store.OutboxFinishItem, len(rows))
			for i, r := range rows {
				items[i] = store.OutboxFinishItem{ID: r.ID, LeaseToken: r.LeaseToken, Outcome: store.OutcomeAcked}
			}
			res, err := d.OutboxFinish(ctx, &store.OutboxFinishParams{Items: items, DeleteAcked: len(rows)%2 == 0})
			if err != nil {
				errs <- err
				return
			}
			if res.Finished != len(rows) || res.Fenced != 0 {
				errs <- fmt.Errorf("finish: %+v for %d rows", res, len(rows))
				return
			}
		}
	}
	for i := 0; i < 8; i++ {
		claimWG.Go(func() { claimer(b.d) })
	}
	for i := 0; i < 2; i++ {
		claimWG.Go(func() { claimer(other) })
	}
	claimWG.Wait()
	<-pubDone
	close(errs)
	for err := range errs {
		t.Errorf("concurrent call failed: %v", err)
	}
	if len(seen) != total {
		t.Fatalf("claimed %d distinct events, want %d", len(seen), total)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("event %s claimed %d times", id, n)
		}
	}
}

func TestFinishOutcomesAndFencing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	evs := []*txbox.Event{newEvent("f", ""), newEvent("f", ""), newEvent("f", ""), newEvent("f", "")}
	publish(t, b.d, evs...)
	rows := claim(t, b.d, "f", 10, time.Minute, false)
	if len(rows) != 4 {
		t.Fatalf("claimed %d", len(rows))
	}
	tok := rows[0].LeaseToken
	res, err := b.d.OutboxFinish(ctx, &store.OutboxFinishParams{Items: []store.OutboxFinishItem{
		{ID: rows[0].ID, LeaseToken: tok, Outcome: store.OutcomeAcked},
		{ID: rows[1].ID, LeaseToken: tok, Outcome: store.OutcomeRetry, RetryAfter: time.Hour, Error: "rejected: 422"},
		{ID: rows[2].ID, LeaseToken: tok, Outcome: store.OutcomeFailed, Error: "poison"},
		{ID: rows[3].ID, LeaseToken: tok, Outcome: store.OutcomeReleased},
		{ID: txbox.NewID(), LeaseToken: tok, Outcome: store.OutcomeAcked},         // unknown row
		{ID: rows[0].ID, LeaseToken: txbox.NewID(), Outcome: store.OutcomeFailed}, // wrong token
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Finished != 4 || res.Fenced != 2 {
		t.Fatalf("result %+v, want 4 finished, 2 fenced", res)
	}
	check := func(i int, wantStatus string, wantAttempts int) {
		t.Helper()
		s, a := status(t, b.d, rows[i].ID)
		if s != wantStatus || a != wantAttempts {
			t.Fatalf("row %d: %s/%d, want %s/%d", i, s, a, wantStatus, wantAttempts)
		}
	}
	check(0, store.StatusProcessed, 0)
	check(1, store.StatusPending, 1)
	check(2, store.StatusFailed, 1)
	check(3, store.StatusPending, 0)
	var lastErr string
	b.d.DB().QueryRow(`SELECT last_error FROM txbox_outbox WHERE id = ?`, rows[1].ID.String()).Scan(&lastErr)
	if lastErr != "rejected: 422" {
		t.Fatalf("last_error %q", lastErr)
	}
	// The retried row is due in an hour; the released row is due now.
	again := claim(t, b.d, "f", 10, time.Minute, false)
	if len(again) != 1 || again[0].ID != rows[3].ID {
		t.Fatalf("reclaimed %v, want only the released row", ids(again))
	}
	// Finishing again with the first, stale token changes nothing.
	stale := finish(t, b.d, store.OutcomeAcked, 0, &store.OutboxRow{ID: rows[3].ID, LeaseToken: tok})
	if stale.Finished != 0 || stale.Fenced != 1 {
		t.Fatalf("stale finish %+v", stale)
	}
	check(3, store.StatusInProcess, 0)

	// Unknown outcomes and negative delays are refused before any change.
	if _, err := b.d.OutboxFinish(ctx, &store.OutboxFinishParams{Items: []store.OutboxFinishItem{{ID: again[0].ID, LeaseToken: again[0].LeaseToken, Outcome: 42}}}); !errors.Is(err, ErrInvalidParams) {
		t.Fatalf("unknown outcome: %v", err)
	}
	if _, err := b.d.OutboxFinish(ctx, &store.OutboxFinishParams{Items: []store.OutboxFinishItem{{ID: again[0].ID, LeaseToken: again[0].LeaseToken, Outcome: store.OutcomeRetry, RetryAfter: -1}}}); !errors.Is(err, ErrInvalidParams) {
		t.Fatalf("negative RetryAfter: %v", err)
	}
	check(3, store.StatusInProcess, 0)
}

// TestLeaseExpiryRecoverAndFence: a claim whose lease expired is recovered
// without counting an attempt, reclaimed by another relay, and the first
// relay's late finish is fenced.
func TestLeaseExpiryRecoverAndFence(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	e := newEvent("lease", "")
	publish(t, b.d, e)
	const lease = 300 * time.Millisecond
	start := time.Now()
	first := claim(t, b.d, "lease", 1, lease, false)
	if len(first) != 1 {
		t.Fatal("no claim")
	}
	n, err := b.d.OutboxRecover(ctx, &store.OutboxRecoverParams{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 && time.Since(start) < lease {
		t.Fatalf("recovered %d rows before the lease expired", n)
	}
	if rows := claim(t, b.d, "lease", 1, lease, false); len(rows) != 0 && time.Since(start) < lease {
		t.Fatal("claimed an IN_PROCESS row before its lease expired")
	}
	testenv.WaitFor(t, 5*time.Second, "lease recovery", func() bool {
		n, err := b.d.OutboxRecover(ctx, &store.OutboxRecoverParams{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	if time.Since(start) < lease {
		t.Fatalf("recovered after %s, before the %s lease ended", time.Since(start), lease)
	}
	if s, a := status(t, b.d, e.ID); s != store.StatusPending || a != 0 {
		t.Fatalf("after recovery %s/%d, want PENDING/0", s, a)
	}
	second := claim(t, b.d, "lease", 1, time.Minute, false)
	if len(second) != 1 || second[0].LeaseToken == first[0].LeaseToken {
		t.Fatalf("reclaim: %v", second)
	}
	if res := finish(t, b.d, store.OutcomeAcked, 0, first[0]); res.Finished != 0 || res.Fenced != 1 {
		t.Fatalf("stale finish %+v, want fenced", res)
	}
	if s, _ := status(t, b.d, e.ID); s != store.StatusInProcess {
		t.Fatalf("stale finish changed the row to %s", s)
	}
	if res := finish(t, b.d, store.OutcomeAcked, 0, second[0]); res.Finished != 1 {
		t.Fatalf("owner finish %+v", res)
	}
	if s, _ := status(t, b.d, e.ID); s != store.StatusProcessed {
		t.Fatalf("owner finish left %s", s)
	}
}

func TestOrderedByKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	a1, a2, a3 := newEvent("ord", "a"), newEvent("ord", "a"), newEvent("ord", "a")
	b1, b2 := newEvent("ord", "b"), newEvent("ord", "b")
	free1, free2 := newEvent("ord", ""), newEvent("ord", "")
	publish(t, b.d, a1, b1, a2, free1, b2, a3, free2)

	rows := claim(t, b.d, "ord", 10, time.Minute, true)
	want := []txbox.ID{a1.ID, b1.ID, free1.ID, free2.ID}
	if !slices.Equal(ids(rows), want) {
		t.Fatalf("first claim %v, want heads of each key and the keyless rows %v", ids(rows), want)
	}
	// Nothing else while the heads are in process.
	if more := claim(t, b.d, "ord", 10, time.Minute, true); len(more) != 0 {
		t.Fatalf("claimed %v behind in-process heads", ids(more))
	}
	// a1 acked, b1 retried (b's head stays pending, so b2 is blocked).
	finish(t, b.d, store.OutcomeAcked, 0, rows[0])
	finish(t, b.d, store.OutcomeRetry, time.Hour, rows[1])
	next := claim(t, b.d, "ord", 10, time.Minute, true)
	if !slices.Equal(ids(next), []txbox.ID{a2.ID}) {
		t.Fatalf("second claim %v, want [a2]", ids(next))
	}
	// a2 fails and is dead-lettered: key a is parked.
	finish(t, b.d, store.OutcomeFailed, 0, next[0])
	if more := claim(t, b.d, "ord", 10, time.Minute, true); len(more) != 0 {
		t.Fatalf("claimed %v behind a FAILED head", ids(more))
	}
	if n, err := b.d.DeadLetterMove(ctx, &store.DeadLetterMoveParams{Limit: 10}); err != nil || n != 1 {
		t.Fatalf("move %d, %v", n, err)
	}
	if more := claim(t, b.d, "ord", 10, time.Minute, true); len(more) != 0 {
		t.Fatalf("claimed %v behind an unresolved dead letter", ids(more))
	}
	// Unordered claims ignore keys: a3 is due (b2 too).
	// Resolving the dead letter releases a3.
	if n, err := b.d.DeadLetterResolve(ctx, []txbox.ID{a2.ID}); err != nil || n != 1 {
		t.Fatalf("resolve %d, %v", n, err)
	}
	last := claim(t, b.d, "ord", 10, time.Minute, true)
	if !slices.Equal(ids(last), []txbox.ID{a3.ID}) {
		t.Fatalf("after resolve %v, want [a3]", ids(last))
	}
	unordered := claim(t, b.d, "ord", 10, time.Minute, false)
	if !slices.Equal(ids(unordered), []txbox.ID{b2.ID}) {
		t.Fatalf("unordered claim %v, want [b2]", ids(unordered))
	}
}

func TestDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	evs := make([]*txbox.Event, 5)
	for i := range evs {
		evs[i] = newEvent("dl", fmt.Sprintf("k%d", i%2))
	}
	evs[4].Type = "other"
	publish(t, b.d, evs...)
	rows := append(claim(t, b.d, "dl", 10, time.Minute, false), claim(t, b.d, "other", 10, time.Minute, false)...)
	items := make([]store.OutboxFinishItem, len(rows))
	for i, r := range rows {
		items[i] = store.OutboxFinishItem{ID: r.ID, LeaseToken: r.LeaseToken, Outcome: store.OutcomeFailed, Error: fmt.Sprintf("Broker said NO #%d", i)}
	}
	if _, err := b.d.OutboxFinish(ctx, &store.OutboxFinishParams{Items: items}); err != nil {
		t.Fatal(err)
	}
	n, err := b.d.DeadLetterMove(ctx, &store.DeadLetterMoveParams{Limit: 3})
	if err != nil || n != 3 {
		t.Fatalf("move %d, %v; want 3", n, err)
	}
	n, err = b.d.DeadLetterMove(ctx, &store.DeadLetterMoveParams{Limit: 10})
	if err != nil || n != 2 {
		t.Fatalf("second move %d, %v; want 2", n, err)
	}
	var left int
	b.d.DB().QueryRow(`SELECT count(*) FROM txbox_outbox`).Scan(&left)
	if left != 0 {
		t.Fatalf("%d rows left in the outbox", left)
	}

	dl, err := b.d.DeadLetterGet(ctx, evs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if dl.EventType != "dl" || dl.Key != "k0" || string(dl.Payload) != string(evs[0].Payload) || dl.Headers["h"] != "v" ||
		dl.Attempts != 1 || dl.Status != store.DeadLetterUnresolved || dl.FailedAt.IsZero() || dl.CreatedAt.IsZero() ||
		!dl.ResolvedAt.IsZero() || dl.LastError == "" {
		t.Fatalf("dead letter %+v", dl)
	}
	if _, err := b.d.DeadLetterGet(ctx, txbox.NewID()); !errors.Is(err, txbox.ErrNotFound) {
		t.Fatalf("get unknown: %v", err)
	}

	count := func(f *store.DeadLetterFilter) int64 {
		t.Helper()
		n, err := b.d.DeadLetterCount(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if c := count(nil); c != 5 {
		t.Fatalf("count all %d", c)
	}
	if c := count(&store.DeadLetterFilter{EventType: "other"}); c != 1 {
		t.Fatalf("count type %d", c)
	}
	if c := count(&store.DeadLetterFilter{Key: "k1"}); c != 2 {
		t.Fatalf("count key %d", c)
	}
	if c := count(&store.DeadLetterFilter{ErrorContains: "broker said no #2"}); c != 1 {
		t.Fatalf("count error text %d", c)
	}
	if c := count(&store.DeadLetterFilter{ErrorContains: "%"}); c != 0 {
		t.Fatalf("count '%%' (no wildcard) %d", c)
	}
	if c := count(&store.DeadLetterFilter{FailedBefore: time.Now().Add(-time.Hour)}); c != 0 {
		t.Fatalf("count failed before an hour ago %d", c)
	}
	if c := count(&store.DeadLetterFilter{FailedAfter: time.Now().Add(-time.Hour), FailedBefore: time.Now().Add(time.Hour)}); c != 5 {
		t.Fatalf("count in range %d", c)
	}
	if _, err := b.d.DeadLetterCount(ctx, &store.DeadLetterFilter{Status: "bogus"}); !errors.Is(err, ErrInvalidParams) {
		t.Fatalf("bad status filter: %v", err)
	}

	// Pages of 2, newest failure first, no overlap, nothing missed.
	var all []*store.DeadLetter
	var cursor *store.DeadLetterCursor
	for {
		page, err := b.d.DeadLetterList(ctx, &store.DeadLetterListParams{After: cursor, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		all = append(all, page...)
		last := page[len(page)-1]
		cursor = &store.DeadLetterCursor{FailedAt: last.FailedAt, ID: last.ID}
	}
	if len(all) != 5 {
		t.Fatalf("paged %d dead letters, want 5", len(all))
	}
	for i := 1; i < len(all); i++ {
		p, c := all[i-1], all[i]
		if c.FailedAt.After(p.FailedAt) || (c.FailedAt.Equal(p.FailedAt) && c.ID.String() >= p.ID.String()) {
			t.Fatalf("list order broken at %d", i)
		}
	}

	// Resolve one, retry two (one of them resolved), delete one.
	if n, err := b.d.DeadLetterResolve(ctx, []txbox.ID{evs[1].ID, evs[1].ID, txbox.NewID()}); err != nil || n != 1 {
		t.Fatalf("resolve %d, %v", n, err)
	}
	if n, _ := b.d.DeadLetterResolve(ctx, []txbox.ID{evs[1].ID}); n != 0 {
		t.Fatalf("resolve twice changed %d", n)
	}
	if c := count(&store.DeadLetterFilter{Status: store.DeadLetterResolved}); c != 1 {
		t.Fatalf("count resolved %d", c)
	}
	if n, err := b.d.DeadLetterRetry(ctx, []txbox.ID{evs[0].ID, evs[1].ID, txbox.NewID()}); err != nil || n != 2 {
		t.Fatalf("retry %d, %v", n, err)
	}
	if n, err := b.d.DeadLetterDelete(ctx, []txbox.ID{evs[2].ID}); err != nil || n != 1 {
		t.Fatalf("delete %d, %v", n, err)
	}
	if c := count(nil); c != 2 {
		t.Fatalf("count after retry and delete %d, want 2", c)
	}
	back := claim(t, b.d, "dl", 10, time.Minute, false)
	if !slices.Equal(ids(back), []txbox.ID{evs[0].ID, evs[1].ID}) {
		t.Fatalf("retried rows claimed %v", ids(back))
	}
	if back[0].Attempts != 0 || string(back[0].Payload) != string(evs[0].Payload) {
		t.Fatalf("retried row %+v", back[0])
	}

	// Dead-letter cleanup only takes resolved rows older than the TTL.
	if n, err := b.d.DeadLetterResolve(ctx, []txbox.ID{evs[3].ID}); err != nil || n != 1 {
		t.Fatalf("resolve %d, %v", n, err)
	}
	if n, err := b.d.DeadLetterCleanup(ctx, &store.CleanupParams{OlderThan: time.Hour, Limit: 10}); err != nil || n != 0 {
		t.Fatalf("cleanup before TTL %d, %v", n, err)
	}
	testenv.WaitFor(t, 5*time.Second, "dead-letter cleanup", func() bool {
		n, err := b.d.DeadLetterCleanup(ctx, &store.CleanupParams{OlderThan: 10 * time.Millisecond, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	if c := count(nil); c != 1 {
		t.Fatalf("after cleanup %d dead letters, want the unresolved one", c)
	}
}

func TestCleanupStatsPendingTypes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if types, err := b.d.OutboxPendingTypes(ctx); err != nil || len(types) != 0 {
		t.Fatalf("pending types on empty table: %v, %v", types, err)
	}
	publish(t, b.d, newEvent("b.type", ""), newEvent("a-type", ""), newEvent("c:type", ""), newEvent("a-type", ""))
	types, err := b.d.OutboxPendingTypes(ctx)
	if err != nil || !slices.Equal(types, []string{"a-type", "b.type", "c:type"}) {
		t.Fatalf("pending types %v, %v", types, err)
	}
	rows := claim(t, b.d, "a-type", 1, time.Minute, false)
	finish(t, b.d, store.OutcomeAcked, 0, claim(t, b.d, "c:type", 1, time.Minute, false)...)
	types, _ = b.d.OutboxPendingTypes(ctx)
	if !slices.Equal(types, []string{"a-type", "b.type"}) {
		t.Fatalf("pending types after claims %v", types)
	}
	testenv.WaitFor(t, 5*time.Second, "a measurable pending age", func() bool {
		st, err := b.d.OutboxStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(st) == 2 && st[0].OldestPendingAge >= 20*time.Millisecond
	})
	st, err := b.d.OutboxStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 2 || st[0].EventType != "a-type" || st[0].Pending != 1 || st[0].InProcess != 1 || st[0].Failed != 0 ||
		st[1].EventType != "b.type" || st[1].Pending != 1 || st[1].OldestPendingAge > time.Minute {
		t.Fatalf("stats %+v %+v", st[0], st[len(st)-1])
	}
	finish(t, b.d, store.OutcomeFailed, 0, rows...)
	st, _ = b.d.OutboxStats(ctx)
	if st[0].Failed != 1 || st[0].InProcess != 0 {
		t.Fatalf("stats after fail %+v", st[0])
	}

	// Cleanup: the processed c:type row goes only once older than the TTL.
	if n, err := b.d.OutboxCleanup(ctx, &store.CleanupParams{OlderThan: time.Hour, Limit: 100}); err != nil || n != 0 {
		t.Fatalf("cleanup before TTL: %d, %v", n, err)
	}
	testenv.WaitFor(t, 5*time.Second, "outbox cleanup", func() bool {
		n, err := b.d.OutboxCleanup(ctx, &store.CleanupParams{OlderThan: 10 * time.Millisecond, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	var total int
	b.d.DB().QueryRow(`SELECT count(*) FROM txbox_outbox`).Scan(&total)
	if total != 3 {
		t.Fatalf("%d rows left, want 3 (cleanup must take only PROCESSED)", total)
	}
	for _, p := range []*store.CleanupParams{nil, {OlderThan: -1, Limit: 1}, {Limit: 0}} {
		if _, err := b.d.OutboxCleanup(ctx, p); !errors.Is(err, ErrInvalidParams) {
			t.Errorf("cleanup %+v: %v", p, err)
		}
	}
}

func TestLeases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	acquire := func(holder string, ttl time.Duration) bool {
		t.Helper()
		ok, err := b.d.LeaseAcquire(ctx, &store.LeaseParams{Name: "cleanup", Holder: holder, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !acquire("a", 200*time.Millisecond) {
		t.Fatal("a could not take a free lease")
	}
	if !acquire("a", 200*time.Millisecond) {
		t.Fatal("a could not renew its lease")
	}
	start := time.Now()
	if acquire("b", time.Minute) && time.Since(start) < 200*time.Millisecond {
		t.Fatal("b took a's live lease")
	}
	testenv.WaitFor(t, 5*time.Second, "b to take the expired lease", func() bool { return acquire("b", time.Minute) })
	if acquire("a", time.Minute) {
		t.Fatal("a took b's live lease")
	}
	if err := b.d.LeaseRelease(ctx, &store.LeaseParams{Name: "cleanup", Holder: "a"}); err != nil {
		t.Fatal(err)
	}
	if acquire("a", time.Minute) {
		t.Fatal("a's release freed b's lease")
	}
	if err := b.d.LeaseRelease(ctx, &store.LeaseParams{Name: "cleanup", Holder: "b"}); err != nil {
		t.Fatal(err)
	}
	if !acquire("a", time.Minute) {
		t.Fatal("a could not take a released lease")
	}
	for _, p := range []*store.LeaseParams{nil, {Holder: "a", TTL: time.Second}, {Name: "n", TTL: time.Second}, {Name: "n", Holder: "a"}} {
		if _, err := b.d.LeaseAcquire(ctx, p); !errors.Is(err, ErrInvalidParams) {
			t.Errorf("acquire %+v: %v", p, err)
		}
	}
}

// TestPlainSQLInsert: a non-Go producer gives only the type and payload;
// every other column has a default and the row is delivered.
func TestPlainSQLInsert(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := 0; i < 50; i++ {
		if _, err := b.d.DB().Exec(`INSERT INTO txbox_outbox (event_type, payload) VALUES ('plain', '{"id":42}')`); err != nil {
			t.Fatal(err)
		}
	}
	rows := claim(t, b.d, "plain", 100, time.Minute, false)
	if len(rows) != 50 {
		t.Fatalf("claimed %d plain rows", len(rows))
	}
	prev := ""
	for _, r := range rows {
		if r.ID.Version() != 7 || r.ID.Variant().String() != "RFC4122" {
			t.Fatalf("default id %s is not a UUIDv7", r.ID)
		}
		sec, nsec := r.ID.Time().UnixTime()
		if ts := time.Unix(sec, nsec); time.Since(ts) > time.Minute || time.Until(ts) > time.Minute {
			t.Fatalf("default id %s carries time %s, not now", r.ID, ts)
		}
		if r.ID.String()[:13] < prev {
			t.Fatalf("default ids are not time ordered: %s after %s", r.ID, prev)
		}
		prev = r.ID.String()[:13]
		if string(r.Payload) != `{"id":42}` || len(r.Headers) != 0 || r.Key != "" || r.CreatedAt.IsZero() {
			t.Fatalf("plain row %+v", r)
		}
	}
	// Headers written by hand with non-string values still decode.
	if _, err := b.d.DB().Exec(`INSERT INTO txbox_outbox (event_type, payload, headers) VALUES ('plain', x'00ff', '{"n":1,"s":"x"}')`); err != nil {
		t.Fatal(err)
	}
	r := claim(t, b.d, "plain", 1, time.Minute, false)
	if len(r) != 1 || r[0].Headers["n"] != "1" || r[0].Headers["s"] != "x" || string(r[0].Payload) != "\x00\xff" {
		t.Fatalf("hand-written headers %+v", r)
	}
}

// TestClaimUsesIndex proves the claim reads the partial claim index in
// order rather than scanning the table.
func TestClaimUsesIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	plan := func(q string, args ...any) string {
		rows, err := b.d.DB().Query("EXPLAIN QUERY PLAN "+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			rows.Scan(&id, &parent, &notused, &detail)
			out += detail + "\n"
		}
		return out
	}
	if p := plan(b.d.q.claim, "+1.000 seconds", "tok", "t", "", 10); !contains(p, "txbox_outbox_claim") || contains(p, "SCAN o\n") || contains(p, "USE TEMP B-TREE") {
		t.Errorf("claim plan does not walk the claim index in order:\n%s", p)
	}
	// The ordered claim: the keyless window walks the claim index in
	// order; a key step is a seek in the key index for the next key and a
	// range of its entries in id order, plus a probe of the parked keys.
	if p := plan(b.d.q.orderedWindow, "t", "", "", 10, ""); !contains(p, "txbox_outbox_claim") || contains(p, "USE TEMP B-TREE") {
		t.Errorf("ordered window plan does not walk the claim index in order:\n%s", p)
	}
	// Route "" and a fan-out route (schema version 7), whose step also
	// probes the key's rows with route "".
	for _, route := range []string{"", "kafka"} {
		if p := plan(b.d.q.orderedKey, "t", "", 4, route); !contains(p, "txbox_outbox_key") || !contains(p, "txbox_dead_letter_key") ||
			contains(p, "SCAN o\n") || contains(p, "SCAN u\n") || contains(p, "USE TEMP B-TREE") || contains(p, "SCAN txbox_outbox\n") {
			t.Errorf("ordered key step (route %q) does not seek the key indexes:\n%s", route, p)
		}
	}
	if p := plan(b.d.q.pendingTypes); contains(p, "SCAN txbox_outbox\n") {
		t.Errorf("pending types scans the table:\n%s", p)
	}
	if p := plan(b.d.q.stats); contains(p, "SCAN txbox_outbox\n") || !contains(p, "txbox_outbox_claim") ||
		!contains(p, "txbox_outbox_lease") || !contains(p, "txbox_outbox_failed") {
		t.Errorf("stats does not read through the partial indexes:\n%s", p)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestNewOnCallerPool: a pool opened by the caller without _txlock still
// gets write transactions that take the lock first, and Close leaves the
// pool open.
func TestNewOnCallerPool(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "own.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d, err := New(db, Config{TablePrefix: "mine_"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	other, err := New(db, Config{TablePrefix: "mine_"})
	if err != nil {
		t.Fatal(err)
	}
	publish(t, d, newEvent("n", ""), newEvent("n", ""))
	// Two drivers on one pool claim at once: no SQLITE_BUSY, no overlap.
	var wg sync.WaitGroup
	got := make([][]*store.OutboxRow, 2)
	errs := make([]error, 2)
	for i, drv := range []*Driver{d, other} {
		wg.Go(func() {
			got[i], errs[i] = drv.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "n", Limit: 1, LeaseDuration: time.Minute})
		})
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("claims: %v, %v", errs[0], errs[1])
	}
	if len(got[0]) != 1 || len(got[1]) != 1 || got[0][0].ID == got[1][0].ID {
		t.Fatalf("claims overlap or missed: %v %v", ids(got[0]), ids(got[1]))
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Ping(); err != nil {
		t.Fatalf("Close closed the caller's pool: %v", err)
	}
	if _, err := d.OutboxStats(ctx); !errors.Is(err, txbox.ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
}

// TestPublishInInboxTx: a consumer that publishes inside its inbox
// transaction may pass the store.InboxTx itself; the events commit or roll
// back with it.
func TestPublishInInboxTx(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, commit := range []bool{false, true} {
		itx, err := b.d.InboxBegin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		e := newEvent("from-consumer", "")
		if err := b.d.OutboxInsert(ctx, itx, &store.OutboxInsertParams{Events: []*txbox.Event{e}}); err != nil {
			t.Fatalf("insert through InboxTx: %v", err)
		}
		if commit {
			err = itx.Commit(ctx)
		} else {
			err = itx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		rows := claim(t, b.d, "from-consumer", 10, time.Minute, false)
		if commit && (len(rows) != 1 || rows[0].ID != e.ID) {
			t.Fatalf("committed inbox tx: claimed %v, want %s", ids(rows), e.ID)
		}
		if !commit && len(rows) != 0 {
			t.Fatalf("rolled-back inbox tx: claimed %v", ids(rows))
		}
	}
}

func TestInvalidParamsMatchesSeamSentinel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.d.OutboxClaim(context.Background(), &store.OutboxClaimParams{EventType: "t", Limit: 0, LeaseDuration: time.Second})
	if !errors.Is(err, ErrInvalidParams) || !errors.Is(err, store.ErrInvalidParams) {
		t.Fatalf("got %v, want an error matching sqlite.ErrInvalidParams and store.ErrInvalidParams", err)
	}
}
