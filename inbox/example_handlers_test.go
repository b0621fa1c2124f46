package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/store/sqlite"
)

// exampleDB opens a migrated SQLite store in a temporary directory, with
// the table the examples' handlers write to. The returned function
// closes it and removes the directory.
func exampleDB() (*sqlite.Driver, func()) {
	dir, err := os.MkdirTemp("", "inbox-example")
	if err != nil {
		panic(err)
	}
	st, err := sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Config{})
	if err != nil {
		panic(err)
	}
	if err := st.Migrate(context.Background()); err != nil {
		panic(err)
	}
	if _, err := st.DB().Exec(`CREATE TABLE shipments (order_id TEXT)`); err != nil {
		panic(err)
	}
	return st, func() { _ = st.Close(); _ = os.RemoveAll(dir) }
}

func countShipments(st *sqlite.Driver) int {
	var n int
	if err := st.DB().QueryRow(`SELECT count(*) FROM shipments`).Scan(&n); err != nil {
		panic(err)
	}
	return n
}

// New checks the configuration up front: a bad consumer name, or a cache
// that would remember ids longer than the table keeps them, is a
// *txbox.ConfigError naming the field.
func ExampleNew() {
	st, cleanup := exampleDB()
	defer cleanup()

	in, err := inbox.New(st, inbox.Config{Consumer: "shipping"})
	fmt.Println(in.Consumer(), in.Mode(), in.TTL(), err)

	_, err = inbox.New(st, inbox.Config{})
	fmt.Println(errors.Is(err, txbox.ErrInvalidConfig))
	// Output:
	// shipping transactional 24h0m0s <nil>
	// true
}

