package outbox_test

import (
	"context"
	"fmt"

	"github.com/txbox/txbox/outbox"
)

// NewTxPublisher fixes the transaction type from the store: sqlite's SQL()
// takes *sql.Tx, so passing d.DB() (a *sql.DB, which would autocommit)
// does not compile instead of failing at run time. postgres.Driver has
// Pgx() for pgx.Tx, and every dialect ORM() for ORM transactions.
func ExampleNewTxPublisher() {
	d, cleanup := sqliteStore()
	defer cleanup()
	ctx := context.Background()

	pub, err := outbox.NewTxPublisher(d.SQL(), outbox.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	tx, _ := d.DB().BeginTx(ctx, nil)
	defer tx.Rollback()
	// pub.Publish(ctx, d.DB(), …) is a compile error.
	if _, err := pub.PublishJSON(ctx, tx, "order-created", "order-1", map[string]int{"id": 1}); err != nil {
		fmt.Println(err)
		return
	}
	_ = tx.Commit()
	fmt.Println(pending(d))
	// Output:
	// [order-created order-1 {"id":1}]
}
