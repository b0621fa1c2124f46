package relay_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
)

// orderSender checks ordered delivery as it happens: a message may only be
// sent once every earlier message of its key (by id) was acknowledged. It
// acks everything except what reject refuses.
type orderSender struct {
	mu     sync.Mutex
	acked  map[txbox.ID]bool
	keys   map[txbox.ID]string // every event of the test, by id
	sends  int
	errs   []string
	reject func(m *sender.Message) error
}

func newOrderSender(keys map[txbox.ID]string) *orderSender {
	return &orderSender{acked: map[txbox.ID]bool{}, keys: keys}
}

func (s *orderSender) Send(_ context.Context, msgs []*sender.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sends++
	errs := make([]error, len(msgs))
	failed := false
	for i, m := range msgs {
		for id, k := range s.keys {
			if k == m.Key && bytes.Compare(id[:], m.ID[:]) < 0 && !s.acked[id] && len(s.errs) < 5 {
				s.errs = append(s.errs, fmt.Sprintf("key %s: %s sent before %s was acked", k, m.ID, id))
			}
		}
		if s.reject != nil {
			errs[i] = s.reject(m)
		}
		if errs[i] != nil {
			failed = true
			continue
		}
		s.acked[m.ID] = true
	}
	if !failed {
		return nil
	}
	return &sender.BatchError{Errs: errs}
}

func (s *orderSender) Close(context.Context) error { return nil }

func (s *orderSender) done() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.acked)
}

func (s *orderSender) violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.errs...)
}

// plainInsert writes n events of type orders spread over keys with plain
// SQL, one per transaction and no NOTIFY, as a non-Go producer does, and
// returns their keys by id.
func plainInsert(t *testing.T, b *bundle, n, keys int) map[txbox.ID]string {
	t.Helper()
	out := make(map[txbox.ID]string, n)
	q := fmt.Sprintf("INSERT INTO %s.txbox_outbox (event_type, event_key, payload) VALUES ('orders', $1, $2) RETURNING id", b.schema)
	for i := range n {
		k := fmt.Sprintf("k%02d", i%keys)
		var id txbox.ID
		if err := b.pool.QueryRow(context.Background(), q, k, fmt.Appendf(nil, `{"n":%d}`, i)).Scan(&id); err != nil {
			t.Fatal(err)
		}
		out[id] = k
	}
	return out
}

// TestOrderedBacklogDrainsAtOnce is the regression test of an ordered type
// that stalled: an ordered claim takes at most a run per key, so with few
// keys it is never full, and adaptive polling read every claim as a
// partial batch and stretched the delay towards max-delay (10 minutes
// here) while thousands of rows waited. Now a finished ordered batch
// triggers the next claim at once, so the backlog of a plain-SQL producer
// (no NOTIFY, no wake-up) drains in order, long before max-delay could
// explain it.
func TestOrderedBacklogDrainsAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	keys := plainInsert(t, b, 1500, 50)
	snd := newOrderSender(keys)
	polls := &pollRecorder{}
	b.start(t, func(c *relay.Config) {
		c.Senders = map[string]sender.Sender{"test": snd}
		c.Events = map[string]relay.EventSettings{"orders": {}}
		c.Defaults.Ordering = new(txbox.OrderingKey)
		c.Defaults.BatchSize = new(100)
		c.Defaults.Polling = &relay.PollingSettings{MinDelay: new(50 * time.Millisecond), MaxDelay: new(10 * time.Minute)}
		c.DiscoverInterval = -1
		c.Hooks = []txbox.RelayHook{polls}
	})
	testenv.WaitFor(t, 60*time.Second, "the ordered backlog delivered", func() bool { return snd.done() == len(keys) })
	for _, v := range snd.violations() {
		t.Error(v)
	}
	testenv.WaitFor(t, 10*time.Second, "every row processed", func() bool { return b.count(t, "outbox", "status <> 'PROCESSED'") == 0 })
	if d := polls.maxDelay(); d > time.Second {
		t.Errorf("a poll of the backlog waited %v before the next claim: partial ordered claims were read as idle", d)
	}
}

// pollRecorder keeps the polls' outcomes.
type pollRecorder struct {
	txbox.NopRelayHook
	mu    sync.Mutex
	polls []txbox.PollEvent
}

func (p *pollRecorder) OnPoll(ev txbox.PollEvent) {
	p.mu.Lock()
	p.polls = append(p.polls, ev)
	p.mu.Unlock()
}

// maxDelay is the longest next delay chosen after a claim that returned
// rows.
func (p *pollRecorder) maxDelay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var d time.Duration
	for _, ev := range p.polls {
		if ev.Claimed > 0 {
			d = max(d, ev.NextDelay)
		}
	}
	return d
}

func (p *pollRecorder) snapshot() []txbox.PollEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]txbox.PollEvent(nil), p.polls...)
}

