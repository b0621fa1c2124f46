package mysql

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
)

func TestPublishCommitAndRollback(t *testing.T) {
	t.Parallel()
	d := setup(t)
	ctx := context.Background()

	rolledBack := &txbox.Event{ID: txbox.NewID(), Type: "order-created", Payload: []byte("never")}
	tx, err := d.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{rolledBack}}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}

	before := time.Now().Add(-2 * time.Second)
	ev := &txbox.Event{ID: txbox.NewID(), Type: "order-created", Key: "order-42", Payload: []byte(`{"id":42}`),
		Headers: map[string]string{"a": "1", "ü": "ß"}}
	publish(t, d, ev)

	rows, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "order-created", Limit: 10, LeaseDuration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("claimed %d rows, want exactly the committed one", len(rows))
	}
	r := rows[0]
	if r.ID != ev.ID || r.Key != ev.Key || !bytes.Equal(r.Payload, ev.Payload) || r.Headers["a"] != "1" || r.Headers["ü"] != "ß" || len(r.Headers) != 2 {
		t.Fatalf("claimed row %+v does not match published %+v", r, ev)
	}
	if r.Attempts != 0 || r.LeaseToken == (txbox.ID{}) || r.EventType != "order-created" {
		t.Fatalf("claimed row: attempts %d, token %v, type %q", r.Attempts, r.LeaseToken, r.EventType)
	}
	if r.CreatedAt.Before(before) || r.CreatedAt.After(time.Now().Add(2*time.Second)) || r.CreatedAt.Location() != time.UTC {
		t.Fatalf("created_at %v is not the database's UTC now", r.CreatedAt)
	}
	if s, _ := statusOf(t, d, rolledBack.ID); s != "" {
		t.Fatalf("rolled-back event exists with status %q", s)
	}
	if s, _ := statusOf(t, d, ev.ID); s != store.StatusInProcess {
		t.Fatalf("status after claim = %q, want IN_PROCESS", s)
	}
	// Nothing else is claimable.
	again, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "order-created", Limit: 10, LeaseDuration: time.Minute})
	if err != nil || len(again) != 0 {
		t.Fatalf("second claim = %d rows, %v; want none", len(again), err)
	}
}

type sqlxLikeTx struct{ tx *sql.Tx }

func (w sqlxLikeTx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return w.tx.ExecContext(ctx, q, args...)
}
func (w sqlxLikeTx) Commit() error { return w.tx.Commit() }

type wrapped struct{ native any }

func (w wrapped) Native() any { return w.native }

func TestOutboxInsertTransactionTypes(t *testing.T) {
	t.Parallel()
	d := setup(t)
	ctx := context.Background()
	ev := func() *store.OutboxInsertParams {
		return &store.OutboxInsertParams{Events: []*txbox.Event{{ID: txbox.NewID(), Type: "t", Payload: []byte("x")}}}
	}
	var nilTx *sql.Tx
	for name, tx := range map[string]any{"nil": nil, "*sql.DB": d.DB(), "nil *sql.Tx": nilTx} {
		err := d.OutboxInsert(ctx, tx, ev())
		if !errors.Is(err, txbox.ErrNoTransaction) {
			t.Errorf("%s: err = %v, want ErrNoTransaction", name, err)
		}
	}
	conn, err := d.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for name, tx := range map[string]any{"*sql.Conn": conn, "string": "BEGIN", "wrapped *sql.Conn": wrapped{conn}} {
		err := d.OutboxInsert(ctx, tx, ev())
		var ute *txbox.UnsupportedTxError
		if !errors.As(err, &ute) || !errors.Is(err, txbox.ErrNoTransaction) || ute.Dialect != "mysql" {
			t.Errorf("%s: err = %v, want *txbox.UnsupportedTxError", name, err)
		}
	}

	// An ORM-style transaction (ExecContext + Commit) and a Native()
	// wrapper both publish.
	tx1, _ := d.DB().BeginTx(ctx, nil)
	p1 := ev()
	if err := d.OutboxInsert(ctx, sqlxLikeTx{tx1}, p1); err != nil {
		t.Fatalf("ORM tx: %v", err)
	}
	tx1.Commit()
	tx2, _ := d.DB().BeginTx(ctx, nil)
	p2 := ev()
	if err := d.OutboxInsert(ctx, wrapped{tx2}, p2); err != nil {
		t.Fatalf("wrapped tx: %v", err)
	}
	tx2.Commit()
	for _, p := range []*store.OutboxInsertParams{p1, p2} {
		if s, _ := statusOf(t, d, p.Events[0].ID); s != store.StatusPending {
			t.Errorf("event %v status %q, want PENDING", p.Events[0].ID, s)
		}
	}
	var n int
	d.DB().QueryRow("SELECT COUNT(*) FROM " + d.qOutbox).Scan(&n)
	if n != 2 {
		t.Fatalf("outbox holds %d rows, want 2 (refused publishes must insert nothing)", n)
	}
}

