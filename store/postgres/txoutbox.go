package postgres

import (
	"database/sql"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox/store"
)

// Pgx returns d's outbox for pgx transactions (pgx.Tx, from a pgxpool or a
// pgx.Conn), for outbox.NewTxPublisher: its Publish then takes a pgx.Tx
// and nothing else compiles. This is the fastest way in: events are bound
// as binary arrays.
func (d *Driver) Pgx() store.TxOutbox[pgx.Tx] { return store.NewTxOutbox[pgx.Tx](d) }

// SQL returns d's outbox for *sql.Tx (pgx's stdlib driver, lib/pq), for
// outbox.NewTxPublisher.
func (d *Driver) SQL() store.TxOutbox[*sql.Tx] { return store.NewTxOutbox[*sql.Tx](d) }

// ORM returns d's outbox for the transactions of ORMs built on
// database/sql (store.ExecTx: sqlx.Tx, bun.Tx, an ent Tx with
// ExecContext, a *sql.Tx too), for outbox.NewTxPublisher.
func (d *Driver) ORM() store.TxOutbox[store.ExecTx] { return store.NewTxOutbox[store.ExecTx](d) }
