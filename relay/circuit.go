package relay

import (
	"math"
	"sync"
	"time"
)

// circuit is one sender's breaker, shared by every poller routed to that
// sender: an outage of the destination pauses all of them at once.
//
// closed: every claim may go ahead. A batch that failed as a whole with a
// transient error opens it. open: no claims until the cool-down has
// passed; then the first poller to ask becomes the probe (half-open) and
// claims one small batch while the others keep waiting. A successful probe
// closes the circuit and resets the cool-down; a failed one reopens it
// with the cool-down multiplied, up to the cap.
type circuit struct {
	name string
	cfg  CircuitConfig
	now  func() time.Time
	// notify is called, outside the lock, with every state change.
	notify func(CircuitEvent)

	mu       sync.Mutex
	state    CircuitState
	coolDown time.Duration // the cool-down of the current or next opening
	until    time.Time     // end of the current cool-down when open
	probing  bool          // a probe batch is out (half-open)
	changed  chan struct{} // closed and replaced on every state change
	lastErr  error
}

func newCircuit(name string, cfg CircuitConfig, now func() time.Time, notify func(CircuitEvent)) *circuit {
	return &circuit{name: name, cfg: cfg, now: now, notify: notify, coolDown: cfg.CoolDown, changed: make(chan struct{})}
}

// ticket is a permission to claim returned by allow.
type ticket struct {
	ok    bool
	probe bool
	// wait is how long until asking again makes sense when !ok; changed
	// is closed earlier if the state changes meanwhile.
	wait    time.Duration
	changed <-chan struct{}
}

// allow asks whether a poller may claim now.
func (c *circuit) allow() ticket {
	c.mu.Lock()
	switch c.state {
	case CircuitClosed:
		c.mu.Unlock()
		return ticket{ok: true}
	case CircuitOpen:
		if now := c.now(); now.Before(c.until) {
			t := ticket{wait: c.until.Sub(now), changed: c.changed}
			c.mu.Unlock()
			return t
		}
		c.probing = true
		ev := c.setLocked(CircuitHalfOpen)
		c.mu.Unlock()
		c.notify(ev)
		return ticket{ok: true, probe: true}
	default: // half-open
		if !c.probing {
			c.probing = true
			c.mu.Unlock()
			return ticket{ok: true, probe: true}
		}
		t := ticket{wait: c.coolDown, changed: c.changed}
		c.mu.Unlock()
		return t
	}
}

// abandon returns an unused probe ticket: the probe claimed nothing, so it
// proved nothing, and another poller may probe.
func (c *circuit) abandon(t ticket) {
	if !t.probe {
		return
	}
	c.mu.Lock()
	if c.state == CircuitHalfOpen && c.probing {
		c.probing = false
		close(c.changed)
		c.changed = make(chan struct{})
	}
	c.mu.Unlock()
}

// success records a batch the destination accepted. Only a probe closes
// the circuit: a batch that was already in flight when it opened says
// little about the destination now.
func (c *circuit) success(t ticket) {
	c.mu.Lock()
	if !t.probe || c.state != CircuitHalfOpen {
		c.mu.Unlock()
		return
	}
	c.probing = false
	c.coolDown = c.cfg.CoolDown
	c.lastErr = nil
	ev := c.setLocked(CircuitClosed)
	c.mu.Unlock()
	c.notify(ev)
}

// failure records a batch that failed as a whole with a transient error.
func (c *circuit) failure(t ticket, err error) {
	c.mu.Lock()
	switch {
	case c.state == CircuitClosed:
		c.coolDown = c.cfg.CoolDown
	case c.state == CircuitHalfOpen && t.probe:
		c.probing = false
		c.coolDown = time.Duration(math.Min(float64(c.coolDown)*c.cfg.Multiplier, float64(c.cfg.MaxCoolDown)))
	default:
		// Already open, or a straggler from before the probe: the
		// current cool-down stands.
		c.mu.Unlock()
		return
	}
	c.until = c.now().Add(c.coolDown)
	c.lastErr = err
	ev := c.setLocked(CircuitOpen)
	ev.Err = err
	c.mu.Unlock()
	c.notify(ev)
}

func (c *circuit) setLocked(s CircuitState) CircuitEvent {
	c.state = s
	close(c.changed)
	c.changed = make(chan struct{})
	return CircuitEvent{Sender: c.name, State: s, CoolDown: c.coolDown}
}

// snapshot returns the state and the error that last opened the circuit.
func (c *circuit) snapshot() (CircuitState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state, c.lastErr
}
