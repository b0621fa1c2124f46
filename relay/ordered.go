package relay

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
)

// Ordered delivery (docs/concepts.md, "Ordering"). An ordered claim takes
// a run of up to keyRun consecutive rows per key (the key's head and the
// rows right behind it); the relay sends a batch in waves: wave i holds
// the i-th row of every key of the batch (plus, in the first wave, the
// rows without a key), so different keys go in parallel while a key's next
// row leaves only after the previous one was acknowledged. When a row
// fails, the rows of its key behind it in the batch are not sent: they
// are released without counting an attempt, and the failed row, still
// the key's head, holds them back until it is delivered.
//
// Why runs: a claim takes one key's rows only while none of them is in
// flight, so with one row per key per claim a type with k keys has at most
// k rows in flight and drains at k rows per round trip (claim, send,
// finish), a fraction of the unordered rate however large the batch size.
// Runs let one round trip carry keyRun rows per key, and let the
// in-flight batches of a type hold different keys (each claim starts
// after the last key the previous one walked). docs/benchmarks/relay.md
// has the figures.

// errUnsent is the outcome of a row that was not sent because an earlier
// row of its key in the same batch failed, or the send deadline came
// before its wave. It is transient, and judgeSent leaves it out of the
// circuits' judgement: the row goes back to PENDING, due at once, with no
// attempt counted, and it never reaches the destination before the row
// that held it back.
var errUnsent = txbox.Transient(errors.New("relay: not sent: an earlier row of its key in the batch was not delivered"))

// keyRun is how many rows of one key an ordered claim may take:
// batchSize/(2*inFlight), 25 with the defaults. A batch then spans at least
// 2*inFlight keys, and the inFlight batches of a type hold different keys
// (each claim walks on from the last key of the previous one), each batch
// sent in up to keyRun waves. Shorter runs mean fewer waves per batch but
// fewer rows per claim when keys are few; longer ones more waves in a row.
// Measured with 50 keys (docs/benchmarks/relay.md, "Ordered drain"): runs
// of 1 drain at about a quarter of the unordered rate, runs of 12, 25 and
// 50 at about half, 25 the most often ahead.
func keyRun(batchSize, inFlight int) int {
	return max(1, batchSize/(2*max(inFlight, 1)))
}

// sendOrdered sends msgs, one claimed batch of an ordered type in claim
// order with each key's rows in key order (inKeyOrder), in waves as described above, and reports per-message outcomes
// like sender.Sender.Send: nil when all were acked, a *sender.BatchError
// when some rows were not sent (marked errUnsent), otherwise what
// sender.Summarize makes of the outcomes.
func (l *lane) sendOrdered(ctx context.Context, msgs []*sender.Message) error {
	errs := make([]error, len(msgs))
	sent := make([]bool, len(msgs))
	var keyless []int
	byKey := map[string][]int{}
	var keys []string
	for i, m := range msgs {
		if m.Key == "" {
			keyless = append(keyless, i)
			continue
		}
		if _, ok := byKey[m.Key]; !ok {
			keys = append(keys, m.Key)
		}
		byKey[m.Key] = append(byKey[m.Key], i)
	}
	// A key's messages come in its order already (inKeyOrder).
	stopped := map[string]bool{} // a row of the key failed: send no more of it
	wave := keyless
	for pos := 0; ; pos++ {
		for _, k := range keys {
			if idx := byKey[k]; pos < len(idx) && !stopped[k] {
				wave = append(wave, idx[pos])
			}
		}
		if len(wave) == 0 {
			break
		}
		if ctx.Err() != nil {
			break // the send deadline passed: the rest is released unsent
		}
		batch := make([]*sender.Message, len(wave))
		for j, i := range wave {
			batch[j] = msgs[i]
		}
		res := sender.Results(l.s.sender.Send(ctx, batch), len(batch))
		for j, i := range wave {
			sent[i] = true
			errs[i] = res[j]
			if res[j] == nil {
				continue
			}
			if k := msgs[i].Key; k != "" {
				stopped[k] = true
			}
		}
		wave = nil
	}
	unsent := 0
	for i := range msgs {
		if !sent[i] {
			errs[i] = errUnsent
			unsent++
		}
	}
	if unsent == 0 {
		return sender.Summarize(errs)
	}
	// Unsent rows keep their own mark (see judgeSent), so the outcome is per
	// message even when every sent row failed the same way.
	return &sender.BatchError{Errs: errs}
}

// inKeyOrder rearranges rows, a claimed batch of an ordered type in claim
// order (due_at, id), so that each key's rows come in the key's order,
// (Seq, ID) (store.OutboxRow.Seq: the producers' transaction order where
// the dialect records it), each in a place that one of its key's rows
// held. Claim order is not key order: a retried head is due later than
// the rows behind it, and on PostgreSQL a row with the smaller id may
// belong to the later transaction.
func inKeyOrder(rows []*store.OutboxRow) {
	places := map[string][]int{}
	for i, r := range rows {
		if r.Key != "" {
			places[r.Key] = append(places[r.Key], i)
		}
	}
	for _, idx := range places {
		if len(idx) < 2 {
			continue
		}
		keyRows := make([]*store.OutboxRow, len(idx))
		for j, i := range idx {
			keyRows[j] = rows[i]
		}
		slices.SortFunc(keyRows, func(a, b *store.OutboxRow) int {
			if c := cmp.Compare(a.Seq, b.Seq); c != 0 {
				return c
			}
			return bytes.Compare(a.ID[:], b.ID[:])
		})
		for j, i := range idx {
			rows[i] = keyRows[j]
		}
	}
}

// batchDone is called when a batch of an ordered type has been finished.
// It asks the run loop to claim again at once: finishing
// a key's rows makes the key's next rows claimable, and an ordered claim
// that returned fewer rows than its limit was limited by keys in flight,
// not by an empty backlog.
func (p *poller) batchDone() {
	if p.horizonHeld() {
		return
	}
	select {
	case p.againC <- struct{}{}:
	default:
	}
}

// horizonBackoff is the wait after claims in a row that found nothing to
// take but rows the commit horizon held back (store.OutboxClaimParams.
// HorizonCut): rows of a key were due but a transaction older than them was
// still in progress, and the horizon moves only when it ends. Claiming again
// at once would cost a claim per batch for nothing; waiting longer would
// delay the key past that transaction's end. 5ms doubling up to 200ms:
// behind a long transaction a poller claims five times a second, and
// delivers within 200ms of its end.
var horizonBackoff = backoff.Policy{Initial: 5 * time.Millisecond, Multiplier: 2, Max: 200 * time.Millisecond}

// horizonCut records how many keys the horizon cut in the claim that just
// returned, and how many rows that claim took. Only a claim that took
// nothing while the horizon cut keys backs off: under live traffic nearly
// every claim finds the newest rows of some keys behind the horizon, for
// the milliseconds their producers' transactions take, and a claim that
// took rows shows the keys are moving. Backing off after those would cap
// a steady ordered stream at a claim per 200ms.
func (p *poller) horizonCut(keys, took int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if keys == 0 || took > 0 {
		p.horizonCuts.Reset()
		p.horizonWait = 0
		return
	}
	p.horizonWait = p.horizonCuts.Next()
}

// horizonHeld reports whether the last claim found nothing but rows the
// horizon held back.
func (p *poller) horizonHeld() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.horizonWait > 0
}

// horizonDelay is the wait after a claim: the horizon back-off when the claim
// found nothing but rows the horizon held back, else delay (the polling
// strategy's).
func (p *poller) horizonDelay(delay time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.horizonWait > 0 {
		return p.horizonWait
	}
	return delay
}
