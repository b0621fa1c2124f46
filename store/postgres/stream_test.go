package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
	"github.com/txbox/txbox/store/postgres/internal/walmsg"
)

// slotCreateTimeout bounds CreateStream in tests: slot creation waits for
// every transaction in the cluster, including other packages' tests.
const slotCreateTimeout = 90 * time.Second

// walEnv is a migrated WAL-mode driver on a fresh schema, with its own
// slot and publication (dropped when the test ends).
type walEnv struct {
	d      *postgres.Driver
	pool   *pgxpool.Pool
	schema string
	slot   string
	outbox string // quoted outbox table
}

func openWAL(t testing.TB, senderTimeout time.Duration) *walEnv {
	t.Helper()
	ctx, cancelCtx := context.WithTimeout(context.Background(), time.Minute)
	defer cancelCtx()
	schema := newSchema(t)
	pool := newPool(t, 10)
	suffix := strings.TrimPrefix(testenv.UniqueName("x"), "x")
	cfg := postgres.Config{Schema: schema, Source: postgres.SourceWAL, WAL: postgres.WALConfig{
		Slot: "t_slot_" + suffix, Publication: "t_pub_" + suffix, SenderTimeout: senderTimeout,
	}}
	d, err := postgres.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	db := admin(t)
	t.Cleanup(func() {
		_, _ = db.Exec(`DROP PUBLICATION IF EXISTS ` + cfg.WAL.Publication)
	})
	cctx, cancel := context.WithTimeout(context.Background(), slotCreateTimeout+10*time.Second)
	defer cancel()
	if err := d.CreateStream(cctx, slotCreateTimeout); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.DropStream(ctx); err != nil {
			t.Errorf("drop stream: %v", err)
		}
	})
	return &walEnv{d: d, pool: pool, schema: schema, slot: cfg.WAL.Slot, outbox: pgx.Identifier{schema, "txbox_outbox"}.Sanitize()}
}

func (e *walEnv) prefix() string { return "txbox:" + e.outbox }

