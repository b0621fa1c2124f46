package relay_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
)

// roundTimes records when each round of one background job ended and what
// it changed.
type roundTimes struct {
	txbox.NopRelayHook
	job    string
	mu     sync.Mutex
	at     []time.Time
	counts []int
}

func (h *roundTimes) OnMaintenance(ev txbox.MaintenanceEvent) {
	if ev.Job != h.job {
		return
	}
	h.mu.Lock()
	h.at = append(h.at, time.Now())
	h.counts = append(h.counts, ev.Count)
	h.mu.Unlock()
}

func (h *roundTimes) snapshot() ([]time.Time, []int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Time(nil), h.at...), append([]int(nil), h.counts...)
}

// An idle relay's recovery sweeps back off (that is its idle cost), and a
// lease that expires while they are backed off is still recovered: by the
// first sweep after it expired, which is at most relay.recover-max-interval
// later. The lease belongs to a relay that crashed, so this relay's own
// claims cannot have kept its recovery at the shortest interval.
func TestRecoveryBacksOffAndStillRecoversExpiredLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hook := &roundTimes{job: txbox.JobRecover}
	const interval, maxInterval = 20 * time.Millisecond, 400 * time.Millisecond
	b.start(t, func(c *relay.Config) {
		c.RecoverInterval, c.RecoverMaxInterval = interval, maxInterval
		c.Hooks = append(c.Hooks, hook)
	})
	// 20, 40, 80, 160, 320, 400 ms: after 7 rounds the sweep is at its cap.
	testenv.WaitFor(t, 30*time.Second, "recovery backed off to its cap", func() bool {
		at, _ := hook.snapshot()
		return len(at) >= 7
	})
	at, _ := hook.snapshot()
	if gap := at[6].Sub(at[5]); gap < 8*interval {
		t.Fatalf("sweeps 6 and 7 of an idle relay were %v apart; backed off they are ≥ %v (320ms)", gap, 8*interval)
	}

	// Another relay claims a row and crashes: its lease expires while
	// this relay's recovery is backed off.
	id := b.publish(t, "crashed", 1, nil)[0]
	const lease = 300 * time.Millisecond
	rows, err := b.store.OutboxClaim(context.Background(), &store.OutboxClaimParams{EventType: "crashed", Limit: 1, LeaseDuration: lease})
	if err != nil || len(rows) != 1 {
		t.Fatalf("claim: %d rows, %v", len(rows), err)
	}
	expired := time.Now().Add(lease)
	testenv.WaitFor(t, 30*time.Second, "expired lease recovered and delivered", func() bool { return len(b.sender.deliveries(id)) == 1 })

	// Recovered by the first sweep that started after the expiry: a sweep
	// that ended after it may have started before it and found nothing, so
	// at most one empty sweep ends between expiry and recovery.
	at, counts := hook.snapshot()
	empty := 0
	for i := range at {
		if !at[i].After(expired) {
			continue
		}
		if counts[i] > 0 {
			break
		}
		empty++
	}
	if empty > 1 {
		t.Errorf("%d sweeps after the lease expired found nothing before one recovered it; want at most 1", empty)
	}
	if d := b.sender.deliveries(id)[0]; d.msg.Attempt != 1 {
		t.Errorf("recovered row delivered as attempt %d, want 1 (recovery counts no attempt)", d.msg.Attempt)
	}
}

// The dead-letter move runs when a batch fails rows, not on a timer: with
// the sweep's interval at an hour, a row that fails for good is still
// moved at once.
func TestFailedRowMovedWithoutWaitingForTheSweep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.sender.setBehave(func(context.Context, []*sender.Message) error {
		return txbox.Permanent(errors.New("refused"))
	})
	hook := &roundTimes{job: txbox.JobDeadLetterMove}
	b.start(t, func(c *relay.Config) {
		c.DeadLetterInterval, c.DeadLetterMaxInterval = time.Hour, time.Hour
		c.Hooks = append(c.Hooks, hook)
	})
	// The sweep at start has run (and found nothing); the next is in an hour.
	testenv.WaitFor(t, 30*time.Second, "the first dead-letter sweep", func() bool {
		at, _ := hook.snapshot()
		return len(at) >= 1
	})
	ids := b.publish(t, "orders", 3, nil)
	testenv.WaitFor(t, 30*time.Second, "failed rows dead-lettered", func() bool {
		return b.count(t, "dead_letter", "id = ANY($1)", ids) == 3
	})
	if n := b.count(t, "outbox", "status = 'FAILED'"); n != 0 {
		t.Errorf("%d FAILED rows left in the outbox", n)
	}
}
