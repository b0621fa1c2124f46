package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BenchmarkOutboxStats compares OutboxStats, which also reports the due
// and scheduled rows, the lag (oldest due age), the next due time, the
// retrying rows, their most attempts and a last error, with the
// statement it replaced (counts and the oldest pending age only), paired
// on one backlog: 100,000 PENDING rows over 10 types, a tenth of them
// retrying with a back-off ahead, plus 5,000 IN_PROCESS and 1,000 FAILED.
// Figures: docs/benchmarks/postgres.md.
func BenchmarkOutboxStats(b *testing.B) {
	d := benchDriver(b, false)
	ctx := context.Background()
	tb := d.Tables()
	outbox := pgx.Identifier{tb.Schema, tb.Outbox}.Sanitize()
	if _, err := d.Pool().Exec(ctx, `INSERT INTO `+outbox+` (event_type, payload, status, attempts, due_at, last_error, lease_until, lease_token)
		SELECT 'type-' || (g % 10),
		       '\x7b7d'::bytea,
		       CASE WHEN g % 100 = 0 THEN 'FAILED' WHEN g % 20 = 1 THEN 'IN_PROCESS' ELSE 'PENDING' END,
		       CASE WHEN g % 10 = 3 THEN 2 ELSE 0 END,
		       CASE WHEN g % 10 = 3 THEN now() + interval '1 minute' ELSE now() - interval '1 second' END,
		       CASE WHEN g % 10 = 3 THEN 'receiver said 503' END,
		       CASE WHEN g % 20 = 1 THEN now() + interval '1 hour' END,
		       CASE WHEN g % 20 = 1 THEN gen_random_uuid() END
		FROM generate_series(1, 106000) AS g`); err != nil {
		b.Fatal(err)
	}
	if _, err := d.Pool().Exec(ctx, `ANALYZE `+outbox); err != nil {
		b.Fatal(err)
	}
	before := `
	SELECT event_type, 'P', count(*), COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8
	FROM ` + outbox + ` WHERE status = 'PENDING' GROUP BY event_type
	UNION ALL
	SELECT event_type, 'I', count(*), 0 FROM ` + outbox + ` WHERE status = 'IN_PROCESS' GROUP BY event_type
	UNION ALL
	SELECT event_type, 'F', count(*), 0 FROM ` + outbox + ` WHERE status = 'FAILED' GROUP BY event_type`
	base := func() time.Duration {
		start := time.Now()
		rows, err := d.Pool().Query(ctx, before)
		if err != nil {
			b.Fatal(err)
		}
		for rows.Next() {
		}
		if rows.Err() != nil {
			b.Fatal(rows.Err())
		}
		return time.Since(start)
	}
	txb := func() time.Duration {
		start := time.Now()
		stats, err := d.OutboxStats(ctx)
		if err != nil || len(stats) != 10 || stats[3].Retrying == 0 || stats[3].LastError == "" {
			b.Fatalf("stats: %v, %+v", err, stats)
		}
		return time.Since(start)
	}
	paired(b, 1, base, txb)
}
