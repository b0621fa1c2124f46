package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/relay/relaytest"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/webhook"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// lateWebhook is a webhook receiver on a port where nothing listens until
// start: until then a connection to it is refused, as a destination that
// is down. It records the txbox-event-id and Idempotency-Key of each request.
type lateWebhook struct {
	addr string
	srv  *http.Server

	mu   sync.Mutex
	ids  []txbox.ID
	keys map[txbox.ID]string
}

func newLateWebhook(t *testing.T) *lateWebhook {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &lateWebhook{addr: l.Addr().String(), keys: map[txbox.ID]string{}}
	_ = l.Close()
	w.srv = &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		id, err := txbox.ParseID(r.Header.Get(txbox.HeaderEventID))
		if err == nil {
			w.mu.Lock()
			w.ids = append(w.ids, id)
			w.keys[id] = r.Header.Get(webhook.HeaderIdempotencyKey)
			w.mu.Unlock()
		}
		rw.WriteHeader(http.StatusOK)
	})}
	t.Cleanup(func() { _ = w.srv.Close() })
	return w
}

func (w *lateWebhook) url() string { return "http://" + w.addr + "/hook" }

func (w *lateWebhook) start(t *testing.T) {
	t.Helper()
	l, err := net.Listen("tcp", w.addr)
	if err != nil {
		t.Fatalf("listen on the webhook's port again: %v", err)
	}
	go func() { _ = w.srv.Serve(l) }()
}

func (w *lateWebhook) received() []txbox.ID {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]txbox.ID(nil), w.ids...)
}

// checkKeyOrder reports the ids that arrived after a later id of the same
// key: per-key order holds per destination when it returns 0.
func checkKeyOrder(t *testing.T, where string, ids []txbox.ID, keyOf map[txbox.ID]string) {
	t.Helper()
	last := map[string]txbox.ID{}
	bad := 0
	for _, id := range ids {
		k := keyOf[id]
		if prev, ok := last[k]; ok && bytes.Compare(prev[:], id[:]) > 0 {
			if bad++; bad <= 3 {
				t.Errorf("%s: key %s: %v arrived after %v, which has a larger id", where, k, id, prev)
			}
			continue
		}
		last[k] = id
	}
	if bad > 0 {
		t.Errorf("%s: %d per-key order violations", where, bad)
	}
}

// TestFanoutOneDestinationDown (scenario 32): an event type with two
// routes, NATS and a webhook whose port is closed. NATS receives every
// event while the webhook is down; once it is up it receives every event
// too; both get the same ids, the webhook the event id as its
// Idempotency-Key, and per-key order holds on each.
func TestFanoutOneDestinationDown(t *testing.T) {
	t.Parallel()
	eachKind(t, withLockKinds(), func(t *testing.T, kind storeKind, d store.Driver) {
		fanoutOneDestinationDown(t, kind, d, true)
	})
}

// TestFanoutSharedClaimOneDestinationDown is TestFanoutOneDestinationDown
// for a type with no ordered route, which takes the shared claim
// (docs/concepts.md, "Fan-out"): each event's one row is sent to both
// routes; while the webhook is down its circuit opens and each event gets
// a row for the webhook route only, which its poller delivers once the
// port opens. Every event reaches both, with the same ids.
func TestFanoutSharedClaimOneDestinationDown(t *testing.T) {
	t.Parallel()
	eachKind(t, withLockKinds(), func(t *testing.T, kind storeKind, d store.Driver) {
		fanoutOneDestinationDown(t, kind, d, false)
	})
}

