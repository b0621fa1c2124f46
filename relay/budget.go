package relay

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
)

// LockReserve is how many connections of the store's pool the lock claims
// leave to everything else when Config.LockBudget is derived from the
// pool's size: the claims of lease-mode types, the heartbeat, the
// background jobs, the health checks and the admin API
// (docs/operations.md, "Connection pool"). Their statements are short, so
// a few connections serve them all.
const LockReserve = 4

// poolSizer is a store that reports the size of its connection pool: the
// PostgreSQL and MySQL/MariaDB drivers. 0 means unbounded.
type poolSizer interface {
	MaxConns() int
}

// lockBudget returns the number of lock-claimed batches that may hold a
// connection at once: Config.LockBudget when set, otherwise the store's
// pool minus LockReserve (at least 1); 0 is no bound.
func (c *Config) lockBudget() int {
	if c.LockBudget != 0 {
		return max(c.LockBudget, 0)
	}
	ps, ok := c.Store.(poolSizer)
	if !ok || ps.MaxConns() <= 0 {
		return 0
	}
	return max(ps.MaxConns()-LockReserve, 1)
}

// claimBudget bounds the lock-claimed batches of all types that hold a
// database connection at once (txbox.ClaimLock: from the claim until the
// finish commits). Without it a slow destination lets the lock claims take
// every connection of the pool, each waiting idle in its transaction for
// an acknowledgement, and everything else (heartbeats, recovery, health
// checks, lease-mode types) waits behind them. With it the claims queue
// here, and the connections outside the budget stay free. A nil
// claimBudget is no bound.
type claimBudget struct {
	// slots holds one token per batch holding a connection; nil: no
	// bound.
	slots chan struct{}
	// waiting counts the claims waiting for a slot.
	waiting atomic.Int64
	// need is the most batches the lock-mode pollers started so far can
	// hold at once (the sum of their in-flight); warnedAt is the need of
	// the last warning that it exceeds the budget.
	mu       sync.Mutex
	need     int
	warnedAt int
}

func newClaimBudget(size int) *claimBudget {
	b := &claimBudget{}
	if size > 0 {
		b.slots = make(chan struct{}, size)
	}
	return b
}

// acquire takes a slot, waiting while the budget is used up; it returns
// ctx's error when ctx ends first.
func (b *claimBudget) acquire(ctx context.Context) error {
	if b == nil || b.slots == nil {
		return nil
	}
	select {
	case b.slots <- struct{}{}:
		return nil
	default:
	}
	b.waiting.Add(1)
	defer b.waiting.Add(-1)
	select {
	case b.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// release gives back a slot taken by acquire.
func (b *claimBudget) release() {
	if b != nil && b.slots != nil {
		<-b.slots
	}
}

// added records a lock-mode poller that may hold inFlight batches.
func (b *claimBudget) added(inFlight int) {
	if b == nil || b.slots == nil {
		return
	}
	b.mu.Lock()
	b.need += inFlight
	b.mu.Unlock()
}

// warnIfShort warns when the lock-mode pollers started so far can hold
// more batches than the budget lets through, and more than when it last
// warned: their claims will queue, and the log line says how large
// database.max-conns must be for them not to. The relay calls it at
// start, after the configured types' pollers started, and after
// discovery or a wake-up started more.
func (b *claimBudget) warnIfShort(log *slog.Logger) {
	if b == nil || b.slots == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.need <= cap(b.slots) || b.need <= b.warnedAt {
		return
	}
	b.warnedAt = b.need
	log.Warn("the lock-mode types can hold more batches than the connection pool leaves them; their claims will queue (raise database.max-conns, or lower in-flight)",
		slog.Int("lock_batches", b.need), slog.Int("lock_budget", cap(b.slots)),
		slog.Int("max_conns_needed", b.need+LockReserve))
}

// LockClaimHealth is the state of the lock claims' budget (Config.LockBudget).
type LockClaimHealth struct {
	// Budget is the most lock-claimed batches that may hold a connection
	// at once; 0 is no bound.
	Budget int
	// Held is how many hold one now.
	Held int
	// Waiting is how many claims wait for the budget.
	Waiting int
}

func (b *claimBudget) health() LockClaimHealth {
	return LockClaimHealth{Budget: cap(b.slots), Held: len(b.slots), Waiting: int(b.waiting.Load())}
}
