package relay

import (
	"errors"
	"sync"
	"testing"
	"time"
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
	var events []CircuitEvent
	c := newCircuit("nats", "", true, CircuitConfig{CoolDown: time.Second, MaxCoolDown: 3 * time.Second, Multiplier: 2}, clk.now,
		func(ev CircuitEvent) { events = append(events, ev) })
	down := errors.New("connection refused")

	t1 := c.allow()
	if !t1.ok || t1.probe {
		t.Fatalf("closed circuit: %+v", t1)
	}
	t2 := c.allow()
	c.failure(t1.probe, down)
	if st, err := c.snapshot(); st != CircuitOpen || err != down {
		t.Fatalf("after failure: %v %v", st, err)
	}
	// A second in-flight batch failing does not extend the cool-down.
	c.failure(t2.probe, down)
	// A straggler succeeding while open does not close it.
	c.success(t2.probe)
	if st, _ := c.snapshot(); st != CircuitOpen {
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
	if st, err := c.snapshot(); st != CircuitClosed || err != nil {
		t.Fatalf("after successful probe: %v %v", st, err)
	}
	// The cool-down is reset after closing.
	c.failure(c.allow().probe, down)
	if tk := c.allow(); tk.wait != time.Second {
		t.Fatalf("cool-down after reopening = %v, want 1s", tk.wait)
	}
	var states []CircuitState
	for _, ev := range events {
		states = append(states, ev.State)
	}
	want := []CircuitState{CircuitOpen, CircuitHalfOpen, CircuitOpen, CircuitHalfOpen, CircuitOpen, CircuitHalfOpen, CircuitClosed, CircuitOpen}
	if len(states) != len(want) {
		t.Fatalf("events %v, want %v", states, want)
	}
	for i := range want {
		if states[i] != want[i] {
			t.Fatalf("events %v, want %v", states, want)
		}
	}
}