// fanoutOneDestinationDown is the body of TestFanoutOneDestinationDown,
// with the type delivered in key order or not.
func fanoutOneDestinationDown(t *testing.T, kind storeKind, d store.Driver, ordered bool) {
	st := newStream(t)
	hook := newLateWebhook(t)
	wh, err := webhook.New(webhook.Config{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wh.Close(context.Background()) })
	cfg := relayConfig(d, newNATSSender(t, testenv.NATSURL), st.prefix, 0)
	cfg.Senders["partner"] = wh
	cfg.Defaults.Sender = new("nats")
	ordering := txbox.OrderingNone
	if ordered {
		ordering = txbox.OrderingKey
	}
	cfg.Events = map[string]relay.EventSettings{"orders": {
		Ordering: &ordering,
		Routes: []relay.RouteSettings{
			{Sender: new("nats"), Route: sender.Route{Subject: st.prefix + ".{event_type}"}},
			{Name: "partner", Sender: new("partner"), Route: sender.Route{URL: hook.url()}, MaxAttempts: new(20)},
		},
	}}
	cfg.Circuit = relay.CircuitConfig{CoolDown: 100 * time.Millisecond, MaxCoolDown: 300 * time.Millisecond}
	relaytest.Start(t, cfg)

	o := newOracle()
	keyOf := map[txbox.ID]string{}
	const txs, perTx = 10, 30
	for range txs {
		evs := make([]*txbox.Event, perTx)
		for i := range evs {
			evs[i] = &txbox.Event{ID: txbox.NewID(), Type: "orders", Key: fmt.Sprintf("k%d", i%7), Payload: []byte("{}")}
			keyOf[evs[i].ID] = evs[i].Key
		}
		if err := kind.publish(context.Background(), d, evs, true); err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			o.committedIDs(ev.ID)
		}
	}
	testenv.WaitFor(t, 60*time.Second, "NATS has every event while the webhook is down", func() bool { return st.count(t) >= uint64(o.expected()) })
	if n := len(hook.received()); n != 0 {
		t.Fatalf("the webhook received %d events while its port was closed", n)
	}
	if n, _ := d.DeadLetterCount(context.Background(), &store.DeadLetterFilter{}); n != 0 {
		t.Errorf("%d dead letters while the webhook was down: an outage must not burn attempts", n)
	}
	hook.start(t)
	testenv.WaitFor(t, 60*time.Second, "the webhook has every event after it came back", func() bool {
		seen := map[txbox.ID]bool{}
		for _, id := range hook.received() {
			seen[id] = true
		}
		return len(seen) >= o.expected()
	})
	testenv.WaitFor(t, 20*time.Second, "outbox settled", func() bool { return outboxSettled(t, d) })

	var natsIDs []txbox.ID
	for _, m := range st.readAll(t) {
		natsIDs = append(natsIDs, m.id)
	}
	natsOracle, hookOracle := o.copy(), o.copy()
	natsOracle.receivedIDs(natsIDs...)
	hookOracle.receivedIDs(hook.received()...)
	if rep := natsOracle.report(); !rep.clean() {
		t.Errorf("oracle (nats): %v", rep)
	}
	if rep := hookOracle.report(); !rep.clean() {
		t.Errorf("oracle (webhook): %v", rep)
	}
	hook.mu.Lock()
	for id, k := range hook.keys {
		if k != id.String() {
			t.Errorf("webhook: event %s came with Idempotency-Key %q, want the event id", id, k)
			break
		}
	}
	hook.mu.Unlock()
	if ordered {
		checkKeyOrder(t, "nats", natsIDs, keyOf)
		checkKeyOrder(t, "webhook", hook.received(), keyOf)
	}
}

// TestWALFanoutOneDestinationDown is TestFanoutOneDestinationDown in WAL
// mode (docs/concepts.md, "Fan-out" and "WAL mode"): the stream hands
// each event to both routes' lanes; NATS receives every event from the
// stream while the webhook's port is closed, the webhook's copies spill
// into the table as its route's rows, and its poller delivers them once
// it is up. Rows a plain-SQL producer inserts (captured) reach both
// routes too. Same ids on both, per-key order on both, no dead letter,
// and the outbox table ends empty (no copy left, no captured row
// expanded again). While the webhook is down the table holds exactly one
// row per event, the webhook route's. It runs with the webhook as the
// second route and as the first, whose copy of a captured row is the
// row itself, spilled in place.
func TestWALFanoutOneDestinationDown(t *testing.T) {
	t.Parallel()
	for _, webhookFirst := range []bool{false, true} {
		t.Run(map[bool]string{false: "webhook-second", true: "webhook-first"}[webhookFirst], func(t *testing.T) {
			t.Parallel()
			walFanoutOneDestinationDown(t, webhookFirst)
		})
	}
}

