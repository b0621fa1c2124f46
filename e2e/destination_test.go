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
	"github.com/txbox/txbox/sender/sendertest"
	"github.com/txbox/txbox/store"
)

// Circuits per destination and poison messages that fail with a 5xx
// (docs/concepts.md, "Outages versus poison"; docs/testing.md, scenarios
// 7, 9 and 21).

// pathServer is a webhook receiver that answers by request path and
// event id, and records the ids it answered 2xx per path.
type pathServer struct {
	*httptest.Server
	status func(path, id string) int

	mu    sync.Mutex
	acked map[string][]txbox.ID // path → ids answered 2xx
	tries map[string]int        // id → requests
}

func newPathServer(t *testing.T, status func(path, id string) int) *pathServer {
	t.Helper()
	s := &pathServer{status: status, acked: map[string][]txbox.ID{}, tries: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("Idempotency-Key")
		code := s.status(r.URL.Path, id)
		s.mu.Lock()
		s.tries[id]++
		if code/100 == 2 {
			if parsed, err := txbox.ParseID(id); err == nil {
				s.acked[r.URL.Path] = append(s.acked[r.URL.Path], parsed)
			}
		}
		s.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *pathServer) ackedOn(path string) []txbox.ID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]txbox.ID(nil), s.acked[path]...)
}

func (s *pathServer) allAcked() []txbox.ID {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []txbox.ID
	for _, ids := range s.acked {
		out = append(out, ids...)
	}
	return out
}

func (s *pathServer) requests(id txbox.ID) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tries[id.String()]
}

// destHook records every circuit event.
type destHook struct {
	txbox.NopRelayHook
	mu     sync.Mutex
	events []txbox.CircuitEvent
}

func (h *destHook) OnCircuit(ev txbox.CircuitEvent) {
	h.mu.Lock()
	h.events = append(h.events, ev)
	h.mu.Unlock()
}

// opened counts the openings of the circuits for which match is true.
func (h *destHook) opened(match func(txbox.CircuitEvent) bool) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, ev := range h.events {
		if ev.State == txbox.CircuitOpen && match(ev) {
			n++
		}
	}
	return n
}

func anyCircuit(txbox.CircuitEvent) bool { return true }

func destinationIs(suffix string) func(txbox.CircuitEvent) bool {
	return func(ev txbox.CircuitEvent) bool { return !ev.Connection && strings.HasSuffix(ev.Destination, suffix) }
}

func isConnection(ev txbox.CircuitEvent) bool { return ev.Connection }

func containsIDs(have, want []txbox.ID) bool {
	set := make(map[txbox.ID]bool, len(have))
	for _, id := range have {
		set[id] = true
	}
	for _, id := range want {
		if !set[id] {
			return false
		}
	}
	return true
}

// circuitOf returns the circuit of the destination whose name ends with
// suffix.
func circuitOf(t *testing.T, h relay.Health, suffix string) relay.CircuitHealth {
	t.Helper()
	for _, c := range h.Circuits {
		if !c.Connection && strings.HasSuffix(c.Destination, suffix) {
			return c
		}
	}
	t.Fatalf("no circuit for a destination ending in %q: %+v", suffix, h.Circuits)
	return relay.CircuitHealth{}
}

