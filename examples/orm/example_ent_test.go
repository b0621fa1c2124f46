package orm_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/txbox/txbox/examples/orm/ent"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/store"
)

// entSetup opens the generated ent client on e's database, creates its
// table and returns a publisher typed for store.ExecTx, which the
// generated *ent.Tx is (sql/execquery feature).
func entSetup(e *env) (*ent.Client, *outbox.TxPublisher[store.ExecTx]) {
	client := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, e.db)))
	must(client.Schema.Create(e.ctx))
	pub, err := outbox.NewTxPublisher(e.store.ORM(), outbox.Config{})
	must(err)
	return client, pub
}

// createEntOrder writes an order and its event through tx.
func createEntOrder(ctx context.Context, tx *ent.Tx, pub *outbox.TxPublisher[store.ExecTx], customer string) error {
	o, err := tx.Order.Create().SetCustomer(customer).SetTotalCents(4990).Save(ctx)
	if err != nil {
		return err
	}
	_, err = pub.PublishJSON(ctx, tx, "order-created", customer, map[string]any{"id": o.ID, "customer": o.Customer})
	return err
}

// Publish through the generated *ent.Tx itself.
func Example_ent() {
	e := open()
	defer e.close()
	client, pub := entSetup(e)

	tx, err := client.Tx(e.ctx)
	must(err)
	must(createEntOrder(e.ctx, tx, pub, "c-1"))
	must(tx.Commit())
	fmt.Println("committed:", e.count("orders", "customer = 'c-1'"), e.events("order-created", "c-1"))

	tx, err = client.Tx(e.ctx)
	must(err)
	must(createEntOrder(e.ctx, tx, pub, "c-2"))
	must(tx.Rollback())
	fmt.Println("rolled back:", e.count("orders", "customer = 'c-2'"), e.events("order-created", "c-2"))
	// Output:
	// committed: 1 1
	// rolled back: 0 0
}

// ent has no nested transactions (its documented behaviour): Tx on a
// transactional client is ent.ErrTxStarted, and the open transaction is
// unharmed and still carries its events to the commit.
func TestEntNoNestedTransaction(t *testing.T) {
	t.Parallel()
	e := open()
	defer e.close()
	client, pub := entSetup(e)
	tx, err := client.Tx(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := createEntOrder(e.ctx, tx, pub, "outer"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Client().Tx(e.ctx); !errors.Is(err, ent.ErrTxStarted) {
		t.Fatalf("a nested ent transaction: %v, want ent.ErrTxStarted", err)
	}
	if err := createEntOrder(e.ctx, tx, pub, "after"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	e.expect(t, "orders", map[string]int{"outer": 1, "after": 1})
}
