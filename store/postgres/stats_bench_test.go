package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BenchmarkOutboxInspect compares OutboxInspect, the per-type figures of
// txbox status, the metrics' backlog gauges and the admin API (due and
// scheduled rows, the lag, the next due time, an attempts histogram, a
// last error), with OutboxStats (counts and the oldest pending age
// only), paired on one backlog: 100,000 PENDING rows over 10 types, a
// tenth of them retrying with a back-off ahead, plus 5,000 IN_PROCESS and
// 1,000 FAILED. Figures: docs/benchmarks/postgres.md.
func BenchmarkOutboxInspect(b *testing.B) {
	d := benchDriver(b, false)
	ctx := context.Background()
	tb := d.Tables()
	outbox := pgx.Identifier{tb.Schema, tb.Outbox}.Sanitize()
	if _, err := d.Pool().Exec(ctx, `INSERT INTO `+outbox+` (event_type, payload, status, attempts, due_at, last_error, lease_until, lease_token)
		SELECT 'type-' || (g % 10),
		       '\x7b7d'::bytea,
		       CASE WHEN g % 100 = 0 THEN 'FAILED' WHEN g % 20 = 1 THEN 'IN_PROCESS' ELSE 'PENDING' END,
		       CASE WHEN g % 10 = 3 THEN 2 ELSE 0 END,
		       CASE WHEN g % 10 = 3 THEN now() + interval '1 hour' ELSE now() - interval '1 second' END,
		       CASE WHEN g % 10 = 3 THEN 'receiver said 503' END,
		       CASE WHEN g % 20 = 1 THEN now() + interval '1 hour' END,
		       CASE WHEN g % 20 = 1 THEN gen_random_uuid() END
		FROM generate_series(1, 106000) AS g`); err != nil {
		b.Fatal(err)
	}
	if _, err := d.Pool().Exec(ctx, `ANALYZE `+outbox); err != nil {
		b.Fatal(err)
	}
	base := func() time.Duration {
		start := time.Now()
		if _, err := d.OutboxStats(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	txb := func() time.Duration {
		start := time.Now()
		types, err := d.OutboxInspect(ctx)
		if err != nil || len(types) != 10 || types[3].Scheduled == 0 || types[3].LastError == "" {
			b.Fatalf("inspect: %v, %+v", err, types)
		}
		return time.Since(start)
	}
	paired(b, 1, base, txb)
}
