package postgres_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
	"github.com/txbox/txbox/store/postgres/internal/walmsg"
)

// emitEnv is a WAL mode driver on a fresh schema, with a unique slot and
// publication name (the cluster is shared).
type emitEnv struct {
	d         *postgres.Driver
	pool      *pgxpool.Pool
	db        *sql.DB
	schema    string
	slot, pub string
	pubMade   bool
}

func newWAL(t testing.TB) *emitEnv {
	t.Helper()
	w := &emitEnv{
		schema: newSchema(t),
		pool:   newPool(t, 6),
		db:     admin(t),
		slot:   testenv.UniqueName("txbox_t_slot_"),
		pub:    testenv.UniqueName("txbox_t_pub_"),
	}
	d, err := postgres.New(w.pool, postgres.Config{Schema: w.schema, Source: postgres.SourceWAL,
		WAL: postgres.WALConfig{Slot: w.slot, Publication: w.pub}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	w.d = d
	return w
}

// tbl is the quoted name of one of the schema's objects ("outbox", ...).
func (w *emitEnv) tbl(name string) string {
	return pgx.Identifier{w.schema, store.DefaultTablePrefix + name}.Sanitize()
}

// createSlot creates a logical slot, a publication and the state row,
// as txbox migrate does in WAL mode; the slot and the publication are
// dropped when the test ends.
func (w *emitEnv) createSlot(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The publication first: pgoutput looks it up as of each change it
	// decodes, and fails on changes from before it existed.
	if !w.pubMade {
		t.Cleanup(func() { _, _ = w.db.Exec(`DROP PUBLICATION IF EXISTS ` + w.pub) })
		if _, err := w.db.ExecContext(ctx, `CREATE PUBLICATION `+w.pub+` FOR TABLE `+w.tbl("outbox")+` WITH (publish = 'insert')`); err != nil {
			t.Fatalf("create publication: %v", err)
		}
		w.pubMade = true
	}
	t.Cleanup(func() { dropSlotNamed(t, w.db, w.slot) })
	if _, err := w.db.ExecContext(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, w.slot); err != nil {
		t.Fatalf("create slot: %v", err)
	}
	w.addState(t, w.slot)
}

func (w *emitEnv) addState(t testing.TB, slot string) {
	t.Helper()
	if _, err := w.db.Exec(`INSERT INTO `+w.tbl("wal_state")+` (slot_name, publication) VALUES ($1, $2)`, slot, w.pub); err != nil {
		t.Fatal(err)
	}
}

// dropSlotNamed drops a slot the test created, stopping whoever holds it.
func dropSlotNamed(t testing.TB, db *sql.DB, slot string) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, _ = db.Exec(`SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot)
		_, err := db.Exec(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("drop slot %s: %v", slot, err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// emit publishes events in one pgx transaction and commits it.
func (w *emitEnv) emit(ctx context.Context, events ...*txbox.Event) error {
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if err := w.d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: events, Notify: true}); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// messages decodes the slot's pending changes with pgoutput (without
// consuming them) and returns the events of this driver's prefix. Any
// non-transactional message with the prefix fails the test.
func (w *emitEnv) messages(t testing.TB) map[txbox.ID]*walmsg.Event {
	t.Helper()
	rows, err := w.db.Query(`SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
		'proto_version', '1', 'publication_names', $2, 'messages', 'true')`, w.slot, w.pub)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	prefix := postgres.MessagePrefix(w.d)
	out := map[txbox.ID]*walmsg.Event{}
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			t.Fatal(err)
		}
		if len(data) == 0 || data[0] != 'M' {
			continue
		}
		// 'M', flags (1 = transactional), LSN, prefix\0, length, content.
		flags := data[1]
		rest := data[10:]
		nul := bytes.IndexByte(rest, 0)
		p, rest := string(rest[:nul]), rest[nul+1:]
		if p != prefix {
			continue
		}
		if flags&1 == 0 {
			t.Errorf("a non-transactional message with prefix %s", p)
		}
		n := binary.BigEndian.Uint32(rest)
		content := bytes.Clone(rest[4 : 4+n])
		ev, err := walmsg.Decode(content)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		out[txbox.ID(ev.ID)] = ev
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func (w *emitEnv) outboxRows(t testing.TB) int {
	t.Helper()
	var n int
	if err := w.db.QueryRow(`SELECT count(*) FROM ` + w.tbl("outbox")).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func walEvent(typ string) *txbox.Event {
	return &txbox.Event{ID: txbox.NewID(), Type: typ, Key: "k-" + typ, Payload: []byte{0, 1, '\\', '"', 0xff}}
}

// TestWALEmit publishes through each kind of transaction and reads the
// messages back from a real slot: exactly the committed events, decodable,
// and no row in the outbox table.
func TestWALEmit(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	w := newWAL(t)
	w.createSlot(t)

	var fromSQL string
	if err := w.pool.QueryRow(ctx, `SELECT `+w.tbl("wal_check")+`()`).Scan(&fromSQL); err != nil {
		t.Fatal(err)
	}
	want := "txbox:" + w.tbl("outbox")
	if p := postgres.MessagePrefix(w.d); p != want || fromSQL != want {
		t.Fatalf("prefix: Go %q, SQL %q, want %q", p, fromSQL, want)
	}

	before := time.Now().Add(-time.Millisecond)
	first := walEvent("order.created")
	first.Headers = map[string]string{`q"`: `a\b`, "u": "名前"}
	first.NotBefore = time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	committed := []*txbox.Event{first}
	if err := w.emit(ctx, first); err != nil {
		t.Fatal(err)
	}
	batch := []*txbox.Event{walEvent("a"), walEvent("b"), walEvent("c")}
	batch[1].Key = ""
	if err := w.emit(ctx, batch...); err != nil {
		t.Fatal(err)
	}
	committed = append(committed, batch...)

	db, err := sql.Open("pgx", testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	for _, c := range []struct {
		name string
		wrap func(*sql.Tx) any
		n    int
	}{{"*sql.Tx one", func(tx *sql.Tx) any { return tx }, 1}, {"*sql.Tx batch", func(tx *sql.Tx) any { return tx }, 2},
		{"ORM tx", func(tx *sql.Tx) any { return ormTx{tx} }, 2}} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var evs []*txbox.Event
		for range c.n {
			evs = append(evs, walEvent("sql"))
		}
		evs[0].Headers = map[string]string{"via": c.name}
		if err := w.d.OutboxInsert(ctx, c.wrap(tx), &store.OutboxInsertParams{Events: evs}); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		committed = append(committed, evs...)
	}

	// Rolled back: no message.
	for _, n := range []int{1, 3} {
		tx, err := w.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var evs []*txbox.Event
		for range n {
			evs = append(evs, walEvent("rolled.back"))
		}
		if err := w.d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: evs}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
	after := time.Now().Add(time.Millisecond)

	got := w.messages(t)
	if len(got) != len(committed) {
		t.Errorf("%d messages, want %d (the committed events only)", len(got), len(committed))
	}
	for _, ev := range committed {
		m := got[ev.ID]
		if m == nil {
			t.Errorf("event %s (%s) has no message", ev.ID, ev.Type)
			continue
		}
		if m.Type != ev.Type || m.Key != ev.Key || !bytes.Equal(m.Payload, ev.Payload) || !m.NotBefore.Equal(ev.NotBefore) ||
			len(m.Headers) != len(ev.Headers) || m.CreatedAt.Before(before) || m.CreatedAt.After(after) {
			t.Errorf("event %s: message %+v, want %+v", ev.ID, m, ev)
		}
		for k, v := range ev.Headers {
			if m.Headers[k] != v {
				t.Errorf("event %s: header %q = %q, want %q", ev.ID, k, m.Headers[k], v)
			}
		}
	}
	if n := w.outboxRows(t); n != 0 {
		t.Errorf("%d rows in the outbox table, want 0", n)
	}

	if err := w.d.OutboxInsert(ctx, nil, &store.OutboxInsertParams{Events: []*txbox.Event{walEvent("x")}}); !errors.Is(err, txbox.ErrNoTransaction) {
		t.Errorf("nil tx: %v, want ErrNoTransaction", err)
	}
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var bad *txbox.InvalidEventTypeError
	if err := w.d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{walEvent("no spaces")}}); !errors.As(err, &bad) {
		t.Errorf("bad type: %v, want an *InvalidEventTypeError", err)
	}
}

