package relay_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/store"
)

// poisonFinishStore fails every finish call that contains the poisoned
// row, as one value the database refuses fails a whole statement.
type poisonFinishStore struct {
	store.Driver
	poison txbox.ID
	mu     sync.Mutex
	sizes  []int // item counts of the calls that failed
}

func (p *poisonFinishStore) OutboxFinish(ctx context.Context, params *store.OutboxFinishParams) (*store.OutboxFinishResult, error) {
	for _, it := range params.Items {
		if it.ID == p.poison {
			p.mu.Lock()
			p.sizes = append(p.sizes, len(params.Items))
			p.mu.Unlock()
			return nil, errors.New("injected: ERROR: invalid byte sequence for encoding \"UTF8\": 0x00 (SQLSTATE 22021)")
		}
	}
	return p.Driver.OutboxFinish(ctx, params)
}

// TestFinishDegradesAroundPoisonedItem: a finish group that keeps failing
// is retried in smaller parts, so one item the database refuses does not
// keep the others IN_PROCESS. The other rows are finished once and never
// sent again, even after the poisoned row's lease expired and it was
// delivered again; the batch reports how many of its rows were not
// finished.
func TestFinishDegradesAroundPoisonedItem(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.publish(t, "orders", 20, nil)
	poisoned := &poisonFinishStore{Driver: b.store, poison: ids[7]}
	hook := &recordingHook{}
	batch := 50
	b.start(t, func(c *relay.Config) {
		c.Store = poisoned
		c.Defaults.BatchSize = &batch
		c.Defaults.LeaseDuration = new(time.Second)
		c.Hooks = []txbox.RelayHook{hook}
	})
	testenv.WaitFor(t, 20*time.Second, "the 19 other rows processed", func() bool {
		return b.count(t, "outbox", "status = 'PROCESSED'") == len(ids)-1
	})
	// The poisoned row's lease expires, it is recovered and sent again:
	// by then the others would have been re-sent too had they stayed
	// IN_PROCESS. Its first batch reports the row it could not finish.
	reported := func() bool {
		hook.mu.Lock()
		defer hook.mu.Unlock()
		for _, ev := range hook.batches {
			if ev.FinishErr != nil && strings.Contains(ev.FinishErr.Error(), "1 of 20 rows not finished") {
				return true
			}
		}
		return false
	}
	testenv.WaitFor(t, 20*time.Second, "the poisoned row re-sent after its lease, and its batch's report", func() bool {
		return len(b.sender.deliveries(ids[7])) >= 2 && reported()
	})
	for i, id := range ids {
		if i == 7 {
			continue
		}
		if n := len(b.sender.deliveries(id)); n != 1 {
			t.Errorf("row %d delivered %d times, want 1", i, n)
		}
	}
	if n := b.count(t, "outbox", "status = 'PROCESSED' AND id = $1", ids[7]); n != 0 {
		t.Error("the poisoned row was finished")
	}
	poisoned.mu.Lock()
	defer poisoned.mu.Unlock()
	if len(poisoned.sizes) == 0 || poisoned.sizes[len(poisoned.sizes)-1] != 1 {
		t.Errorf("failed finish sizes %v: the group was not split down to the poisoned item", poisoned.sizes)
	}
}