// open opens a stream closed when the test ends.
func (e *walEnv) open(t testing.TB, opts *store.StreamOptions) store.Stream {
	t.Helper()
	s, err := e.d.OpenStream(context.Background(), opts)
	if err != nil {
		t.Fatalf("open stream: %v", err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// emitted is an event a test wrote into the WAL.
type emitted struct {
	id      uuid.UUID
	typ     string
	key     string
	payload []byte
}

func newEmitted(typ, key string) emitted {
	return emitted{id: uuid.Must(uuid.NewV7()), typ: typ, key: key, payload: []byte("payload of " + typ)}
}

// execer is a transaction or the pool.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// emit writes ev as a txbox message in q (a transaction or the pool).
func (e *walEnv) emit(t testing.TB, q execer, ev emitted, transactional bool, prefix string) {
	t.Helper()
	msg := walmsg.Append(nil, ev.id, time.Now(), time.Time{}, ev.typ, ev.key, []byte(`{"h":"v"}`), ev.payload)
	if _, err := q.Exec(context.Background(), `SELECT pg_logical_emit_message($1, $2, $3::bytea)`, transactional, prefix, msg); err != nil {
		t.Fatalf("emit: %v", err)
	}
}

// capture inserts ev into the outbox table as a producer does.
func (e *walEnv) capture(t *testing.T, q execer, ev emitted) {
	t.Helper()
	if _, err := q.Exec(context.Background(), `INSERT INTO `+e.outbox+` (id, event_type, event_key, payload, headers) VALUES ($1, $2, $3, $4, '{"h": "v"}')`,
		ev.id.String(), ev.typ, ev.key, ev.payload); err != nil {
		t.Fatalf("capture: %v", err)
	}
}

// next reads the next transaction within 30s.
func next(t testing.TB, s store.Stream) *store.StreamTx {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tx, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("next: %v", err)
	}
	return tx
}

// wantTx checks tx's events against want (ids in order, and the fields).
func wantTx(t *testing.T, tx *store.StreamTx, captured []bool, want ...emitted) {
	t.Helper()
	if len(tx.Events) != len(want) {
		var got []string
		for _, ev := range tx.Events {
			got = append(got, ev.Row.EventType)
		}
		t.Fatalf("tx at %s has %d events %v, want %d", pglogrepl.LSN(tx.End), len(tx.Events), got, len(want))
	}
	for i, w := range want {
		ev := tx.Events[i]
		r := ev.Row
		if r.ID != w.id || r.EventType != w.typ || r.Key != w.key || !bytes.Equal(r.Payload, w.payload) || r.Headers["h"] != "v" || r.Invalid != "" {
			t.Errorf("event %d: %+v, want %+v", i, r, w)
		}
		if ev.Captured != captured[i] {
			t.Errorf("event %d: captured %v, want %v", i, ev.Captured, captured[i])
		}
		if ev.Captured && r.Seq == 0 {
			t.Errorf("event %d: a captured row without its txid", i)
		}
		if r.CreatedAt.IsZero() || time.Since(r.CreatedAt) > time.Hour {
			t.Errorf("event %d: created at %v", i, r.CreatedAt)
		}
		if i > 0 && ev.Pos <= tx.Events[i-1].Pos {
			t.Errorf("event %d: pos %d after %d", i, ev.Pos, tx.Events[i-1].Pos)
		}
	}
}

func begin(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	tx, err := pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

func commit(t *testing.T, tx pgx.Tx) {
	t.Helper()
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestStreamCommitOrderAndFilters: messages and captured inserts arrive by
// transaction in commit order (the transaction that began first and
// committed last comes last); a rolled-back transaction, non-transactional
// messages, other prefixes and the relay's own rows (stream_pos set) never
// arrive; an undecodable message arrives Invalid.
func TestStreamCommitOrderAndFilters(t *testing.T) {
	t.Parallel()
	e := openWAL(t, 0)
	s := e.open(t, nil)

	a1 := newEmitted("a.one", "k")
	txA := begin(t, e.pool)
	e.emit(t, txA, a1, true, e.prefix())

	b1, b2 := newEmitted("b.one", "k"), newEmitted("b.two", "")
	txB := begin(t, e.pool)
	e.emit(t, txB, b1, true, e.prefix())
	e.capture(t, txB, b2)
	commit(t, txB)

	txC := begin(t, e.pool)
	e.emit(t, txC, newEmitted("c.rolled_back", "k"), true, e.prefix())
	e.capture(t, txC, newEmitted("c.rolled_back_row", "k"))
	if err := txC.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.emit(t, e.pool, newEmitted("n.non_transactional", ""), false, e.prefix())
	e.emit(t, e.pool, newEmitted("w.other_prefix", ""), true, e.prefix()+"x")
	e.emit(t, e.pool, newEmitted("w.other_prefix", ""), true, "txbox:other")

	d1, dRelay := newEmitted("d.one", "k"), newEmitted("d.relay_row", "k")
	txD := begin(t, e.pool)
	e.emit(t, txD, d1, true, e.prefix())
	if _, err := txD.Exec(context.Background(), `INSERT INTO `+e.outbox+` (id, event_type, payload, stream_pos) VALUES ($1, $2, 'x', 12345)`,
		dRelay.id.String(), dRelay.typ); err != nil {
		t.Fatal(err)
	}
	if _, err := txD.Exec(context.Background(), `SELECT pg_logical_emit_message(true, $1, 'not a txbox message'::bytea)`, e.prefix()); err != nil {
		t.Fatal(err)
	}
	commit(t, txD)
	commit(t, txA)
	last := newEmitted("e.last", "")
	e.emit(t, e.pool, last, true, e.prefix())

	gotB := next(t, s)
	wantTx(t, gotB, []bool{false, true}, b1, b2)
	gotD := next(t, s)
	if len(gotD.Events) != 2 {
		t.Fatalf("tx D: %d events, want the message and the undecodable one", len(gotD.Events))
	}
	wantTx(t, &store.StreamTx{End: gotD.End, Events: gotD.Events[:1]}, []bool{false}, d1)
	bad := gotD.Events[1].Row
	lsn, lerr := pglogrepl.ParseLSN(bad.Headers[postgres.WALPositionHeader])
	if bad.EventType != store.UndecodableEventType || string(bad.Payload) != "not a txbox message" || lerr != nil ||
		uint64(lsn) <= gotB.End || uint64(lsn) >= gotD.End || !strings.Contains(bad.Invalid, "WAL position "+lsn.String()) || bad.ID == (uuid.UUID{}) {
		t.Errorf("undecodable message: %+v (its position %s, %v)", bad, lsn, lerr)
	}
	gotA := next(t, s)
	wantTx(t, gotA, []bool{false}, a1)
	gotE := next(t, s)
	wantTx(t, gotE, []bool{false}, last)
	var prevEnd, prevPos uint64
	for _, tx := range []*store.StreamTx{gotB, gotD, gotA, gotE} {
		if tx.End <= prevEnd || tx.Events[0].Pos <= prevPos {
			t.Errorf("tx at %s (first pos %x) after %s (last pos %x)", pglogrepl.LSN(tx.End), tx.Events[0].Pos, pglogrepl.LSN(prevEnd), prevPos)
		}
		prevEnd, prevPos = tx.End, tx.Events[len(tx.Events)-1].Pos
	}
}

func confirmedLSN(t *testing.T, e *walEnv) uint64 {
	t.Helper()
	var s string
	if err := e.pool.QueryRow(context.Background(), `SELECT confirmed_lsn::text FROM `+pgx.Identifier{e.schema, "txbox_wal_state"}.Sanitize()+` WHERE slot_name = $1`, e.slot).Scan(&s); err != nil {
		t.Fatal(err)
	}
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(lsn)
}

func outboxCount(t *testing.T, e *walEnv, id uuid.UUID) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+e.outbox+` WHERE id = $1`, id.String()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStreamConfirmResumes: Confirm deletes the acked captured rows and
// persists the position; a reopened stream resumes after it (nothing
// confirmed comes back), and what was not confirmed comes back.
func TestStreamConfirmResumes(t *testing.T) {
	t.Parallel()
	e := openWAL(t, 0)
	ctx := ctxT(t)
	evs := []emitted{newEmitted("t.one", "k"), newEmitted("t.two", "k"), newEmitted("t.three", "k")}
	rows := []emitted{newEmitted("t.two_row", "k"), newEmitted("t.two_spilled", "k")}
	e.emit(t, e.pool, evs[0], true, e.prefix())
	tx := begin(t, e.pool)
	e.emit(t, tx, evs[1], true, e.prefix())
	e.capture(t, tx, rows[0])
	e.capture(t, tx, rows[1])
	commit(t, tx)
	e.emit(t, e.pool, evs[2], true, e.prefix())

	s := e.open(t, nil)
	t1, t2, t3 := next(t, s), next(t, s), next(t, s)
	wantTx(t, t2, []bool{false, true, true}, evs[1], rows[0], rows[1])
	// rows[1] "spilled": the relay does not pass its id, so it stays.
	if err := s.Confirm(ctx, t2.End, []txbox.ID{rows[0].id}); err != nil {
		t.Fatal(err)
	}
	if got := confirmedLSN(t, e); got != t2.End {
		t.Errorf("confirmed_lsn %s, want %s", pglogrepl.LSN(got), pglogrepl.LSN(t2.End))
	}
	if outboxCount(t, e, rows[0].id) != 0 || outboxCount(t, e, rows[1].id) != 1 {
		t.Errorf("after confirm: acked row %d, spilled row %d", outboxCount(t, e, rows[0].id), outboxCount(t, e, rows[1].id))
	}
	// A lower end is ignored.
	if err := s.Confirm(ctx, t1.End, nil); err != nil {
		t.Fatal(err)
	}
	if got := confirmedLSN(t, e); got != t2.End {
		t.Errorf("a lower confirm moved confirmed_lsn to %s", pglogrepl.LSN(got))
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitSlotFree(t, e)

	// Reopened: T3 (never confirmed) first, not T1 or T2.
	s2, err := e.d.OpenStream(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := next(t, s2)
	if got.End != t3.End {
		t.Fatalf("after reopening: tx at %s, want the unconfirmed one at %s", pglogrepl.LSN(got.End), pglogrepl.LSN(t3.End))
	}
	wantTx(t, got, []bool{false}, evs[2])
	if err := s2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitSlotFree(t, e)
	// Not confirmed: it comes back once more.
	s3 := e.open(t, nil)
	if got := next(t, s3); got.End != t3.End {
		t.Fatalf("third open: tx at %s, want %s", pglogrepl.LSN(got.End), pglogrepl.LSN(t3.End))
	}
}

// slotPID is the slot's active_pid, 0 when none.
func slotPID(t *testing.T, e *walEnv) int {
	t.Helper()
	var pid *int32
	if err := e.pool.QueryRow(context.Background(), `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if pid == nil {
		return 0
	}
	return int(*pid)
}

// waitSlotFree waits until no walsender holds the slot: a closed stream's
// walsender exits a moment after the connection closes.
func waitSlotFree(t *testing.T, e *walEnv) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, "the slot to be released", func() bool { return slotPID(t, e) == 0 })
}

// TestStreamBusyAndTakeover: a second OpenStream fails with ErrStreamBusy
// while a stream is open; once the holder's walsender is terminated, the
// holder's Next fails and a new OpenStream succeeds within seconds.
func TestStreamBusyAndTakeover(t *testing.T) {
	t.Parallel()
	e := openWAL(t, 0)
	ctx := ctxT(t)
	s := e.open(t, nil)
	if _, err := e.d.OpenStream(ctx, nil); !errors.Is(err, store.ErrStreamBusy) {
		t.Fatalf("second open: %v, want ErrStreamBusy", err)
	}
	// Past the check (two relays racing), the server's own refusal
	// (SQLSTATE 55006) is ErrStreamBusy too.
	if _, err := e.d.StartStreamUnchecked(ctx); !errors.Is(err, store.ErrStreamBusy) {
		t.Fatalf("START_REPLICATION of an active slot: %v, want ErrStreamBusy", err)
	}
	pid := slotPID(t, e)
	if pid == 0 {
		t.Fatal("no walsender holds the slot")
	}
	if s.ServerPID() != pid {
		t.Errorf("ServerPID %d, the slot's active_pid %d", s.ServerPID(), pid)
	}
	var app string
	if err := e.pool.QueryRow(ctx, `SELECT application_name FROM pg_stat_replication WHERE pid = $1`, pid).Scan(&app); err != nil || app != postgres.DefaultApplicationName {
		t.Errorf("application_name %q (%v), want %q", app, err, postgres.DefaultApplicationName)
	}
	killed := time.Now()
	if _, err := e.pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.Next(nctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the holder's Next after its walsender died: %v", err)
	}
	var s2 store.Stream
	testenv.WaitFor(t, 5*time.Second, "a new stream to open", func() bool {
		var err error
		s2, err = e.d.OpenStream(ctx, nil)
		if err != nil && !errors.Is(err, store.ErrStreamBusy) {
			t.Fatalf("open after takeover: %v", err)
		}
		return err == nil
	})
	t.Logf("a new stream opened %s after the holder's walsender was terminated", time.Since(killed).Round(time.Millisecond))
	ev := newEmitted("after.takeover", "")
	e.emit(t, e.pool, ev, true, e.prefix())
	wantTx(t, next(t, s2), []bool{false}, ev)
	if err := s2.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestStreamSlowConsumer: with wal_sender_timeout 2s, a stream whose
// consumer neither calls Next nor confirms for three times that keeps its
// connection (the status timer answers the server), and then delivers.
// With a status interval past the timeout the server drops the same
// stream, which shows the timeout is in effect.
func TestStreamSlowConsumer(t *testing.T) {
	t.Parallel()
	e := openWAL(t, 2*time.Second)
	ctx := ctxT(t)
	var evs []emitted
	for i := range 3 {
		ev := newEmitted("slow."+string(rune('a'+i)), "")
		evs = append(evs, ev)
		e.emit(t, e.pool, ev, true, e.prefix())
	}
	s := e.open(t, &store.StreamOptions{Window: 1})
	first := next(t, s)
	wantTx(t, first, []bool{false}, evs[0])
	pid := slotPID(t, e)
	// 6s without Next, three times the sender timeout: the walsender
	// must stay the same throughout.
	if testenv.Within(6*time.Second, 100*time.Millisecond, func() bool { return slotPID(t, e) != pid }) {
		t.Fatalf("within 6s without Next: walsender %d, was %d", slotPID(t, e), pid)
	}
	if err := s.Confirm(ctx, first.End, nil); err != nil {
		t.Fatal(err)
	}
	wantTx(t, next(t, s), []bool{false}, evs[1])
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitSlotFree(t, e)

	// The same with a status interval of 30s: the server ends it.
	s2 := e.open(t, &store.StreamOptions{Window: 1, StatusInterval: 30 * time.Second})
	next(t, s2)
	testenv.WaitFor(t, 15*time.Second, "wal_sender_timeout to end a silent stream", func() bool { return slotPID(t, e) == 0 })
}

// TestOpenStreamRefusals: no slot, wal_level and synchronous_standby_names
// as the server has them (the cluster is shared: no ALTER SYSTEM).
func TestOpenStreamRefusals(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	d, err := postgres.New(newPool(t, 2), postgres.Config{Schema: newSchema(t), Source: postgres.SourceWAL,
		WAL: postgres.WALConfig{Slot: "t_noslot_" + strings.TrimPrefix(testenv.UniqueName("x"), "x")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = d.OpenStream(ctx, nil)
	if err == nil || !strings.Contains(err.Error(), "txbox migrate") {
		t.Errorf("open without a slot: %v", err)
	}
	var level, names string
	if err := d.Pool().QueryRow(ctx, `SELECT current_setting('wal_level'), current_setting('synchronous_standby_names')`).Scan(&level, &names); err != nil {
		t.Fatal(err)
	}
	if level != "logical" {
		t.Errorf("the test cluster has wal_level %s", level)
	}
	t.Logf("synchronous_standby_names = %q", names)
}

// TestStreamLostSlot: a state row whose slot is gone is a lost stream,
// with the documented way to recreate it.
func TestStreamLostSlot(t *testing.T) {
	t.Parallel()
	e := openWAL(t, 0)
	ctx := ctxT(t)
	if _, err := e.pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, e.slot); err != nil {
		t.Fatal(err)
	}
	_, err := e.d.OpenStream(ctx, nil)
	if !errors.Is(err, store.ErrStreamLost) || !strings.Contains(err.Error(), "on-slot-lost") {
		t.Errorf("open a dropped slot: %v", err)
	}
	// txbox migrate recreates a lost slot, saying what could not be
	// recovered.
	res, err := e.d.CreateStreamWith(ctx, postgres.CreateStreamParams{Timeout: slotCreateTimeout})
	if err != nil {
		t.Fatalf("create over a lost stream: %v", err)
	}
	if res.Loss == nil || !res.Created || len(res.Warnings) == 0 || !strings.Contains(strings.Join(res.Warnings, " "), "cannot be recovered") {
		t.Errorf("create over a lost stream: %+v", res)
	}
	s := e.open(t, nil)
	ev := newEmitted("after.recreate", "")
	e.emit(t, e.pool, ev, true, e.prefix())
	wantTx(t, next(t, s), []bool{false}, ev)
}

// TestCreateStreamTimeout: slot creation waits for a transaction that holds
// an xid; the timeout ends it with an error that says how to find the
// blocker, and leaves no slot behind. CreateStream is idempotent.
func TestCreateStreamTimeout(t *testing.T) {
	t.Parallel()
	e := openWAL(t, 0)
	ctx := ctxT(t)
	if err := e.d.CreateStream(ctx, time.Second); err != nil {
		t.Fatalf("CreateStream again: %v", err)
	}
	other, err := postgres.New(e.pool, postgres.Config{Schema: e.schema, Source: postgres.SourceWAL,
		WAL: postgres.WALConfig{Slot: e.slot + "_b", Publication: "t_pub_b" + strings.TrimPrefix(e.slot, "t_slot_")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin(t).Exec(`DROP PUBLICATION IF EXISTS t_pub_b` + strings.TrimPrefix(e.slot, "t_slot_"))
	})
	holder := begin(t, e.pool)
	if _, err := holder.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = other.CreateStream(ctx, 2*time.Second)
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "backend_xid") || !strings.Contains(err.Error(), "pg_stat_activity") {
		t.Fatalf("CreateStream with an open transaction: %v", err)
	}
	if took > 15*time.Second {
		t.Errorf("CreateStream returned after %s", took)
	}
	t.Logf("CreateStream gave up after %s: %v", took.Round(time.Millisecond), err)
	_ = holder.Rollback(ctx)
	var n int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, e.slot+"_b").Scan(&n); err != nil || n != 0 {
		t.Errorf("the cancelled slot: %d (%v)", n, err)
	}
}

// slotFlushed is the slot's confirmed_flush_lsn.
func slotFlushed(t *testing.T, e *walEnv) uint64 {
	t.Helper()
	var s string
	if err := e.pool.QueryRow(context.Background(), `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&s); err != nil {
		t.Fatal(err)
	}
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(lsn)
}

func walInsertLSN(t *testing.T, e *walEnv) uint64 {
	t.Helper()
	var s string
	if err := e.pool.QueryRow(context.Background(), `SELECT pg_current_wal_insert_lsn()::text`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(lsn)
}

// TestStreamFlushPosition: the server hears only confirmed positions
// while a transaction is in flight, however much WAL it sent meanwhile;
// Confirm reports at once; with nothing in flight, the position follows
// the server's WAL (keepalives, event-less transactions).
func TestStreamFlushPosition(t *testing.T) {
	t.Parallel()
	e := openWAL(t, 0)
	ctx := ctxT(t)
	s := e.open(t, &store.StreamOptions{StatusInterval: 200 * time.Millisecond})
	ev := newEmitted("flush.one", "")
	e.emit(t, e.pool, ev, true, e.prefix())
	tx1 := next(t, s)
	// Event-less transactions after it: decoded and passed, but tx1 is
	// in flight.
	for range 3 {
		e.emit(t, e.pool, newEmitted("flush.other", ""), true, "txbox:other")
	}
	// Wait until the server has sent past them, and has then heard two
	// status updates from the stream.
	after := walInsertLSN(t, e)
	testenv.WaitFor(t, 10*time.Second, "the server to send past the event-less transactions", func() bool {
		var sent string
		err := e.pool.QueryRow(ctx, `SELECT sent_lsn::text FROM pg_stat_replication WHERE pid = $1`, slotPID(t, e)).Scan(&sent)
		lsn, _ := pglogrepl.ParseLSN(sent)
		return err == nil && uint64(lsn) >= after
	})
	var sentAt time.Time
	if err := e.pool.QueryRow(ctx, `SELECT now()`).Scan(&sentAt); err != nil {
		t.Fatal(err)
	}
	replies := 0
	var lastReply time.Time
	testenv.WaitFor(t, 10*time.Second, "two status updates", func() bool {
		var at *time.Time
		if err := e.pool.QueryRow(ctx, `SELECT reply_time FROM pg_stat_replication WHERE pid = $1`, slotPID(t, e)).Scan(&at); err != nil {
			t.Fatal(err)
		}
		if at != nil && at.After(sentAt) && !at.Equal(lastReply) {
			replies++
			lastReply = *at
		}
		return replies >= 2
	})
	if f := slotFlushed(t, e); f >= tx1.End {
		t.Fatalf("confirmed_flush_lsn %s reached the unconfirmed transaction's end %s", pglogrepl.LSN(f), pglogrepl.LSN(tx1.End))
	}
	if err := s.Confirm(ctx, tx1.End, nil); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "the confirmed position to reach the server", func() bool { return slotFlushed(t, e) >= tx1.End })
	past := walInsertLSN(t, e)
	e.emit(t, e.pool, newEmitted("flush.other", ""), true, "txbox:other")
	testenv.WaitFor(t, 20*time.Second, "the position to follow the WAL with nothing in flight", func() bool { return slotFlushed(t, e) > past })
	if got := confirmedLSN(t, e); got != tx1.End {
		t.Errorf("persisted %s, want the confirmed %s (keepalive positions are not persisted)", pglogrepl.LSN(got), pglogrepl.LSN(tx1.End))
	}
}

// TestStreamCapturedRowFields: a captured row's columns (a future due_at,
// a NULL key, headers with a non-string value) as the claim reads them.
func TestStreamCapturedRowFields(t *testing.T) {
	t.Parallel()
	e := openWAL(t, 0)
	s := e.open(t, nil)
	id := uuid.Must(uuid.NewV7())
	due := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	if _, err := e.pool.Exec(context.Background(), `INSERT INTO `+e.outbox+` (id, event_type, payload, headers, due_at, attempts) VALUES ($1, 'row.future', '\x00ff', '{"n": 3, "s": "x"}', $2, 2)`,
		id.String(), due); err != nil {
		t.Fatal(err)
	}
	tx := next(t, s)
	if len(tx.Events) != 1 {
		t.Fatalf("%d events", len(tx.Events))
	}
	ev := tx.Events[0]
	r := ev.Row
	if !ev.Captured || r.ID != id || r.EventType != "row.future" || r.Key != "" || !bytes.Equal(r.Payload, []byte{0, 0xff}) ||
		r.Headers["n"] != "3" || r.Headers["s"] != "x" || r.Attempts != 2 || !ev.NotBefore.Equal(due) || r.Invalid != "" || r.Seq == 0 {
		t.Errorf("captured row: %+v, not before %v", ev, ev.NotBefore)
	}
}

// TestCreateStreamRestoresPublication: an existing publication of another
// shape is altered back, not dropped.
func TestCreateStreamRestoresPublication(t *testing.T) {
	t.Parallel()
	e := openWAL(t, 0)
	ctx := ctxT(t)
	pub := e.d.WAL().Publication
	var oid1 uint32
	if err := e.pool.QueryRow(ctx, `SELECT oid FROM pg_publication WHERE pubname = $1`, pub).Scan(&oid1); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `ALTER PUBLICATION `+pub+` SET TABLE `+e.outbox); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `ALTER PUBLICATION `+pub+` SET (publish = 'insert, update, delete')`); err != nil {
		t.Fatal(err)
	}
	if err := e.d.CreateStream(ctx, slotCreateTimeout); err != nil {
		t.Fatal(err)
	}
	var oid2 uint32
	var upd bool
	var filter *string
	if err := e.pool.QueryRow(ctx, `SELECT p.oid, p.pubupdate, t.rowfilter FROM pg_publication p JOIN pg_publication_tables t ON t.pubname = p.pubname WHERE p.pubname = $1`, pub).
		Scan(&oid2, &upd, &filter); err != nil {
		t.Fatal(err)
	}
	if oid2 != oid1 || upd || filter == nil || *filter != "(stream_pos IS NULL)" {
		t.Errorf("publication after CreateStream: oid %d (was %d), update %v, filter %v", oid2, oid1, upd, filter)
	}
}

// BenchmarkStreamDelivery reads events through a real stream: b.N
// messages of 256 bytes, emitted beforehand in transactions of 100, read
// with Next and confirmed per transaction (one durable commit each).
func BenchmarkStreamDelivery(b *testing.B) {
	e := openWAL(b, 0)
	ctx := context.Background()
	payload := bytes.Repeat([]byte("x"), 256)
	const perTx = 100
	for i := 0; i < b.N; i += perTx {
		batch := &pgx.Batch{}
		for j := i; j < min(i+perTx, b.N); j++ {
			msg := walmsg.Append(nil, uuid.Must(uuid.NewV7()), time.Now(), time.Time{}, "bench.event", "k", nil, payload)
			batch.Queue(`SELECT pg_logical_emit_message(true, $1, $2::bytea)`, e.prefix(), msg)
		}
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := tx.SendBatch(ctx, batch).Close(); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	s := e.open(b, nil)
	for got := 0; got < b.N; {
		tx := next(b, s)
		got += len(tx.Events)
		if err := s.Confirm(ctx, tx.End, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// TestStreamDeferredEmit: an event with a future not-before, from
// txbox_emit and from the Go publisher, is a message of the stream with
// its NotBefore, in commit order before the key's later event, and
// nothing is in the outbox table at publish time (the relay writes it
// there itself, at its place in the stream). The same key's immediate
// emit after it comes after it.
func TestStreamDeferredEmit(t *testing.T) {
	t.Parallel()
	e := openWAL(t, 0)
	ctx := ctxT(t)
	s := e.open(t, nil)
	emit := pgx.Identifier{e.schema, "txbox_emit"}.Sanitize()

	var sqlDeferred, sqlNow uuid.UUID
	var nb time.Time
	if err := e.pool.QueryRow(ctx, `SELECT `+emit+`('acct', 'kd', 'one'::bytea, '{"h": "v"}', now() + interval '1 hour'), now() + interval '1 hour'`).Scan(&sqlDeferred, &nb); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.QueryRow(ctx, `SELECT `+emit+`('acct', 'kd', 'two'::bytea)`).Scan(&sqlNow); err != nil {
		t.Fatal(err)
	}
	goDeferred := &txbox.Event{ID: txbox.NewID(), Type: "acct", Key: "kg", Payload: []byte("three"),
		NotBefore: time.Now().Add(time.Hour).Truncate(time.Microsecond)}
	goNow := &txbox.Event{ID: txbox.NewID(), Type: "acct", Key: "kg", Payload: []byte("four")}
	for _, ev := range []*txbox.Event{goDeferred, goNow} {
		tx := begin(t, e.pool)
		if err := e.d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{ev}}); err != nil {
			t.Fatal(err)
		}
		commit(t, tx)
	}
	var rows int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM `+e.outbox).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("%d rows in the outbox table after the emits (%v), want none", rows, err)
	}

	want := []struct {
		id        uuid.UUID
		key       string
		payload   string
		notBefore time.Time
	}{
		{sqlDeferred, "kd", "one", nb}, {sqlNow, "kd", "two", time.Time{}},
		{goDeferred.ID, "kg", "three", goDeferred.NotBefore}, {goNow.ID, "kg", "four", time.Time{}},
	}
	for i, w := range want {
		tx := next(t, s)
		if len(tx.Events) != 1 {
			t.Fatalf("transaction %d: %d events, want 1", i, len(tx.Events))
		}
		ev := tx.Events[0]
		if ev.Row.ID != w.id || ev.Row.EventType != "acct" || ev.Row.Key != w.key || string(ev.Row.Payload) != w.payload ||
			ev.Row.Invalid != "" || ev.Captured || !ev.NotBefore.Equal(w.notBefore) {
			t.Errorf("event %d: %+v, not before %s; want id %s, key %s, not before %s", i, ev.Row, ev.NotBefore, w.id, w.key, w.notBefore)
		}
	}
}

// TestStreamRecreate: StreamRecreate does nothing while the slot is there
// or after a planned drop (no state), recreates a lost slot once however
// many relays ask at the same time, reports the loss from the last
// confirmed position, and records it in the state that StreamStatus reads;
// the new stream delivers what is emitted after it.
func TestStreamRecreate(t *testing.T) {
	t.Parallel()
	e := openWAL(t, 0)
	ctx := ctxT(t)
	if loss, err := e.d.StreamRecreate(ctx, slotCreateTimeout); err != nil || loss != nil {
		t.Fatalf("recreate a slot that is there: %+v, %v", loss, err)
	}
	s := e.open(t, nil)
	ev := newEmitted("before.loss", "")
	e.emit(t, e.pool, ev, true, e.prefix())
	tx := next(t, s)
	if err := s.Confirm(ctx, tx.End, nil); err != nil {
		t.Fatal(err)
	}
	_ = s.Close(ctx)
	waitSlotFree(t, e)
	if _, err := e.pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, e.slot); err != nil {
		t.Fatal(err)
	}
	losses := make(chan *store.StreamLoss, 3)
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loss, err := e.d.StreamRecreate(ctx, slotCreateTimeout)
			if err != nil {
				t.Error(err)
			}
			losses <- loss
		}()
	}
	wg.Wait()
	close(losses)
	var got []*store.StreamLoss
	for l := range losses {
		if l != nil {
			got = append(got, l)
		}
	}
	if len(got) != 1 {
		t.Fatalf("%d recreations by 3 concurrent calls, want 1", len(got))
	}
	if l := got[0]; l.From != tx.End || l.To < l.From || l.LastConfirm.IsZero() {
		t.Errorf("loss %+v: want it from the confirmed end %X", l, tx.End)
	}
	st, err := e.d.StreamStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.LastLoss == nil || st.LastLoss.From != tx.End {
		t.Errorf("status loss %+v", st.LastLoss)
	}
	s = e.open(t, nil)
	after := newEmitted("after.loss", "")
	e.emit(t, e.pool, after, true, e.prefix())
	wantTx(t, next(t, s), []bool{false}, after)
	_ = s.Close(ctx)
	waitSlotFree(t, e)
	if err := e.d.DropStream(ctx); err != nil {
		t.Fatal(err)
	}
	if loss, err := e.d.StreamRecreate(ctx, slotCreateTimeout); err != nil || loss != nil {
		t.Errorf("recreate after a planned drop: %+v, %v", loss, err)
	}
	if err := e.d.CreateStream(ctx, slotCreateTimeout); err != nil {
		t.Fatal(err)
	}
}
