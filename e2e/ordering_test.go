package e2e

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
	"github.com/txbox/txbox/relay/relaytest"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
)

// TestOrderedByKey: with ordering: key, events with the same key arrive in
// id order although batches overlap (in-flight 4, helper claimers) and
// some events are rejected and retried; different keys still flow. It
// runs in lock mode too under TXBOX_CHAOS.
func TestOrderedByKey(t *testing.T) {
	t.Parallel()
	eachKind(t, withLockKindsInChaos(), func(t *testing.T, kind storeKind, d store.Driver) {
		st := newStream(t)
		o := newOracle()
		const keys, perKey = 20, 40
		keyOf := map[txbox.ID]string{}
		for range perKey / 10 {
			var evs []*txbox.Event
			for i := range 10 * keys {
				ev := &txbox.Event{ID: txbox.NewID(), Type: "orders", Key: fmt.Sprintf("k%02d", i%keys), Payload: []byte("{}")}
				keyOf[ev.ID] = ev.Key
				evs = append(evs, ev)
			}
			if err := kind.publish(context.Background(), d, evs, true); err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs {
				o.committedIDs(ev.ID)
			}
		}
		// Every 50th event is refused once: its key must wait for the
		// retry rather than overtake it.
		rejectOnce := map[txbox.ID]bool{}
		n := 0
		for id := range keyOf {
			if n%50 == 0 {
				rejectOnce[id] = true
			}
			n++
		}
		snd := &rejectingSender{Sender: newNATSSender(t, testenv.NATSURL), once: rejectOnce}
		cfg := relayConfig(d, snd, st.prefix, 0)
		cfg.Defaults.Ordering = new(txbox.OrderingKey)
		cfg.Defaults.BatchSize = new(50)
		cfg.Defaults.Backoff = &relay.BackoffSettings{Delay: new(50 * time.Millisecond), Multiplier: new(1.0), Max: new(time.Second)}
		relaytest.Start(t, cfg)
		testenv.WaitFor(t, 60*time.Second, "all events delivered", func() bool { return st.count(t) >= uint64(keys*perKey) })
		testenv.WaitFor(t, 20*time.Second, "outbox settled", func() bool { return outboxSettled(t, d) })
		msgs := st.readAll(t)
		last := map[string]txbox.ID{}
		violations := 0
		for _, m := range msgs {
			o.receivedIDs(m.id)
			k := keyOf[m.id]
			if prev, ok := last[k]; ok && bytes.Compare(prev[:], m.id[:]) > 0 {
				violations++
				if violations <= 3 {
					t.Errorf("key %s: %v arrived after %v, which has a larger id", k, m.id, prev)
				}
			}
			last[k] = m.id
		}
		if violations > 0 {
			t.Errorf("%d per-key order violations", violations)
		}
		if rep := o.report(); !rep.clean() {
			t.Errorf("oracle: %v", rep)
		}
		if snd.rejected() == 0 {
			t.Error("no event was rejected: the retry part of the test did not run")
		}
	})
}

// rejectingSender refuses each id in once the first time it is sent
// (rejected: an attempt is counted and the row retried after backoff).
type rejectingSender struct {
	sender.Sender
	once map[txbox.ID]bool

	mu    sync.Mutex
	count int
}

func (r *rejectingSender) Send(ctx context.Context, msgs []*sender.Message) error {
	errs := make([]error, len(msgs))
	var pass []*sender.Message
	var idx []int
	r.mu.Lock()
	for i, m := range msgs {
		if r.once[m.ID] {
			delete(r.once, m.ID)
			r.count++
			errs[i] = txbox.Rejected(errors.New("refused once"))
			continue
		}
		pass = append(pass, m)
		idx = append(idx, i)
	}
	r.mu.Unlock()
	res := sender.Results(r.Sender.Send(ctx, pass), len(pass))
	failed := false
	for j, i := range idx {
		errs[i] = res[j]
	}
	for _, e := range errs {
		failed = failed || e != nil
	}
	if !failed {
		return nil
	}
	return &sender.BatchError{Errs: errs}
}

func (r *rejectingSender) rejected() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}
