package inboxtest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/store"
)

// countingStore counts the transactions an Inbox opens on the real store,
// which shows whether a delivery reached the table or was answered by the
// cache.
type countingStore struct {
	Store
	begins atomic.Int64
}

func (c *countingStore) InboxBegin(ctx context.Context) (store.InboxTx, error) {
	c.begins.Add(1)
	return c.Store.InboxBegin(ctx)
}

// NewCache returns a cache with the given TTL for one test, isolated from
// every other test, and a function that empties it (nil when the cache
// cannot be emptied from outside).
type NewCache func(t *testing.T, ttl time.Duration) (c inbox.Cache, flush func())

// ExerciseCache checks the cache contract through the real inbox and store:
// a hit answers Duplicate without touching the table, a miss goes to the
// table, entries are written only after a commit, entries are namespaced by
// consumer, a cache TTL above the inbox TTL is refused, and emptying the
// cache in the middle of a run of redeliveries costs lookups, never a
// second effect.
func ExerciseCache(t *testing.T, h Harness, newCache NewCache) {
	e := &cacheEnv{inboxEnv: newInboxEnv(t, h), newCache: newCache}
	t.Run("HitSkipsTable", func(t *testing.T) { t.Parallel(); testHitSkipsTable(t, e) })
	t.Run("MissGoesToTable", func(t *testing.T) { t.Parallel(); testMissGoesToTable(t, e) })
	t.Run("NotWrittenOnFailure", func(t *testing.T) { t.Parallel(); testNotWrittenOnFailure(t, e) })
	t.Run("TTLAboveInboxTTLRefused", func(t *testing.T) { t.Parallel(); testTTLAboveInboxTTLRefused(t, e) })
	t.Run("FlushMidRun", func(t *testing.T) { t.Parallel(); testFlushMidRun(t, e) })
}

// cacheEnv is what the cache contract's subtests share: the store suite's
// namespace and store (isolated from each other by consumer name) and the
// cache under test.
type cacheEnv struct {
	*inboxEnv
	newCache NewCache
}

func testHitSkipsTable(t *testing.T, e *cacheEnv) {
	c, _ := e.newCache(t, time.Hour)
	cs := &countingStore{Store: e.st}
	const consumer = "cache-hit"
	in, err := inbox.New(cs, inbox.Config{Consumer: consumer, Cache: c})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := txbox.NewID()
	if hit, err := c.Contains(ctx, consumer, id); err != nil || hit {
		t.Fatalf("fresh cache Contains = %v, %v", hit, err)
	}
	if r, err := in.Handle(ctx, inbox.Message{ID: id}, e.handler(consumer)); err != nil || r != inbox.Processed {
		t.Fatalf("Handle = %v, %v", r, err)
	}
	if hit, err := c.Contains(ctx, consumer, id); err != nil || !hit {
		t.Fatalf("after commit Contains = %v, %v; want a hit", hit, err)
	}
	before := cs.begins.Load()
	if r, err := in.Handle(ctx, inbox.Message{ID: id}, e.handler(consumer)); err != nil || r != inbox.Duplicate {
		t.Fatalf("redelivery = %v, %v; want duplicate", r, err)
	}
	if got := cs.begins.Load() - before; got != 0 {
		t.Errorf("a cache hit opened %d transactions, want 0", got)
	}
	// Another consumer's entry is not this consumer's.
	if hit, err := c.Contains(ctx, consumer+"-other", id); err != nil || hit {
		t.Errorf("other consumer Contains = %v, %v; want a miss", hit, err)
	}
}

func testMissGoesToTable(t *testing.T, e *cacheEnv) {
	c, _ := e.newCache(t, time.Hour)
	cs := &countingStore{Store: e.st}
	const consumer = "cache-miss"
	ctx := context.Background()
	id := txbox.NewID()
	// Processed through an inbox without the cache: the cache does not
	// know it, so the table must answer.
	plain, err := inbox.New(e.st, inbox.Config{Consumer: consumer})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := plain.Handle(ctx, inbox.Message{ID: id}, e.handler(consumer)); err != nil || r != inbox.Processed {
		t.Fatal(r, err)
	}
	in, err := inbox.New(cs, inbox.Config{Consumer: consumer, Cache: c})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := in.Handle(ctx, inbox.Message{ID: id}, e.handler(consumer)); err != nil || r != inbox.Duplicate {
		t.Fatalf("miss = %v, %v; want duplicate from the table", r, err)
	}
	if got := cs.begins.Load(); got != 1 {
		t.Errorf("a miss opened %d transactions, want 1", got)
	}
	// The table's answer was remembered.
	if hit, _ := c.Contains(ctx, consumer, id); !hit {
		t.Error("the table's duplicate was not written to the cache")
	}
	e.expectEffects(t, consumer, map[txbox.ID]int{id: 1})
}

func testNotWrittenOnFailure(t *testing.T, e *cacheEnv) {
	c, _ := e.newCache(t, time.Hour)
	const consumer = "cache-fail"
	in, err := inbox.New(e.st, inbox.Config{Consumer: consumer, Cache: c})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := txbox.NewID()
	r, err := in.Handle(ctx, inbox.Message{ID: id}, func(context.Context, any, inbox.Message) error { return errBoom })
	if r != inbox.Failed || !errors.Is(err, errBoom) {
		t.Fatalf("Handle = %v, %v", r, err)
	}
	if hit, err := c.Contains(ctx, consumer, id); err != nil || hit {
		t.Errorf("after a failed handler Contains = %v, %v; want a miss", hit, err)
	}
	if r, err := in.Handle(ctx, inbox.Message{ID: id}, e.handler(consumer)); err != nil || r != inbox.Processed {
		t.Errorf("redelivery = %v, %v; want processed", r, err)
	}
}

func testTTLAboveInboxTTLRefused(t *testing.T, e *cacheEnv) {
	c, _ := e.newCache(t, 2*time.Hour)
	_, err := inbox.New(e.st, inbox.Config{Consumer: "cache-ttl", Cache: c, TTL: time.Hour})
	var te *inbox.CacheTTLError
	if !errors.As(err, &te) || te.CacheTTL != 2*time.Hour || te.InboxTTL != time.Hour {
		t.Fatalf("New = %v; want a *CacheTTLError(2h > 1h)", err)
	}
	if _, err := inbox.New(e.st, inbox.Config{Consumer: "cache-ttl", Cache: c, TTL: 2 * time.Hour}); err != nil {
		t.Errorf("equal TTLs: %v", err)
	}
}

func testFlushMidRun(t *testing.T, e *cacheEnv) {
	c, flush := e.newCache(t, time.Hour)
	if flush == nil {
		t.Fatal("NewCache must return a flush function")
	}
	const consumer = "cache-flush"
	in, err := inbox.New(e.st, inbox.Config{Consumer: consumer, Cache: c})
	if err != nil {
		t.Fatal(err)
	}
	const n, rounds, workers = 60, 4, 4
	all := newIDs(n)
	var processed atomic.Int64
	var done atomic.Int64
	flushed := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				for i := range all {
					id := all[(i+w*7)%n]
					res, err := in.Handle(context.Background(), inbox.Message{ID: id}, e.handler(consumer))
					if err != nil {
						t.Errorf("Handle: %v", err)
						return
					}
					if res == inbox.Processed {
						processed.Add(1)
					}
					if done.Add(1) == workers*rounds*n/2 {
						once.Do(func() { flush(); close(flushed) })
					}
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-flushed:
	default:
		t.Fatal("the cache was never flushed mid-run")
	}
	e.expectOnceEach(t, consumer, all, processed.Load())
}
