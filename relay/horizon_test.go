package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/relay/relaytest"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/webhook"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
	"github.com/txbox/txbox/store/sqlite"
	"github.com/txbox/txbox/store/storetest"
)

// The commit horizon (docs/concepts.md, "Ordering"): a key's events reach
// the destination in their producers' transaction order, also when the
// transactions overlap, with the real relay and a webhook receiver.

// receiver is a webhook endpoint that records the payloads it was sent,
// in arrival order. Payloads are {"key": ..., "name": ...}.
type receiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []horizonPayload
}

type horizonPayload struct {
	Key  string `json:"key"`
	Name string `json:"name"`
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var p horizonPayload
		if err == nil {
			err = json.Unmarshal(body, &p)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.got = append(r.got, p)
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.got))
	for i, p := range r.got {
		out[i] = p.Name
	}
	return out
}

func (r *receiver) snapshot() []horizonPayload {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// typePolls counts the claims of one type.
type typePolls struct {
	txbox.NopRelayHook
	typ string
	n   atomic.Int64
}

func (c *typePolls) OnPoll(ev txbox.PollEvent) {
	if ev.EventType == c.typ && ev.Err == nil {
		c.n.Add(1)
	}
}

// horizonEnv is one dialect's store and a relay delivering one ordered type
// to a webhook receiver.
type horizonEnv struct {
	h     storetest.Harness
	d     store.Driver
	rcv   *receiver
	polls *typePolls
	typ   string
}

func newHorizonEnv(t *testing.T, h storetest.Harness) *horizonEnv {
	t.Helper()
	d, err := h.Open(t, h.NewNamespace(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &horizonEnv{h: h, d: d, rcv: newReceiver(t), typ: "horizon.repro", polls: &typePolls{typ: "horizon.repro"}}
}

// start runs the relay, with claim as the type's claim mode.
func (e *horizonEnv) start(t *testing.T, claim txbox.ClaimMode) {
	t.Helper()
	hook, err := webhook.New(webhook.Config{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig(e.d, map[string]sender.Sender{"hook": hook})
	cfg.Hooks = []txbox.RelayHook{e.polls}
	cfg.Events = map[string]relay.EventSettings{e.typ: {
		Ordering: new(txbox.OrderingKey),
		Claim:    new(claim),
		Route:    &sender.Route{URL: e.rcv.srv.URL},
	}}
	relaytest.Start(t, cfg)
}

func (e *horizonEnv) event(id txbox.ID, key, name string) *txbox.Event {
	return &txbox.Event{ID: id, Type: e.typ, Key: key, Payload: fmt.Appendf(nil, `{"key":%q,"name":%q}`, key, name)}
}

// insert inserts evs in tx.
func (e *horizonEnv) insert(t testing.TB, tx storetest.Tx, evs ...*txbox.Event) {
	t.Helper()
	if err := e.d.OutboxInsert(context.Background(), tx.Native(), &store.OutboxInsertParams{Events: evs, Notify: true}); err != nil {
		_ = tx.Rollback()
		t.Fatalf("insert: %v", err)
	}
}

// horizonDialects are the dialects that keep transaction order: PostgreSQL (its
// transaction ids) in both claim modes, and SQLite (the rowid the INSERT
// assigns) with the lease claim, its only one. MySQL/MariaDB orders a key
// by id only between transactions that do not overlap (docs/concepts.md,
// "Ordering").
func horizonDialects() []struct {
	name  string
	h     func() storetest.Harness
	claim txbox.ClaimMode
} {
	return []struct {
		name  string
		h     func() storetest.Harness
		claim txbox.ClaimMode
	}{
		{"postgres/lease", storeharness.Postgres, txbox.ClaimLease},
		{"postgres/lock", storeharness.Postgres, txbox.ClaimLock},
		{"sqlite/lease", storeharness.SQLite, txbox.ClaimLease},
	}
}

// TestOrderedOverlappingTransactions is the reproduction of the
// inversion: transaction A inserts k1 with the smaller id and stays open,
// B inserts k1 and commits, the relay polls while A is open, then A
// commits. The receiver must get A, then B. On SQLite, where A's open
// transaction holds the only write lock, B waits in busy_timeout with its
// id already made; there B has the smaller id, A inserts first, and the
// receiver must get A (the first insert) before B.
func TestOrderedOverlappingTransactions(t *testing.T) {
	t.Parallel()
	for _, tc := range horizonDialects() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := tc.h()
			e := newHorizonEnv(t, h)
			if h.SerialWriter {
				// No claim can run while A holds the write lock; the relay
				// starts once both committed, when id order would put B
				// first.
				overlapSerialWriter(t, e)
				e.start(t, tc.claim)
			} else {
				e.start(t, tc.claim)
				overlapConcurrentWriters(t, e)
			}
			testenv.WaitFor(t, time.Minute, "both events delivered", func() bool { return len(e.rcv.names()) >= 2 })
			if got := e.rcv.names(); !slices.Equal(got, []string{"A", "B"}) {
				t.Fatalf("the receiver got %v, want [A B]", got)
			}
		})
	}
}

func overlapConcurrentWriters(t *testing.T, e *horizonEnv) {
	idA, idB := txbox.NewID(), txbox.NewID() // A's id is the smaller
	a := e.h.Begin(t, e.d)
	e.insert(t, a, e.event(idA, "k1", "A"))
	b := e.h.Begin(t, e.d)
	e.insert(t, b, e.event(idB, "k1", "B"))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	// The relay claims the type a few times while A is open: each claim
	// sees B as the only row of k1.
	from := e.polls.n.Load()
	testenv.WaitFor(t, time.Minute, "three claims while A is open", func() bool { return e.polls.n.Load() >= from+3 })
	if got := e.rcv.names(); len(got) != 0 {
		_ = a.Rollback()
		t.Fatalf("the receiver got %v while A, the key's first transaction, was still open", got)
	}
	if err := a.Commit(); err != nil {
		t.Fatal(err)
	}
}

func overlapSerialWriter(t *testing.T, e *horizonEnv) {
	idB, idA := txbox.NewID(), txbox.NewID() // B's id is the smaller
	a := e.h.Begin(t, e.d)
	e.insert(t, a, e.event(idA, "k1", "A")) // A holds the write lock
	db := e.d.(*sqlite.Driver).DB()
	bDone := make(chan error, 1)
	go func() {
		// B waits in busy_timeout, at its begin or its insert, with its
		// id made, until A commits.
		b, err := db.BeginTx(context.Background(), nil)
		if err != nil {
			bDone <- err
			return
		}
		err = e.d.OutboxInsert(context.Background(), b, &store.OutboxInsertParams{Events: []*txbox.Event{e.event(idB, "k1", "B")}})
		if err == nil {
			err = b.Commit()
		} else {
			_ = b.Rollback()
		}
		bDone <- err
	}()
	if err := a.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-bDone; err != nil {
		t.Fatalf("B: %v", err)
	}
}

// TestOrderedOverlapLoad has many producers whose transactions overlap
// on a few keys against a per-key order oracle. Each producer makes its
// event id first, waits a random while (so id order is not transaction
// order), begins, reads its transaction id (which gives it one), inserts
// an event carrying that id, and holds the transaction open a random
// while before it commits. The receiver must get every event of a key in
// increasing transaction id order, and every event.
func TestOrderedOverlapLoad(t *testing.T) {
	t.Parallel()
	for _, claim := range []txbox.ClaimMode{txbox.ClaimLease, txbox.ClaimLock} {
		t.Run(string(claim), func(t *testing.T) {
			t.Parallel()
			e := newHorizonEnv(t, storeharness.Postgres())
			e.start(t, claim)
			pool := e.d.(*postgres.Driver).Pool()
			const producers, perProducer, keys = 12, 25, 4
			var wg sync.WaitGroup
			errs := make(chan error, producers)
			for p := range producers {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(p), 22))
					for i := range perProducer {
						if err := publishOverlapping(e, pool, rng, fmt.Sprintf("k%d", (p+i)%keys)); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			testenv.WaitFor(t, 2*time.Minute, "every event delivered", func() bool { return len(e.rcv.names()) >= producers*perProducer })
			last := map[string]uint64{}
			for _, p := range e.rcv.snapshot() {
				var x uint64
				if _, err := fmt.Sscan(p.Name, &x); err != nil {
					t.Fatalf("payload name %q: %v", p.Name, err)
				}
				if x <= last[p.Key] {
					t.Fatalf("key %s: transaction %d delivered after %d", p.Key, x, last[p.Key])
				}
				last[p.Key] = x
			}
			if got := len(e.rcv.names()); got != producers*perProducer {
				t.Fatalf("delivered %d, want %d", got, producers*perProducer)
			}
		})
	}
}

// publishOverlapping is one producer transaction of TestOrderedOverlapLoad.
func publishOverlapping(e *horizonEnv, pool *pgxpool.Pool, rng *rand.Rand, key string) error {
	ctx := context.Background()
	id := txbox.NewID()
	time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond) // workload: let later ids overtake this one
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	var xid string
	if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&xid); err != nil {
		return err
	}
	if err := e.d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{e.event(id, key, xid)}, Notify: true}); err != nil {
		return err
	}
	time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond) // workload: hold the transaction open
	return tx.Commit(ctx)
}

