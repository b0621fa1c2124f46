package consumetest

import (
	"context"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

// EndToEnd is what one consumer adapter brings to the end-to-end scenario
// every adapter runs (Pipeline.RunEndToEnd).
type EndToEnd struct {
	// Sender and Route are what the relays deliver with; the scenario
	// closes Sender when the test ends.
	Sender sender.Sender
	Route  sender.Route
	// Consumer returns the Run of the consumer under test, built once the
	// first relay runs; the scenario runs it and stops it at the end. Nil
	// when the consumer serves already (a webhook handler behind a test
	// server).
	Consumer func() func(ctx context.Context) error
	// Redeliver delivers the events ids again by hand, outside the relay
	// and so without what the relay's messages carry to deduplicate them.
	// Like Consumer, it runs on the test's goroutine and may fail the test.
	Redeliver func(ids []txbox.ID)
}

// RunEndToEnd runs business transactions (some rolled back) → outbox →
// relay → broker → consumer → inbox → handler writing an effect row in the
// same PostgreSQL transaction. The relay is stopped abruptly half way and
// a second one takes over after the lease; a tenth of the events is
// delivered again by hand. Every committed event must have exactly one
// effect, rolled-back ones none.
func (p *Pipeline) RunEndToEnd(t testing.TB, e EndToEnd) {
	t.Helper()
	t.Cleanup(func() { _ = e.Sender.Close(context.Background()) })
	n := E2EEvents()
	const perTx = 10
	p.Publish(t, "order-created", n/perTx/2, perTx, 7)
	stop1 := p.StartRelay(t, e.Sender, e.Route, 2*time.Second)
	if e.Consumer != nil {
		_, cancel, done := Run(e.Consumer())
		defer func() {
			cancel()
			<-done
		}()
	}
	// The second half is published while the first relay runs; it is
	// stopped mid-run with no time to finish its batches.
	p.Publish(t, "order-created", n/perTx/2, perTx, 7)
	stop1(time.Millisecond)
	p.StartRelay(t, e.Sender, e.Route, 2*time.Second)
	committed := p.Committed()
	e.Redeliver(committed[:len(committed)/10])
	p.WaitDelivered(t, E2ETimeout())
}
