package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// spillEnv is a WAL mode driver on a fresh schema, with no slot: the tests
// of this file write the stream state row themselves, which is all the
// claims and the spill read.
type spillEnv struct {
	d      *postgres.Driver
	pool   *pgxpool.Pool
	schema string
	slot   string
}

func newSpillEnv(t *testing.T) *spillEnv {
	t.Helper()
	schema := newSchema(t)
	pool := newPool(t, 6)
	slot := testenv.UniqueName("spill_slot_")
	d, err := postgres.New(pool, postgres.Config{Schema: schema, Source: postgres.SourceWAL, WAL: postgres.WALConfig{Slot: slot}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return &spillEnv{d: d, pool: pool, schema: schema, slot: slot}
}

func (e *spillEnv) table(name string) string {
	return pgx.Identifier{e.schema, "txbox_" + name}.Sanitize()
}

func (e *spillEnv) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := e.pool.Exec(ctxT(t), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// capture inserts rows as a producer does in WAL mode with plain SQL,
// in one transaction: stream_pos NULL, txid the transaction's.
func (e *spillEnv) capture(t *testing.T, typ, key string, n int) []txbox.ID {
	t.Helper()
	ids := make([]txbox.ID, n)
	for i := range ids {
		ids[i] = txbox.NewID()
	}
	var k any
	if key != "" {
		k = key
	}
	e.exec(t, `INSERT INTO `+e.table("outbox")+` (id, event_type, event_key, payload)
		SELECT u, $2, $3, '\x01' FROM unnest($1::uuid[]) u`, ids, typ, k)
	return ids
}

// takeSnapshot writes the slot's state row with a snapshot taken now, as
// `txbox migrate` does with the slot's creation snapshot.
func (e *spillEnv) takeSnapshot(t *testing.T) {
	t.Helper()
	e.exec(t, `INSERT INTO `+e.table("wal_state")+` (slot_name, publication, snapshot) VALUES ($1, 'p', pg_current_snapshot())`, e.slot)
}

func ids(rows []*store.OutboxRow) []txbox.ID {
	out := make([]txbox.ID, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

func sameIDs(a, b []txbox.ID) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	cmp := func(p, q txbox.ID) int { return strings.Compare(p.String(), q.String()) }
	slices.SortFunc(x, cmp)
	slices.SortFunc(y, cmp)
	return slices.Equal(x, y)
}

func claimParams(typ string, ordered bool) *store.OutboxClaimParams {
	return &store.OutboxClaimParams{EventType: typ, Limit: 100, LeaseDuration: time.Minute, OrderedByKey: ordered}
}

// ack finishes rows as acked (lease claim).
func ack(t *testing.T, d *postgres.Driver, rows []*store.OutboxRow) {
	t.Helper()
	items := make([]store.OutboxFinishItem, len(rows))
	for i, r := range rows {
		items[i] = store.OutboxFinishItem{ID: r.ID, LeaseToken: r.LeaseToken, Outcome: store.OutcomeAcked}
	}
	res, err := d.OutboxFinish(ctxT(t), &store.OutboxFinishParams{Items: items})
	if err != nil || res.Finished != len(rows) {
		t.Fatalf("finish: %+v, %v", res, err)
	}
}

// captured returns the spill item of a captured row.
func captured(id txbox.ID, typ, key string, pos uint64, outcome store.Outcome) *store.StreamSpillItem {
	return &store.StreamSpillItem{Outcome: outcome, Attempts: 1, Error: "down",
		Event: &store.StreamEvent{Captured: true, Pos: pos, Row: store.OutboxRow{ID: id, EventType: typ, Key: key}}}
}

// emittedSpill returns the spill item of an emitted event.
func emittedSpill(id txbox.ID, typ, key string, pos uint64, outcome store.Outcome) *store.StreamSpillItem {
	return &store.StreamSpillItem{Outcome: outcome, Attempts: 2, Error: "down",
		Event: &store.StreamEvent{Pos: pos, Row: store.OutboxRow{ID: id, EventType: typ, Key: key,
			Payload: []byte("p" + id.String()), Headers: map[string]string{"h": "v"}, CreatedAt: time.Now().Add(-time.Minute)}}}
}

// TestWALClaimShare: in WAL mode the poller claims captured rows visible
// in the slot's creation snapshot and rows the relay wrote, never a
// captured row the stream owns, until StreamSpill hands it over; the lease
// claim and the lock claim alike.
func TestWALClaimShare(t *testing.T) {
	t.Parallel()
	e := newSpillEnv(t)
	ctx := ctxT(t)
	const typ = "share.t"
	before := e.capture(t, typ, "", 3)
	// Without a state row only relay-written rows are the poller's.
	if rows, err := e.d.OutboxClaim(ctx, claimParams(typ, false)); err != nil || len(rows) != 0 {
		t.Fatalf("claim without a stream state: %d rows, %v; want none", len(rows), err)
	}
	e.takeSnapshot(t)
	after := e.capture(t, typ, "", 2)

	rows, err := e.d.OutboxClaim(ctx, claimParams(typ, false))
	if err != nil {
		t.Fatal(err)
	}
	if !sameIDs(ids(rows), before) {
		t.Fatalf("lease claim took %v, want the rows before the snapshot %v", ids(rows), before)
	}
	ack(t, e.d, rows)
	lb, err := e.d.OutboxLock(ctx, claimParams(typ, false))
	if err != nil || lb != nil {
		t.Fatalf("lock claim of stream-owned rows: %v, %v; want nothing", lb, err)
	}

	// Spill one captured row in place, and one emitted event.
	ev := txbox.NewID()
	if err := e.d.StreamSpill(ctx, []*store.StreamSpillItem{
		captured(after[0], typ, "", 10, store.OutcomeReleased),
		emittedSpill(ev, typ, "", 11, store.OutcomeRetry),
	}); err != nil {
		t.Fatal(err)
	}
	lb, err = e.d.OutboxLock(ctx, claimParams(typ, false))
	if err != nil || lb == nil {
		t.Fatalf("lock claim after the spill: %v, %v", lb, err)
	}
	if got := ids(lb.Rows()); !sameIDs(got, []txbox.ID{after[0], ev}) {
		t.Fatalf("lock claim took %v, want the spilled rows %v and %v", got, after[0], ev)
	}
	for _, r := range lb.Rows() {
		if r.ID == ev && (string(r.Payload) != "p"+ev.String() || r.Headers["h"] != "v" || r.Attempts != 2) {
			t.Fatalf("emitted spill read back as %+v", r)
		}
	}
	items := []store.OutboxFinishItem{}
	for _, r := range lb.Rows() {
		items = append(items, store.OutboxFinishItem{ID: r.ID, Outcome: store.OutcomeAcked})
	}
	if res, err := lb.Finish(ctx, &store.OutboxFinishParams{Items: items, DeleteAcked: true}); err != nil || res.Finished != 2 {
		t.Fatalf("lock finish: %+v, %v", res, err)
	}
	// The other captured row is still the stream's.
	if rows, err := e.d.OutboxClaim(ctx, claimParams(typ, false)); err != nil || len(rows) != 0 {
		t.Fatalf("claim: %v, %v; want none (the row %v is the stream's)", ids(rows), err, after[1])
	}
	var left int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM `+e.table("outbox")+` WHERE id = $1 AND status = 'PENDING' AND stream_pos IS NULL`, after[1]).Scan(&left); err != nil || left != 1 {
		t.Fatalf("the stream's row: %d, %v", left, err)
	}
	// stream_pos 0 and txid 0 rows are the poller's whatever the snapshot.
	zero := txbox.NewID()
	e.exec(t, `INSERT INTO `+e.table("outbox")+` (id, event_type, payload, stream_pos) VALUES ($1, $2, '\x00', 0)`, zero, typ)
	old := txbox.NewID()
	e.exec(t, `INSERT INTO `+e.table("outbox")+` (id, event_type, payload, txid) VALUES ($1, $2, '\x00', '0')`, old, typ)
	if rows, err := e.d.OutboxClaim(ctx, claimParams(typ, false)); err != nil || !sameIDs(ids(rows), []txbox.ID{zero, old}) {
		t.Fatalf("claim: %v, %v; want %v and %v", ids(rows), err, zero, old)
	}
}

// TestWALOrderedSpill: an ordered type's captured rows after the snapshot
// wait for the stream, holding their key; once spilled, the key's rows
// come in stream order, captured and emitted alike, even where the ids
// of the stream order go backwards.
func TestWALOrderedSpill(t *testing.T) {
	t.Parallel()
	e := newSpillEnv(t)
	ctx := ctxT(t)
	const typ = "order.t"
	pre := e.capture(t, typ, "k", 1)
	e.takeSnapshot(t)
	// Another key and a keyless row, owned by the stream: never claimed.
	e.capture(t, typ, "other", 2)
	e.capture(t, typ, "", 1)
	c1 := e.capture(t, typ, "k", 1)[0]
	storeharness.PostgresWaitHorizon(t, e.pool)

	rows, err := e.d.OutboxClaim(ctx, claimParams(typ, true))
	if err != nil || !sameIDs(ids(rows), pre) {
		t.Fatalf("ordered claim: %v, %v; want the row before the snapshot %v", ids(rows), err, pre)
	}
	ack(t, e.d, rows)
	if rows, err := e.d.OutboxClaim(ctx, claimParams(typ, true)); err != nil || len(rows) != 0 {
		t.Fatalf("ordered claim of the stream's rows: %v, %v; want none", ids(rows), err)
	}
	if lb, err := e.d.OutboxLock(ctx, claimParams(typ, true)); err != nil || lb != nil {
		t.Fatalf("ordered lock claim of the stream's rows: %v, %v; want none", lb, err)
	}

	// Stream order: c1, then emitted events whose ids go backwards.
	e3, e2 := txbox.NewID(), txbox.NewID()
	e1 := txbox.NewID()
	want := []txbox.ID{c1, e2, e3, e1}
	err = e.d.StreamSpill(ctx, []*store.StreamSpillItem{
		emittedSpill(e1, typ, "k", 1<<40+3, store.OutcomeReleased), // given out of order: the spill sorts by position
		captured(c1, typ, "k", 1<<40, store.OutcomeReleased),
		emittedSpill(e2, typ, "k", 1<<40+1, store.OutcomeReleased),
		emittedSpill(e3, typ, "k", 1<<40+2, store.OutcomeReleased),
	})
	if err != nil {
		t.Fatal(err)
	}
	storeharness.PostgresWaitHorizon(t, e.pool)
	var got []txbox.ID
	for range want {
		p := claimParams(typ, true)
		p.Limit = 1
		rows, err := e.d.OutboxClaim(ctx, p)
		if err != nil || len(rows) != 1 {
			t.Fatalf("ordered claim %d: %v, %v", len(got), ids(rows), err)
		}
		got = append(got, rows[0].ID)
		ack(t, e.d, rows)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("claimed %v, want the stream order %v", got, want)
	}
	// And with a run of a key at once: (Seq, ID) order is stream order.
	f1, f0 := txbox.NewID(), txbox.NewID()
	if err := e.d.StreamSpill(ctx, []*store.StreamSpillItem{
		emittedSpill(f1, typ, "k", 1<<41, store.OutcomeReleased),
		emittedSpill(f0, typ, "k", 1<<41+1, store.OutcomeReleased),
	}); err != nil {
		t.Fatal(err)
	}
	storeharness.PostgresWaitHorizon(t, e.pool)
	p := claimParams(typ, true)
	p.KeyRun = 10
	rows, err = e.d.OutboxClaim(ctx, p)
	if err != nil || len(rows) != 2 {
		t.Fatalf("ordered claim of a run: %v, %v", ids(rows), err)
	}
	slices.SortFunc(rows, func(a, b *store.OutboxRow) int {
		if a.Seq != b.Seq {
			return int(a.Seq - b.Seq)
		}
		return strings.Compare(a.ID.String(), b.ID.String())
	})
	if rows[0].ID != f1 || rows[1].ID != f0 {
		t.Fatalf("a run in (Seq, ID) order: %v, want %v then %v", ids(rows), f1, f0)
	}
	ack(t, e.d, rows)

	// A captured row spilled after an emitted event of its key goes
	// behind it, though its producer's transaction is the older one.
	c2 := e.capture(t, typ, "k", 1)[0]
	g := txbox.NewID()
	for _, it := range []*store.StreamSpillItem{emittedSpill(g, typ, "k", 1<<42, store.OutcomeReleased), captured(c2, typ, "k", 1<<42+1, store.OutcomeReleased)} {
		if err := e.d.StreamSpill(ctx, []*store.StreamSpillItem{it}); err != nil {
			t.Fatal(err)
		}
	}
	storeharness.PostgresWaitHorizon(t, e.pool)
	got = nil
	for range 2 {
		p := claimParams(typ, true)
		p.Limit = 1
		rows, err := e.d.OutboxClaim(ctx, p)
		if err != nil || len(rows) != 1 {
			t.Fatalf("ordered claim: %v, %v", ids(rows), err)
		}
		got = append(got, rows[0].ID)
		ack(t, e.d, rows)
	}
	if !slices.Equal(got, []txbox.ID{g, c2}) {
		t.Fatalf("claimed %v, want the stream order %v, %v", got, g, c2)
	}
}

// TestWALFailedSpillParks: a FAILED spill goes to the dead-letter table
// through the store's mover with its txid, and parks its key for the
// ordered claim until it is resolved.
func TestWALFailedSpillParks(t *testing.T) {
	t.Parallel()
	e := newSpillEnv(t)
	ctx := ctxT(t)
	const typ = "park.t"
	e.takeSnapshot(t)
	bad, next := txbox.NewID(), txbox.NewID()
	if err := e.d.StreamSpill(ctx, []*store.StreamSpillItem{
		emittedSpill(bad, typ, "k", 100, store.OutcomeFailed),
		emittedSpill(next, typ, "k", 101, store.OutcomeRetry),
	}); err != nil {
		t.Fatal(err)
	}
	var txid string
	if err := e.pool.QueryRow(ctx, `SELECT txid::text FROM `+e.table("outbox")+` WHERE id = $1 AND status = 'FAILED' AND processed_at IS NOT NULL`, bad).Scan(&txid); err != nil {
		t.Fatalf("the failed spill: %v", err)
	}
	if n, err := e.d.DeadLetterMove(ctx, &store.DeadLetterMoveParams{Limit: 10}); err != nil || n != 1 {
		t.Fatalf("dead-letter move: %d, %v", n, err)
	}
	var dlTxid, lastErr string
	var attempts int
	if err := e.pool.QueryRow(ctx, `SELECT txid::text, last_error, attempts FROM `+e.table("dead_letter")+` WHERE id = $1 AND status = 'UNRESOLVED'`, bad).Scan(&dlTxid, &lastErr, &attempts); err != nil {
		t.Fatal(err)
	}
	if dlTxid != txid || lastErr != "down" || attempts != 2 {
		t.Fatalf("dead letter: txid %s (row's %s), error %q, attempts %d", dlTxid, txid, lastErr, attempts)
	}
	storeharness.PostgresWaitHorizon(t, e.pool)
	if rows, err := e.d.OutboxClaim(ctx, claimParams(typ, true)); err != nil || len(rows) != 0 {
		t.Fatalf("ordered claim of a parked key: %v, %v; want none", ids(rows), err)
	}
	keys, err := e.d.StreamSpilledKeys(ctx, nil, 10)
	if err != nil || !slices.Equal(keys, []store.StreamKey{{EventType: typ, Key: "k"}}) {
		t.Fatalf("spilled keys: %v, %v", keys, err)
	}
	if n, err := e.d.DeadLetterResolve(ctx, []txbox.ID{bad}); err != nil || n != 1 {
		t.Fatalf("resolve: %d, %v", n, err)
	}
	rows, err := e.d.OutboxClaim(ctx, claimParams(typ, true))
	if err != nil || !sameIDs(ids(rows), []txbox.ID{next}) {
		t.Fatalf("ordered claim after the resolve: %v, %v; want %v", ids(rows), err, next)
	}
	ack(t, e.d, rows)
	if keys, err := e.d.StreamSpilledKeys(ctx, nil, 10); err != nil || len(keys) != 0 {
		t.Fatalf("spilled keys when done: %v, %v", keys, err)
	}
}

// TestStreamSpillRepeat: a spill repeated (after a failure the caller
// could not tell from a success) changes nothing: an emitted event keeps
// its first row, a captured row already spilled is not rewritten.
func TestStreamSpillRepeat(t *testing.T) {
	t.Parallel()
	e := newSpillEnv(t)
	ctx := ctxT(t)
	const typ = "repeat.t"
	e.takeSnapshot(t)
	c := e.capture(t, typ, "k", 1)[0]
	ev := txbox.NewID()
	first := []*store.StreamSpillItem{captured(c, typ, "k", 5, store.OutcomeRetry), emittedSpill(ev, typ, "k", 6, store.OutcomeRetry)}
	if err := e.d.StreamSpill(ctx, first); err != nil {
		t.Fatal(err)
	}
	read := func() string {
		var s string
		if err := e.pool.QueryRow(ctx, `SELECT string_agg(concat_ws('/', id, status, attempts, stream_pos, txid, last_error, payload), ' ' ORDER BY id) FROM `+e.table("outbox")).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	was := read()
	again := []*store.StreamSpillItem{captured(c, typ, "k", 5, store.OutcomeFailed), emittedSpill(ev, typ, "k", 6, store.OutcomeFailed)}
	again[0].Attempts, again[1].Attempts = 9, 9
	again[1].Event.Row.Payload = []byte("changed")
	if err := e.d.StreamSpill(ctx, again); err != nil {
		t.Fatal(err)
	}
	if now := read(); now != was {
		t.Fatalf("a repeated spill changed the rows:\n%s\nwas\n%s", now, was)
	}
	for _, s := range []string{"/PENDING/1/5/", "/PENDING/2/6/"} {
		if !strings.Contains(was, s) {
			t.Fatalf("rows %s: want %s", was, s)
		}
	}
}

// TestStreamSpillInvalid: bad input is a typed error and writes nothing.
func TestStreamSpillInvalid(t *testing.T) {
	t.Parallel()
	e := newSpillEnv(t)
	ctx := ctxT(t)
	ok := func() *store.StreamSpillItem { return emittedSpill(txbox.NewID(), "bad.t", "", 1, store.OutcomeRetry) }
	cases := map[string]func(*store.StreamSpillItem){
		"nil event":         func(it *store.StreamSpillItem) { it.Event = nil },
		"acked":             func(it *store.StreamSpillItem) { it.Outcome = store.OutcomeAcked },
		"position 0":        func(it *store.StreamSpillItem) { it.Event.Pos = 0 },
		"position > int64":  func(it *store.StreamSpillItem) { it.Event.Pos = 1 << 63 },
		"no id":             func(it *store.StreamSpillItem) { it.Event.Row.ID = txbox.ID{} },
		"bad type":          func(it *store.StreamSpillItem) { it.Event.Row.EventType = "a b" },
		"negative attempts": func(it *store.StreamSpillItem) { it.Attempts = -1 },
	}
	for name, spoil := range cases {
		it := ok()
		spoil(it)
		if err := e.d.StreamSpill(ctx, []*store.StreamSpillItem{ok(), it}); !errors.Is(err, store.ErrInvalidParams) {
			t.Errorf("%s: %v, want store.ErrInvalidParams", name, err)
		}
	}
	if err := e.d.StreamSpill(ctx, []*store.StreamSpillItem{nil}); !errors.Is(err, store.ErrInvalidParams) {
		t.Errorf("nil item: %v", err)
	}
	big := make([]*store.StreamSpillItem, postgres.MaxSpillItems+1)
	err := e.d.StreamSpill(ctx, big)
	if !errors.Is(err, postgres.ErrSpillTooLarge) || !errors.Is(err, store.ErrInvalidParams) {
		t.Errorf("%d items: %v, want ErrSpillTooLarge", len(big), err)
	}
	var n int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM `+e.table("outbox")).Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows after invalid spills: %d, %v", n, err)
	}
	if err := e.d.StreamSpill(ctx, nil); err != nil {
		t.Fatalf("empty spill: %v", err)
	}
	for _, limit := range []int{0, postgres.MaxSpilledKeys + 1} {
		if _, err := e.d.StreamSpilledKeys(ctx, nil, limit); !errors.Is(err, store.ErrInvalidParams) {
			t.Errorf("spilled keys limit %d: %v", limit, err)
		}
	}
}

// TestStreamSpilledKeys: the pairs with unfinished rows the poller owns or
// an unresolved dead letter, in order, paged; not the stream's captured
// rows, keyless rows, finished rows or resolved dead letters.
func TestStreamSpilledKeys(t *testing.T) {
	t.Parallel()
	e := newSpillEnv(t)
	ctx := ctxT(t)
	e.capture(t, "a.t", "k1", 2) // before the snapshot: the poller's
	e.takeSnapshot(t)
	e.capture(t, "a.t", "k0", 1) // the stream's
	e.capture(t, "a.t", "", 1)
	if err := e.d.StreamSpill(ctx, []*store.StreamSpillItem{
		emittedSpill(txbox.NewID(), "a.t", "k2", 1, store.OutcomeRetry),
		emittedSpill(txbox.NewID(), "b.t", "k1", 2, store.OutcomeFailed),
		emittedSpill(txbox.NewID(), "b.t", "", 3, store.OutcomeRetry),
	}); err != nil {
		t.Fatal(err)
	}
	e.exec(t, `INSERT INTO `+e.table("outbox")+` (id, event_type, event_key, payload, status, stream_pos) VALUES ($1, 'a.t', 'k9', '\x00', 'PROCESSED', 7)`, txbox.NewID())
	e.exec(t, `INSERT INTO `+e.table("dead_letter")+` (id, event_type, event_key, payload, created_at, status) VALUES
		($1, 'a.t', 'k3', '\x00', now(), 'UNRESOLVED'), ($2, 'a.t', 'k8', '\x00', now(), 'RESOLVED'), ($3, 'a.t', 'k2', '\x00', now(), 'UNRESOLVED')`,
		txbox.NewID(), txbox.NewID(), txbox.NewID())
	want := []store.StreamKey{{EventType: "a.t", Key: "k1"}, {EventType: "a.t", Key: "k2"}, {EventType: "a.t", Key: "k3"}, {EventType: "b.t", Key: "k1"}}
	var got []store.StreamKey
	var after *store.StreamKey
	for range 10 {
		page, err := e.d.StreamSpilledKeys(ctx, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 2 {
			t.Fatalf("page of %d, limit 2", len(page))
		}
		got = append(got, page...)
		if len(page) < 2 {
			break
		}
		after = &page[len(page)-1]
	}
	if !slices.Equal(got, want) {
		t.Fatalf("spilled keys %v, want %v", got, want)
	}
}

// TestStreamSpilledKeysRoutes: the rows of a fan-out type are split by
// route in the outbox's key index; the pages still list each (type, key)
// once, in order, whatever routes hold it, and skip none: the cursor's
// type is walked route by route from the cursor's key.
func TestStreamSpilledKeysRoutes(t *testing.T) {
	t.Parallel()
	e := newSpillEnv(t)
	ctx := ctxT(t)
	for _, r := range []struct{ typ, route, key string }{
		{"c.t", "", "k5"}, {"c.t", "hook", "k1"}, {"c.t", "hook", "k3"}, {"c.t", "hook", "k6"},
		{"c.t", "kafka", "k2"}, {"c.t", "kafka", "k3"}, {"c.t", "kafka", "k4"}, {"c.t", "nats", "k0"},
		{"d.t", "kafka", "k1"}, {"d.t", "nats", "k0"},
	} {
		e.exec(t, `INSERT INTO `+e.table("outbox")+` (id, event_type, event_key, route, payload, stream_pos) VALUES ($1, $2, $3, $4, '\x00', 0)`,
			txbox.NewID(), r.typ, r.key, r.route)
	}
	var want []store.StreamKey
	for _, k := range []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6"} {
		want = append(want, store.StreamKey{EventType: "c.t", Key: k})
	}
	want = append(want, store.StreamKey{EventType: "d.t", Key: "k0"}, store.StreamKey{EventType: "d.t", Key: "k1"})
	for _, limit := range []int{1, 2, 3, 100} {
		var got []store.StreamKey
		var after *store.StreamKey
		for range 20 {
			page, err := e.d.StreamSpilledKeys(ctx, after, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) > limit {
				t.Fatalf("page of %d, limit %d", len(page), limit)
			}
			got = append(got, page...)
			if len(page) < limit {
				break
			}
			after = &page[len(page)-1]
		}
		if !slices.Equal(got, want) {
			t.Fatalf("limit %d: spilled keys %v, want %v", limit, got, want)
		}
	}
}

// TestStreamStatus reads a real slot's health, in a database of its own
// (dropped with its slot when the test ends): idle, then streamed by a
// walsender; and the last confirm's time from the stream state. A missing
// slot is ErrNoSlot.
func TestStreamStatus(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, dbURL := testenv.PostgresDatabase(t, admin(t))
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	slot := testenv.UniqueName("status_slot_")
	d, err := postgres.New(pool, postgres.Config{Source: postgres.SourceWAL, WAL: postgres.WALConfig{Slot: slot}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := d.StreamStatus(ctx); !errors.Is(err, postgres.ErrNoSlot) {
		t.Fatalf("status of a missing slot: %v, want ErrNoSlot", err)
	}
	// Creating a logical slot waits for the transactions running in the
	// cluster, other tests' too: hence ctx's deadline.
	for _, q := range []string{
		`CREATE PUBLICATION p FOR ALL TABLES`,
		`SELECT pg_create_logical_replication_slot('` + slot + `', 'pgoutput')`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	st, err := d.StreamStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Slot != slot || st.Active || st.ActivePID != 0 || st.WALStatus != "reserved" || st.RestartLag < 0 || st.FlushLag < 0 || !st.LastConfirm.IsZero() {
		t.Fatalf("idle slot: %+v", st)
	}
	var keep int64
	if err := pool.QueryRow(ctx, `SELECT COALESCE(pg_size_bytes(NULLIF(current_setting('max_slot_wal_keep_size'), '-1') || 'MB'), -1)`).Scan(&keep); err != nil {
		t.Fatal(err)
	}
	if (keep < 0) != (st.SafeWALSize == -1) {
		t.Fatalf("safe WAL size %d with max_slot_wal_keep_size %d", st.SafeWALSize, keep)
	}
	// WAL written after the slot's position is lag.
	if _, err := pool.Exec(ctx, `CREATE TABLE lagging AS SELECT g FROM generate_series(1, 10000) g`); err != nil {
		t.Fatal(err)
	}
	confirmed := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	if _, err := pool.Exec(ctx, `INSERT INTO txbox_wal_state (slot_name, publication, confirmed_at) VALUES ($1, 'p', $2)`, slot, confirmed); err != nil {
		t.Fatal(err)
	}
	pid := testenv.PostgresWalsender(t, dbURL, slot, `(proto_version '1', publication_names 'p')`)
	st, err = d.StreamStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Active || st.ActivePID != int(pid) || st.RestartLag <= 0 || st.FlushLag <= 0 || !st.LastConfirm.Equal(confirmed) {
		t.Fatalf("streamed slot (walsender %d), confirmed at %s: %+v", pid, confirmed, st)
	}
}

// TestStreamSpillDue: a spill is due at its DueAt, and a zero DueAt is
// now.
func TestStreamSpillDue(t *testing.T) {
	t.Parallel()
	e := newSpillEnv(t)
	ctx := ctxT(t)
	const typ = "due.t"
	e.takeSnapshot(t)
	later, now := emittedSpill(txbox.NewID(), typ, "", 1, store.OutcomeRetry), emittedSpill(txbox.NewID(), typ, "", 2, store.OutcomeReleased)
	later.DueAt = time.Now().Add(time.Hour).Truncate(time.Microsecond)
	if err := e.d.StreamSpill(ctx, []*store.StreamSpillItem{later, now}); err != nil {
		t.Fatal(err)
	}
	rows, err := e.d.OutboxClaim(ctx, claimParams(typ, false))
	if err != nil || !sameIDs(ids(rows), []txbox.ID{now.Event.Row.ID}) {
		t.Fatalf("claim: %v, %v; want only %v", ids(rows), err, now.Event.Row.ID)
	}
	var due time.Time
	if err := e.pool.QueryRow(ctx, `SELECT due_at FROM `+e.table("outbox")+` WHERE id = $1`, later.Event.Row.ID).Scan(&due); err != nil || !due.Equal(later.DueAt) {
		t.Fatalf("due_at %s, %v; want %s", due, err, later.DueAt)
	}
}

// BenchmarkStreamSpill200 spills 200 emitted events of 20 keys per call,
// on a session with synchronous_commit off: the spill's own SET LOCAL
// turns it on, so each call pays one WAL flush (compare
// BenchmarkPublishBatch100's nofsync and fsync figures).
func BenchmarkStreamSpill200(b *testing.B) {
	d := benchDriver(b, false, func(c *postgres.Config) { c.Source = postgres.SourceWAL })
	ctx := context.Background()
	ev := benchEvent()
	var pos uint64
	items := make([]*store.StreamSpillItem, 200)
	b.ResetTimer()
	for b.Loop() {
		for i := range items {
			pos++
			items[i] = &store.StreamSpillItem{Outcome: store.OutcomeReleased, Event: &store.StreamEvent{Pos: pos,
				Row: store.OutboxRow{ID: txbox.NewID(), EventType: ev.Type, Key: "k" + strconv.Itoa(i%20), Payload: ev.Payload, Headers: ev.Headers}}}
		}
		if err := d.StreamSpill(ctx, items); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(items))/b.Elapsed().Seconds(), "events/s")
}

// TestStreamSpillUndecodable: a message of txbox's prefix that does not
// decode, read from a real slot, spills as a FAILED row (the outbox takes
// its type) and the dead-letter mover moves it with its raw bytes, its
// txbox-wal-lsn header and its error; a confirm past it then succeeds.
func TestStreamSpillUndecodable(t *testing.T) {
	t.Parallel()
	e := openWAL(t, 0)
	ctx := ctxT(t)
	s := e.open(t, nil)
	// Version 2, which this relay does not read, with a NUL and invalid
	// UTF-8 in it.
	raw := append([]byte{2, 0, 0xff, 0, '\\', '"'}, strings.Repeat("x", 60)...)
	if _, err := e.pool.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, $2::bytea)`, e.prefix(), raw); err != nil {
		t.Fatal(err)
	}
	tx := next(t, s)
	if len(tx.Events) != 1 {
		t.Fatalf("%d events, want the undecodable message", len(tx.Events))
	}
	ev := tx.Events[0]
	lsn := ev.Row.Headers[postgres.WALPositionHeader]
	if ev.Row.EventType != store.UndecodableEventType || ev.Row.Invalid == "" || lsn == "" {
		t.Fatalf("undecodable message: %+v", ev.Row)
	}
	if err := e.d.StreamSpill(ctx, []*store.StreamSpillItem{{Event: ev, Outcome: store.OutcomeFailed, Error: ev.Row.Invalid}}); err != nil {
		t.Fatalf("spill of the undecodable event: %v", err)
	}
	if n, err := e.d.DeadLetterMove(ctx, &store.DeadLetterMoveParams{Limit: 10}); err != nil || n != 1 {
		t.Fatalf("dead-letter move: %d, %v", n, err)
	}
	dl, err := e.d.DeadLetterGet(ctx, ev.Row.ID)
	if err != nil {
		t.Fatal(err)
	}
	if dl.EventType != store.UndecodableEventType || !slices.Equal(dl.Payload, raw) || len(dl.Headers) != 1 ||
		dl.Headers[postgres.WALPositionHeader] != lsn || dl.LastError != ev.Row.Invalid ||
		!strings.Contains(dl.LastError, "version 2") || !strings.Contains(dl.LastError, "WAL position "+lsn) ||
		dl.Status != store.DeadLetterUnresolved || dl.Key != "" {
		t.Fatalf("dead letter %+v, want type %s, payload %q, header %s, error %q", dl, store.UndecodableEventType, raw, lsn, ev.Row.Invalid)
	}
	if err := s.Confirm(ctx, tx.End, nil); err != nil {
		t.Fatal(err)
	}
	if got := confirmedLSN(t, e); got != tx.End {
		t.Errorf("confirmed %d, want past the undecodable message's transaction %d", got, tx.End)
	}
	var left int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM `+e.outbox).Scan(&left); err != nil || left != 0 {
		t.Errorf("%d rows left in the outbox (%v)", left, err)
	}
}

// TestStreamSpillDataRefused: a spill the database refuses because of
// the data (a NUL or invalid UTF-8 in a text column, a CHECK) fails with
// an error matching store.ErrDataRefused, keeps the server's error, and
// writes nothing of its transaction.
func TestStreamSpillDataRefused(t *testing.T) {
	t.Parallel()
	e := newSpillEnv(t)
	ctx := ctxT(t)
	e.takeSnapshot(t)
	// A CHECK of this test's own table, as a stricter schema would have.
	e.exec(t, `ALTER TABLE `+e.table("outbox")+` ADD CONSTRAINT refuse_key CHECK (event_key IS DISTINCT FROM 'refused')`)
	for _, c := range []struct{ name, key, code string }{
		{"NUL in the key", "k\x00", "22021"},
		{"invalid UTF-8 in the key", "k\xff", "22021"},
		{"a CHECK", "refused", "23514"},
		// Random hex compresses too little to fit the key-order index's
		// row (at most 2,704 bytes): WAL mode's emits touch no index, so
		// the spill is the first write to meet it.
		{"a key too long for the index", longRandomKey(t, 12000), "54000"},
	} {
		ok := emittedSpill(txbox.NewID(), "refused.t", "fine", 1, store.OutcomeRetry)
		bad := emittedSpill(txbox.NewID(), "refused.t", c.key, 2, store.OutcomeRetry)
		err := e.d.StreamSpill(ctx, []*store.StreamSpillItem{ok, bad})
		var pe *pgconn.PgError
		if !errors.Is(err, store.ErrDataRefused) || !errors.As(err, &pe) || pe.Code != c.code {
			t.Errorf("%s: %v, want store.ErrDataRefused with SQLSTATE %s", c.name, err, c.code)
		}
		if errors.Is(err, store.ErrInvalidParams) || errors.Is(err, postgres.ErrDuplicateID) {
			t.Errorf("%s: %v matches another sentinel", c.name, err)
		}
	}
	var n int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM `+e.table("outbox")).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows after refused spills (%v), want none", n, err)
	}
	// The same items without the fault go in.
	if err := e.d.StreamSpill(ctx, []*store.StreamSpillItem{emittedSpill(txbox.NewID(), "refused.t", "fine", 3, store.OutcomeRetry)}); err != nil {
		t.Fatal(err)
	}
}

// longRandomKey returns n hexadecimal characters of random data.
func longRandomKey(t *testing.T, n int) string {
	b := make([]byte, (n+1)/2)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)[:n]
}

// TestWALSpillFanoutCopies: a fanned-out type's copies spill as their
// routes' rows (docs/concepts.md, "Fan-out", WAL mode): a captured row,
// the first route's copy, in place with its route; another route's copy
// as a new row with its route and event id. The expander leaves both
// alone, and each route's claim takes its own.
func TestWALSpillFanoutCopies(t *testing.T) {
	t.Parallel()
	e := newSpillEnv(t)
	ctx := ctxT(t)
	const typ = "fan.t"
	e.takeSnapshot(t)
	c := e.capture(t, typ, "k", 1)[0]
	first := captured(c, typ, "k", 10, store.OutcomeReleased)
	first.Event.Row.Route = "a"
	second := &store.StreamSpillItem{Outcome: store.OutcomeReleased, Event: &store.StreamEvent{Pos: 10, Row: store.OutboxRow{
		ID: store.RouteRowID(c, 1), EventID: c, Route: "b", EventType: typ, Key: "k", Payload: []byte{1}}}}
	if err := e.d.StreamSpill(ctx, []*store.StreamSpillItem{first, second}); err != nil {
		t.Fatal(err)
	}
	if n, err := e.d.OutboxExpand(ctx, &store.OutboxExpandParams{EventType: typ, Routes: []string{"a", "b"}, Limit: 10}); err != nil || n != 0 {
		t.Fatalf("expand after the spill: %d, %v; want nothing to expand", n, err)
	}
	for _, want := range []struct {
		route   string
		id, eid txbox.ID
	}{{"a", c, txbox.ID{}}, {"b", store.RouteRowID(c, 1), c}} {
		// Ordered, with the horizon off: a parallel test's open
		// transaction must not hold the spill's rows back.
		p := claimParams(typ, true)
		p.Route, p.HorizonOff = want.route, true
		rows, err := e.d.OutboxClaim(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || rows[0].ID != want.id || rows[0].EventID != want.eid || rows[0].Route != want.route || rows[0].Event() != c {
			t.Fatalf("route %s claimed %+v, want the one row %s (event %s)", want.route, rows, want.id, c)
		}
	}
}

// TestWALSpillFanoutCopyIDTaken: a route's copy whose id is another
// event's row (a producer's dense ids) is spilled under a fresh id, with
// its route and event id, rather than dropped by the insert's conflict;
// a repeated spill of a copy that is in the table changes nothing.
func TestWALSpillFanoutCopyIDTaken(t *testing.T) {
	t.Parallel()
	e := newSpillEnv(t)
	ctx := ctxT(t)
	const typ = "fan.taken"
	ev := txbox.NewID()
	other := &store.StreamSpillItem{Outcome: store.OutcomeReleased, Event: &store.StreamEvent{Pos: 5, Row: store.OutboxRow{
		ID: store.RouteRowID(ev, 1), EventType: "other.t", Payload: []byte{2}}}}
	copyB := &store.StreamSpillItem{Outcome: store.OutcomeReleased, Event: &store.StreamEvent{Pos: 6, Row: store.OutboxRow{
		ID: store.RouteRowID(ev, 1), EventID: ev, Route: "b", EventType: typ, Key: "k", Payload: []byte{1}}}}
	for range 2 {
		if err := e.d.StreamSpill(ctx, []*store.StreamSpillItem{other}); err != nil {
			t.Fatal(err)
		}
		if err := e.d.StreamSpill(ctx, []*store.StreamSpillItem{copyB}); err != nil {
			t.Fatal(err)
		}
	}
	p := claimParams(typ, false)
	p.Route = "b"
	rows, err := e.d.OutboxClaim(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("route b claimed %d rows, want the copy twice (spilled twice under fresh ids)", len(rows))
	}
	for _, r := range rows {
		if r.ID == copyB.Event.Row.ID || r.EventID != ev || r.Route != "b" || r.Event() != ev {
			t.Fatalf("route b row %+v: want a fresh id for event %s", r, ev)
		}
	}
	o := claimParams("other.t", false)
	if got, err := e.d.OutboxClaim(ctx, o); err != nil || len(got) != 1 || got[0].ID != other.Event.Row.ID {
		t.Fatalf("the other event's row: %+v, %v", got, err)
	}
}
