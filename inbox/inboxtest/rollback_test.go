package inboxtest_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store/postgres"
)

type cacheHits struct {
	inbox.NopHook
	hits atomic.Int64
}

func (h *cacheHits) OnCache(e inbox.CacheEvent) {
	if e.Hit {
		h.hits.Add(1)
	}
}

// TestDuplicateIsARollback backs what docs/inbox.md says about the cost of
// duplicates in transactional mode: each one is a database transaction
// that rolls back (BEGIN, an insert that inserts nothing, ROLLBACK), which
// pg_stat_database counts in xact_rollback; a cache hit costs none. It
// runs in a database of its own so that no other test's transactions are
// counted.
func TestDuplicateIsARollback(t *testing.T) {
	t.Parallel()
	admin := storeharness.PostgresAdmin(t)
	db, dbURL := testenv.PostgresDatabase(t, admin)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	// One connection: pg_stat_force_next_flush then applies to the backend
	// that ran the inbox's transactions, so the counts show without
	// waiting for the statistics' idle flush (10 s).
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st, err := postgres.New(pool, postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	rollbacks := func() int64 {
		if _, err := pool.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := admin.QueryRow("SELECT xact_rollback FROM pg_stat_database WHERE datname = $1", db).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	ok := func(ctx context.Context, tx any, m inbox.Message) error {
		_, err := tx.(pgx.Tx).Exec(ctx, "SELECT 1")
		return err
	}
	const dups = 200
	duplicates := func(in *inbox.Inbox, id txbox.ID, n int) {
		for i := 0; i < n; i++ {
			if r, err := in.Handle(ctx, inbox.Message{ID: id}, ok); r != inbox.Duplicate || err != nil {
				t.Fatalf("Handle = %v, %v; want duplicate", r, err)
			}
		}
	}

	// Without a cache: one rollback per duplicate.
	plain, err := inbox.New(st, inbox.Config{Consumer: "plain"})
	if err != nil {
		t.Fatal(err)
	}
	id := txbox.NewID()
	if _, err := plain.Handle(ctx, inbox.Message{ID: id}, ok); err != nil {
		t.Fatal(err)
	}
	base := rollbacks()
	duplicates(plain, id, dups)
	testenv.WaitFor(t, 60*time.Second, "xact_rollback to count every duplicate", func() bool { return rollbacks()-base >= dups })
	t.Logf("%d duplicates without a cache: xact_rollback +%d", dups, rollbacks()-base)

	// With a cache: the duplicates are cache hits, no transaction. 50
	// uncached duplicates afterwards show when the statistics are in.
	hook := &cacheHits{}
	lru, err := inbox.NewLRU(100, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cached, err := inbox.New(st, inbox.Config{Consumer: "cached", Cache: lru, Hook: hook})
	if err != nil {
		t.Fatal(err)
	}
	id2 := txbox.NewID()
	if _, err := cached.Handle(ctx, inbox.Message{ID: id2}, ok); err != nil {
		t.Fatal(err)
	}
	base = rollbacks()
	duplicates(cached, id2, dups)
	const marker = 50
	duplicates(plain, id, marker)
	testenv.WaitFor(t, 60*time.Second, "xact_rollback to count the marker duplicates", func() bool { return rollbacks()-base >= marker })
	got := rollbacks() - base
	t.Logf("%d cached duplicates + %d uncached: xact_rollback +%d, %d cache hits", dups, marker, got, hook.hits.Load())
	if hook.hits.Load() != dups || got >= marker+dups/2 {
		t.Errorf("xact_rollback +%d with %d cache hits; want about %d (the uncached duplicates only)", got, hook.hits.Load(), marker)
	}
}