func walFanoutOneDestinationDown(t *testing.T, webhookFirst bool) {
	eachKind(t, []storeKind{walKind}, func(t *testing.T, kind storeKind, d store.Driver) {
		st := newStream(t)
		hook := newLateWebhook(t)
		wh, err := webhook.New(webhook.Config{Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = wh.Close(context.Background()) })
		nc := newAckCounter(newNATSSender(t, testenv.NATSURL))
		cfg := relayConfig(d, nc, st.prefix, 0)
		cfg.Senders["partner"] = wh
		cfg.Defaults.Sender = new("nats")
		routes := []relay.RouteSettings{
			{Sender: new("nats"), Route: sender.Route{Subject: st.prefix + ".{event_type}"}},
			{Name: "partner", Sender: new("partner"), Route: sender.Route{URL: hook.url()}, MaxAttempts: new(20)},
		}
		if webhookFirst {
			routes[0], routes[1] = routes[1], routes[0]
		}
		cfg.Events = map[string]relay.EventSettings{"orders": {Ordering: new(txbox.OrderingKey), Routes: routes}}
		cfg.Circuit = relay.CircuitConfig{CoolDown: 100 * time.Millisecond, MaxCoolDown: 300 * time.Millisecond}
		r := relaytest.Start(t, cfg)
		testenv.WaitFor(t, 30*time.Second, "the relay streams", func() bool {
			h := r.Health()
			return h.Stream != nil && h.Stream.State == relay.StreamStreaming
		})

		o := newOracle()
		keyOf := map[txbox.ID]string{}
		const txs, perTx = 10, 30
		for range txs {
			evs := make([]*txbox.Event, perTx)
			for i := range evs {
				evs[i] = &txbox.Event{ID: txbox.NewID(), Type: "orders", Key: fmt.Sprintf("k%d", i%7), Payload: []byte("{}")}
				keyOf[evs[i].ID] = evs[i].Key
			}
			if err := kind.publish(context.Background(), d, evs, true); err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs {
				o.committedIDs(ev.ID)
			}
		}
		insertPlainSQL(t, d, "orders", 40, o)
		testenv.WaitFor(t, 60*time.Second, "NATS has every event while the webhook is down", func() bool { return st.count(t) >= uint64(o.expected()) })
		testenv.WaitFor(t, 30*time.Second, "one row per event in the table, the webhook route's", func() bool {
			byRoute := outboxRoutes(t, d)
			return len(byRoute) == 1 && byRoute["partner"] == o.expected()
		})
		if n := len(hook.received()); n != 0 {
			t.Fatalf("the webhook received %d events while its port was closed", n)
		}
		if n, _ := d.DeadLetterCount(context.Background(), &store.DeadLetterFilter{}); n != 0 {
			t.Errorf("%d dead letters while the webhook was down: an outage must not burn attempts", n)
		}
		hook.start(t)
		testenv.WaitFor(t, 60*time.Second, "the webhook has every event after it came back", func() bool {
			seen := map[txbox.ID]bool{}
			for _, id := range hook.received() {
				seen[id] = true
			}
			return len(seen) >= o.expected()
		})
		testenv.WaitFor(t, 30*time.Second, "the outbox table empty", func() bool { return outboxRows(t, d) == 0 })
		if n, _ := d.DeadLetterCount(context.Background(), &store.DeadLetterFilter{}); n != 0 {
			t.Errorf("%d dead letters, want none", n)
		}

		var natsIDs []txbox.ID
		for _, m := range st.readAll(t) {
			natsIDs = append(natsIDs, m.id)
		}
		natsOracle, hookOracle := o.copy(), o.copy()
		natsOracle.receivedIDs(natsIDs...)
		hookOracle.receivedIDs(hook.received()...)
		if rep := natsOracle.report(); !rep.clean() {
			t.Errorf("oracle (nats): %v", rep)
		}
		if rep := hookOracle.report(); !rep.clean() {
			t.Errorf("oracle (webhook): %v", rep)
		}
		hook.mu.Lock()
		for id, k := range hook.keys {
			if k != id.String() {
				t.Errorf("webhook: event %s came with Idempotency-Key %q, want the event id", id, k)
				break
			}
		}
		hook.mu.Unlock()
		keyed := func(ids []txbox.ID) []txbox.ID {
			var out []txbox.ID
			for _, id := range ids {
				if _, ok := keyOf[id]; ok {
					out = append(out, id)
				}
			}
			return out
		}
		// Sent to NATS once each: a captured row is not expanded again
		// after its spill (NATS would drop a second copy by its
		// Nats-Msg-Id, so the sender's count tells).
		nc.mu.Lock()
		for id, n := range nc.acked {
			if n != 1 {
				t.Errorf("event %s was sent to NATS %d times, want once", id, n)
			}
		}
		nc.mu.Unlock()
		checkKeyOrder(t, "nats", keyed(natsIDs), keyOf)
		checkKeyOrder(t, "webhook", keyed(hook.received()), keyOf)
	})
}

// outboxRoutes counts the outbox table's rows by route.
func outboxRoutes(t testing.TB, d store.Driver) map[string]int {
	t.Helper()
	pd := d.(*postgres.Driver)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := pd.Pool().Query(ctx, fmt.Sprintf("SELECT route, count(*) FROM %s.%s GROUP BY route", pd.Tables().Schema, pd.Tables().Outbox))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var r string
		var n int
		if err := rows.Scan(&r, &n); err != nil {
			t.Fatal(err)
		}
		out[r] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
