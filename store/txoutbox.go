package store

import (
	"context"
	"database/sql"
)

// TxOutbox is an Outbox whose inserts take one transaction type, TTx, so
// that handing it something that is not such a transaction (a pool, a
// *sql.DB, a pgx.Tx where a *sql.Tx is expected) does not compile, the
// way River's drivers fix their transaction type. Dialect packages return
// one per type they accept (postgres.Driver.Pgx, SQL and ORM; the SQL and
// ORM methods of the mysql and sqlite drivers), and outbox.NewTxPublisher
// takes it. Outbox.OutboxInsert, which takes any, stays for callers whose
// transaction type is only known at run time.
type TxOutbox[TTx any] interface {
	Outbox
	// OutboxInsertTx is Outbox.OutboxInsert with tx of type TTx. A nil
	// TTx is still txbox.ErrNoTransaction, at run time.
	OutboxInsertTx(ctx context.Context, tx TTx, params *OutboxInsertParams) error
}

// ExecTx is the method set of a database/sql-style transaction: *sql.Tx
// and the transactions of ORMs built on database/sql (sqlx.Tx, bun.Tx, an
// ent Tx generated with the sql/execquery feature). The Commit method is
// what tells a transaction from a *sql.DB or a *sql.Conn, which also have
// ExecContext but would autocommit the event on its own: neither
// satisfies ExecTx.
type ExecTx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	Commit() error
}

// NewTxOutbox narrows o to transactions of type TTx. It is for dialect
// packages, each calling it only for the transaction types its
// OutboxInsert accepts; an application takes the result from its
// dialect's methods instead.
func NewTxOutbox[TTx any](o Outbox) TxOutbox[TTx] { return txOutbox[TTx]{o} }

// txOutbox forwards the typed insert to the untyped one, which classifies
// the value as it does for any caller.
type txOutbox[TTx any] struct{ Outbox }

func (o txOutbox[TTx]) OutboxInsertTx(ctx context.Context, tx TTx, params *OutboxInsertParams) error {
	return o.OutboxInsert(ctx, tx, params)
}
