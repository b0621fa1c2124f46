package sqlite_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/sqlite"
)

// Open a database file, migrate it, publish an event in a business
// transaction, then claim and acknowledge it as the relay does.
func Example() {
	dir, err := os.MkdirTemp("", "txbox-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	ctx := context.Background()
	d, err := sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	// The business transaction: your own writes, then the event.
	tx, err := d.DB().BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	ev := &txbox.Event{ID: txbox.NewID(), Type: "order-created", Key: "order-42", Payload: []byte(`{"id":42}`)}
	if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{ev}}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	// The relay's side.
	rows, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "order-created", Limit: 100, LeaseDuration: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range rows {
		fmt.Printf("%s %s %s same id: %v\n", r.EventType, r.Key, r.Payload, r.ID == ev.ID)
	}
	res, err := d.OutboxFinish(ctx, &store.OutboxFinishParams{Items: []store.OutboxFinishItem{
		{ID: rows[0].ID, LeaseToken: rows[0].LeaseToken, Outcome: store.OutcomeAcked},
	}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("finished:", res.Finished, "fenced:", res.Fenced)
	// Output:
	// order-created order-42 {"id":42} same id: true
	// finished: 1 fenced: 0
}

// A producer in another language needs only plain SQL: every column but
// the event type and payload has a default, the id included.
func Example_plainSQL() {
	dir, err := os.MkdirTemp("", "txbox-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	d, err := sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	if _, err := d.DB().ExecContext(ctx, `INSERT INTO txbox_outbox (event_type, payload) VALUES ('order-created', '{"id":42}')`); err != nil {
		log.Fatal(err)
	}
	rows, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "order-created", Limit: 1, LeaseDuration: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(rows[0].EventType, string(rows[0].Payload), "UUID version", rows[0].ID.Version())
	// Output:
	// order-created {"id":42} UUID version VERSION_7
}