func TestOutboxInsertBadEvents(t *testing.T) {
	t.Parallel()
	d := setup(t)
	ctx := context.Background()
	tx, _ := d.DB().BeginTx(ctx, nil)
	defer tx.Rollback()
	cases := map[string]*txbox.Event{
		"no id":     {Type: "t"},
		"bad type":  {ID: txbox.NewID(), Type: "x\"; DROP TABLE t;--"},
		"long key":  {ID: txbox.NewID(), Type: "t", Key: strings.Repeat("k", MaxKeyLength+1)},
		"empty typ": {ID: txbox.NewID()},
	}
	for name, e := range cases {
		if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{e}}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A key of exactly MaxKeyLength bytes, not valid UTF-8, is stored
	// byte for byte.
	key := string(bytes.Repeat([]byte{0xff}, MaxKeyLength))
	e := &txbox.Event{ID: txbox.NewID(), Type: "t", Key: key}
	if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{e}}); err != nil {
		t.Fatalf("MaxKeyLength-byte binary key: %v", err)
	}
	var got []byte
	if err := tx.QueryRow("SELECT event_key FROM "+d.qOutbox+" WHERE id = ?", e.ID.String()).Scan(&got); err != nil || string(got) != key {
		t.Fatalf("stored key = %x, %v", got, err)
	}
}

func TestLargePayloads(t *testing.T) {
	t.Parallel()
	_, dsn := newDatabase(t)
	db, err := OpenDB(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// A small MaxInsertBytes forces the batch below into several INSERTs.
	d, err := New(db, Config{SessionReadCommitted: true, MaxInsertBytes: 512 << 10})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	mk := func(n int) []byte {
		b := make([]byte, n)
		rand.Read(b)
		return b
	}
	evs := []*txbox.Event{
		{ID: txbox.NewID(), Type: "big", Payload: mk(64<<10 + 1)}, // > BLOB's 64 KiB
		{ID: txbox.NewID(), Type: "big", Payload: mk(1 << 20)},    // 1 MiB, the default limit
		{ID: txbox.NewID(), Type: "big", Payload: mk(300 << 10)},
		{ID: txbox.NewID(), Type: "big", Payload: mk(10)},
	}

	// The split batch stays atomic: rolled back, none of it exists.
	tx, _ := db.BeginTx(ctx, nil)
	if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: evs}); err != nil {
		t.Fatal(err)
	}
	tx.Rollback()
	var n int
	db.QueryRow("SELECT COUNT(*) FROM " + d.qOutbox).Scan(&n)
	if n != 0 {
		t.Fatalf("%d rows survived the rollback", n)
	}

	publish(t, d, evs...)
	rows, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "big", Limit: 10, LeaseDuration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(evs) {
		t.Fatalf("claimed %d, want %d", len(rows), len(evs))
	}
	byID := map[txbox.ID][]byte{}
	for _, r := range rows {
		byID[r.ID] = r.Payload
	}
	for _, e := range evs {
		if !bytes.Equal(byID[e.ID], e.Payload) {
			t.Errorf("payload of %d bytes came back as %d bytes or different", len(e.Payload), len(byID[e.ID]))
		}
	}
}

