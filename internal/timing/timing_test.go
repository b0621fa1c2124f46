package timing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/timing"
	"github.com/txbox/txbox/sender"
)

// refuser acks every message but those of type "bad".
type refuser struct{}

func (refuser) Send(_ context.Context, msgs []*sender.Message) error {
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		if m.EventType == "bad" {
			errs[i] = errors.New("refused")
		}
	}
	return sender.Summarize(errs)
}

func (refuser) Close(context.Context) error { return nil }

// TestRecorderTimesPickupAndAck: the first hand-over and the last ack of
// each message are noted, a refused message is picked up but never acked,
// and a message acked twice counts once.
func TestRecorderTimesPickupAndAck(t *testing.T) {
	t.Parallel()
	rec := timing.New(refuser{})
	ok1, ok2, bad := txbox.NewID(), txbox.NewID(), txbox.NewID()
	committed := time.Now()
	msgs := []*sender.Message{{ID: ok1, EventType: "a"}, {ID: ok2, EventType: "b"}, {ID: bad, EventType: "bad"}}
	if err := rec.Send(context.Background(), msgs); err == nil {
		t.Fatal("Send hid the refusal")
	}
	firstPick, firstAck := rec.Times(ok1)
	if firstPick.Before(committed) || firstAck.Before(firstPick) {
		t.Fatalf("ok1: picked %v, acked %v, after a commit at %v", firstPick, firstAck, committed)
	}
	if p, a := rec.Times(bad); p.IsZero() || !a.IsZero() {
		t.Fatalf("refused message: picked %v, acked %v; want picked, not acked", p, a)
	}
	if err := rec.Send(context.Background(), msgs[:1]); err != nil {
		t.Fatal(err)
	}
	if p, a := rec.Times(ok1); !p.Equal(firstPick) || a.Before(firstAck) {
		t.Fatalf("resent ok1: picked %v (first %v), acked %v (first %v)", p, firstPick, a, firstAck)
	}
	if n, na := rec.Acked(), rec.AckedOf("a"); n != 2 || na != 1 {
		t.Fatalf("Acked() = %d, AckedOf(a) = %d; want 2 and 1", n, na)
	}
	pick, ack := rec.Latencies(map[txbox.ID]time.Time{ok1: committed, ok2: time.Now().Add(time.Hour)})
	if len(pick) != 2 || len(ack) != 2 {
		t.Fatalf("Latencies gave %d and %d values for 2 commits", len(pick), len(ack))
	}
	// ok2's commit is after its pickup: floored to 0; ok1's ack comes
	// after its pickup.
	zero := 0
	for i := range pick {
		switch {
		case pick[i] == 0 && ack[i] == 0:
			zero++
		case pick[i] < 0 || ack[i] < pick[i]:
			t.Fatalf("latency %d: pick %v, ack %v", i, pick[i], ack[i])
		}
	}
	if zero != 1 {
		t.Fatalf("%d latencies floored to 0, want 1 (the commit after its pickup): %v %v", zero, pick, ack)
	}
	if got := rec.Destination(sender.Route{Topic: "t"}); got != sender.DestinationOf(refuser{}, sender.Route{Topic: "t"}) {
		t.Fatalf("Destination = %q, want the wrapped sender's", got)
	}
}