// TestOrderedWaitsBehindAnXidHolder is the horizon pin on delivery: a
// transaction that holds a transaction id (it read pg_current_xact_id()
// and stays open; a read-only snapshot would hold none) keeps every
// ordered event published after it began from being delivered, in both
// claim modes, and the events go once it ends. It logs the delay from
// its commit to the delivery: the horizon's wait (the claim's horizon
// back-off) on top of the relay's usual pick-up. TXBOX_HORIZON_HOLD holds
// the transaction that much longer (docs/concepts.md, "Ordering", has
// the delay behind a 60 s transaction).
func TestOrderedWaitsBehindAnXidHolder(t *testing.T) {
	t.Parallel()
	hold := time.Duration(0)
	if v := os.Getenv("TXBOX_HORIZON_HOLD"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("TXBOX_HORIZON_HOLD=%q: %v", v, err)
		}
		hold = d
	}
	for _, claim := range []txbox.ClaimMode{txbox.ClaimLease, txbox.ClaimLock} {
		t.Run(string(claim), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newHorizonEnv(t, storeharness.Postgres())
			e.start(t, claim)
			pool := e.d.(*postgres.Driver).Pool()
			pin, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer pin.Rollback(ctx)
			if _, err := pin.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
				t.Fatal(err)
			}
			tx := e.h.Begin(t, e.d)
			e.insert(t, tx, e.event(txbox.NewID(), "k1", "after the pin"))
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			from := e.polls.n.Load()
			testenv.WaitFor(t, time.Minute, "three claims while the pin holds", func() bool { return e.polls.n.Load() >= from+3 })
			time.Sleep(hold) // workload: the long transaction's length
			if got := e.rcv.names(); len(got) != 0 {
				t.Fatalf("delivered %v while an older transaction holding an xid was open", got)
			}
			if err := pin.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			ended := time.Now()
			testenv.WaitFor(t, time.Minute, "the event delivered after the pin", func() bool { return len(e.rcv.names()) == 1 })
			t.Logf("%s claim: delivered %v after the pinning transaction (held %v more) ended", claim, time.Since(ended).Round(time.Millisecond), hold)
		})
	}
}
