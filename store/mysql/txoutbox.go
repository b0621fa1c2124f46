package mysql

import (
	"database/sql"

	"github.com/txbox/txbox/store"
)

// SQL returns d's outbox for *sql.Tx, for outbox.NewTxPublisher: its
// Publish then takes a *sql.Tx and nothing else compiles.
func (d *Driver) SQL() store.TxOutbox[*sql.Tx] { return store.NewTxOutbox[*sql.Tx](d) }

// ORM returns d's outbox for the transactions of ORMs built on
// database/sql (store.ExecTx: sqlx.Tx, bun.Tx, an ent Tx with
// ExecContext, a *sql.Tx too), for outbox.NewTxPublisher.
func (d *Driver) ORM() store.TxOutbox[store.ExecTx] { return store.NewTxOutbox[store.ExecTx](d) }
