package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/relay/relaytest"
	"github.com/txbox/txbox/sender"
	natssender "github.com/txbox/txbox/sender/nats"
	"github.com/txbox/txbox/sender/sendertest"
	"github.com/txbox/txbox/sender/webhook"
	"github.com/txbox/txbox/store"
)

func newNATSSender(t *testing.T, url string) *natssender.Sender {
	t.Helper()
	s, err := natssender.New(natssender.Config{URL: url, AckTimeout: 2 * time.Second, ReconnectWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// publishOne publishes one committed event and returns its id.
func publishOne(t *testing.T, kind storeKind, d store.Driver, ev *txbox.Event) txbox.ID {
	t.Helper()
	if ev.ID == (txbox.ID{}) {
		ev.ID = txbox.NewID()
	}
	if ev.Payload == nil {
		ev.Payload = []byte("{}")
	}
	if err := kind.publish(context.Background(), d, []*txbox.Event{ev}, true); err != nil {
		t.Fatal(err)
	}
	return ev.ID
}

func publishN(t *testing.T, kind storeKind, d store.Driver, typ string, n int, o *oracle) []txbox.ID {
	t.Helper()
	ids := make([]txbox.ID, n)
	evs := make([]*txbox.Event, n)
	for i := range evs {
		ids[i] = txbox.NewID()
		evs[i] = &txbox.Event{ID: ids[i], Type: typ, Payload: []byte("{}")}
	}
	if err := kind.publish(context.Background(), d, evs, true); err != nil {
		t.Fatal(err)
	}
	if o != nil {
		o.committedIDs(ids...)
	}
	return ids
}

// TestRollbackAndDelayedEvent: a rolled-back event never reaches the
// stream; a delayed event does not arrive before its time (measured on
// the broker's clock, which is this machine's).
func TestRollbackAndDelayedEvent(t *testing.T) {
	t.Parallel()
	eachKind(t, withLockKindsInChaos(), func(t *testing.T, kind storeKind, d store.Driver) {
		st := newStream(t)
		o := newOracle()
		rb := &txbox.Event{ID: txbox.NewID(), Type: "orders", Payload: []byte("{}")}
		if err := kind.publish(context.Background(), d, []*txbox.Event{rb}, false); err != nil {
			t.Fatal(err)
		}
		o.rolledBackIDs(rb.ID)
		notBefore := time.Now().Add(2 * time.Second)
		delayed := publishOne(t, kind, d, &txbox.Event{Type: "orders", NotBefore: notBefore})
		o.committedIDs(delayed)
		now := publishOne(t, kind, d, &txbox.Event{Type: "orders"})
		o.committedIDs(now)
		relaytest.Start(t, relayConfig(d, newNATSSender(t, testenv.NATSURL), st.prefix, 0))
		testenv.WaitFor(t, 15*time.Second, "both events in the stream", func() bool { return st.count(t) >= 2 })
		testenv.WaitFor(t, 10*time.Second, "outbox settled", func() bool { return outboxSettled(t, d) })
		msgs := st.readAll(t)
		for _, m := range msgs {
			o.receivedIDs(m.id)
			if m.id == delayed && m.at.Before(notBefore) {
				t.Errorf("delayed event arrived %v before its time", notBefore.Sub(m.at))
			}
			if m.id == now && !m.at.Before(notBefore) {
				t.Errorf("the undelayed event waited for the delayed one")
			}
		}
		if r := o.report(); !r.clean() || r.OK != 2 {
			t.Errorf("oracle: %v", r)
		}
	})
}

// hookServer is an httptest webhook receiver whose answer per request is
// chosen by respond; it records every request.
type hookServer struct {
	*httptest.Server
	mu      sync.Mutex
	reqs    []hookRequest
	respond atomic.Value // func(id string, n int) int: status for the n-th request of id
}

type hookRequest struct {
	id     string
	status int
	at     time.Time
}

func newHookServer(t *testing.T, respond func(id string, n int) int) *hookServer {
	t.Helper()
	h := &hookServer{}
	h.respond.Store(respond)
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("Idempotency-Key")
		if id == "" || r.Header.Get(txbox.HeaderEventID) != id {
			http.Error(w, "missing idempotency key", http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		n := 0
		for _, q := range h.reqs {
			if q.id == id {
				n++
			}
		}
		status := h.respond.Load().(func(string, int) int)(id, n+1)
		h.reqs = append(h.reqs, hookRequest{id: id, status: status, at: time.Now()})
		h.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *hookServer) requests(id string) []hookRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []hookRequest
	for _, q := range h.reqs {
		if id == "" || q.id == id {
			out = append(out, q)
		}
	}
	return out
}

// acked returns the ids answered 2xx, with repeats.
func (h *hookServer) acked() []txbox.ID {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []txbox.ID
	for _, q := range h.reqs {
		if q.status/100 == 2 {
			id, _ := txbox.ParseID(q.id)
			out = append(out, id)
		}
	}
	return out
}

// attemptRecorder wraps a sender and records the Attempt of every message
// it is given.
type attemptRecorder struct {
	sender.Sender
	mu       sync.Mutex
	attempts map[txbox.ID][]int
}

func (a *attemptRecorder) Send(ctx context.Context, msgs []*sender.Message) error {
	a.mu.Lock()
	if a.attempts == nil {
		a.attempts = map[txbox.ID][]int{}
	}
	for _, m := range msgs {
		a.attempts[m.ID] = append(a.attempts[m.ID], m.Attempt)
	}
	a.mu.Unlock()
	return a.Sender.Send(ctx, msgs)
}

// Destination forwards the wrapped sender's destination names, so the
// relay's circuits are keyed as they would be without the recorder.
func (a *attemptRecorder) Destination(r sender.Route) string {
	return sender.DestinationOf(a.Sender, r)
}

// maxAttempt is the highest Attempt any message was sent with.
func (a *attemptRecorder) maxAttempt() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := 0
	for _, as := range a.attempts {
		for _, n := range as {
			m = max(m, n)
		}
	}
	return m
}

// noBurnedAttempts fails t when a message was sent as a later attempt
// than its first: an outage must not count against MaxAttempts.
func (a *attemptRecorder) noBurnedAttempts(t testing.TB) {
	t.Helper()
	if m := a.maxAttempt(); m != 1 {
		t.Errorf("a message was sent as attempt %d: the outage burned attempts", m)
	}
}

// outageRecovered checks relay r during an outage (health degraded,
// nothing dead-lettered), ends the outage with up, then checks the
// recovery: the backlog drains, no attempt was burned, nothing was
// dead-lettered.
func outageRecovered(t testing.TB, r *relay.Relay, d store.Driver, rec *attemptRecorder, up func()) {
	t.Helper()
	if h := r.Health(); !h.Degraded {
		t.Errorf("health not degraded during the outage: %+v", h)
	}
	noDeadLetters(t, d, "during the outage")
	up()
	testenv.WaitFor(t, 60*time.Second, "backlog drained after the outage", func() bool { return outboxSettled(t, d) })
	rec.noBurnedAttempts(t)
	noDeadLetters(t, d, "after the outage")
}

// noDeadLetters fails t when d holds a dead letter; when says at which
// point of the test ("during the outage").
func noDeadLetters(t testing.TB, d store.Driver, when string) {
	t.Helper()
	n, err := d.DeadLetterCount(context.Background(), &store.DeadLetterFilter{})
	if err != nil || n != 0 {
		t.Errorf("%d dead letters %s (%v)", n, when, err)
	}
}

func webhookConfig(t *testing.T, d store.Driver, url string, wrap func(sender.Sender) sender.Sender) relay.Config {
	t.Helper()
	s, err := webhook.New(webhook.Config{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	var snd sender.Sender = s
	if wrap != nil {
		snd = wrap(s)
	}
	cfg := relayConfig(d, snd, "unused", 0)
	cfg.Defaults.Route = &sender.Route{URL: url + "/{event_type}"}
	return cfg
}

// TestRetryScheduleAndPoison: a message the receiver refuses with 422 is
// retried on the configured schedule (attempts and due times) and
// dead-lettered after max attempts with its last error, exactly once,
// while other events flow; a message refused twice then accepted is
// delivered on its third attempt.
func TestRetryScheduleAndPoison(t *testing.T) {
	t.Parallel()
	eachKind(t, withLockKindsInChaos(), func(t *testing.T, kind storeKind, d store.Driver) {
		var poison, flaky atomic.Value
		poison.Store("")
		flaky.Store("")
		h := newHookServer(t, func(id string, n int) int {
			switch {
			case id == poison.Load().(string):
				return http.StatusUnprocessableEntity
			case id == flaky.Load().(string) && n <= 2:
				return http.StatusUnprocessableEntity
			}
			return http.StatusOK
		})
		o := newOracle()
		p := publishOne(t, kind, d, &txbox.Event{Type: "orders"})
		f := publishOne(t, kind, d, &txbox.Event{Type: "orders"})
		poison.Store(p.String())
		flaky.Store(f.String())
		o.committedIDs(f)
		o.committedIDs(publishN(t, kind, d, "orders", 50, nil)...)
		o.committedIDs(publishN(t, kind, d, "other", 50, nil)...)
		rec := &attemptRecorder{}
		cfg := webhookConfig(t, d, h.URL, func(s sender.Sender) sender.Sender { rec.Sender = s; return rec })
		cfg.Defaults.MaxAttempts = new(4)
		cfg.Defaults.Backoff = &relay.BackoffSettings{Delay: new(300 * time.Millisecond), Multiplier: new(2.0), Max: new(time.Minute)}
		relaytest.Start(t, cfg)

		testenv.WaitFor(t, 20*time.Second, "poison dead-lettered", func() bool {
			n, err := d.DeadLetterCount(context.Background(), &store.DeadLetterFilter{})
			return err == nil && n >= 1
		})
		testenv.WaitFor(t, 10*time.Second, "outbox settled", func() bool { return outboxSettled(t, d) })
		dl, err := d.DeadLetterGet(context.Background(), p)
		if err != nil {
			t.Fatalf("poison not in the dead-letter table: %v", err)
		}
		if dl.Attempts != 4 || !strings.Contains(dl.LastError, "422") {
			t.Errorf("dead letter: attempts %d, last error %q; want 4 and the 422", dl.Attempts, dl.LastError)
		}
		if n, _ := d.DeadLetterCount(context.Background(), &store.DeadLetterFilter{}); n != 1 {
			t.Errorf("%d dead letters, want exactly the poison", n)
		}
		// Schedule: retry n after 300ms × 2^(n-1) → gaps ≥ 300, 600, 1200ms.
		tries := h.requests(p.String())
		if len(tries) != 4 {
			t.Fatalf("poison requested %d times, want 4", len(tries))
		}
		for i, want := range []time.Duration{300 * time.Millisecond, 600 * time.Millisecond, 1200 * time.Millisecond} {
			gap := tries[i+1].at.Sub(tries[i].at)
			if gap < want-20*time.Millisecond || gap > want+2*time.Second {
				t.Errorf("gap before retry %d = %v, want about %v", i+1, gap, want)
			}
		}
		rec.mu.Lock()
		pa, fa := rec.attempts[p], rec.attempts[f]
		rec.mu.Unlock()
		if len(pa) != 4 || pa[0] != 1 || pa[3] != 4 {
			t.Errorf("poison attempts = %v, want 1..4", pa)
		}
		if len(fa) != 3 || fa[2] != 3 {
			t.Errorf("flaky attempts = %v, want 1..3", fa)
		}
		o.receivedIDs(h.acked()...)
		if r := o.report(); !r.clean() {
			t.Errorf("oracle: %v", r)
		}
	})
}

// TestOutage503: the receiver answers 503 to everything for a while. The
// circuit opens, no attempt is burned, nothing is dead-lettered, and the
// backlog drains once it recovers.
func TestOutage503(t *testing.T) {
	t.Parallel()
	eachKind(t, withLockKindsInChaos(), func(t *testing.T, kind storeKind, d store.Driver) {
		var down atomic.Bool
		down.Store(true)
		h := newHookServer(t, func(string, int) int {
			if down.Load() {
				return http.StatusServiceUnavailable
			}
			return http.StatusNoContent
		})
		o := newOracle()
		publishN(t, kind, d, "orders", 200, o)
		publishN(t, kind, d, "other", 200, o)
		rec := &attemptRecorder{}
		circuits := &circuitHook{}
		cfg := webhookConfig(t, d, h.URL, func(s sender.Sender) sender.Sender { rec.Sender = s; return rec })
		cfg.Defaults.MaxAttempts = new(2)
		cfg.Hooks = []txbox.RelayHook{circuits}
		r := relaytest.Start(t, cfg)
		testenv.WaitFor(t, 10*time.Second, "three failed probes", func() bool { return circuits.opened() >= 4 })
		for _, st := range destCircuits(r.Health()) {
			if st.State == txbox.CircuitClosed || !strings.Contains(st.LastError, "503") {
				t.Errorf("circuit during the outage = %+v", st)
			}
		}
		requestsDuringOutage := len(h.requests(""))
		down.Store(false)
		testenv.WaitFor(t, 30*time.Second, "backlog drained", func() bool { return outboxSettled(t, d) })
		rec.noBurnedAttempts(t)
		noDeadLetters(t, d, "after an outage")
		// 400 rows in batches of 200: the first claim of each type
		// sends its whole batch (the webhook posts every message of
		// it), then only probes of 10 rows go out per cool-down.
		// Without the circuit every poll would hit the receiver again.
		opened := circuits.opened()
		t.Logf("%d requests during the outage, %d circuit openings", requestsDuringOutage, opened)
		if limit := 400 + 10*(opened+1); requestsDuringOutage > limit {
			t.Errorf("%d requests during the outage, want ≤ %d: pollers did not pause", requestsDuringOutage, limit)
		}
		o.receivedIDs(h.acked()...)
		if rep := o.report(); !rep.clean() {
			t.Errorf("oracle: %v", rep)
		}
		for _, st := range r.Health().Circuits {
			if st.State != txbox.CircuitClosed {
				t.Errorf("circuit after recovery = %+v", st)
			}
		}
	})
}

// TestNATSUnavailable: the NATS server becomes unreachable (a proxy in
// front of it goes down). The circuit opens, attempts are not burned,
// nothing is dead-lettered; after it comes back everything arrives, with
// duplicates only from sends whose outcome was unknown.
func TestNATSUnavailable(t *testing.T) {
	t.Parallel()
	eachKind(t, withLockKinds(), func(t *testing.T, kind storeKind, d store.Driver) {
		st := newStream(t)
		proxy := sendertest.NewProxy(t, "127.0.0.1:4222")
		rec := &attemptRecorder{Sender: newNATSSender(t, "nats://"+proxy.Addr())}
		circuits := &circuitHook{}
		cfg := relayConfig(d, rec, st.prefix, 0)
		cfg.Defaults.MaxAttempts = new(2)
		cfg.Hooks = []txbox.RelayHook{circuits}
		r := relaytest.Start(t, cfg)
		o := newOracle()
		publishN(t, kind, d, "orders", 100, o)
		testenv.WaitFor(t, 15*time.Second, "first events delivered", func() bool { return st.count(t) >= 100 })

		proxy.Down(t)
		publishN(t, kind, d, "orders", 300, o)
		publishN(t, kind, d, "other", 100, o)
		testenv.WaitFor(t, 20*time.Second, "circuit open with failed probes", func() bool { return circuits.opened() >= 3 })
		outageRecovered(t, r, d, rec, func() { proxy.Up(t) })
		for _, m := range st.readAll(t) {
			o.receivedIDs(m.id)
		}
		rep := o.report()
		t.Logf("oracle: %v", rep)
		// Duplicates are allowed only for unknown outcomes, bounded by
		// what can be in flight: in-flight batches × batch size.
		if len(rep.Lost) != 0 || len(rep.Unexpected) != 0 || rep.extra() > relay.DefaultInFlight*relay.DefaultBatchSize {
			t.Errorf("oracle: %v", rep)
		}
	})
}

// TestStaleRelayFinishIsFenced: a relay claims a batch and stalls past its
// lease; the rows are recovered and delivered by another relay (as attempt
// 1, not before the lease expired); the stale relay's finish then changes
// nothing. The store-level boundary (not at expiry−δ, yes at expiry+δ) is
// in the storetest conformance suite.
//
// On the lock kinds the stale batch is a lock claim: its transaction is
// bounded by the lease on the session, the database ends it when the
// lease runs out, and its late finish fails and commits nothing.
func TestStaleRelayFinishIsFenced(t *testing.T) {
	t.Parallel()
	eachKind(t, withLockKinds(), func(t *testing.T, kind storeKind, d store.Driver) {
		st := newStream(t)
		o := newOracle()
		publishN(t, kind, d, "orders", 20, o)
		const lease = 2 * time.Second
		claim := &store.OutboxClaimParams{EventType: "orders", Limit: 100, LeaseDuration: lease}
		var stale []*store.OutboxRow
		var staleLock store.LockedBatch
		var err error
		if kind.claim == txbox.ClaimLock {
			if staleLock, err = d.(store.OutboxLocker).OutboxLock(context.Background(), claim); staleLock != nil {
				stale = staleLock.Rows()
			}
		} else {
			stale, err = d.OutboxClaim(context.Background(), claim)
		}
		if err != nil || len(stale) != 20 {
			t.Fatalf("stale claim: %d rows, %v", len(stale), err)
		}
		claimed := time.Now()
		rec := &attemptRecorder{Sender: newNATSSender(t, testenv.NATSURL)}
		relaytest.Start(t, relayConfig(d, rec, st.prefix, 24*time.Hour))
		testenv.WaitFor(t, 20*time.Second, "recovered rows delivered", func() bool { return st.count(t) >= 20 })
		msgs := st.readAll(t)
		for _, m := range msgs {
			o.receivedIDs(m.id)
			if m.at.Sub(claimed) < lease-100*time.Millisecond {
				t.Errorf("row redelivered %v after the claim, before its %v lease expired", m.at.Sub(claimed), lease)
			}
		}
		if m := rec.maxAttempt(); m != 1 {
			t.Errorf("recovered rows sent as attempt %d, want 1", m)
		}
		testenv.WaitFor(t, 10*time.Second, "outbox settled", func() bool { return outboxSettled(t, d) })
		items := make([]store.OutboxFinishItem, len(stale))
		for i, row := range stale {
			items[i] = store.OutboxFinishItem{ID: row.ID, LeaseToken: row.LeaseToken, Outcome: store.OutcomeFailed, Error: "stale"}
		}
		if staleLock != nil {
			if res, err := staleLock.Finish(context.Background(), &store.OutboxFinishParams{Items: items}); err == nil {
				t.Errorf("stale lock finish = %+v, want an error: the database ended its transaction", res)
			}
		} else {
			res, err := d.OutboxFinish(context.Background(), &store.OutboxFinishParams{Items: items})
			if err != nil {
				t.Fatal(err)
			}
			if res.Finished != 0 || res.Fenced != len(stale) {
				t.Errorf("stale finish = %+v, want all fenced", res)
			}
		}
		stats, err := d.OutboxStats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range stats {
			if s.Failed != 0 {
				t.Errorf("stale finish failed %d rows of %s", s.Failed, s.EventType)
			}
		}
		if r := o.report(); !r.clean() {
			t.Errorf("oracle: %v", r)
		}
	})
}

// destCircuits returns the destination circuits of h (not the senders'
// connection circuits).
func destCircuits(h relay.Health) []relay.CircuitHealth {
	var out []relay.CircuitHealth
	for _, c := range h.Circuits {
		if !c.Connection {
			out = append(out, c)
		}
	}
	return out
}

// circuitHook counts circuit openings.
type circuitHook struct {
	txbox.NopRelayHook
	n atomic.Int64
}

func (c *circuitHook) OnCircuit(ev txbox.CircuitEvent) {
	if ev.State == txbox.CircuitOpen {
		c.n.Add(1)
	}
}

func (c *circuitHook) opened() int { return int(c.n.Load()) }

// TestUnroutableNATSSubject (scenario 8): a route whose subject no stream
// captures is the message's problem, not an outage: each send counts an
// attempt, the rows are dead-lettered after max attempts with the cause,
// and the circuit stays closed.
func TestUnroutableNATSSubject(t *testing.T) {
	t.Parallel()
	kind := postgresKind
	d := freshStore(t, kind)
	ids := publishN(t, kind, d, "orders", 5, nil)
	circuits := &circuitHook{}
	cfg := relayConfig(d, newNATSSender(t, testenv.NATSURL), testenv.UniqueName("nostream_"), 0)
	cfg.Defaults.MaxAttempts = new(2)
	cfg.Defaults.Backoff = &relay.BackoffSettings{Delay: new(50 * time.Millisecond), Multiplier: new(1.0), Max: new(time.Second)}
	cfg.Hooks = []txbox.RelayHook{circuits}
	relaytest.Start(t, cfg)
	testenv.WaitFor(t, 30*time.Second, "unroutable events dead-lettered", func() bool {
		n, err := d.DeadLetterCount(context.Background(), &store.DeadLetterFilter{})
		return err == nil && n == int64(len(ids))
	})
	dl, err := d.DeadLetterGet(context.Background(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if dl.Attempts != 2 || !strings.Contains(dl.LastError, "no stream") {
		t.Errorf("dead letter: attempts %d, last error %q; want 2 and the missing stream", dl.Attempts, dl.LastError)
	}
	if n := circuits.opened(); n != 0 {
		t.Errorf("circuit opened %d times for an unroutable subject", n)
	}
}
