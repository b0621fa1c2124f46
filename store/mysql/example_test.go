package mysql_test

import (
	"context"
	"log"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/store/mysql"
)

// Publish an event in the same transaction as the business write. The
// driver's pool (from Open) runs at READ COMMITTED; the business
// transaction may use it or any other pool on the same database.
func Example() {
	ctx := context.Background()
	d, err := mysql.Open("app:secret@tcp(127.0.0.1:3306)/shop?parseTime=true", mysql.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	pub, err := outbox.NewPublisher(d, outbox.Config{})
	if err != nil {
		log.Fatal(err)
	}

	tx, err := d.DB().BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "UPDATE orders SET status = 'paid' WHERE id = ?", 42); err != nil {
		log.Fatal(err)
	}
	if _, err := pub.Publish(ctx, tx, txbox.Event{Type: "order-paid", Key: "order-42", Payload: []byte(`{"id":42}`)}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
}

// Share your own pool with the driver. Without SessionReadCommitted the
// driver sets READ COMMITTED on each of its own transactions.
func ExampleNew() {
	db, err := mysql.OpenDB("app:secret@tcp(127.0.0.1:3306)/shop")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	d, err := mysql.New(db, mysql.Config{TablePrefix: "shop_", SessionReadCommitted: true})
	if err != nil {
		log.Fatal(err)
	}
	_ = d // give d to relay.Config.Store and outbox.NewPublisher
}

// Print the schema for a migration tool instead of calling Migrate.
func ExampleRenderMigrations() {
	files, err := mysql.RenderMigrations(mysql.Config{TablePrefix: "shop_"})
	if err != nil {
		log.Fatal(err)
	}
	for _, sql := range files {
		_ = sql // write to your goose / golang-migrate directory
	}
}
