package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/store/postgres"
)

// publishChunks is how many rounds the publish pairs are grouped into:
// each round's figure is the median of its pairs.
const publishChunks = 5

// batch is the size of the publish scenario's batch (against COPY).
const batch = 100

func (r *runner) scenarioPublish(ctx context.Context, s *Scenario) error {
	s.Title = "publish overhead"
	s.Measures = "In this process, on one pool: `outbox.Publisher.Publish` of one event in a transaction against a bare " +
		"`INSERT` of the same row in the same transaction shape, and a batch of 100 against `COPY` of 100 rows. " +
		"Each operation pair runs back to back, alternating which goes first; a round's figure is the median of its pairs. " +
		"Default settings: NOTIFY on, synchronous_commit as the server has it."
	s.Conditions = map[string]string{"pairs per comparison": strconv.Itoa(r.o.PublishOps), "rounds": strconv.Itoa(publishChunks)}
	schema, err := r.db.newSchema(ctx)
	if err != nil {
		return err
	}
	defer r.db.drop(schema)
	ops, closePool, err := r.publishOps(ctx, schema)
	defer closePool()
	if err != nil {
		return err
	}
	r.p.begin("publish: one event vs bare INSERT")
	if err := r.pairedOps(ctx, s, "bare INSERT", "Publish one", 1, ops.bareOne, ops.txboxOne); err != nil {
		return err
	}
	r.p.begin("publish: batch of 100 vs COPY")
	if err := r.pairedOps(ctx, s, "COPY 100", "Publish 100", batch, ops.bareCopy, ops.txboxBatch); err != nil {
		return err
	}
	// Time ratio for one event (rate of bare / rate of txbox), rate ratio
	// for the batch.
	s.addRatio("Publish one / bare INSERT (time)", "Publish one", "bare INSERT", s.rates("bare INSERT"), s.rates("Publish one"), false,
		"≤ 1.1×", func(x float64) bool { return x <= 1.1 })
	s.addRatio("Publish 100 / COPY 100 (rate)", "Publish 100", "COPY 100", s.rates("Publish 100"), s.rates("COPY 100"), true,
		"≥ 0.8", func(x float64) bool { return x >= 0.8 })
	return nil
}

// pairedOps runs base and txb o.PublishOps times each, in pairs that
// alternate which goes first, and records one Measurement per round and variant
// whose Rate is perOp / median time.
func (r *runner) pairedOps(ctx context.Context, s *Scenario, baseName, txbName string, perOp int, base, txb func() (time.Duration, error)) error {
	// Warm both statement caches outside the timing.
	if _, err := base(); err != nil {
		return fmt.Errorf("%s: %w", baseName, err)
	}
	if _, err := txb(); err != nil {
		return fmt.Errorf("%s: %w", txbName, err)
	}
	per := max(r.o.PublishOps/publishChunks, 1)
	for round := 1; round <= publishChunks; round++ {
		var tb, tt []float64
		for i := range per {
			first, second := base, txb
			if i%2 == 1 {
				first, second = txb, base
			}
			d1, err := first()
			if err != nil {
				return err
			}
			d2, err := second()
			if err != nil {
				return err
			}
			if i%2 == 1 {
				d1, d2 = d2, d1
			}
			tb = append(tb, d1.Seconds())
			tt = append(tt, d2.Seconds())
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		r.p.count(int64(round), publishChunks)
		mb, mt := median(tb), median(tt)
		s.Runs = append(s.Runs,
			Measurement{Variant: baseName, Round: round, Events: per * perOp, Seconds: sum(tb), Rate: float64(perOp) / mb,
				Extra: map[string]float64{"median_ms": mb * 1000}},
			Measurement{Variant: txbName, Round: round, Events: per * perOp, Seconds: sum(tt), Rate: float64(perOp) / mt,
				Extra: map[string]float64{"median_ms": mt * 1000}})
	}
	return nil
}

func sum(xs []float64) float64 {
	t := 0.0
	for _, x := range xs {
		t += x
	}
	return t
}

// publishFuncs are the four operations of the publish scenario, each
// timing one transaction.
type publishFuncs struct {
	bareOne, txboxOne, bareCopy, txboxBatch func() (time.Duration, error)
}

// publishOps migrates schema and returns the operations on a pool of two
// connections. closePool closes it; call it even on error.
func (r *runner) publishOps(ctx context.Context, schema string) (ops publishFuncs, closePool func(), err error) {
	closeIt := func() {}
	cfg, err := pgxpool.ParseConfig(r.o.DSN)
	if err != nil {
		return ops, closeIt, err
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return ops, closeIt, err
	}
	closeIt = pool.Close
	d, err := postgres.New(pool, postgres.Config{Schema: schema})
	if err != nil {
		return ops, closeIt, err
	}
	if err := d.Migrate(ctx); err != nil {
		return ops, closeIt, err
	}
	pub, err := outbox.NewPublisher(d, outbox.Config{})
	if err != nil {
		return ops, closeIt, err
	}
	ev := txbox.Event{Type: "order-created", Key: "order-42", Payload: []byte(benchPayload),
		Headers: map[string]string{"content-type": "application/json"}}
	const headers = `{"content-type":"application/json"}`
	table := pgx.Identifier{schema, "txbox_outbox"}
	insert := `INSERT INTO ` + table.Sanitize() + ` (id, event_type, event_key, payload, headers) VALUES ($1, $2, $3, $4, $5)`
	inTx := func(fn func(tx pgx.Tx) error) (time.Duration, error) {
		start := time.Now()
		tx, err := pool.Begin(ctx)
		if err != nil {
			return 0, err
		}
		if err := fn(tx); err != nil {
			_ = tx.Rollback(ctx)
			return 0, err
		}
		err = tx.Commit(ctx)
		return time.Since(start), err
	}
	ops.bareOne = func() (time.Duration, error) {
		return inTx(func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, insert, [16]byte(txbox.NewID()), ev.Type, ev.Key, ev.Payload, headers)
			return err
		})
	}
	ops.txboxOne = func() (time.Duration, error) {
		return inTx(func(tx pgx.Tx) error { _, err := pub.Publish(ctx, tx, ev); return err })
	}
	evs := make([]txbox.Event, batch)
	for i := range evs {
		evs[i] = ev
	}
	rows := make([][]any, batch)
	cols := []string{"id", "event_type", "event_key", "payload", "headers"}
	ops.bareCopy = func() (time.Duration, error) {
		// Building the rows is part of COPY's cost as it is of Publish's.
		start := time.Now()
		for i := range rows {
			rows[i] = []any{[16]byte(txbox.NewID()), ev.Type, ev.Key, ev.Payload, headers}
		}
		el := time.Since(start)
		d, err := inTx(func(tx pgx.Tx) error { _, err := tx.CopyFrom(ctx, table, cols, pgx.CopyFromRows(rows)); return err })
		return el + d, err
	}
	ops.txboxBatch = func() (time.Duration, error) {
		return inTx(func(tx pgx.Tx) error { _, err := pub.Publish(ctx, tx, evs...); return err })
	}

	return ops, closeIt, nil
}