// TestOneFailingRouteLeavesOthersFlowing (scenario 21): one webhook
// sender, type a routed to a path answering 503 and type b to a path
// answering 200. a's circuit opens and stays open (a cool-down of 30s);
// b, published after it opened, is delivered at once, in full batches:
// its circuit never opens. a burns no attempt.
func TestOneFailingRouteLeavesOthersFlowing(t *testing.T) {
	t.Parallel()
	eachKind(t, storeKinds, func(t *testing.T, kind storeKind, d store.Driver) {
		srv := newPathServer(t, func(path, _ string) int {
			if path == "/a" {
				return http.StatusServiceUnavailable
			}
			return http.StatusOK
		})
		rec := &attemptRecorder{}
		hook := &destHook{}
		cfg := webhookConfig(t, d, srv.URL, func(s sender.Sender) sender.Sender { rec.Sender = s; return rec })
		cfg.Events = map[string]relay.EventSettings{"a": {}, "b": {}}
		// A cool-down far longer than the test: with one circuit per
		// sender, b would wait for it.
		cfg.Circuit = relay.CircuitConfig{CoolDown: 30 * time.Second, MaxCoolDown: 30 * time.Second}
		cfg.Hooks = []txbox.RelayHook{hook}
		r := relaytest.Start(t, cfg)

		o := newOracle()
		publishN(t, kind, d, "a", 50, nil)
		testenv.WaitFor(t, 15*time.Second, "a's circuit open", func() bool { return hook.opened(anyCircuit) >= 1 })
		idsB := publishN(t, kind, d, "b", 300, o)
		r.Wake("b")
		testenv.WaitFor(t, 10*time.Second, "b delivered while a's destination fails", func() bool {
			return containsIDs(srv.ackedOn("/b"), idsB)
		})

		h := r.Health()
		if c := circuitOf(t, h, "/a"); c.State != txbox.CircuitOpen || !strings.Contains(c.LastError, "503") {
			t.Errorf("a's circuit = %+v, want open with the 503", c)
		}
		if c := circuitOf(t, h, "/b"); c.State != txbox.CircuitClosed {
			t.Errorf("b's circuit = %+v, want closed", c)
		}
		for _, c := range h.Circuits {
			if c.Connection && c.State != txbox.CircuitClosed {
				t.Errorf("connection circuit %+v: a 503 is the destination's, not the connection's", c)
			}
		}
		if n := hook.opened(destinationIs("/b")); n != 0 {
			t.Errorf("b's circuit opened %d times", n)
		}
		if m := rec.maxAttempt(); m != 1 {
			t.Errorf("a message was sent as attempt %d: the failing route burned attempts", m)
		}
		if n, _ := d.DeadLetterCount(context.Background(), &store.DeadLetterFilter{}); n != 0 {
			t.Errorf("%d dead letters", n)
		}
		o.receivedIDs(srv.ackedOn("/b")...)
		if rep := o.report(); !rep.clean() {
			t.Errorf("oracle (type b): %v", rep)
		}
	})
}

// steadyTraffic publishes, every 20ms, perTx events of typ in one
// transaction on d and tells o, until the returned stop is called (it
// waits for the publisher to end).
func steadyTraffic(t *testing.T, kind storeKind, d store.Driver, o *oracle, typ string, perTx int) (stop func()) {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			ids := make([]txbox.ID, perTx)
			batch := make([]*txbox.Event, perTx)
			for i := range batch {
				ids[i] = txbox.NewID()
				batch[i] = &txbox.Event{ID: ids[i], Type: typ, Payload: []byte("{}")}
			}
			if err := kind.publish(context.Background(), d, batch, true); err != nil {
				t.Errorf("publish: %v", err)
				return
			}
			o.committedIDs(ids...)
		}
	}()
	return func() { close(quit); <-done }
}

// waitPoisonDeadLettered waits (what names the wait) until a dead letter
// exists, stops the test's publisher (stop), waits for the outbox to
// settle and checks that poison was dead-lettered after
// poisonMaxAttempts attempts, the receiver's 500 its last error.
func waitPoisonDeadLettered(t *testing.T, d store.Driver, poison txbox.ID, what string, stop func()) {
	t.Helper()
	testenv.WaitFor(t, 30*time.Second, what, func() bool {
		n, err := d.DeadLetterCount(context.Background(), &store.DeadLetterFilter{})
		return err == nil && n >= 1
	})
	stop()
	testenv.WaitFor(t, 30*time.Second, "outbox settled", func() bool { return outboxSettled(t, d) })
	dl, err := d.DeadLetterGet(context.Background(), poison)
	if err != nil {
		t.Fatalf("poison not in the dead-letter table: %v", err)
	}
	if dl.Attempts != poisonMaxAttempts || !strings.Contains(dl.LastError, "500") {
		t.Errorf("dead letter: attempts %d, last error %q; want %d and the 500", dl.Attempts, dl.LastError, poisonMaxAttempts)
	}
}

// poisonMaxAttempts is the max attempts of newPoisonWebhook's relay.
const poisonMaxAttempts = 3

// poisonWebhook is the set-up of the poison tests: a store of one kind, a
// receiver that answers 500 to the event id held in poison and 200 to
// every other, and the config of a webhook relay (not started) that
// records attempts in rec, reports its circuits to hook, and dead-letters
// after poisonMaxAttempts attempts 100ms, 200ms, ... apart.
type poisonWebhook struct {
	d      store.Driver
	poison atomic.Value // string
	srv    *pathServer
	rec    *attemptRecorder
	hook   *destHook
	cfg    relay.Config
}

