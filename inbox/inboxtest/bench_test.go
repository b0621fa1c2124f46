package inboxtest_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/inbox/rediscache"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store/postgres"
)

// benchStream returns n message ids of which about dupPct% repeat an
// earlier id, as redeliveries do.
func benchStream(n, dupPct int) []txbox.ID {
	out := make([]txbox.ID, n)
	for i := range out {
		if i > 10 && rand.IntN(100) < dupPct {
			out[i] = out[rand.IntN(i)]
		} else {
			out[i] = txbox.NewID()
		}
	}
	return out
}

// BenchmarkConsumePostgres measures messages/s through the transactional
// consumer on PostgreSQL against the same handler (one INSERT in its own
// transaction) without the inbox, with no cache, the LRU and Redis, with
// 10% duplicate deliveries (and 50% from 8 goroutines, where a cache has
// something to save), sequentially and from 8 goroutines. Compare
// the msgs/s of the variants of one run; see docs/benchmarks/inbox.md.
func BenchmarkConsumePostgres(b *testing.B) {
	ns, st := storeharness.PostgresInbox().Setup(b)
	d := st.(*postgres.Driver)
	effect := `INSERT INTO ` + pgx.Identifier{ns, "inbox_effect"}.Sanitize() + ` (consumer, event_id) VALUES ($1, $2)`
	rc := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr})
	b.Cleanup(func() { _ = rc.Close() })

	handler := func(consumer string) inbox.Handler {
		return inbox.Typed(func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
			_, err := tx.Exec(ctx, effect, consumer, m.ID.String())
			return err
		})
	}
	type variant struct {
		name string
		run  func(ctx context.Context, id txbox.ID) error
	}
	mkInbox := func(cache func() inbox.Cache) func(ctx context.Context, id txbox.ID) error {
		consumer := testenv.UniqueName("bench_")
		var c inbox.Cache
		if cache != nil {
			c = cache()
		}
		in, err := inbox.New(d, inbox.Config{Consumer: consumer, Cache: c})
		if err != nil {
			b.Fatal(err)
		}
		h := handler(consumer)
		return func(ctx context.Context, id txbox.ID) error {
			_, err := in.Handle(ctx, inbox.Message{ID: id}, h)
			return err
		}
	}
	variants := []variant{
		{"bare", func(ctx context.Context, id txbox.ID) error {
			tx, err := d.Pool().Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, effect, "bare", id.String()); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}},
		{"inbox", mkInbox(nil)},
		{"inbox+lru", mkInbox(func() inbox.Cache {
			c, _ := inbox.NewLRU(0, time.Hour)
			return c
		})},
		{"inbox+redis", mkInbox(func() inbox.Cache {
			c, err := rediscache.New(rc, rediscache.Config{Namespace: testenv.UniqueName("txboxbench:")})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _, _ = c.Purge(context.Background()) })
			return c
		})},
	}
	// The variants run interleaved in chunks, so that the load other
	// processes put on the shared machine hits them alike; the ratios to
	// "bare" are the figures to compare.
	const chunk = 50
	for _, bc := range []struct{ par, dupPct int }{{1, 10}, {8, 10}, {8, 50}} {
		par := bc.par
		b.Run(fmt.Sprintf("interleaved/goroutines=%d/dup=%d%%", par, bc.dupPct), func(b *testing.B) {
			streams := make([][]txbox.ID, len(variants))
			for i := range streams {
				streams[i] = benchStream(b.N, bc.dupPct)
			}
			elapsed := make([]time.Duration, len(variants))
			ctx := context.Background()
			b.ResetTimer()
			for off := 0; off < b.N; off += chunk {
				end := min(off+chunk, b.N)
				for vi, v := range variants {
					start := time.Now()
					var next atomic.Int64
					next.Store(int64(off))
					var wg sync.WaitGroup
					for g := 0; g < par; g++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for {
								i := int(next.Add(1) - 1)
								if i >= end {
									return
								}
								if err := v.run(ctx, streams[vi][i]); err != nil {
									b.Error(err)
									return
								}
							}
						}()
					}
					wg.Wait()
					elapsed[vi] += time.Since(start)
				}
			}
			for vi, v := range variants {
				rate := float64(b.N) / elapsed[vi].Seconds()
				b.ReportMetric(rate, v.name+"-msgs/s")
				if vi > 0 {
					b.ReportMetric(elapsed[0].Seconds()/elapsed[vi].Seconds(), v.name+"/bare")
				}
			}
		})
	}
}
