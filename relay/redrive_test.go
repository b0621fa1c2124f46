package relay_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
)

// TestRedriveResendsKeptEvents is the redrive end to end on PostgreSQL: a
// relay with a retention delivers three batches; a redrive of the second
// batch's processed window sets exactly those rows back to PENDING, and
// the relay, which polls only once an hour, delivers them again with the
// same ids and payloads at once: the redrive's NOTIFY woke it.
func TestRedriveResendsKeptEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	r := b.startWakeOnly(t) // fastConfig keeps processed rows an hour
	waitListening(t, b, b.store)
	var batches [][]txbox.ID
	var firstProcessed []time.Time
	for i, n := range []int{3, 5, 2} {
		ids := b.publish(t, "orders", n, nil)
		r.Wake("orders")
		testenv.WaitFor(t, 10*time.Second, "batch delivered and processed", func() bool {
			return b.count(t, "outbox", "status = 'PROCESSED' AND id = ANY($1)", ids) == n
		})
		res, err := b.store.OutboxRedrive(ctx, &store.OutboxRedriveParams{EventType: "orders", IDs: ids, Limit: n, DryRun: true})
		if err != nil || res.Matched != n {
			t.Fatalf("batch %d: dry run %+v, %v", i, res, err)
		}
		batches = append(batches, ids)
		firstProcessed = append(firstProcessed, res.Oldest)
		time.Sleep(2 * time.Millisecond) // the next batch is processed later
	}
	for _, id := range slices.Concat(batches...) {
		if n := len(b.sender.deliveries(id)); n != 1 {
			t.Fatalf("%s delivered %d times before the redrive", id, n)
		}
	}

	// The second batch's window: from its first processed time to the
	// third's, a page of 2 at a time.
	redriven := time.Now()
	p := &store.OutboxRedriveParams{EventType: "orders", ProcessedAfter: firstProcessed[1], ProcessedBefore: firstProcessed[2], Limit: 2}
	changed := 0
	for {
		res, err := b.store.OutboxRedrive(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		changed += res.Changed
		if res.Matched < p.Limit {
			break
		}
		p.After = res.Last
	}
	if changed != len(batches[1]) {
		t.Fatalf("redrive changed %d, want %d", changed, len(batches[1]))
	}
	testenv.WaitFor(t, 10*time.Second, "the redriven events delivered again", func() bool {
		for _, id := range batches[1] {
			if len(b.sender.deliveries(id)) != 2 {
				return false
			}
		}
		return true
	})
	var last time.Time
	for _, id := range batches[1] {
		d := b.sender.deliveries(id)
		if string(d[1].msg.Payload) != string(d[0].msg.Payload) {
			t.Errorf("%s sent again with payload %q, first %q", id, d[1].msg.Payload, d[0].msg.Payload)
		}
		if d[1].at.After(last) {
			last = d[1].at
		}
	}
	t.Logf("redriven events delivered %v after the redrive began", last.Sub(redriven))
	if took := last.Sub(redriven); took > 2*time.Second {
		t.Logf("slower than the 2s bar (a loaded machine?): %v", took)
	}
	// Exactly those: the first and third batches went out once.
	time.Sleep(200 * time.Millisecond)
	for _, id := range slices.Concat(batches[0], batches[2]) {
		if n := len(b.sender.deliveries(id)); n != 1 {
			t.Errorf("%s outside the window delivered %d times", id, n)
		}
	}
	if n := b.count(t, "outbox", "status = 'PROCESSED'"); n != 10 {
		t.Errorf("%d processed rows after the redelivery, want 10", n)
	}
}
