package relay

import (
	"sort"
	"sync"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/sender"
)

// Defaults of the circuit settings.
const (
	// DefaultCircuitCoolDown is the first wait before an open circuit lets a
	// probe batch through.
	DefaultCircuitCoolDown = time.Second
	// DefaultCircuitMaxCoolDown caps the doubling cool-down.
	DefaultCircuitMaxCoolDown = time.Minute
	// DefaultCircuitMultiplier grows the cool-down after a failed probe.
	DefaultCircuitMultiplier = 2.0
)

// CircuitConfig configures the circuit breakers: one per destination
// and one per sender's connection (docs/concepts.md, "Outages versus
// poison"). Zero fields take the defaults.
type CircuitConfig struct {
	// CoolDown is the first wait after the circuit opens before a probe
	// batch is let through. Defaults to 1s.
	CoolDown time.Duration
	// MaxCoolDown caps the cool-down. Defaults to 1m, or CoolDown when
	// that is longer.
	MaxCoolDown time.Duration
	// Multiplier grows the cool-down after each failed probe; at least 1.
	// Defaults to 2.
	Multiplier float64
}

// Circuits (docs/concepts.md, "Outages versus poison"): every destination
// (sender name + sender.DestinationOf of the type's route) has a circuit,
// shared by the pollers of every type routed to it, so one failing route
// pauses only the types routed to it. Each sender also has a connection
// circuit, opened only by failures the sender marks sender.Disconnected
// (the broker itself is unreachable): it pauses every destination of the
// sender at once, so no poller burns a send on a connection known to be
// down.

// circuit is one circuit breaker: a destination's, or a sender's connection.
//
// closed: every claim may go ahead. A batch that failed as a whole with a
// transient error opens it. open: no claims until the cool-down has
// passed; then the first poller to ask becomes the probe (half-open) and
// claims one small batch while the others keep waiting. A successful probe
// closes the circuit and resets the cool-down; a failed one reopens it
// with the cool-down multiplied, up to the cap.
type circuit struct {
	sender     string
	dest       string
	connection bool
	now        func() time.Time
	// notify is called, outside the lock, with every state change.
	notify func(txbox.CircuitEvent)

	mu    sync.Mutex
	state txbox.CircuitState
	// opens counts the openings since the circuit last closed (the first,
	// then one per failed probe); the n-th lasts Delay(n) of the
	// cool-down policy.
	opens    backoff.Streak
	coolDown time.Duration // the cool-down of the current or next opening
	until    time.Time     // end of the current cool-down when open
	probing  bool          // a probe batch is out (half-open)
	changed  chan struct{} // closed and replaced on every state change
	lastErr  error
}

func newCircuit(senderName, dest string, connection bool, cfg CircuitConfig, now func() time.Time, notify func(txbox.CircuitEvent)) *circuit {
	return &circuit{sender: senderName, dest: dest, connection: connection, now: now, notify: notify,
		opens: backoff.Streak{Policy: cfg.policy()}, coolDown: cfg.CoolDown, changed: make(chan struct{})}
}

// ticket is a permission to claim returned by allow.
type ticket struct {
	ok bool
	// probe is true when the batch probes a circuit that is half-open:
	// it is kept small.
	probe bool
	// connProbe and destProbe say which circuit the probe is for (a
	// circuit pair's ticket may probe both).
	connProbe, destProbe bool
	// wait is how long until asking again makes sense when !ok; changed
	// is closed earlier if the state changes meanwhile.
	wait    time.Duration
	changed <-chan struct{}
}

