package postgres_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// Open the store on a pool you own, migrate, publish in a transaction, and
// claim and finish the row the way a relay does.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testenv.PostgresURL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	schema := testenv.UniqueName("example_")
	defer pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")

	d, err := postgres.New(pool, postgres.Config{Schema: schema})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := d.Migrate(ctx); err != nil { // safe to run from every instance
		fmt.Println(err)
		return
	}

	pub, _ := outbox.NewPublisher(d, outbox.Config{})
	tx, _ := pool.Begin(ctx)
	if _, err := pub.Publish(ctx, tx, txbox.Event{Type: "user-signed-up", Key: "u-1", Payload: []byte(`{"id":"u-1"}`)}); err != nil {
		fmt.Println(err)
		return
	}
	_ = tx.Commit(ctx)

	rows, _ := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "user-signed-up", Limit: 100, LeaseDuration: time.Minute})
	items := make([]store.OutboxFinishItem, len(rows))
	for i, r := range rows {
		fmt.Printf("claimed %s %s attempts=%d\n", r.EventType, r.Payload, r.Attempts)
		items[i] = store.OutboxFinishItem{ID: r.ID, LeaseToken: r.LeaseToken, Outcome: store.OutcomeAcked}
	}
	res, _ := d.OutboxFinish(ctx, &store.OutboxFinishParams{Items: items})
	fmt.Printf("finished=%d fenced=%d\n", res.Finished, res.Fenced)
	// Output:
	// claimed user-signed-up {"id":"u-1"} attempts=0
	// finished=1 fenced=0
}
