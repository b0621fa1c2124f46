// Package timing wraps a sender.Sender to note when each message is
// handed to it and when its send came back acknowledged: the probe of the
// pickup-latency benchmarks (`txbox bench`, the e2e benchmarks; see
// docs/benchmarks.md), which compare those moments with the producer's
// commit.
//
// It holds one entry per message it saw, so it is for bounded runs, not
// for a relay that runs for good. It is internal: a tool of txbox's own
// benchmarks, not a sender to deploy.
package timing

import (
	"context"
	"sync"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

// Recorder is a sender.Sender that passes every batch to the one it wraps
// and notes, per message id, the first time it was handed over (picked up)
// and the last time its send returned acked.
type Recorder struct {
	sender.Sender
	mu      sync.Mutex
	picked  map[txbox.ID]time.Time
	acked   map[txbox.ID]time.Time
	ackedOf map[string]int // distinct acked ids by event type
}

// New returns a Recorder around s.
func New(s sender.Sender) *Recorder {
	return &Recorder{Sender: s, picked: map[txbox.ID]time.Time{}, acked: map[txbox.ID]time.Time{}, ackedOf: map[string]int{}}
}

// Send records the pickup and ack times around the wrapped sender's Send.
func (r *Recorder) Send(ctx context.Context, msgs []*sender.Message) error {
	now := time.Now()
	r.mu.Lock()
	for _, m := range msgs {
		if _, ok := r.picked[m.ID]; !ok {
			r.picked[m.ID] = now
		}
	}
	r.mu.Unlock()
	err := r.Sender.Send(ctx, msgs)
	res := sender.Results(err, len(msgs))
	done := time.Now()
	r.mu.Lock()
	for i, m := range msgs {
		if res[i] == nil {
			if _, again := r.acked[m.ID]; !again {
				r.ackedOf[m.EventType]++
			}
			r.acked[m.ID] = done
		}
	}
	r.mu.Unlock()
	return err
}

// Destination passes the wrapped sender's circuit key through, so the
// relay treats the recorder as it would the sender.
func (r *Recorder) Destination(route sender.Route) string {
	return sender.DestinationOf(r.Sender, route)
}

// Acked returns how many distinct messages were acked.
func (r *Recorder) Acked() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.acked)
}

// AckedOf returns how many distinct messages of eventType were acked.
func (r *Recorder) AckedOf(eventType string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ackedOf[eventType]
}

// Times returns when the message id was first picked up and last acked
// (zero times when it was not).
func (r *Recorder) Times(id txbox.ID) (picked, acked time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.picked[id], r.acked[id]
}

// Latencies returns, for each message of committed (id to the moment its
// producer sent COMMIT), the time from the commit to its pickup and to its
// ack, in no particular order. A time before the commit (the relay may
// claim before the commit's reply is back) counts as 0.
func (r *Recorder) Latencies(committed map[txbox.ID]time.Time) (pick, ack []time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, c := range committed {
		pick = append(pick, max(r.picked[id].Sub(c), 0))
		ack = append(ack, max(r.acked[id].Sub(c), 0))
	}
	return pick, ack
}