// allow asks whether a poller may claim now.
func (c *circuit) allow() ticket {
	c.mu.Lock()
	switch c.state {
	case txbox.CircuitClosed:
		c.mu.Unlock()
		return ticket{ok: true}
	case txbox.CircuitOpen:
		if now := c.now(); now.Before(c.until) {
			t := ticket{wait: c.until.Sub(now), changed: c.changed}
			c.mu.Unlock()
			return t
		}
		c.probing = true
		ev := c.setLocked(txbox.CircuitHalfOpen)
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

// abandon returns an unused probe: the probe claimed nothing, so it
// proved nothing, and another poller may probe.
func (c *circuit) abandon(probe bool) {
	if !probe {
		return
	}
	c.mu.Lock()
	if c.state == txbox.CircuitHalfOpen && c.probing {
		c.probing = false
		close(c.changed)
		c.changed = make(chan struct{})
	}
	c.mu.Unlock()
}

// success records a batch the destination accepted. Only a probe closes
// the circuit: a batch that was already in flight when it opened says
// little about the destination now.
func (c *circuit) success(probe bool) {
	c.mu.Lock()
	if !probe || c.state != txbox.CircuitHalfOpen {
		c.mu.Unlock()
		return
	}
	c.probing = false
	c.opens.Reset()
	c.coolDown = c.opens.Policy.Initial
	c.lastErr = nil
	ev := c.setLocked(txbox.CircuitClosed)
	c.mu.Unlock()
	c.notify(ev)
}

// failure records a batch that failed as a whole with a transient error.
func (c *circuit) failure(probe bool, err error) {
	c.mu.Lock()
	switch {
	case c.state == txbox.CircuitClosed:
		c.opens.Reset()
		c.coolDown = c.opens.Next()
	case c.state == txbox.CircuitHalfOpen && probe:
		c.probing = false
		c.coolDown = c.opens.Next()
	default:
		// Already open, or a straggler from before the probe: the
		// current cool-down stands.
		c.mu.Unlock()
		return
	}
	c.until = c.now().Add(c.coolDown)
	c.lastErr = err
	ev := c.setLocked(txbox.CircuitOpen)
	ev.Err = err
	c.mu.Unlock()
	c.notify(ev)
}

func (c *circuit) setLocked(s txbox.CircuitState) txbox.CircuitEvent {
	c.state = s
	close(c.changed)
	c.changed = make(chan struct{})
	return txbox.CircuitEvent{Sender: c.sender, Destination: c.dest, Connection: c.connection, State: s, CoolDown: c.coolDown}
}

// snapshot returns the state and the error that last opened the circuit.
func (c *circuit) snapshot() (txbox.CircuitState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state, c.lastErr
}

func (c *circuit) closed() bool {
	st, _ := c.snapshot()
	return st == txbox.CircuitClosed
}

// maxSuspects bounds the messages one destination remembers as having
// failed transiently. Forgetting one only costs it one more failure that
// counts no attempt.
const maxSuspects = 4096

// circuitPair is what a source asks before taking a batch: its sender's connection
// circuit and its destination's circuit. It also judges each transient
// failure: an outage of the destination (no attempt counted) or a fault of
// the one message (an attempt counted, so that a message the destination
// always refuses with a 5xx ends in the dead-letter table).
type circuitPair struct {
	conn *circuit
	dest *circuit
	// coolDown is the circuits' cool-down policy, which also paces the
	// rows put back without an attempt (see assess).
	coolDown backoff.Policy

	// Evidence that the destination accepts messages, shared by every
	// poller routed to it. Guarded by mu.
	mu sync.Mutex
	// lastAckSend is when the latest batch that had a message acked was
	// sent (the start of its Send).
	lastAckSend time.Time
	// suspects are the messages whose last transient failure counted no
	// attempt, or counted one: their next failure counts only if the
	// destination acknowledged another batch sent after it.
	suspects map[txbox.ID]suspect
}

type suspect struct {
	// since is when the failure that made the message a suspect was
	// judged (the first failure that counted nothing, or the last one
	// that counted an attempt).
	since time.Time
	// free counts the failures since then that counted nothing while the
	// circuits were closed; the message waits longer after each: the
	// free-th wait of the cool-down policy.
	free int
}

// verdict is the judgement of one message's transient failure.
type verdict struct {
	// count is true when the failure is the message's own: it counts an
	// attempt, with the type's backoff, like a rejection.
	count bool
	// retryAfter is, when count is false, how long the row waits before
	// it is due again.
	retryAfter time.Duration
}

// allow asks both circuits; a poller may claim only when both let it.
func (g *circuitPair) allow() ticket {
	tc := g.conn.allow()
	if !tc.ok {
		return tc
	}
	td := g.dest.allow()
	if !td.ok {
		g.conn.abandon(tc.probe)
		return td
	}
	return ticket{ok: true, probe: tc.probe || td.probe, connProbe: tc.probe, destProbe: td.probe}
}

// abandon returns a ticket that claimed nothing or whose batch proved
// nothing (a shutdown).
func (g *circuitPair) abandon(t ticket) {
	g.conn.abandon(t.connProbe)
	g.dest.abandon(t.destProbe)
}

// assess records the outcome of one sent batch in the circuits and returns
// a verdict for each message (the entries of messages that did not fail
// transiently are unused). sent is when the batch's Send started; ids and
// results are per message (nil result = acked). The rule
// (docs/concepts.md, "Outages versus poison"): a transient failure counts
// an attempt only when it is shown to be the message's own, that is when
//
//   - the message failed transiently before, and since then the
//     destination acknowledged another batch, sent after that failure;
//   - both circuits are closed once this batch is taken into account;
//   - the failure is not marked sender.Disconnected.
//
// Acks of the same batch are no such evidence: at the start or the end of
// an outage a batch may be cut in two, some messages acked and the rest
// refused, which looks exactly like one poison message among good ones. So
// the first transient failure of a message never counts, and neither does
// one with no later batch to compare with. Such a failure puts the row
// back without an attempt, to be tried again after the circuit's
// cool-down; while the circuits stay closed that wait grows with each
// such failure of the message, as an open circuit's cool-down does.
//
// The destination's circuit opens when a batch fails as a whole with a
// transient error, except when every message of it is already a suspect
// and the circuit is closed: the destination showed nothing new, and
// other traffic will open it if it is down. A failure marked
// sender.Disconnected opens the connection circuit instead.
func (g *circuitPair) assess(t ticket, sent time.Time, ids []txbox.ID, results []error, classes []txbox.ErrorClass) []verdict {
	tl := tallyResults(results, classes)
	now := time.Now()
	confirmed, allSuspects, allConfirmed := g.weigh(sent, ids, results, tl)
	up := g.feed(t, tl, allSuspects, allConfirmed)
	return g.verdicts(ids, results, tl, confirmed, up, now)
}

// tally sorts a batch's results: what the destination answered, and the
// transient failures.
type tally struct {
	acked, answered, transient int
	isTransient                []bool
	// firstTransient and firstDisconnected are the first transient
	// failure, and the first one marked sender.Disconnected.
	firstTransient, firstDisconnected error
}

// tallyResults tallies results, each of class classes[i] (classify).
func tallyResults(results []error, classes []txbox.ErrorClass) tally {
	tl := tally{isTransient: make([]bool, len(results))}
	for i, res := range results {
		switch {
		case res == nil:
			tl.acked++
		case classes[i] != txbox.ClassTransient:
			// Rejected or permanent: the destination answered.
			tl.answered++
		default:
			tl.isTransient[i] = true
			tl.transient++
			if tl.firstTransient == nil {
				tl.firstTransient = res
			}
			if tl.firstDisconnected == nil && sender.IsDisconnected(res) {
				tl.firstDisconnected = res
			}
		}
	}
	return tl
}

// weigh returns, for each transient failure of the batch sent at sent,
// whether it is confirmed as the message's own (the message was a suspect
// since before the destination last acknowledged another batch), and
// whether every one is a suspect or confirmed. It then records the
// batch's acks as evidence for later batches.
func (g *circuitPair) weigh(sent time.Time, ids []txbox.ID, results []error, tl tally) (confirmed []bool, allSuspects, allConfirmed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	confirmed = make([]bool, len(results))
	allSuspects, allConfirmed = tl.transient > 0, tl.transient > 0
	for i := range results {
		if !tl.isTransient[i] {
			continue
		}
		sp, ok := g.suspects[ids[i]]
		confirmed[i] = ok && sp.since.Before(g.lastAckSend) && !sender.IsDisconnected(results[i])
		allSuspects = allSuspects && ok
		allConfirmed = allConfirmed && confirmed[i]
	}
	// This batch's acks are evidence for later batches only.
	if tl.acked > 0 && sent.After(g.lastAckSend) {
		g.lastAckSend = sent
	}
	for i, res := range results {
		if res == nil {
			delete(g.suspects, ids[i])
		}
	}
	return confirmed, allSuspects, allConfirmed
}

// feed records the batch in the connection and destination circuits and
// reports whether both are closed now (and the batch was not cut off by
// a disconnection).
func (g *circuitPair) feed(t ticket, tl tally, allSuspects, allConfirmed bool) (up bool) {
	if tl.firstDisconnected != nil {
		g.conn.failure(t.connProbe, tl.firstDisconnected)
	} else {
		// The sender reached the broker: the connection works.
		g.conn.success(t.connProbe)
	}
	switch {
	case tl.acked > 0 || tl.answered > 0:
		g.dest.success(t.destProbe)
	case tl.firstDisconnected != nil:
		g.dest.abandon(t.destProbe)
	case allConfirmed, allSuspects && g.dest.closed():
		// Only messages already known to fail: nothing new about the
		// destination.
		g.dest.abandon(t.destProbe)
	default:
		g.dest.failure(t.destProbe, tl.firstTransient)
	}
	return tl.firstDisconnected == nil && g.conn.closed() && g.dest.closed()
}

// verdicts judges each transient failure, judged at now, and updates the
// suspects: see assess.
func (g *circuitPair) verdicts(ids []txbox.ID, results []error, tl tally, confirmed []bool, up bool, now time.Time) []verdict {
	out := make([]verdict, len(results))
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, res := range results {
		if !tl.isTransient[i] {
			continue
		}
		if sender.IsDisconnected(res) {
			// The connection's fault, not the message's.
			out[i] = verdict{retryAfter: g.coolDown.Initial}
			continue
		}
		sp, ok := g.suspects[ids[i]]
		if up && confirmed[i] {
			out[i] = verdict{count: true}
			sp = suspect{since: now} // the next failure needs new evidence
		} else {
			if !ok {
				sp = suspect{since: now}
			}
			// While a circuit is open it paces the retries; while both
			// are closed only the row's own wait does, growing with each
			// failure that showed nothing new.
			out[i] = verdict{retryAfter: g.coolDown.Initial}
			if up {
				sp.free++
				out[i].retryAfter = g.coolDown.Delay(sp.free)
			}
		}
		if !ok {
			g.makeRoomLocked()
		}
		g.suspects[ids[i]] = sp
	}
	return out
}

// makeRoomLocked forgets suspects, when there are maxSuspects, down to
// three quarters of that. g.mu is held.
func (g *circuitPair) makeRoomLocked() {
	if len(g.suspects) < maxSuspects {
		return
	}
	for id := range g.suspects {
		delete(g.suspects, id)
		if len(g.suspects) < maxSuspects*3/4 {
			break
		}
	}
}

// policy is the cool-down schedule of circuits configured by c: the n-th
// opening in a row lasts CoolDown × Multiplier^(n-1), capped at
// MaxCoolDown. A row whose n-th transient failure in a row counted no
// attempt while the circuits stayed closed waits as long.
func (c CircuitConfig) policy() backoff.Policy {
	return backoff.Policy{Initial: c.CoolDown, Multiplier: c.Multiplier, Max: c.MaxCoolDown}
}

// circuitSet holds every circuit of a relay: one connection circuit per
// sender, made at New, and one per destination, made when the first
// poller routed to it starts.
type circuitSet struct {
	cfg    CircuitConfig
	now    func() time.Time
	notify func(txbox.CircuitEvent)

	mu    sync.Mutex
	conns map[string]*circuit
	pairs map[destKey]*circuitPair
}

type destKey struct{ sender, dest string }

func newCircuitSet(senders []string, cfg CircuitConfig, now func() time.Time, notify func(txbox.CircuitEvent)) *circuitSet {
	cs := &circuitSet{cfg: cfg, now: now, notify: notify, conns: map[string]*circuit{}, pairs: map[destKey]*circuitPair{}}
	for _, name := range senders {
		cs.conns[name] = newCircuit(name, "", true, cfg, now, notify)
	}
	return cs
}

// circuitPair returns the circuit pair of destination dest on sender
// senderName.
func (cs *circuitSet) circuitPair(senderName, dest string) *circuitPair {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	k := destKey{senderName, dest}
	g := cs.pairs[k]
	if g == nil {
		g = &circuitPair{
			coolDown: cs.cfg.policy(),
			conn:     cs.conns[senderName],
			dest:     newCircuit(senderName, dest, false, cs.cfg, cs.now, cs.notify),
			suspects: map[txbox.ID]suspect{},
		}
		cs.pairs[k] = g
	}
	return g
}

// unjudged returns a circuit pair of its own that no batch is judged by,
// so it stays closed: the shared claim of a fanned-out type asks it (its
// routes' circuits judge their sends, relay/fanout_shared.go). It is in
// no list of circuits.
func (cs *circuitSet) unjudged() *circuitPair {
	return &circuitPair{
		coolDown: cs.cfg.policy(),
		conn:     newCircuit("", "", true, cs.cfg, cs.now, func(txbox.CircuitEvent) {}),
		dest:     newCircuit("", "", false, cs.cfg, cs.now, func(txbox.CircuitEvent) {}),
		suspects: map[txbox.ID]suspect{},
	}
}

// health lists every circuit: per sender, its connection circuit first,
// then its destinations by name.
func (cs *circuitSet) health() []CircuitHealth {
	cs.mu.Lock()
	all := make([]*circuit, 0, len(cs.conns)+len(cs.pairs))
	for _, c := range cs.conns {
		all = append(all, c)
	}
	for _, g := range cs.pairs {
		all = append(all, g.dest)
	}
	cs.mu.Unlock()
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if a.sender != b.sender {
			return a.sender < b.sender
		}
		if a.connection != b.connection {
			return a.connection
		}
		return a.dest < b.dest
	})
	out := make([]CircuitHealth, 0, len(all))
	for _, c := range all {
		st, err := c.snapshot()
		ch := CircuitHealth{Sender: c.sender, Destination: c.dest, Connection: c.connection, State: st}
		if err != nil {
			ch.LastError = err.Error()
		}
		out = append(out, ch)
	}
	return out
}
