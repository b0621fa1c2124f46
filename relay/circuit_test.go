package relay

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestCircuitLifecycle(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	var events []txbox.CircuitEvent
	c := newCircuit("nats", "", true, CircuitConfig{CoolDown: time.Second, MaxCoolDown: 3 * time.Second, Multiplier: 2}, clk.now,
		func(ev txbox.CircuitEvent) { events = append(events, ev) })
	down := errors.New("connection refused")

	t1 := c.allow()
	if !t1.ok || t1.probe {
		t.Fatalf("closed circuit: %+v", t1)
	}
	t2 := c.allow()
	c.failure(t1.probe, down)
	if st, err := c.snapshot(); st != txbox.CircuitOpen || err != down {
		t.Fatalf("after failure: %v %v", st, err)
	}
	// A second in-flight batch failing does not extend the cool-down.
	c.failure(t2.probe, down)
	// A straggler succeeding while open does not close it.
	c.success(t2.probe)
	if st, _ := c.snapshot(); st != txbox.CircuitOpen {
		t.Fatalf("straggler success closed the circuit")
	}
	blocked := c.allow()
	if blocked.ok || blocked.wait != time.Second {
		t.Fatalf("open circuit let a claim through: %+v", blocked)
	}
	clk.add(time.Second)
	probe := c.allow()
	if !probe.ok || !probe.probe {
		t.Fatalf("after cool-down: %+v, want a probe", probe)
	}
	select {
	case <-blocked.changed:
	default:
		t.Error("waiters were not signalled when the circuit went half-open")
	}
	if other := c.allow(); other.ok {
		t.Fatal("second poller got through while the probe is out")
	}
	// Failed probe: cool-down doubles.
	c.failure(probe.probe, down)
	if tk := c.allow(); tk.ok || tk.wait != 2*time.Second {
		t.Fatalf("after failed probe: %+v, want wait 2s", tk)
	}
	clk.add(2 * time.Second)
	probe = c.allow()
	c.failure(probe.probe, down)
	if tk := c.allow(); tk.wait != 3*time.Second {
		t.Fatalf("cool-down not capped: %+v", tk)
	}
	clk.add(3 * time.Second)
	// An abandoned probe (nothing claimed) lets another poller probe.
	probe = c.allow()
	c.abandon(probe.probe)
	probe = c.allow()
	if !probe.ok || !probe.probe {
		t.Fatalf("after abandoned probe: %+v", probe)
	}
	c.success(probe.probe)
	if st, err := c.snapshot(); st != txbox.CircuitClosed || err != nil {
		t.Fatalf("after successful probe: %v %v", st, err)
	}
	// The cool-down is reset after closing.
	c.failure(c.allow().probe, down)
	if tk := c.allow(); tk.wait != time.Second {
		t.Fatalf("cool-down after reopening = %v, want 1s", tk.wait)
	}
	var states []txbox.CircuitState
	for _, ev := range events {
		states = append(states, ev.State)
	}
	want := []txbox.CircuitState{txbox.CircuitOpen, txbox.CircuitHalfOpen, txbox.CircuitOpen, txbox.CircuitHalfOpen, txbox.CircuitOpen, txbox.CircuitHalfOpen, txbox.CircuitClosed, txbox.CircuitOpen}
	if len(states) != len(want) {
		t.Fatalf("events %v, want %v", states, want)
	}
	for i := range want {
		if states[i] != want[i] {
			t.Fatalf("events %v, want %v", states, want)
		}
	}
}

func testBreaker() (*circuitPair, *circuitSet) {
	cfg := CircuitConfig{CoolDown: time.Second, MaxCoolDown: 4 * time.Second, Multiplier: 2}
	cs := newCircuitSet([]string{"s"}, cfg, time.Now, func(txbox.CircuitEvent) {})
	return cs.circuitPair("s", "url=http://x/hook"), cs
}