func TestFencingAndLeaseRecovery(t *testing.T) {
	t.Parallel()
	d := setup(t)
	ctx := context.Background()
	evs := publish(t, d, events("fence", 3)...)
	const lease = 400 * time.Millisecond
	// The lease starts at the database's now during the claim, which is
	// not before claimedAt (same machine clock).
	claimedAt := time.Now()
	first, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "fence", Limit: 10, LeaseDuration: lease})
	if err != nil || len(first) != 3 {
		t.Fatalf("claim: %d rows, %v", len(first), err)
	}
	// Before expiry nothing is recovered.
	n, err := d.OutboxRecover(ctx, &store.OutboxRecoverParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 && time.Since(claimedAt) < lease {
		t.Fatalf("recovered %d rows before the lease expired", n)
	}
	// After expiry all three are recovered, attempts unchanged.
	var recovered int
	testenv.WaitFor(t, 10*time.Second, "lease recovery", func() bool {
		n, err := d.OutboxRecover(ctx, &store.OutboxRecoverParams{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		recovered += n
		return recovered == 3
	})
	if time.Since(claimedAt) < lease {
		t.Fatalf("recovered after %v, before the %v lease expired", time.Since(claimedAt), lease)
	}
	for _, e := range evs {
		if s, a := statusOf(t, d, e.ID); s != store.StatusPending || a != 0 {
			t.Fatalf("recovered row: %s attempts %d, want PENDING 0", s, a)
		}
	}
	second := claimN(t, d, "fence", 10, 3)
	// The first relay wakes up and finishes with its stale token: nothing
	// changes.
	var stale []store.OutboxFinishItem
	for i, r := range first {
		o := store.OutcomeAcked
		if i == 0 {
			o = store.OutcomeRetry
		}
		stale = append(stale, store.OutboxFinishItem{ID: r.ID, LeaseToken: r.LeaseToken, Outcome: o, Error: "stale"})
	}
	res, err := d.OutboxFinish(ctx, &store.OutboxFinishParams{Items: stale})
	if err != nil || res.Finished != 0 || res.Fenced != 3 {
		t.Fatalf("stale finish = %+v, %v; want 0 finished, 3 fenced", res, err)
	}
	for _, e := range evs {
		if s, a := statusOf(t, d, e.ID); s != store.StatusInProcess || a != 0 {
			t.Fatalf("after stale finish: %s attempts %d, want IN_PROCESS 0", s, a)
		}
	}
	var fresh []store.OutboxFinishItem
	for _, r := range second {
		fresh = append(fresh, store.OutboxFinishItem{ID: r.ID, LeaseToken: r.LeaseToken, Outcome: store.OutcomeAcked})
	}
	res, err = d.OutboxFinish(ctx, &store.OutboxFinishParams{Items: fresh})
	if err != nil || res.Finished != 3 || res.Fenced != 0 {
		t.Fatalf("owner's finish = %+v, %v", res, err)
	}
	for _, e := range evs {
		if s, _ := statusOf(t, d, e.ID); s != store.StatusProcessed {
			t.Fatalf("after finish: %s, want PROCESSED", s)
		}
	}
}

func TestFinishOutcomes(t *testing.T) {
	t.Parallel()
	d := setup(t)
	ctx := context.Background()
	evs := publish(t, d, events("out", 5)...)
	rows := claimN(t, d, "out", 10, 5)
	tok := rows[0].LeaseToken
	bad := "bad \xff utf8 " + strings.Repeat("e", 20000)
	items := []store.OutboxFinishItem{
		{ID: evs[0].ID, LeaseToken: tok, Outcome: store.OutcomeAcked},
		{ID: evs[1].ID, LeaseToken: tok, Outcome: store.OutcomeRetry, RetryAfter: time.Hour, Error: "boom"},
		{ID: evs[2].ID, LeaseToken: tok, Outcome: store.OutcomeReleased, RetryAfter: 0},
		{ID: evs[3].ID, LeaseToken: tok, Outcome: store.OutcomeFailed, Error: bad},
		{ID: evs[4].ID, LeaseToken: tok, Outcome: store.OutcomeRetry, RetryAfter: 0, Error: "again"},
	}
	res, err := d.OutboxFinish(ctx, &store.OutboxFinishParams{Items: items, DeleteAcked: true})
	if err != nil || res.Finished != 5 || res.Fenced != 0 {
		t.Fatalf("finish = %+v, %v", res, err)
	}
	type want struct {
		status   string
		attempts int
		due      bool // due now (true) or in an hour (false)
		lastErr  string
	}
	wants := []want{
		{"", 0, false, ""}, // deleted
		{store.StatusPending, 1, false, "boom"},
		{store.StatusPending, 0, true, ""},
		{store.StatusFailed, 1, false, ""},
		{store.StatusPending, 1, true, "again"},
	}
	for i, w := range wants {
		var status string
		var attempts int
		var due bool
		var lastErr sql.NullString
		var token sql.NullString
		err := d.DB().QueryRow("SELECT status, attempts, due_at <= UTC_TIMESTAMP(6), last_error, lease_token FROM "+d.qOutbox+" WHERE id = ?", evs[i].ID.String()).
			Scan(&status, &attempts, &due, &lastErr, &token)
		if w.status == "" {
			if err != sql.ErrNoRows {
				t.Errorf("item %d: acked with DeleteAcked still exists (%v)", i, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if status != w.status || attempts != w.attempts || token.Valid {
			t.Errorf("item %d: %s attempts %d token %v; want %s %d and no token", i, status, attempts, token, w.status, w.attempts)
		}
		if w.status == store.StatusPending && due != w.due {
			t.Errorf("item %d: due now = %v, want %v", i, due, w.due)
		}
		if w.lastErr != "" && lastErr.String != w.lastErr {
			t.Errorf("item %d: last_error %q, want %q", i, lastErr.String, w.lastErr)
		}
		if i == 3 && (len(lastErr.String) == 0 || len(lastErr.String) > maxErrorLength || !strings.HasPrefix(lastErr.String, "bad \uFFFD utf8")) {
			t.Errorf("failed item's error stored as %d bytes starting %q", len(lastErr.String), lastErr.String[:min(20, len(lastErr.String))])
		}
	}
	// Only the two due rows are claimable again; the hour-delayed retry is
	// not.
	again, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "out", Limit: 10, LeaseDuration: time.Minute})
	if err != nil || len(again) != 2 || again[0].ID != evs[2].ID || again[1].ID != evs[4].ID || again[1].Attempts != 1 {
		t.Fatalf("reclaim = %d rows, %v", len(again), err)
	}

	// Bad outcomes and negative delays are refused before any SQL.
	if _, err := d.OutboxFinish(ctx, &store.OutboxFinishParams{Items: []store.OutboxFinishItem{{ID: evs[2].ID, Outcome: 99}}}); !errors.Is(err, ErrInvalidParams) {
		t.Fatalf("unknown outcome: %v", err)
	}
	if _, err := d.OutboxFinish(ctx, &store.OutboxFinishParams{Items: []store.OutboxFinishItem{{ID: evs[2].ID, Outcome: store.OutcomeRetry, RetryAfter: -1}}}); !errors.Is(err, ErrInvalidParams) {
		t.Fatalf("negative RetryAfter: %v", err)
	}
}

func TestClaimOrderAndNotBefore(t *testing.T) {
	t.Parallel()
	d := setup(t)
	ctx := context.Background()
	evs := events("ord", 6)
	evs[1].NotBefore = time.Now().Add(time.Hour)
	evs[4].NotBefore = time.Now().Add(-time.Hour) // past: due now
	publish(t, d, evs...)
	publish(t, d, &txbox.Event{ID: txbox.NewID(), Type: "other"})
	rows := claimN(t, d, "ord", 3, 3)
	want := []txbox.ID{evs[0].ID, evs[2].ID, evs[3].ID}
	for i := range want {
		if rows[i].ID != want[i] || rows[i].LeaseToken != rows[0].LeaseToken {
			t.Fatalf("row %d = %v, want %v (one token per batch)", i, rows[i].ID, want[i])
		}
	}
	rest, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "ord", Limit: 10, LeaseDuration: time.Minute})
	if err != nil || len(rest) != 2 || rest[0].ID != evs[4].ID || rest[1].ID != evs[5].ID {
		t.Fatalf("second claim: %d rows %v", len(rest), err)
	}
	if rest[0].LeaseToken == rows[0].LeaseToken {
		t.Fatal("two claims share a lease token")
	}
	for _, p := range []*store.OutboxClaimParams{nil, {EventType: "ord"}, {EventType: "ord", Limit: 1}, {Limit: 1, LeaseDuration: time.Second}} {
		if _, err := d.OutboxClaim(ctx, p); !errors.Is(err, ErrInvalidParams) {
			t.Errorf("claim %+v: %v, want ErrInvalidParams", p, err)
		}
	}
}

func ids(rows []*store.OutboxRow) []txbox.ID {
	out := make([]txbox.ID, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}
