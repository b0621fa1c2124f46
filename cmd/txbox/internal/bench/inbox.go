package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/store/postgres"
)

func (r *runner) scenarioInbox(ctx context.Context, s *Scenario) error {
	s.Title = "inbox cost"
	s.Measures = "In this process, one goroutine: a handler that writes one effect row in a transaction, run through " +
		"`inbox.Handle` (transactional mode, no cache) against the same handler without the inbox " +
		"(`BEGIN; INSERT effect; COMMIT`, duplicates simply processed again). The two run interleaved in chunks of 50 messages; " +
		"each round's rate is over its share of the messages."
	s.Conditions = map[string]string{"messages per variant": strconv.Itoa(r.o.InboxMessages),
		"duplicates": fmt.Sprintf("%.0f %%", r.o.InboxDups*100), "rounds": strconv.Itoa(publishChunks)}
	schema, err := r.db.newSchema(ctx)
	if err != nil {
		return err
	}
	defer r.db.drop(schema)
	bare, withInbox, closePool, err := r.inboxHandlers(ctx, schema)
	if err != nil {
		return err
	}
	defer closePool()
	stream := func() []txbox.ID {
		out := make([]txbox.ID, r.o.InboxMessages)
		for i := range out {
			if i > 10 && rand.Float64() < r.o.InboxDups {
				out[i] = out[rand.IntN(i)]
			} else {
				out[i] = txbox.NewID()
			}
		}
		return out
	}
	r.p.begin("inbox: interleaved")
	variants := []struct {
		name string
		ids  []txbox.ID
		fn   func(txbox.ID) error
	}{{"handler without inbox", stream(), bare}, {"handler with inbox", stream(), withInbox}}
	const chunk = 50
	per := (r.o.InboxMessages + publishChunks - 1) / publishChunks
	for round := 1; round <= publishChunks; round++ {
		lo, hi := (round-1)*per, min(round*per, r.o.InboxMessages)
		el := make([]time.Duration, len(variants))
		for off := lo; off < hi; off += chunk {
			for vi, v := range variants {
				start := time.Now()
				for _, id := range v.ids[off:min(off+chunk, hi)] {
					if err := v.fn(id); err != nil {
						return fmt.Errorf("%s: %w", v.name, err)
					}
				}
				el[vi] += time.Since(start)
			}
			r.p.count(int64(off+chunk), int64(r.o.InboxMessages))
		}
		for vi, v := range variants {
			s.Runs = append(s.Runs, Measurement{Variant: v.name, Round: round, Events: hi - lo, Seconds: el[vi].Seconds(),
				Rate: float64(hi-lo) / el[vi].Seconds()})
		}
	}
	s.addRatio("with inbox / without (rate)", variants[1].name, variants[0].name, s.rates(variants[1].name), s.rates(variants[0].name), true, "", nil)
	return nil
}

// inboxHandlers returns the two handlers compared: one effect row in its
// own transaction, and the same through inbox.Handle. closePool closes
// their pool; call it even on error.
func (r *runner) inboxHandlers(ctx context.Context, schema string) (bare, withInbox func(txbox.ID) error, closePool func(), err error) {
	closeIt := func() {}
	cfg, err := pgxpool.ParseConfig(r.o.DSN)
	if err != nil {
		return nil, nil, closeIt, err
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, closeIt, err
	}
	closeIt = pool.Close
	d, err := postgres.New(pool, postgres.Config{Schema: schema})
	if err != nil {
		return nil, nil, closeIt, err
	}
	if err := d.Migrate(ctx); err != nil {
		return nil, nil, closeIt, err
	}
	effectTable := pgx.Identifier{schema, "inbox_effect"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+effectTable+" (consumer text NOT NULL, event_id text NOT NULL)"); err != nil {
		return nil, nil, closeIt, err
	}
	effect := "INSERT INTO " + effectTable + " (consumer, event_id) VALUES ($1, $2)"
	in, err := inbox.New(d, inbox.Config{Consumer: "bench"})
	if err != nil {
		return nil, nil, closeIt, err
	}
	h := inbox.Typed(func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		_, err := tx.Exec(ctx, effect, "bench", m.ID.String())
		return err
	})
	bare = func(id txbox.ID) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, effect, "bare", id.String()); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	withInbox = func(id txbox.ID) error {
		_, err := in.Handle(ctx, inbox.Message{ID: id}, h)
		return err
	}
	return bare, withInbox, closeIt, nil
}
