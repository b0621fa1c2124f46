package storetest

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

func testPublishCommit(t *testing.T, e *env) {
	ev := event("order-created")
	ev.Key = "order-42"
	ev.Headers = map[string]string{"a": "1", "b": "two"}
	before := time.Now()
	tx := e.h.Begin(t, e.d)
	if err := e.d.OutboxInsert(e.ctx, tx.Native(), &store.OutboxInsertParams{Events: []*txbox.Event{ev}, Notify: true}); err != nil {
		t.Fatalf("insert: %v", err)
	}
	if !e.h.SerialWriter {
		// Not visible to another session before commit.
		if rows := e.claim(ev.Type, 10, longLease); len(rows) != 0 {
			t.Fatalf("claimed %d uncommitted rows", len(rows))
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	rows := e.claim(ev.Type, 10, longLease)
	if len(rows) != 1 {
		t.Fatalf("claimed %d rows after commit, want 1", len(rows))
	}
	r := rows[0]
	if r.ID != ev.ID || r.EventType != ev.Type || r.Key != ev.Key || !bytes.Equal(r.Payload, ev.Payload) || r.Attempts != 0 {
		t.Fatalf("claimed row %+v does not match published event %+v", r, ev)
	}
	if len(r.Headers) != 2 || r.Headers["a"] != "1" || r.Headers["b"] != "two" {
		t.Fatalf("headers = %v, want a=1 b=two", r.Headers)
	}
	if r.LeaseToken == (txbox.ID{}) {
		t.Fatal("claimed row has no lease token")
	}
	// The database clock set created_at; allow generous skew on one host.
	if r.CreatedAt.Before(before.Add(-time.Minute)) || r.CreatedAt.After(time.Now().Add(time.Minute)) {
		t.Fatalf("created_at %v is not near now %v", r.CreatedAt, before)
	}
	if rows := e.claim(ev.Type, 10, longLease); len(rows) != 0 {
		t.Fatalf("claimed the same row twice")
	}
}

func testPublishRollback(t *testing.T, e *env) {
	ev := event("rolled-back")
	tx := e.h.Begin(t, e.d)
	if err := e.d.OutboxInsert(e.ctx, tx.Native(), &store.OutboxInsertParams{Events: []*txbox.Event{ev, event("rolled-back")}, Notify: true}); err != nil {
		t.Fatalf("insert: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	if rows := e.claim(ev.Type, 10, longLease); len(rows) != 0 {
		t.Fatalf("claimed %d rolled-back rows", len(rows))
	}
	if s := e.stats(ev.Type); s.Pending != 0 {
		t.Fatalf("stats show %d pending rolled-back rows", s.Pending)
	}
	// A later commit in the same namespace is unaffected.
	ok := event("rolled-back")
	e.publish(ok)
	if rows := e.claim(ev.Type, 10, longLease); len(rows) != 1 || rows[0].ID != ok.ID {
		t.Fatalf("after rollback then commit claimed %v, want [%s]", ids(rows), ok.ID)
	}
}

type notATx struct{}

func testPublishNoTx(t *testing.T, e *env) {
	p := &store.OutboxInsertParams{Events: []*txbox.Event{event("no-tx")}}
	for name, tx := range map[string]any{"nil": nil, "int": 42, "struct": notATx{}} {
		if err := e.d.OutboxInsert(e.ctx, tx, p); !errors.Is(err, txbox.ErrNoTransaction) {
			t.Errorf("insert with %s tx: error %v, want one matching txbox.ErrNoTransaction", name, err)
		}
	}
	if rows := e.claim("no-tx", 10, longLease); len(rows) != 0 {
		t.Fatalf("an insert without a transaction left %d rows", len(rows))
	}
}

var hostile = []string{
	`x"; DROP TABLE t;--`,
	"x`; DROP TABLE t;--",
	`x'); DELETE FROM txbox_outbox;--`,
	strings.Repeat("a", 300),
	"ünïcødé_名前",
}

func testHostileValues(t *testing.T, e *env) {
	before := e.h.Tables(t, e.ns)
	var evs []*txbox.Event
	for _, s := range hostile {
		ev := event("hostile")
		ev.Key = s
		ev.Payload = []byte(s + "\x00\xff")
		ev.Headers = map[string]string{s: s, "q": `"\'`}
		evs = append(evs, ev)
	}
	e.publish(evs...)
	rows := e.claim("hostile", 100, longLease)
	if len(rows) != len(evs) {
		t.Fatalf("claimed %d rows, want %d", len(rows), len(evs))
	}
	byID := map[txbox.ID]*store.OutboxRow{}
	for _, r := range rows {
		byID[r.ID] = r
	}
	for _, ev := range evs {
		r := byID[ev.ID]
		if r == nil || r.Key != ev.Key || !bytes.Equal(r.Payload, ev.Payload) || r.Headers[ev.Key] != ev.Key || r.Headers["q"] != `"\'` {
			t.Fatalf("hostile values were not stored verbatim: got %+v want %+v", r, ev)
		}
	}
	if _, err := e.d.OutboxClaim(e.ctx, &store.OutboxClaimParams{EventType: hostile[0], Limit: 1, LeaseDuration: longLease}); err == nil {
		t.Fatal("claim with a hostile event type succeeded")
	}
	if after := e.h.Tables(t, e.ns); !slices.Equal(before, after) {
		t.Fatalf("tables changed: before %v after %v", before, after)
	}
}

func testBatchPublish(t *testing.T, e *env) {
	evs := events("batch", 250)
	evs[7].Key = "k"
	evs[9].NotBefore = time.Now().Add(time.Hour)
	e.publish(evs...)
	rows := e.claim("batch", 1000, longLease)
	if len(rows) != 249 {
		t.Fatalf("claimed %d rows, want 249 (one is not before an hour)", len(rows))
	}
	want := sortedIDs(append(slices.Clone(evs[:9]), evs[10:]...))
	if got := ids(rows); !slices.Equal(got, want) {
		t.Fatalf("batch rows are not in id order (one statement, one due time)")
	}
	if s := e.stats("batch"); s.Pending != 1 || s.InProcess != 249 {
		t.Fatalf("stats = %+v, want pending 1, in process 249", s)
	}
}
