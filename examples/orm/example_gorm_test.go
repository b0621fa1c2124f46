package orm_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	gormpg "gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/txbox/txbox/outbox"
)

// GormOrder is the GORM model of an order.
type GormOrder struct {
	ID         int64
	Customer   string
	TotalCents int64
}

// gormSetup opens GORM on e's database, creates its table and returns
// the publisher. GORM's transaction is a *gorm.DB whose
// Statement.ConnPool is only known at run time to be a transaction, so
// the untyped Publisher takes it.
func gormSetup(e *env) (*gorm.DB, *outbox.Publisher) {
	return gormSetupWith(e, &gorm.Config{Logger: logger.Discard})
}

func gormSetupWith(e *env, cfg *gorm.Config) (*gorm.DB, *outbox.Publisher) {
	gdb, err := gorm.Open(gormpg.New(gormpg.Config{Conn: e.db}), cfg)
	must(err)
	must(gdb.AutoMigrate(&GormOrder{}))
	pub, err := outbox.NewPublisher(e.store, outbox.Config{})
	must(err)
	return gdb, pub
}

// createGormOrder writes an order and its event through tx.
func createGormOrder(ctx context.Context, tx *gorm.DB, pub *outbox.Publisher, customer string) error {
	o := GormOrder{Customer: customer, TotalCents: 4990}
	if err := tx.Create(&o).Error; err != nil {
		return err
	}
	_, err := pub.PublishJSON(ctx, tx.Statement.ConnPool, "order-created", customer, o)
	return err
}

// Publish inside GORM's db.Transaction: the order and its event commit
// together, and roll back together when the function fails.
func Example_gorm() {
	e := open()
	defer e.close()
	gdb, pub := gormSetup(e)

	err := gdb.Transaction(func(tx *gorm.DB) error {
		return createGormOrder(e.ctx, tx, pub, "c-1")
	})
	fmt.Println("committed:", err, e.count("gorm_orders", "customer = 'c-1'"), e.events("order-created", "c-1"))

	err = gdb.Transaction(func(tx *gorm.DB) error {
		if err := createGormOrder(e.ctx, tx, pub, "c-2"); err != nil {
			return err
		}
		return errors.New("out of stock")
	})
	fmt.Println("rolled back:", err, e.count("gorm_orders", "customer = 'c-2'"), e.events("order-created", "c-2"))
	// Output:
	// committed: <nil> 1 1
	// rolled back: out of stock 0 0
}

// A nested tx.Transaction is a SAVEPOINT (GORM's documented behaviour):
// when it fails, its order and its event roll back and the outer
// transaction's commit.
func TestGormNestedTransaction(t *testing.T) {
	t.Parallel()
	e := open()
	defer e.close()
	gdb, pub := gormSetup(e)
	err := gdb.Transaction(func(tx *gorm.DB) error {
		if err := createGormOrder(e.ctx, tx, pub, "outer"); err != nil {
			return err
		}
		inner := tx.Transaction(func(tx2 *gorm.DB) error {
			if err := createGormOrder(e.ctx, tx2, pub, "inner"); err != nil {
				return err
			}
			return errors.New("inner refused")
		})
		if inner == nil {
			t.Error("the inner transaction did not fail")
		}
		return createGormOrder(e.ctx, tx, pub, "after")
	})
	if err != nil {
		t.Fatal(err)
	}
	e.expect(t, "gorm_orders", map[string]int{"outer": 1, "inner": 0, "after": 1})
}

// GORM's manual Begin/Rollback behaves the same way, and the database
// handle outside a transaction is refused rather than autocommitted.
func TestGormManualAndNoTransaction(t *testing.T) {
	t.Parallel()
	e := open()
	defer e.close()
	gdb, pub := gormSetup(e)
	tx := gdb.Begin()
	if err := createGormOrder(e.ctx, tx, pub, "manual"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback().Error; err != nil {
		t.Fatal(err)
	}
	if rows, events := e.count("gorm_orders", "customer = 'manual'"), e.events("order-created", "manual"); rows != 0 || events != 0 {
		t.Fatalf("after Rollback: %d rows, %d events", rows, events)
	}
	if _, err := pub.PublishJSON(e.ctx, gdb.Statement.ConnPool, "order-created", "no-tx", 1); err == nil {
		t.Fatal("publishing through GORM's *sql.DB outside a transaction was accepted")
	}
	if n := e.events("order-created", "no-tx"); n != 0 {
		t.Fatalf("%d events written without a transaction", n)
	}
}

// With PrepareStmt, GORM's ConnPool inside a transaction is its
// prepared-statement wrapper rather than the *sql.Tx; it has ExecContext
// and Commit, so Publish takes it all the same.
func TestGormPreparedStatements(t *testing.T) {
	t.Parallel()
	e := open()
	defer e.close()
	gdb, pub := gormSetupWith(e, &gorm.Config{Logger: logger.Discard, PrepareStmt: true})
	var pool string
	err := gdb.Transaction(func(tx *gorm.DB) error {
		pool = fmt.Sprintf("%T", tx.Statement.ConnPool)
		return createGormOrder(e.ctx, tx, pub, "prepared")
	})
	if err != nil {
		t.Fatalf("%s: %v", pool, err)
	}
	t.Logf("ConnPool in the transaction: %s", pool)
	e.expect(t, "gorm_orders", map[string]int{"prepared": 1})
	err = gdb.Transaction(func(tx *gorm.DB) error {
		if err := createGormOrder(e.ctx, tx, pub, "prepared-rolled-back"); err != nil {
			return err
		}
		return errors.New("refused")
	})
	if err == nil {
		t.Fatal("the transaction did not fail")
	}
	e.expect(t, "gorm_orders", map[string]int{"prepared-rolled-back": 0})
}