// TestGateJudge walks the rule of docs/concepts.md, "Outages versus
// poison", one batch at a time.
func TestGateJudge(t *testing.T) {
	t.Parallel()
	g, _ := testBreaker()
	p, a, b := txbox.NewID(), txbox.NewID(), txbox.NewID()
	e500 := txbox.Transient(errors.New("500 internal server error"))
	send := func(ids []txbox.ID, res []error) []verdict {
		t.Helper()
		tk := g.allow()
		if !tk.ok {
			t.Fatalf("breaker closed to claims: %+v", tk)
		}
		return g.assess(tk, time.Now(), ids, res, classify(res))
	}

	// First failure, in a batch whose other message is acked: it could be
	// an outage starting mid-batch, so it counts nothing.
	v := send([]txbox.ID{p, a}, []error{e500, nil})
	if v[0].count || v[0].retryAfter != time.Second {
		t.Fatalf("first failure: %+v, want released after the 1s cool-down", v[0])
	}
	// Alone again, with no other batch since: nothing new, no attempt,
	// no opening, a longer wait.
	v = send([]txbox.ID{p}, []error{e500})
	if v[0].count || v[0].retryAfter != 2*time.Second {
		t.Fatalf("failure without evidence: %+v, want released after 2s", v[0])
	}
	if st, _ := g.dest.snapshot(); st != txbox.CircuitClosed {
		t.Fatalf("a known suspect failing alone opened the circuit: %v", st)
	}
	// Another batch is acked; then the message fails alone: it counts,
	// and the circuit stays closed.
	send([]txbox.ID{b}, []error{nil})
	v = send([]txbox.ID{p}, []error{e500})
	if !v[0].count {
		t.Fatalf("failure after the destination acked another batch: %+v, want counted", v[0])
	}
	if st, _ := g.dest.snapshot(); st != txbox.CircuitClosed {
		t.Fatalf("circuit %v after a poison failure", st)
	}
	// The count needs new evidence each time.
	if v = send([]txbox.ID{p}, []error{e500}); v[0].count {
		t.Fatalf("counted twice on the same evidence: %+v", v[0])
	}

	// A new message failing as a whole opens the circuit; nothing counts.
	c := txbox.NewID()
	if v = send([]txbox.ID{c}, []error{e500}); v[0].count {
		t.Fatal("whole-batch failure of a new message counted")
	}
	if st, _ := g.dest.snapshot(); st != txbox.CircuitOpen {
		t.Fatalf("circuit %v after a whole-batch failure of a new message, want open", st)
	}
}

// TestGateOutageEdges: the batch that straddles the end of an outage (its
// first messages refused, the rest acked) counts nothing for the refused
// ones, which failed during the outage already.
func TestGateOutageEdges(t *testing.T) {
	t.Parallel()
	g, _ := testBreaker()
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	g.dest.now = clk.now
	m1, m2, m3 := txbox.NewID(), txbox.NewID(), txbox.NewID()
	e503 := txbox.Transient(errors.New("503 service unavailable"))
	tk := g.allow()
	g.assess(tk, time.Now(), []txbox.ID{m1, m2, m3}, []error{e503, e503, e503}, classify([]error{e503, e503, e503}))
	if st, _ := g.dest.snapshot(); st != txbox.CircuitOpen {
		t.Fatalf("circuit %v after the outage's first batch", st)
	}
	clk.add(time.Second)
	probe := g.allow()
	if !probe.probe {
		t.Fatalf("no probe after the cool-down: %+v", probe)
	}
	v := g.assess(probe, time.Now(), []txbox.ID{m1, m2, m3}, []error{e503, nil, nil}, classify([]error{e503, nil, nil}))
	if v[0].count {
		t.Fatal("the straddling probe counted an attempt for a message refused before the destination came back")
	}
	if st, _ := g.dest.snapshot(); st != txbox.CircuitClosed {
		t.Fatalf("circuit %v after a probe with acks", st)
	}
}

// TestGateDisconnected: a failure marked sender.Disconnected opens the
// sender's connection circuit, which pauses every destination of the
// sender; it counts no attempt and makes no suspect.
func TestGateDisconnected(t *testing.T) {
	t.Parallel()
	g, cs := testBreaker()
	other := cs.circuitPair("s", "url=http://y/other")
	m := txbox.NewID()
	down := sender.Disconnected(txbox.Transient(errors.New("nats: not connected")))
	tk := g.allow()
	v := g.assess(tk, time.Now(), []txbox.ID{m}, []error{down}, classify([]error{down}))
	if v[0].count {
		t.Fatal("a disconnection counted an attempt")
	}
	if st, _ := g.conn.snapshot(); st != txbox.CircuitOpen {
		t.Fatalf("connection circuit %v, want open", st)
	}
	if st, _ := g.dest.snapshot(); st != txbox.CircuitClosed {
		t.Fatalf("destination circuit %v: a disconnection is not the destination's", st)
	}
	if tk := other.allow(); tk.ok {
		t.Fatal("another destination of the disconnected sender may still claim")
	}
	if len(g.suspects) != 0 {
		t.Fatalf("a disconnection made suspects: %v", g.suspects)
	}
	var events []txbox.CircuitEvent
	for _, c := range cs.health() {
		events = append(events, txbox.CircuitEvent{Sender: c.Sender, Destination: c.Destination, Connection: c.Connection, State: c.State})
	}
	if len(events) != 3 || !events[0].Connection || events[0].State != txbox.CircuitOpen || events[1].Destination != "url=http://x/hook" {
		t.Fatalf("health = %+v, want the connection circuit first, then destinations by name", events)
	}
}
