package orm_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/store"
)

// sqlxSetup wraps e's database in sqlx, creates the table and returns a
// publisher typed for store.ExecTx, which *sqlx.Tx is.
func sqlxSetup(e *env) (*sqlx.DB, *outbox.TxPublisher[store.ExecTx]) {
	xdb := sqlx.NewDb(e.db, "pgx")
	xdb.MustExecContext(e.ctx, `CREATE TABLE sqlx_orders (id bigserial PRIMARY KEY, customer text NOT NULL, total_cents bigint NOT NULL)`)
	pub, err := outbox.NewTxPublisher(e.store.ORM(), outbox.Config{})
	must(err)
	return xdb, pub
}

// createSqlxOrder writes an order and its event through tx.
func createSqlxOrder(ctx context.Context, tx *sqlx.Tx, pub *outbox.TxPublisher[store.ExecTx], customer string) error {
	var id int64
	if err := tx.QueryRowxContext(ctx, `INSERT INTO sqlx_orders (customer, total_cents) VALUES ($1, $2) RETURNING id`, customer, 4990).Scan(&id); err != nil {
		return err
	}
	_, err := pub.PublishJSON(ctx, tx, "order-created", customer, map[string]any{"id": id, "customer": customer})
	return err
}

// Publish through a *sqlx.Tx: it is a store.ExecTx, so the typed
// publisher takes it as it is (and refuses a *sqlx.DB at compile time).
func Example_sqlx() {
	e := open()
	defer e.close()
	xdb, pub := sqlxSetup(e)

	tx := xdb.MustBeginTx(e.ctx, nil)
	must(createSqlxOrder(e.ctx, tx, pub, "c-1"))
	must(tx.Commit())
	fmt.Println("committed:", e.count("sqlx_orders", "customer = 'c-1'"), e.events("order-created", "c-1"))

	tx = xdb.MustBeginTx(e.ctx, nil)
	must(createSqlxOrder(e.ctx, tx, pub, "c-2"))
	must(tx.Rollback())
	fmt.Println("rolled back:", e.count("sqlx_orders", "customer = 'c-2'"), e.events("order-created", "c-2"))
	// Output:
	// committed: 1 1
	// rolled back: 0 0
}

// sqlx has no nested transactions; a SAVEPOINT run by hand takes the
// events published after it when the transaction rolls back to it.
func TestSqlxSavepoint(t *testing.T) {
	t.Parallel()
	e := open()
	defer e.close()
	xdb, pub := sqlxSetup(e)
	tx := xdb.MustBeginTx(e.ctx, nil)
	defer func() { _ = tx.Rollback() }()
	steps := []func() error{
		func() error { return createSqlxOrder(e.ctx, tx, pub, "outer") },
		func() error { _, err := tx.ExecContext(e.ctx, "SAVEPOINT sp_inner"); return err },
		func() error { return createSqlxOrder(e.ctx, tx, pub, "inner") },
		func() error { _, err := tx.ExecContext(e.ctx, "ROLLBACK TO SAVEPOINT sp_inner"); return err },
		func() error { return createSqlxOrder(e.ctx, tx, pub, "after") },
		tx.Commit,
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	e.expect(t, "sqlx_orders", map[string]int{"outer": 1, "inner": 0, "after": 1})
}
