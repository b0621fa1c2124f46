package nats_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	txnats "github.com/txbox/txbox/sender/nats"
	"github.com/txbox/txbox/sender/sendertest"
)

// TestConnectionCutMidBatch is the relay's loop in miniature under a
// connection cut while batches are in flight: every message is sent until
// it is acked, failures are resent in the next batch, and the connection
// is cut right after the server has seen part of a batch whose acks are
// still on their way (an unknown outcome). The oracle: every message ends
// acked, none is lost, and thanks to Nats-Msg-Id none is stored twice,
// although some were sent twice. Set TXBOX_CHAOS=1 for 100 rounds.
func TestConnectionCutMidBatch(t *testing.T) {
	t.Parallel()
	rounds := 6
	if os.Getenv("TXBOX_CHAOS") != "" {
		rounds = 100
	}
	st := newStream(t)
	p := sendertest.NewProxy(t, natsAddr(t))
	s := openSender(t, p.Addr(), txnats.Config{ReconnectWait: 20 * time.Millisecond, AckTimeout: 5 * time.Second})
	route := sender.Route{Subject: st.subject()}

	var all, pending []*sender.Message
	resent, cuts, unknown := 0, 0, 0
	sendOnce := func(batch []*sender.Message, cut bool) []*sender.Message {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		before := len(st.received(t))
		done := make(chan error, 1)
		go func() { done <- s.Send(ctx, batch) }()
		var result error
		finished := false
		if cut {
			// Cut once the server stored part of the batch: its acks are
			// held back by the latency, so the outcome is unknown to the
			// sender. A Send that fails at once (still reconnecting after
			// the previous cut) is not cut.
			testenv.WaitFor(t, 30*time.Second, "the batch to reach the server (or Send to return)", func() bool {
				select {
				case result = <-done:
					finished = true
				default:
				}
				return finished || len(st.received(t)) != before
			})
			if !finished {
				p.Down(t)
				p.Up(t)
				cuts++
			}
		}
		if !finished {
			result = <-done
		}
		var failed []*sender.Message
		for i, err := range sender.Results(result, len(batch)) {
			if err == nil {
				continue
			}
			if c := txbox.Classify(err); c != txbox.ClassTransient {
				t.Fatalf("message failed %v during a connection cut, want transient: %v", c, err)
			}
			failed = append(failed, batch[i])
		}
		if cut && len(failed) > 0 {
			// Failed, yet stored: the outcomes the sender could not know.
			stored := map[string]bool{}
			for _, d := range st.received(t) {
				stored[d.ID] = true
			}
			for _, m := range failed {
				if stored[m.ID.String()] {
					unknown++
				}
			}
		}
		return failed
	}

	p.SetLatency(t, 100*time.Millisecond)
	for r := 0; r < rounds; r++ {
		fresh := sendertest.NewMessages(50, route)
		all = append(all, fresh...)
		pending = sendOnce(fresh, true)
		// The relay keeps retrying (here at once, it would back off)
		// until every message is acked; then the next round starts on a
		// live connection.
		// The poll interval stands for the relay's retry backoff,
		// shortened: while the sender reconnects, a Send fails at once.
		testenv.WaitForEvery(t, 60*time.Second, 10*time.Millisecond, "every message of the round to be acked", func() bool {
			if len(pending) > 0 {
				resent += len(pending)
				pending = sendOnce(pending, false)
			}
			return len(pending) == 0
		})
	}

	counts := map[string]int{}
	for _, d := range st.received(t) {
		counts[d.ID]++
	}
	for _, m := range all {
		switch n := counts[m.ID.String()]; n {
		case 1:
		case 0:
			t.Fatalf("message %s acked but lost", m.ID)
		default:
			t.Fatalf("message %s stored %d times despite Nats-Msg-Id", m.ID, n)
		}
		delete(counts, m.ID.String())
	}
	if len(counts) != 0 {
		t.Fatalf("%d unexpected messages in the stream", len(counts))
	}
	if unknown == 0 {
		t.Fatalf("no cut produced an unknown outcome (%d cuts): the test proved nothing", cuts)
	}
	t.Logf("%d messages, %d rounds, %d cuts mid-batch, %d failed-but-stored, %d resends, 0 lost, 0 duplicated", len(all), rounds, cuts, unknown, resent)
}