// TestWALEmitFunction is the plain-SQL producer: txbox_emit writes the
// same message, refuses bad input, and emits an event with a future
// not-before with it in the message, as the Go publisher does, writing no
// row.
func TestWALEmitFunction(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	w := newWAL(t)
	w.createSlot(t)
	emit := w.tbl("emit")

	var id1, id2 txbox.ID
	if err := w.db.QueryRowContext(ctx, `SELECT `+emit+`('order.paid', 'o-1', '\x00ff'::bytea, '{"a": "b"}')`).Scan(&id1); err != nil {
		t.Fatal(err)
	}
	if err := w.db.QueryRowContext(ctx, `SELECT `+emit+`('order.paid', NULL, ''::bytea)`).Scan(&id2); err != nil {
		t.Fatal(err)
	}
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT `+emit+`('rolled.back', NULL, 'x'::bytea)`); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback()

	for _, c := range []struct{ name, args, msg string }{
		{"type", `'no spaces', NULL, ''::bytea`, "event_type"},
		{"array headers", `'t', NULL, ''::bytea, '[1]'`, "JSON object of strings"},
		{"number header", `'t', NULL, ''::bytea, '{"n": 1}'`, "JSON object of strings"},
		{"null payload", `'t', NULL, NULL`, "must not be NULL"},
	} {
		_, err := w.db.ExecContext(ctx, `SELECT `+emit+`(`+c.args+`)`)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || !strings.Contains(pe.Message, c.msg) {
			t.Errorf("%s: %v, want an error about %s", c.name, err, c.msg)
		}
	}

	// A future not-before: a message like any other, with its not-before,
	// and no row, in SQL and Go (schema version 7).
	nb := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	var id3 txbox.ID
	if err := w.db.QueryRowContext(ctx, `SELECT `+emit+`('later', 'k', 'p'::bytea, '{}', $1)`, nb).Scan(&id3); err != nil {
		t.Fatal(err)
	}
	later, now := walEvent("later"), walEvent("now")
	later.NotBefore = nb
	if err := w.emit(ctx, later, now); err != nil {
		t.Fatal(err)
	}
	// An infinite not-before has no place in the message.
	for _, inf := range []string{"infinity", "-infinity"} {
		_, err := w.db.ExecContext(ctx, `SELECT `+emit+`('later', 'k', 'p'::bytea, '{}', '`+inf+`')`)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "22023" || !strings.Contains(pe.Message, "not a finite time") {
			t.Errorf("not_before %s: %v, want 22023", inf, err)
		}
	}

	got := w.messages(t)
	if len(got) != 5 || got[id1] == nil || got[id2] == nil || got[id3] == nil || got[later.ID] == nil || got[now.ID] == nil {
		t.Fatalf("messages %v, want the three committed SQL emits and the two Go ones", got)
	}
	for _, id := range []txbox.ID{id3, later.ID} {
		if m := got[id]; m.Type != "later" || !m.NotBefore.Equal(nb) {
			t.Errorf("deferred event %s: message %+v, want not-before %s", id, m, nb)
		}
	}
	if m := got[now.ID]; !m.NotBefore.IsZero() {
		t.Errorf("the Go event without a not-before: message %+v", m)
	}
	m := got[id1]
	if m.Type != "order.paid" || m.Key != "o-1" || !bytes.Equal(m.Payload, []byte{0, 0xff}) || m.Headers["a"] != "b" || len(m.Headers) != 1 ||
		!m.NotBefore.IsZero() || time.Since(m.CreatedAt) > time.Minute {
		t.Errorf("txbox_emit message %+v", m)
	}
	if m := got[id2]; m.Key != "" || m.Headers != nil || len(m.Payload) != 0 {
		t.Errorf("txbox_emit defaults: message %+v", m)
	}
	if n := w.outboxRows(t); n != 0 {
		t.Errorf("%d rows in the outbox table, want none (deferred events are emitted too)", n)
	}
}

// wantSlotError checks that err is the emit check's, of kind, with msg.
func wantSlotError(t *testing.T, err, kind error, msg string) {
	t.Helper()
	var se *postgres.SlotError
	var pe *pgconn.PgError
	if !errors.Is(err, kind) || !errors.As(err, &se) || !errors.As(err, &pe) || !strings.Contains(err.Error(), msg) {
		t.Fatalf("got %v, want %v with %q", err, kind, msg)
	}
	if pe.ConstraintName != "txbox_wal_check" {
		t.Errorf("constraint %q", pe.ConstraintName)
	}
}

// waitGuardWaiter waits until a session waits for a lock on w's guard.
func (w *emitEnv) waitGuardWaiter(t *testing.T) {
	t.Helper()
	testenv.WaitFor(t, 30*time.Second, "a session waiting for the emit guard", func() bool {
		var n int
		err := w.db.QueryRow(`SELECT count(*) FROM pg_locks WHERE relation = $1::regclass AND NOT granted`, w.tbl("wal_guard")).Scan(&n)
		return err == nil && n > 0
	})
}

// TestWALEmitGuard: every way the slot can fail to keep a message makes
// the emitting statement fail, and a slot drop and emits exclude each
// other.
func TestWALEmitGuard(t *testing.T) {
	t.Parallel()
	t.Run("no slot recorded", func(t *testing.T) {
		t.Parallel()
		ctx := ctxT(t)
		w := newWAL(t)
		wantSlotError(t, w.emit(ctx, walEvent("a")), postgres.ErrNoSlot, "WAL mode has no slot: run txbox migrate with database.source wal")
		wantSlotError(t, w.emit(ctx, walEvent("a"), walEvent("b")), postgres.ErrNoSlot, "WAL mode has no slot")
		// A deferred event is checked too: it is a message like any other.
		deferred := walEvent("a")
		deferred.NotBefore = time.Now().Add(time.Hour)
		wantSlotError(t, w.emit(ctx, deferred), postgres.ErrNoSlot, "WAL mode has no slot")
		for _, nb := range []string{"NULL", "now() + interval '1 hour'"} {
			_, err := w.db.ExecContext(ctx, `SELECT `+w.tbl("emit")+`('a', NULL, ''::bytea, '{}', `+nb+`)`)
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "42704" || pe.ConstraintName != "txbox_wal_check" {
				t.Errorf("txbox_emit, not_before %s: %v, want SQLSTATE 42704 from txbox_wal_check", nb, err)
			}
		}
		if n := w.outboxRows(t); n != 0 {
			t.Errorf("%d rows in the outbox table after refused emits", n)
		}
	})
	t.Run("slot dropped", func(t *testing.T) {
		t.Parallel()
		w := newWAL(t)
		w.addState(t, w.slot)
		wantSlotError(t, w.emit(ctxT(t), walEvent("a")), postgres.ErrNoSlot, "slot "+w.slot+" does not exist")
	})
	t.Run("other database", func(t *testing.T) {
		t.Parallel()
		w := newWAL(t)
		t.Cleanup(func() { dropSlotNamed(t, w.db, w.slot) })
		if _, err := w.db.Exec(`SELECT pg_create_physical_replication_slot($1)`, w.slot); err != nil {
			t.Fatal(err)
		}
		w.addState(t, w.slot)
		wantSlotError(t, w.emit(ctxT(t), walEvent("a")), postgres.ErrSlotNotReady, "decodes database (none")
	})
	t.Run("not consistent", func(t *testing.T) {
		t.Parallel()
		ctx := ctxT(t)
		w := newWAL(t)
		t.Cleanup(func() { dropSlotNamed(t, w.db, w.slot) })
		// An open transaction with an xid holds the slot's creation.
		hold, err := w.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := hold.Exec(ctx, `SELECT txid_current()`); err != nil {
			t.Fatal(err)
		}
		created := make(chan error, 1)
		go func() {
			_, err := w.db.ExecContext(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, w.slot)
			created <- err
		}()
		t.Cleanup(func() { _ = hold.Rollback(context.Background()); <-created })
		testenv.WaitFor(t, 30*time.Second, "the slot listed, not consistent", func() bool {
			var pending bool
			err := w.db.QueryRow(`SELECT confirmed_flush_lsn IS NULL FROM pg_replication_slots WHERE slot_name = $1`, w.slot).Scan(&pending)
			return err == nil && pending
		})
		w.addState(t, w.slot)
		wantSlotError(t, w.emit(ctx, walEvent("a")), postgres.ErrSlotNotReady, "is not consistent yet")
		if err := hold.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-created:
			created <- err // for the clean-up
			if err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("the slot is still not created")
		}
		if err := w.emit(ctx, walEvent("a")); err != nil {
			t.Fatalf("emit once consistent: %v", err)
		}
	})
	t.Run("unreserved (substituted status)", func(t *testing.T) {
		// No real way: wal_status leaves reserved/extended only with
		// max_slot_wal_keep_size set and max_wal_size of WAL behind the
		// slot, cluster-wide. The check's own SQL runs here against a
		// copy of the slot's row with the status replaced.
		t.Parallel()
		ctx := ctxT(t)
		w := newWAL(t)
		w.createSlot(t)
		var src string
		if err := w.db.QueryRow(`SELECT prosrc FROM pg_proc WHERE oid = $1::regprocedure`, w.tbl("wal_check")+"()").Scan(&src); err != nil {
			t.Fatal(err)
		}
		fake := w.tbl("fake_slots")
		if strings.Count(src, "pg_catalog.pg_replication_slots") != 1 {
			t.Fatalf("the check no longer reads pg_catalog.pg_replication_slots once:\n%s", src)
		}
		src = strings.Replace(src, "pg_catalog.pg_replication_slots", fake, 1)
		for _, q := range []string{
			`CREATE TABLE ` + fake + ` AS SELECT slot_name, database, confirmed_flush_lsn, wal_status FROM pg_replication_slots WHERE slot_name = '` + w.slot + `'`,
			`CREATE OR REPLACE FUNCTION ` + w.tbl("wal_check") + `() RETURNS text LANGUAGE plpgsql AS $fake$` + src + `$fake$`,
		} {
			if _, err := w.db.Exec(q); err != nil {
				t.Fatal(err)
			}
		}
		for _, status := range []string{"unreserved", "lost", "extended", "reserved"} {
			if _, err := w.db.Exec(`UPDATE `+fake+` SET wal_status = $1`, status); err != nil {
				t.Fatal(err)
			}
			err := w.emit(ctx, walEvent("a"))
			if status == "extended" || status == "reserved" {
				if err != nil {
					t.Errorf("%s: %v", status, err)
				}
				continue
			}
			wantSlotError(t, err, postgres.ErrSlotNotReady, "has wal_status "+status+", not reserved or extended")
		}
	})
	t.Run("being dropped", func(t *testing.T) {
		t.Parallel()
		ctx := ctxT(t)
		w := newWAL(t)
		w.createSlot(t)

		// An emit in flight makes the drop wait.
		inFlight, err := w.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = inFlight.Rollback(ctx) }()
		if err := w.d.OutboxInsert(ctx, inFlight, &store.OutboxInsertParams{Events: []*txbox.Event{walEvent("a")}}); err != nil {
			t.Fatal(err)
		}
		dropped := make(chan error, 1)
		go func() { dropped <- w.d.DropStream(ctx) }()
		w.waitGuardWaiter(t)
		select {
		case err := <-dropped:
			t.Fatalf("the drop did not wait for the emit in flight: %v", err)
		default:
		}
		if err := inFlight.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-dropped; err != nil {
			t.Fatalf("drop: %v", err)
		}
		var slots, states int
		if err := w.db.QueryRow(`SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1), (SELECT count(*) FROM `+w.tbl("wal_state")+`)`, w.slot).Scan(&slots, &states); err != nil {
			t.Fatal(err)
		}
		if slots != 0 || states != 0 {
			t.Fatalf("after DropStream: %d slots, %d state rows", slots, states)
		}
		wantSlotError(t, w.emit(ctx, walEvent("a")), postgres.ErrNoSlot, "WAL mode has no slot")
		if err := w.d.DropStream(ctx); err != nil {
			t.Errorf("DropStream of a missing slot: %v", err)
		}

		// A drop holding the guard makes an emit wait, then fail.
		w.createSlot(t)
		drop, err := w.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = drop.Rollback(ctx) }()
		if err := w.d.LockEmits(ctx, drop); err != nil {
			t.Fatal(err)
		}
		emitted := make(chan error, 1)
		go func() { emitted <- w.emit(ctx, walEvent("a")) }()
		w.waitGuardWaiter(t)
		select {
		case err := <-emitted:
			t.Fatalf("the emit did not wait for the drop: %v", err)
		default:
		}
		if _, err := drop.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, w.slot); err != nil {
			t.Fatal(err)
		}
		if err := drop.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		wantSlotError(t, <-emitted, postgres.ErrNoSlot, "slot "+w.slot+" does not exist")
	})
	t.Run("DropSlotSQL", func(t *testing.T) {
		t.Parallel()
		ctx := ctxT(t)
		w := newWAL(t)
		w.createSlot(t)
		conn, err := w.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		if _, err := conn.Exec(ctx, w.d.DropSlotSQL(), pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%v\n%s", err, w.d.DropSlotSQL())
		}
		wantSlotError(t, w.emit(ctx, walEvent("a")), postgres.ErrNoSlot, "WAL mode has no slot")
	})
}