// In non-transactional mode the id is committed before the handler runs
// and the handler gets a nil transaction: at-most-once, for effects that
// cannot be rolled back (an e-mail, a call to another service). A handler
// that fails after the commit reports Lost: the redelivery is a duplicate
// and does not run it again.
func ExampleInbox_Handle_nonTransactional() {
	st, cleanup := exampleDB()
	defer cleanup()
	ctx := context.Background()

	in, err := inbox.New(st, inbox.Config{
		Consumer: "mailer",
		Mode:     inbox.NonTransactional,
		Logger:   slog.New(slog.DiscardHandler), // a lost effect is logged at ERROR
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	sent := 0
	mail := func(ctx context.Context, tx any, m inbox.Message) error {
		sent++ // the SMTP call would go here; tx is nil
		return nil
	}
	msg := inbox.Message{ID: txbox.NewID(), Type: "order-paid", Key: "order-42"}
	for range 2 {
		r, err := in.Handle(ctx, msg, mail)
		fmt.Println(r, err, r.Acknowledge())
	}

	failing := inbox.Message{ID: txbox.NewID(), Type: "order-paid", Key: "order-43"}
	r, err := in.Handle(ctx, failing, func(context.Context, any, inbox.Message) error {
		return errors.New("smtp: connection reset")
	})
	fmt.Println(r, r.Acknowledge(), err != nil)
	r, _ = in.Handle(ctx, failing, mail)
	fmt.Println(r, "sent:", sent)
	// Output:
	// processed <nil> true
	// duplicate <nil> true
	// lost true true
	// duplicate sent: 1
}

// HandleBatch records the new ids of a whole batch with one statement and
// runs the handler once, in one transaction, with only the messages not
// seen before (in input order). Repeated ids within the batch count once.
func ExampleInbox_HandleBatch() {
	st, cleanup := exampleDB()
	defer cleanup()
	ctx := context.Background()
	in, err := inbox.New(st, inbox.Config{Consumer: "shipping"})
	if err != nil {
		fmt.Println(err)
		return
	}

	a := inbox.Message{ID: txbox.NewID(), Type: "order-paid", Key: "order-1"}
	b := inbox.Message{ID: txbox.NewID(), Type: "order-paid", Key: "order-2"}
	c := inbox.Message{ID: txbox.NewID(), Type: "order-paid", Key: "order-3"}
	ship := func(ctx context.Context, tx any, msgs []inbox.Message) error {
		for _, m := range msgs {
			fmt.Println("shipping", m.Key)
			if _, err := tx.(*sql.Tx).ExecContext(ctx, `INSERT INTO shipments (order_id) VALUES (?)`, m.Key); err != nil {
				return err
			}
		}
		return nil
	}
	rs, err := in.HandleBatch(ctx, []inbox.Message{a, b, a}, ship)
	fmt.Println(rs, err)
	rs, err = in.HandleBatch(ctx, []inbox.Message{b, c}, ship)
	fmt.Println(rs, err)
	fmt.Println("shipments:", countShipments(st))
	// Output:
	// shipping order-1
	// shipping order-2
	// [processed processed duplicate] <nil>
	// shipping order-3
	// [duplicate processed] <nil>
	// shipments: 3
}

// HandleInTx records the id inside a transaction the caller already runs
// (its own unit of work) and commits nothing: the caller's commit makes
// the effect and the id durable together, its rollback forgets both.
func ExampleInbox_HandleInTx() {
	st, cleanup := exampleDB()
	defer cleanup()
	ctx := context.Background()
	in, err := inbox.New(st, inbox.Config{Consumer: "shipping"})
	if err != nil {
		fmt.Println(err)
		return
	}
	ship := inbox.Typed(func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO shipments (order_id) VALUES (?)`, m.Key)
		return err
	})
	msg := inbox.Message{ID: txbox.NewID(), Type: "order-paid", Key: "order-42"}

	// First try: the caller's unit of work fails later and rolls back.
	tx, _ := st.DB().BeginTx(ctx, nil)
	r, err := in.HandleInTx(ctx, tx, msg, ship)
	fmt.Println(r, err)
	_ = tx.Rollback()

	// The redelivery runs again, and this time the caller commits.
	tx, _ = st.DB().BeginTx(ctx, nil)
	r, err = in.HandleInTx(ctx, tx, msg, ship)
	fmt.Println(r, err)
	_ = tx.Commit()

	tx, _ = st.DB().BeginTx(ctx, nil)
	r, err = in.HandleInTx(ctx, tx, msg, ship)
	fmt.Println(r, err)
	_ = tx.Commit()
	fmt.Println("shipments:", countShipments(st))
	// Output:
	// processed <nil>
	// processed <nil>
	// duplicate <nil>
	// shipments: 1
}

// hits is an inbox Hook that counts the cache's answers.
type hits struct {
	inbox.NopHook
	hit, miss int
}

func (h *hits) OnCache(e inbox.CacheEvent) {
	if e.Hit {
		h.hit++
	} else {
		h.miss++
	}
}

// An in-process LRU in front of the inbox table answers a redelivery
// without a database round trip. It is an optimisation only: a miss falls
// through to the table, which stays the authority. Its TTL may not exceed
// the inbox's; inbox/rediscache shares one cache between instances.
func ExampleNewLRU() {
	st, cleanup := exampleDB()
	defer cleanup()
	ctx := context.Background()

	cache, err := inbox.NewLRU(10_000, time.Hour)
	if err != nil {
		fmt.Println(err)
		return
	}
	h := &hits{}
	in, err := inbox.New(st, inbox.Config{Consumer: "shipping", Cache: cache, Hook: h})
	if err != nil {
		fmt.Println(err)
		return
	}
	msg := inbox.Message{ID: txbox.NewID(), Type: "order-paid", Key: "order-42"}
	for range 3 {
		r, _ := in.Handle(ctx, msg, func(context.Context, any, inbox.Message) error { return nil })
		fmt.Println(r)
	}
	fmt.Println("cache hits:", h.hit, "misses:", h.miss, "entries:", cache.Len())

	tooLong, _ := inbox.NewLRU(0, 30*24*time.Hour)
	_, err = inbox.New(st, inbox.Config{Consumer: "shipping", Cache: tooLong})
	fmt.Println(err != nil)
	// Output:
	// processed
	// duplicate
	// duplicate
	// cache hits: 2 misses: 1 entries: 1
	// true
}

// The Cleaner deletes ids older than the inbox TTL, in bounded batches,
// under a database lease so that one instance of many does the work.
// Start runs it in the background; RunOnce is one round.
func ExampleNewCleaner() {
	st, cleanup := exampleDB()
	defer cleanup()
	ctx := context.Background()
	in, err := inbox.New(st, inbox.Config{Consumer: "shipping", TTL: time.Hour})
	if err != nil {
		fmt.Println(err)
		return
	}
	msg := inbox.Message{ID: txbox.NewID(), Type: "order-paid", Key: "order-42"}
	_, _ = in.Handle(ctx, msg, func(context.Context, any, inbox.Message) error { return nil })
	// Pretend the id was recorded two hours ago.
	if _, err := st.DB().Exec(`UPDATE txbox_inbox SET processed_at = ?`, time.Now().Add(-2*time.Hour).UTC()); err != nil {
		fmt.Println(err)
		return
	}

	c, err := inbox.NewCleaner(st, st, inbox.CleanerConfig{TTL: in.TTL()})
	if err != nil {
		fmt.Println(err)
		return
	}
	deleted, held, err := c.RunOnce(ctx)
	fmt.Println(deleted, held, err)
	r, _ := in.Handle(ctx, msg, func(context.Context, any, inbox.Message) error { return nil })
	fmt.Println(r) // forgotten: past the TTL a redelivery runs again
	// Output:
	// 1 true <nil>
	// processed
}

// Typed gives the handler the store's own transaction type (here
// database/sql's *sql.Tx, as SQLite and MySQL use; pgx.Tx on
// PostgreSQL) instead of an any to assert. A transaction of another type
// is an error matching txbox.ErrNoTransaction, and the handler is not
// called.
func ExampleTyped() {
	st, cleanup := exampleDB()
	defer cleanup()
	in, err := inbox.New(st, inbox.Config{Consumer: "shipping"})
	if err != nil {
		panic(err)
	}
	ship := inbox.Typed(func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO shipments (order_id) VALUES (?)`, m.Key)
		return err
	})
	msg := inbox.Message{ID: txbox.NewID(), Key: "order-7"}
	res, err := in.Handle(context.Background(), msg, ship)
	fmt.Println(res, err, countShipments(st))

	wrong := inbox.Typed(func(context.Context, *os.File, inbox.Message) error { return nil })
	_, err = in.Handle(context.Background(), inbox.Message{ID: txbox.NewID()}, wrong)
	fmt.Println(errors.Is(err, txbox.ErrNoTransaction))
	// Output:
	// processed <nil> 1
	// true
}