// TestOrderedRunStopsAtAFailure: a key's rows of one batch go in waves;
// when one fails (rejected once, or transiently twice while the
// destination acks the others), the rows of its key behind it are not
// sent in that batch and never count an attempt, and the key resumes with
// the failed row.
func TestOrderedRunStopsAtAFailure(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		fails int
		err   error
	}{
		{"rejected", 1, txbox.Rejected(errors.New("refused once"))},
		{"transient", 2, txbox.Transient(errors.New("partition unavailable"))},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			// 4 keys of 60 rows, batches of 40 in runs of 20: while key k1
			// waits for its failed row, the other keys' batches are acked,
			// which is what makes a transient failure count (see
			// circuitPair.assess) and must never make a row that was not sent count.
			ids := b.publish(t, "orders", 240, func(i int, ev *txbox.Event) { ev.Key = fmt.Sprint("k", i%4) })
			keys := map[txbox.ID]string{}
			for i, id := range ids {
				keys[id] = fmt.Sprint("k", i%4)
			}
			poison := ids[5] // key k1, its second row
			snd := newOrderSender(keys)
			var fmu sync.Mutex
			left := c.fails
			snd.reject = func(m *sender.Message) error {
				fmu.Lock()
				defer fmu.Unlock()
				if m.ID == poison && left > 0 {
					left--
					return c.err
				}
				return nil
			}
			attempts := map[txbox.ID]int{}
			var amu sync.Mutex
			b.start(t, func(cfg *relay.Config) {
				cfg.Senders = map[string]sender.Sender{"test": &attemptSender{Sender: snd, mu: &amu, attempts: attempts}}
				cfg.Events = map[string]relay.EventSettings{"orders": {}}
				cfg.Defaults.Ordering = new(txbox.OrderingKey)
				cfg.Defaults.BatchSize = new(40)
				cfg.Defaults.InFlight = new(1) // runs of 20: rows of k1 behind the poison are in its batch
			})
			testenv.WaitFor(t, 30*time.Second, "every event delivered", func() bool { return snd.done() == len(ids) })
			for _, v := range snd.violations() {
				t.Error(v)
			}
			amu.Lock()
			defer amu.Unlock()
			if attempts[poison] != c.fails+1 {
				t.Errorf("poison row sent %d times, want %d", attempts[poison], c.fails+1)
			}
			for i, id := range ids {
				if id != poison && attempts[id] != 1 {
					t.Errorf("row %d (key %s) sent %d times, want once: rows behind a failure must wait, not be sent", i, keys[id], attempts[id])
				}
			}
			testenv.WaitFor(t, 10*time.Second, "every row processed", func() bool { return b.count(t, "outbox", "status <> 'PROCESSED'") == 0 })
			if n := b.count(t, "outbox", "attempts > 0 AND id <> $1", poison); n != 0 {
				t.Errorf("%d rows other than the failed one counted an attempt", n)
			}
		})
	}
}

// attemptSender counts sends per id (the message's Attempt says what the
// relay counted).
type attemptSender struct {
	sender.Sender
	mu       *sync.Mutex
	attempts map[txbox.ID]int
}

func (a *attemptSender) Send(ctx context.Context, msgs []*sender.Message) error {
	a.mu.Lock()
	for _, m := range msgs {
		a.attempts[m.ID]++
	}
	a.mu.Unlock()
	return a.Sender.Send(ctx, msgs)
}

// TestOrderedIdleBacksOff: an ordered type with nothing claimable backs
// off like any other type, so the fix for key-limited claims does not
// raise the idle cost.
func TestOrderedIdleBacksOff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	polls := &pollRecorder{}
	b.start(t, func(c *relay.Config) {
		c.Events = map[string]relay.EventSettings{"orders": {}}
		c.Defaults.Ordering = new(txbox.OrderingKey)
		c.Defaults.Polling = &relay.PollingSettings{MinDelay: new(5 * time.Millisecond), MaxDelay: new(80 * time.Millisecond), Multiplier: new(2.0)}
		c.DiscoverInterval = -1
		c.Hooks = []txbox.RelayHook{polls}
	})
	testenv.WaitFor(t, 10*time.Second, "the idle delay reached max-delay", func() bool {
		evs := polls.snapshot()
		return len(evs) > 0 && evs[len(evs)-1].NextDelay == 80*time.Millisecond
	})
	evs := polls.snapshot()
	for i := 1; i < len(evs); i++ {
		if evs[i].Claimed != 0 || evs[i].NextDelay < evs[i-1].NextDelay {
			t.Fatalf("idle polls: %d: claimed %d, delay %v after %v: the delay must only grow", i, evs[i].Claimed, evs[i].NextDelay, evs[i-1].NextDelay)
		}
	}
}