func newPoisonWebhook(t *testing.T, kind storeKind) *poisonWebhook {
	t.Helper()
	w := &poisonWebhook{d: openStore(t, kind, kind.newNamespace(t), 4), rec: &attemptRecorder{}, hook: &destHook{}}
	w.poison.Store("")
	w.srv = newPathServer(t, func(_, id string) int {
		if id == w.poison.Load().(string) {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	w.cfg = webhookConfig(t, w.d, w.srv.URL, func(s sender.Sender) sender.Sender { w.rec.Sender = s; return w.rec })
	w.cfg.Defaults.MaxAttempts = new(poisonMaxAttempts)
	w.cfg.Defaults.Backoff = &relay.BackoffSettings{Delay: new(100 * time.Millisecond), Multiplier: new(2.0), Max: new(time.Second)}
	w.cfg.Hooks = []txbox.RelayHook{w.hook}
	return w
}

// TestTransientPoisonDeadLettered (scenario 9 with a 5xx): the receiver
// answers 500 to one event and 200 to every other, under a steady load
// on the same destination. The 500 is a fault of that message, since the
// destination accepts others meanwhile: it counts attempts, the event is
// dead-lettered after max attempts with the 500 as its error, every other
// event is delivered, and the circuit never opens.
func TestTransientPoisonDeadLettered(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			w := newPoisonWebhook(t, kind)
			d, poison, srv, hook, cfg := w.d, &w.poison, w.srv, w.hook, w.cfg
			const maxAttempts = poisonMaxAttempts

			// The poison goes out in the middle of a batch of others.
			o := newOracle()
			evs := make([]*txbox.Event, 20)
			for i := range evs {
				evs[i] = &txbox.Event{ID: txbox.NewID(), Type: "orders", Payload: []byte("{}")}
			}
			p := evs[10].ID
			poison.Store(p.String())
			if err := kind.publish(context.Background(), d, evs, true); err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs {
				if ev.ID != p {
					o.committedIDs(ev.ID)
				}
			}
			relaytest.Start(t, cfg)

			// Steady traffic to the same destination until the poison is
			// dead-lettered.
			stop := steadyTraffic(t, kind, d, o, "orders", 3)
			waitPoisonDeadLettered(t, d, p, "poison dead-lettered", stop)
			if n, _ := d.DeadLetterCount(context.Background(), &store.DeadLetterFilter{}); n != 1 {
				t.Errorf("%d dead letters, want only the poison", n)
			}
			// Its first failure counts nothing (it could be the start of
			// an outage); a later one counts when the destination
			// accepted another batch since the previous failure, which
			// the steady load makes the usual case.
			n := srv.requests(p)
			t.Logf("poison requested %d times for %d attempts", n, maxAttempts)
			if n < maxAttempts+1 {
				t.Errorf("poison requested %d times, want at least %d: its first failure counted an attempt", n, maxAttempts+1)
			}
			if n := hook.opened(anyCircuit); n != 0 {
				t.Errorf("the circuit opened %d times for one poison message", n)
			}
			o.receivedIDs(srv.allAcked()...)
			if rep := o.report(); !rep.clean() {
				t.Errorf("oracle: %v", rep)
			}
		})
	}
}

// TestLonePoisonWaitsForEvidence: the only event of type a always gets a
// 500, so every batch of a is that one message failing as a whole. With
// no other traffic nothing tells it from an outage of the destination:
// its circuit opens, probes back off, no attempt is counted and nothing
// is dead-lettered. Once type b, routed to the same destination, is
// delivered there, the next failure counts, and the message is
// dead-lettered after max attempts while b keeps flowing.
func TestLonePoisonWaitsForEvidence(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			w := newPoisonWebhook(t, kind)
			d, poison, srv, rec, hook, cfg := w.d, &w.poison, w.srv, w.rec, w.hook, w.cfg
			cfg.Defaults.Route = &sender.Route{URL: srv.URL + "/hook"} // one destination for every type
			cfg.Events = map[string]relay.EventSettings{"a": {}, "b": {}}
			p := txbox.NewID()
			poison.Store(p.String())
			publishOne(t, kind, d, &txbox.Event{ID: p, Type: "a"})
			r := relaytest.Start(t, cfg)

			testenv.WaitFor(t, 20*time.Second, "three failed probes", func() bool { return hook.opened(anyCircuit) >= 3 })
			if m := rec.maxAttempt(); m != 1 {
				t.Errorf("the lone poison was sent as attempt %d without evidence that the destination is up", m)
			}
			noDeadLetters(t, d, "without other traffic")
			if c := circuitOf(t, r.Health(), "/hook"); c.State == txbox.CircuitClosed {
				t.Errorf("circuit %+v closed while its only traffic fails", c)
			}

			o := newOracle()
			stop := steadyTraffic(t, kind, d, o, "b", 1)
			waitPoisonDeadLettered(t, d, p, "lone poison dead-lettered once b flows", stop)
			o.receivedIDs(srv.allAcked()...)
			if rep := o.report(); !rep.clean() {
				t.Errorf("oracle (type b): %v", rep)
			}
			if c := circuitOf(t, r.Health(), "/hook"); c.State != txbox.CircuitClosed {
				t.Errorf("circuit after the poison left = %+v", c)
			}
		})
	}
}

