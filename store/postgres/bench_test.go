package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/store/postgres"
)

// The publish benchmarks compare txbox against the bare SQL a hand-written
// outbox would run, in the same transaction shape (begin, write, commit),
// on the same table and connection pool. The machine they run on is shared
// and noisy, so each benchmark is PAIRED: every iteration runs the baseline
// and txbox back to back (alternating which goes first) and reports both
// times and their ratio as metrics, so both see the same load. Figures and
// conditions are in docs/benchmarks/postgres.md.
//
// "fsync" commits with the server's default synchronous_commit=on: the
// realistic cost of a business transaction, dominated by the WAL flush.
// "nofsync" sets synchronous_commit=off for the session, which removes
// the flush and exposes the per-statement overhead txbox adds.

func benchDriver(b *testing.B, syncCommit bool, opts ...func(*postgres.Config)) *postgres.Driver {
	b.Helper()
	testenv.RequireTCP(b, "PostgreSQL", testenv.PostgresAddr)
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 2
	if !syncCommit {
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	cfg2 := postgres.Config{Schema: newSchema(b)}
	for _, o := range opts {
		o(&cfg2)
	}
	d, err := postgres.New(pool, cfg2)
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	return d
}

func benchEvent() txbox.Event {
	return txbox.Event{
		Type:    "order-created",
		Key:     "order-42",
		Payload: []byte(`{"id":42,"customer":"c-7","total":1999,"currency":"EUR"}`),
		Headers: map[string]string{"content-type": "application/json"},
	}
}

const benchHeaders = `{"content-type":"application/json"}`

// inTx runs fn in a transaction, commits it and returns the elapsed time.
func inTx(b *testing.B, d *postgres.Driver, fn func(tx pgx.Tx) error) time.Duration {
	ctx := context.Background()
	start := time.Now()
	tx, err := d.Pool().Begin(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if err := fn(tx); err != nil {
		b.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// paired runs base and txb once per iteration, alternating the order, and
// reports the median time of each and the median of the per-pair ratios
// txb/base. Medians, because the shared machine's load spikes hit single
// iterations hard; pairing, because both halves of a pair see the same
// load.
func paired(b *testing.B, perOp int, base, txb func() time.Duration) {
	// Warm both statement caches outside the timing.
	base()
	txb()
	var tb, tt []float64
	var ratios []float64
	i := 0
	for b.Loop() {
		var db, dt time.Duration
		if i%2 == 0 {
			db = base()
			dt = txb()
		} else {
			dt = txb()
			db = base()
		}
		tb = append(tb, float64(db))
		tt = append(tt, float64(dt))
		ratios = append(ratios, float64(dt)/float64(db))
		i++
	}
	mb, mt := median(tb), median(tt)
	b.ReportMetric(mb, "base-ns/op")
	b.ReportMetric(mt, "txbox-ns/op")
	b.ReportMetric(median(ratios), "txbox/base")
	if perOp > 1 {
		b.ReportMetric(float64(perOp)/(mb/1e9), "base-events/s")
		b.ReportMetric(float64(perOp)/(mt/1e9), "txbox-events/s")
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func BenchmarkPublishOne(b *testing.B) {
	ctx := context.Background()
	ev := benchEvent()
	for _, syncCommit := range []bool{true, false} {
		for _, notify := range []bool{true, false} {
			name := fmt.Sprintf("%s/notify=%v", map[bool]string{true: "fsync", false: "nofsync"}[syncCommit], notify)
			b.Run(name, func(b *testing.B) {
				d := benchDriver(b, syncCommit)
				q := `INSERT INTO ` + d.Tables().Schema + `.txbox_outbox (id, event_type, event_key, payload, headers) VALUES ($1, $2, $3, $4, $5)`
				p, err := outbox.NewPublisher(d, outbox.Config{DisableNotify: !notify})
				if err != nil {
					b.Fatal(err)
				}
				paired(b, 1,
					func() time.Duration {
						return inTx(b, d, func(tx pgx.Tx) error {
							_, err := tx.Exec(ctx, q, txbox.NewID(), ev.Type, ev.Key, ev.Payload, benchHeaders)
							return err
						})
					},
					func() time.Duration {
						return inTx(b, d, func(tx pgx.Tx) error {
							_, err := p.Publish(ctx, tx, ev)
							return err
						})
					})
			})
		}
	}
}

func BenchmarkPublishBatch100(b *testing.B) {
	const n = 100
	ctx := context.Background()
	ev := benchEvent()
	batch := make([]txbox.Event, n)
	for i := range batch {
		batch[i] = ev
	}
	for _, syncCommit := range []bool{true, false} {
		for _, notify := range []bool{true, false} {
			name := fmt.Sprintf("%s/notify=%v", map[bool]string{true: "fsync", false: "nofsync"}[syncCommit], notify)
			b.Run(name, func(b *testing.B) {
				d := benchDriver(b, syncCommit)
				cols := []string{"id", "event_type", "event_key", "payload", "headers"}
				table := pgx.Identifier{d.Tables().Schema, d.Tables().Outbox}
				rows := make([][]any, n)
				p, err := outbox.NewPublisher(d, outbox.Config{DisableNotify: !notify})
				if err != nil {
					b.Fatal(err)
				}
				paired(b, n,
					func() time.Duration {
						// Row building is part of COPY's cost as it is of Publish's.
						start := time.Now()
						for i := range rows {
							rows[i] = []any{txbox.NewID(), ev.Type, ev.Key, ev.Payload, benchHeaders}
						}
						return time.Since(start) + inTx(b, d, func(tx pgx.Tx) error {
							_, err := tx.CopyFrom(ctx, table, cols, pgx.CopyFromRows(rows))
							return err
						})
					},
					func() time.Duration {
						return inTx(b, d, func(tx pgx.Tx) error {
							_, err := p.Publish(ctx, tx, batch...)
							return err
						})
					})
			})
		}
	}
}
