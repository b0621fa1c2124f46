package relay

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
)

// The lock claims' budget lets Budget claims through, queues the next
// (reported as Waiting), hands a released slot to a waiter, and gives a
// waiter up when its context ends (the relay stops).
func TestClaimBudgetQueuesBeyondItsSize(t *testing.T) {
	b := newClaimBudget(2)
	ctx := context.Background()
	for range 2 {
		if err := b.acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan error, 1)
	go func() { got <- b.acquire(ctx) }()
	testenv.WaitFor(t, 5*time.Second, "a third claim waiting", func() bool { return b.health() == LockClaimHealth{Budget: 2, Held: 2, Waiting: 1} })
	b.release()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if h := b.health(); h != (LockClaimHealth{Budget: 2, Held: 2}) {
		t.Fatalf("after the hand-over: %+v", h)
	}
	stopped, cancel := context.WithCancel(ctx)
	go func() { got <- b.acquire(stopped) }()
	testenv.WaitFor(t, 5*time.Second, "a claim waiting", func() bool { return b.health().Waiting == 1 })
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("a waiting claim after its context ended: %v", err)
	}
	if h := b.health(); h != (LockClaimHealth{Budget: 2, Held: 2}) {
		t.Fatalf("a given-up claim holds a slot: %+v", h)
	}
	var none *claimBudget // no bound
	if err := none.acquire(ctx); err != nil {
		t.Fatal(err)
	}
	none.release()
}

// The budget is LockBudget when set, else the store's pool minus
// LockReserve (at least 1), else none.
func TestLockBudgetFromThePool(t *testing.T) {
	for _, c := range []struct {
		budget, pool, want int
	}{
		{0, 16, 12}, {0, 5, 1}, {0, 2, 1}, {0, 0, 0}, {7, 16, 7}, {-1, 16, 0},
	} {
		cfg := Config{LockBudget: c.budget, Store: sizedStore{n: c.pool}}
		if got := cfg.lockBudget(); got != c.want {
			t.Errorf("LockBudget %d, pool %d: budget %d, want %d", c.budget, c.pool, got, c.want)
		}
	}
}

// sizedStore is a store that reports its pool size and does nothing else.
type sizedStore struct {
	store.Driver
	n int
}

func (s sizedStore) MaxConns() int { return s.n }