// TestBrokerDownPausesAllRoutes (scenario 7): two types on two subjects
// of one NATS sender; the server becomes unreachable. The sender marks
// its failures sender.Disconnected, so its connection circuit opens and
// pauses both routes: only probes go out,
// no attempt is burned, nothing is dead-lettered; when the server is back
// both routes drain.
func TestBrokerDownPausesAllRoutes(t *testing.T) {
	t.Parallel()
	kind := postgresKind
	d := freshStore(t, kind)
	st := newStream(t)
	proxy := sendertest.NewProxy(t, "127.0.0.1:4222")
	rec := &attemptRecorder{Sender: newNATSSender(t, "nats://"+proxy.Addr())}
	var sends atomic.Int64
	counting := &countingSender{Sender: rec, n: &sends}
	hook := &destHook{}
	cfg := relayConfig(d, counting, st.prefix, 0)
	cfg.Defaults.MaxAttempts = new(2)
	cfg.Events = map[string]relay.EventSettings{"a": {}, "b": {}}
	cfg.Hooks = []txbox.RelayHook{hook}
	r := relaytest.Start(t, cfg)
	o := newOracle()
	publishN(t, kind, d, "a", 50, o)
	publishN(t, kind, d, "b", 50, o)
	testenv.WaitFor(t, 15*time.Second, "first events delivered", func() bool { return st.count(t) >= 100 })

	proxy.Down(t)
	publishN(t, kind, d, "a", 200, o)
	publishN(t, kind, d, "b", 200, o)
	testenv.WaitFor(t, 20*time.Second, "connection circuit open", func() bool { return hook.opened(isConnection) >= 1 })
	opens0, sends0 := hook.opened(isConnection), sends.Load()
	testenv.WaitFor(t, 20*time.Second, "failed probes of the connection", func() bool { return hook.opened(isConnection) >= opens0+3 })
	opens1, sends1 := hook.opened(isConnection), sends.Load()
	// While the connection circuit is open both routes wait: each
	// reopening follows one probe, whichever route it came from.
	if n, limit := sends1-sends0, int64(opens1-opens0+2); n > limit {
		t.Errorf("%d sends during %d reopenings of the connection circuit, want ≤ %d: the routes did not pause", n, opens1-opens0, limit)
	}
	outageRecovered(t, r, d, rec, func() { proxy.Up(t) })
	for _, c := range r.Health().Circuits {
		if c.State != txbox.CircuitClosed {
			t.Errorf("circuit after recovery: %+v", c)
		}
	}
	for _, m := range st.readAll(t) {
		o.receivedIDs(m.id)
	}
	rep := o.report()
	t.Logf("oracle: %v; connection circuit opened %d times", rep, hook.opened(isConnection))
	if len(rep.Lost) != 0 || len(rep.Unexpected) != 0 || rep.extra() > relay.DefaultInFlight*relay.DefaultBatchSize {
		t.Errorf("oracle: %v", rep)
	}
}

// countingSender counts Send calls.
type countingSender struct {
	sender.Sender
	n *atomic.Int64
}

func (c *countingSender) Send(ctx context.Context, msgs []*sender.Message) error {
	c.n.Add(1)
	return c.Sender.Send(ctx, msgs)
}

func (c *countingSender) Destination(r sender.Route) string { return sender.DestinationOf(c.Sender, r) }
