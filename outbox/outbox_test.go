package outbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	"go.opentelemetry.io/otel/trace"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// bundle is one test's real PostgreSQL store on a fresh schema.
type bundle struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	store *postgres.Driver
	db    *sql.DB
}

func setup(t *testing.T) *bundle {
	t.Helper()
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	db, err := sql.Open("pgx", testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(2)
	t.Cleanup(func() { db.Close() })
	schema := testenv.PostgresSchema(t, db)
	pool := storeharness.PostgresPool(t, 4)
	d, err := postgres.New(pool, postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return &bundle{ctx: ctx, pool: pool, store: d, db: db}
}

func (b *bundle) claim(t *testing.T, typ string) []*store.OutboxRow {
	t.Helper()
	rows, err := b.store.OutboxClaim(b.ctx, &store.OutboxClaimParams{EventType: typ, Limit: 1000, LeaseDuration: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// begin starts a transaction on the bundle's pool.
func (b *bundle) begin(t *testing.T) pgx.Tx {
	t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

// publishTx publishes evs with p in a transaction of its own, committed or
// rolled back, and returns their ids.
func (b *bundle) publishTx(t *testing.T, p *outbox.Publisher, commit bool, evs ...txbox.Event) []txbox.ID {
	t.Helper()
	tx := b.begin(t)
	ids, err := p.Publish(b.ctx, tx, evs...)
	if err != nil {
		_ = tx.Rollback(b.ctx)
		t.Fatal(err)
	}
	end := tx.Rollback
	if commit {
		end = tx.Commit
	}
	if err := end(b.ctx); err != nil {
		t.Fatal(err)
	}
	return ids
}

func newPublisher(t *testing.T, s store.Outbox, cfg outbox.Config) *outbox.Publisher {
	t.Helper()
	p, err := outbox.NewPublisher(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPublishCommitAndRollback(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := newPublisher(t, b.store, outbox.Config{})

	tx := b.begin(t)
	ids, err := p.Publish(b.ctx, tx, txbox.Event{Type: "committed", Payload: []byte("1")}, txbox.Event{Type: "committed", Payload: []byte("2")})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2 || ids[0] == ids[1] || ids[0].Version() != 7 {
		t.Fatalf("ids = %v, want two distinct UUIDv7", ids)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	rows := b.claim(t, "committed")
	if got := []txbox.ID{rows[0].ID, rows[1].ID}; len(rows) != 2 || !slices.Equal(got, ids) {
		t.Fatalf("claimed %d rows, want ids %v", len(rows), ids)
	}

	b.publishTx(t, p, false, txbox.Event{Type: "rolled-back"})
	if rows := b.claim(t, "rolled-back"); len(rows) != 0 {
		t.Fatalf("a rolled-back event was claimable")
	}
}

func TestPublishRequiresTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := newPublisher(t, b.store, outbox.Config{})
	ev := txbox.Event{Type: "no-tx"}
	for name, tx := range map[string]any{"nil": nil, "*sql.DB": b.db, "pool": b.pool, "string": "tx"} {
		if _, err := p.Publish(b.ctx, tx, ev); !errors.Is(err, txbox.ErrNoTransaction) {
			t.Errorf("publish with %s: %v, want txbox.ErrNoTransaction", name, err)
		}
	}
	if rows := b.claim(t, "no-tx"); len(rows) != 0 {
		t.Fatalf("%d events were written without a transaction", len(rows))
	}
}

func TestPayloadLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const limit = 1000
	p := newPublisher(t, b.store, outbox.Config{MaxPayloadSize: limit})
	tx := b.begin(t)
	defer tx.Rollback(b.ctx)
	atLimit := txbox.Event{Type: "sized", Payload: make([]byte, limit)}
	over := txbox.Event{Type: "sized", Payload: make([]byte, limit+1)}
	_, err := p.Publish(b.ctx, tx, atLimit, over)
	var tooLarge *txbox.PayloadTooLargeError
	if !errors.As(err, &tooLarge) || tooLarge.Size != limit+1 || tooLarge.Limit != limit || tooLarge.EventType != "sized" {
		t.Fatalf("publish of limit+1 bytes: %v, want *txbox.PayloadTooLargeError{Size: %d, Limit: %d}", err, limit+1, limit)
	}
	// The refused batch wrote nothing, and the transaction is still usable.
	if _, err := p.Publish(b.ctx, tx, atLimit); err != nil {
		t.Fatalf("publish of exactly the limit: %v", err)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	rows := b.claim(t, "sized")
	if len(rows) != 1 || len(rows[0].Payload) != limit {
		t.Fatalf("claimed %d rows, want the one at the limit", len(rows))
	}

	def := newPublisher(t, b.store, outbox.Config{})
	tx2 := b.begin(t)
	defer tx2.Rollback(b.ctx)
	if _, err := def.Publish(b.ctx, tx2, txbox.Event{Type: "sized", Payload: make([]byte, txbox.DefaultMaxPayloadSize+1)}); !errors.As(err, &tooLarge) {
		t.Fatalf("default limit not enforced: %v", err)
	}
	if _, err := def.Publish(b.ctx, tx2, txbox.Event{Type: "sized", Payload: make([]byte, txbox.DefaultMaxPayloadSize)}); err != nil {
		t.Fatalf("default limit refused exactly 1 MiB: %v", err)
	}
}

func TestInvalidEventType(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := newPublisher(t, b.store, outbox.Config{})
	tx := b.begin(t)
	defer tx.Rollback(b.ctx)
	for _, typ := range []string{"", `x"; DROP TABLE t;--`, "a b", strings.Repeat("a", 201), "ünï"} {
		_, err := p.Publish(b.ctx, tx, txbox.Event{Type: "fine"}, txbox.Event{Type: typ})
		var bad *txbox.InvalidEventTypeError
		if !errors.As(err, &bad) {
			t.Errorf("type %q: %v, want *txbox.InvalidEventTypeError", typ, err)
		}
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if rows := b.claim(t, "fine"); len(rows) != 0 {
		t.Fatalf("a batch with an invalid type wrote %d rows", len(rows))
	}
}

func TestIDsHeadersAndTrace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := newPublisher(t, b.store, outbox.Config{})
	given := txbox.NewID()
	hdr := map[string]string{"a": "1"}
	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	spanID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, _ := trace.ParseTraceState("vendor=x")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled, TraceState: ts})
	ctx := trace.ContextWithSpanContext(b.ctx, sc)

	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	evs := []txbox.Event{{ID: given, Type: "traced", Headers: hdr}, {Type: "traced"}}
	ids, err := p.Publish(ctx, tx, evs...)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if ids[0] != given || ids[1] == (txbox.ID{}) {
		t.Fatalf("ids = %v, want the given id kept and a new one assigned", ids)
	}
	if len(hdr) != 1 || evs[1].ID != (txbox.ID{}) {
		t.Fatal("Publish modified the caller's headers or events")
	}
	rows := b.claim(t, "traced")
	if len(rows) != 2 {
		t.Fatalf("claimed %d, want 2", len(rows))
	}
	want := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, r := range rows {
		if r.Headers[txbox.HeaderTraceParent] != want || r.Headers[txbox.HeaderTraceState] != "vendor=x" {
			t.Fatalf("headers = %v, want traceparent %s and tracestate vendor=x", r.Headers, want)
		}
		if r.ID == given && r.Headers["a"] != "1" {
			t.Fatalf("user header lost: %v", r.Headers)
		}
	}

	// No span in the context: no trace headers.
	b.publishTx(t, p, true, txbox.Event{Type: "untraced"})
	if rows := b.claim(t, "untraced"); len(rows) != 1 || len(rows[0].Headers) != 0 {
		t.Fatalf("untraced event headers = %v, want none", rows[0].Headers)
	}
}

// countingStore counts OutboxInsert calls on the real store, to prove a
// batch is one insert.
type countingStore struct {
	store.Outbox
	mu      sync.Mutex
	inserts int
	notify  []bool
}

func (c *countingStore) OutboxInsert(ctx context.Context, tx any, p *store.OutboxInsertParams) error {
	c.mu.Lock()
	c.inserts++
	c.notify = append(c.notify, p.Notify)
	c.mu.Unlock()
	return c.Outbox.OutboxInsert(ctx, tx, p)
}

func TestBatchIsOneInsertAndOnPublish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := &countingStore{Outbox: b.store}
	var woke [][]string
	p := newPublisher(t, cs, outbox.Config{OnPublish: func(types []string) { woke = append(woke, types) }})
	var evs []txbox.Event
	for i := range 100 {
		typ := "batch-a"
		if i%2 == 1 {
			typ = "batch-b"
		}
		evs = append(evs, txbox.Event{Type: typ, Payload: []byte{byte(i)}})
	}
	ids := b.publishTx(t, p, true, evs...)
	if cs.inserts != 1 || !cs.notify[0] {
		t.Fatalf("inserts = %d (notify %v), want 1 notifying insert", cs.inserts, cs.notify)
	}
	if len(woke) != 1 || !slices.Equal(woke[0], []string{"batch-a", "batch-b"}) {
		t.Fatalf("OnPublish calls = %v, want one with [batch-a batch-b]", woke)
	}
	if n := len(b.claim(t, "batch-a")) + len(b.claim(t, "batch-b")); n != 100 {
		t.Fatalf("claimed %d, want 100", n)
	}

	quiet := newPublisher(t, cs, outbox.Config{DisableNotify: true})
	tx := b.begin(t)
	defer tx.Rollback(b.ctx)
	if _, err := quiet.Publish(b.ctx, tx, txbox.Event{Type: "quiet"}); err != nil {
		t.Fatal(err)
	}
	if cs.notify[1] {
		t.Fatal("DisableNotify still asked the store to notify")
	}
	// A failed insert (a duplicate id) returns the store's error and does
	// not call OnPublish.
	woke = nil
	if _, err := p.Publish(b.ctx, tx, txbox.Event{ID: ids[0], Type: "batch-a"}); !errors.Is(err, postgres.ErrDuplicateID) {
		t.Fatalf("duplicate id: %v, want postgres.ErrDuplicateID", err)
	}
	if woke != nil {
		t.Fatalf("OnPublish called after a failed insert: %v", woke)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	if _, err := outbox.NewPublisher(nil, outbox.Config{}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("nil store: %v, want ErrInvalidConfig", err)
	}
	if _, err := outbox.NewPublisher(&countingStore{}, outbox.Config{MaxPayloadSize: -1}); !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), "MaxPayloadSize") {
		t.Errorf("negative MaxPayloadSize: %v, want ErrInvalidConfig naming the field", err)
	}
}

type order struct {
	ID    string `json:"id"`
	Total int    `json:"total"`
}

func TestPublishJSONAndResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := newPublisher(t, b.store, outbox.Config{})
	if _, err := b.pool.Exec(b.ctx, `CREATE TABLE `+b.store.Tables().Schema+`.orders (id text PRIMARY KEY, total int)`); err != nil {
		t.Fatal(err)
	}
	tx := b.begin(t)
	create := func(tx pgx.Tx, id string, fail bool) (order, error) {
		return outbox.PublishResult(b.ctx, p, tx, "order-created", id, func(ctx context.Context) (order, error) {
			if fail {
				return order{}, errors.New("out of stock")
			}
			o := order{ID: id, Total: 42}
			_, err := tx.Exec(ctx, `INSERT INTO `+b.store.Tables().Schema+`.orders VALUES ($1, $2)`, o.ID, o.Total)
			return o, err
		})
	}
	got, err := create(tx, "o1", false)
	if err != nil || got.ID != "o1" {
		t.Fatalf("PublishResult = %+v, %v", got, err)
	}
	if _, err := create(tx, "o2", true); err == nil || err.Error() != "out of stock" {
		t.Fatalf("fn error not returned unchanged: %v", err)
	}
	if _, err := p.PublishJSON(b.ctx, tx, "order-created", "o3", func() {}); err == nil {
		t.Fatal("PublishJSON of an unmarshalable value succeeded")
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	rows := b.claim(t, "order-created")
	if len(rows) != 1 {
		t.Fatalf("claimed %d events, want only o1's (o2's fn failed)", len(rows))
	}
	var o order
	if err := json.Unmarshal(rows[0].Payload, &o); err != nil || o != (order{ID: "o1", Total: 42}) {
		t.Fatalf("payload %s = %+v, %v", rows[0].Payload, o, err)
	}
	if rows[0].Key != "o1" || rows[0].Headers[outbox.HeaderContentType] != outbox.ContentTypeJSON {
		t.Fatalf("key %q headers %v", rows[0].Key, rows[0].Headers)
	}
	if _, err := outbox.PublishResult(b.ctx, p, nil, "x", "", func(context.Context) (int, error) { t.Fatal("fn ran without a tx"); return 0, nil }); !errors.Is(err, txbox.ErrNoTransaction) {
		t.Fatalf("PublishResult without tx: %v", err)
	}
}

// database/sql users (pgx's stdlib driver here) publish through *sql.Tx.
func TestPublishThroughDatabaseSQL(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := newPublisher(t, b.store, outbox.Config{})
	tx, err := b.db.BeginTx(b.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	one, err := p.PublishJSON(b.ctx, tx, "sql-tx", "k", map[string]int{"n": 1})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := p.Publish(b.ctx, tx, txbox.Event{Type: "sql-tx", Payload: []byte("a")}, txbox.Event{Type: "sql-tx", Payload: []byte("b")})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	rows := b.claim(t, "sql-tx")
	got := map[txbox.ID]bool{}
	for _, r := range rows {
		got[r.ID] = true
	}
	if len(rows) != 3 || !got[one] || !got[batch[0]] || !got[batch[1]] {
		t.Fatalf("claimed %d rows, want the 3 published through *sql.Tx", len(rows))
	}
}
