package postgres_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// BenchmarkDrain measures the store's claim + finish loop draining a
// backlog, against a bare claim-and-delete SQL loop on the same table, with
// and without another session pinning the xmin horizon (a REPEATABLE READ
// transaction left open, which keeps vacuum and index-entry killing from
// removing the dead versions every claim leaves behind).
func BenchmarkDrain(b *testing.B) {
	const batch = 200
	// TXBOX_DRAIN_BACKLOG overrides the backlog size (default 20,000).
	backlog := 20_000
	if v, err := strconv.Atoi(os.Getenv("TXBOX_DRAIN_BACKLOG")); err == nil && v > 0 {
		backlog = v
	}
	ctx := context.Background()
	for _, pinned := range []bool{false, true} {
		for _, lookback := range []time.Duration{-1, postgres.DefaultClaimLookback} {
			b.Run(fmt.Sprintf("pinned=%v/lookback=%v", pinned, lookback), func(b *testing.B) {
				d := benchDriver(b, false, func(c *postgres.Config) { c.ClaimLookback = lookback })
				ob := pgx.Identifier{d.Tables().Schema, d.Tables().Outbox}.Sanitize()
				fill := fmt.Sprintf(`INSERT INTO %s (event_type, payload) SELECT 'drain', '\x00'::bytea FROM generate_series(1, %d); ANALYZE %s`, ob, backlog, ob)
				bare := `DELETE FROM ` + ob + ` WHERE id IN (SELECT id FROM ` + ob + ` WHERE status = 'PENDING' AND event_type = 'drain' AND due_at <= now() ORDER BY due_at, id LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING id, payload`
				// drain fills the backlog (untimed), pins the horizon if asked,
				// and times one full drain by step.
				drain := func(step func() int) time.Duration {
					if _, err := d.Pool().Exec(ctx, fill, pgx.QueryExecModeSimpleProtocol); err != nil {
						b.Fatal(err)
					}
					if pinned {
						pin, err := d.Pool().BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
						if err != nil {
							b.Fatal(err)
						}
						if _, err := pin.Exec(ctx, "SELECT 1"); err != nil {
							b.Fatal(err)
						}
						defer pin.Rollback(ctx)
					}
					start := time.Now()
					for n := 0; n < backlog; {
						got := step()
						if got == 0 {
							b.Fatalf("drained %d of %d", n, backlog)
						}
						n += got
					}
					return time.Since(start)
				}
				bareStep := func() int {
					tag, err := d.Pool().Exec(ctx, bare, batch)
					if err != nil {
						b.Fatal(err)
					}
					return int(tag.RowsAffected())
				}
				txboxStep := func() int { return drainOnce(ctx, b, d, batch) }
				steps := []func() int{bareStep, txboxStep}
				times := make([][]float64, len(steps))
				i := 0
				for b.Loop() {
					for k := range steps {
						j := (i + k) % len(steps)
						times[j] = append(times[j], float64(drain(steps[j])))
					}
					i++
				}
				for j, name := range []string{"bare", "txbox"} {
					b.ReportMetric(float64(backlog)/(median(times[j])/1e9), name+"-events/s")
				}
			})
		}
	}
}

func drainOnce(ctx context.Context, b *testing.B, d *postgres.Driver, batch int) int {
	rows, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "drain", Limit: batch, LeaseDuration: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	items := make([]store.OutboxFinishItem, len(rows))
	for i, r := range rows {
		items[i] = store.OutboxFinishItem{ID: r.ID, LeaseToken: r.LeaseToken, Outcome: store.OutcomeAcked}
	}
	if len(items) > 0 {
		res, err := d.OutboxFinish(ctx, &store.OutboxFinishParams{Items: items, DeleteAcked: true})
		if err != nil {
			b.Fatal(err)
		}
		if res.Finished != len(items) {
			b.Fatalf("finished %d of %d", res.Finished, len(items))
		}
	}
	return len(rows)
}

// BenchmarkDrainBacklogSize drains the first 10,000 events of a backlog of
// 10,000 and of a much larger one (200,000; 1,000,000 with
// TXBOX_DRAIN_BIG=1) with the store's claim + finish loop, interleaved,
// and reports the rate at the large backlog as a fraction of the rate at
// the small one (target in docs/benchmarks.md: within 20%).
func BenchmarkDrainBacklogSize(b *testing.B) {
	const drained, batch = 10_000, 200
	big := 200_000
	if os.Getenv("TXBOX_DRAIN_BIG") != "" {
		big = 1_000_000
	}
	ctx := context.Background()
	small := benchDriver(b, false)
	large := benchDriver(b, false)
	fill := func(d *postgres.Driver, n int) {
		ob := pgx.Identifier{d.Tables().Schema, d.Tables().Outbox}.Sanitize()
		q := fmt.Sprintf(`TRUNCATE %[1]s; INSERT INTO %[1]s (event_type, payload) SELECT 'drain', '\x00'::bytea FROM generate_series(1, %[2]d)`, ob, n)
		if _, err := d.Pool().Exec(ctx, q, pgx.QueryExecModeSimpleProtocol); err != nil {
			b.Fatal(err)
		}
		if _, err := d.Pool().Exec(ctx, `VACUUM ANALYZE `+ob, pgx.QueryExecModeSimpleProtocol); err != nil {
			b.Fatal(err)
		}
	}
	drain := func(d *postgres.Driver) time.Duration {
		start := time.Now()
		for n := 0; n < drained; {
			got := drainOnce(ctx, b, d, batch)
			if got == 0 {
				b.Fatalf("drained %d of %d", n, drained)
			}
			n += got
		}
		return time.Since(start)
	}
	var ts, tl []float64
	for b.Loop() {
		b.StopTimer()
		fill(small, drained)
		fill(large, big)
		b.StartTimer()
		ts = append(ts, float64(drain(small)))
		tl = append(tl, float64(drain(large)))
	}
	b.ReportMetric(drained/(median(ts)/1e9), "small-events/s")
	b.ReportMetric(drained/(median(tl)/1e9), "large-events/s")
	b.ReportMetric(median(ts)/median(tl), "large/small-rate")
	b.ReportMetric(float64(big), "large-backlog")
}
