// Package misuse hands typed publishers what they cannot use. It must not
// compile: TestTxPublisherMisuseDoesNotCompile builds it and checks that
// the compiler refuses each call below (testdata is outside ./...).
package misuse

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/store/postgres"
)

func misuse(ctx context.Context, d *postgres.Driver, pool *pgxpool.Pool, db *sql.DB, ptx pgx.Tx, stx *sql.Tx) {
	pgxPub, _ := outbox.NewTxPublisher(d.Pgx(), outbox.Config{})
	sqlPub, _ := outbox.NewTxPublisher(d.SQL(), outbox.Config{})
	ormPub, _ := outbox.NewTxPublisher(d.ORM(), outbox.Config{})

	// What each accepts compiles.
	pgxPub.Publish(ctx, ptx)
	sqlPub.Publish(ctx, stx)
	ormPub.Publish(ctx, stx)
	outbox.PublishResultTx(ctx, pgxPub, ptx, "t", "", func(context.Context) (int, error) { return 1, nil })

	// What each refuses does not.
	pgxPub.Publish(ctx, pool)                                                                               // MISUSE pool-as-pgx-tx
	pgxPub.Publish(ctx, stx)                                                                                // MISUSE sql-tx-as-pgx-tx
	sqlPub.Publish(ctx, ptx)                                                                                // MISUSE pgx-tx-as-sql-tx
	sqlPub.Publish(ctx, db)                                                                                 // MISUSE db-as-sql-tx
	ormPub.Publish(ctx, db)                                                                                 // MISUSE db-as-orm-tx
	ormPub.PublishJSON(ctx, ptx, "t", "", 1)                                                                // MISUSE pgx-tx-as-orm-tx
	outbox.PublishResultTx(ctx, sqlPub, ptx, "t", "", func(context.Context) (int, error) { return 1, nil }) // MISUSE result-pgx-tx-as-sql-tx
}
