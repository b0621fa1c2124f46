// Package orm shows txbox's outbox.Publisher inside the transactions of
// four Go ORMs on PostgreSQL: GORM, sqlx, bun and ent. Each example
// writes an order through the ORM and publishes its event through the
// same transaction, so the event exists if and only if the order does;
// the tests check commit, rollback and each ORM's nested or savepoint
// transactions (docs/orm.md).
//
// How each ORM hands over its transaction:
//
//   - GORM: inside db.Transaction, tx.Statement.ConnPool is the
//     database/sql transaction (a *sql.Tx, or a prepared-statement
//     wrapper with ExecContext and Commit); pass it to the untyped
//     Publisher.Publish, which takes either. A nested tx.Transaction is a
//     SAVEPOINT: an event published inside it rolls back with it.
//   - sqlx: *sqlx.Tx is a store.ExecTx; outbox.NewTxPublisher(pg.ORM(), …)
//     takes it as it is. sqlx has no nested transactions; a SAVEPOINT run
//     by hand takes the events published after it when rolled back to.
//   - bun: pass tx.Tx, the *sql.Tx inside bun.Tx, to a publisher from
//     pg.SQL(). bun.Tx itself has ExecContext and Commit, but its
//     ExecContext formats the query with bun's ? placeholders and drops
//     the arguments, so an insert through it fails (loudly: Publish
//     returns the error and nothing is written). tx.RunInTx inside a
//     transaction is a SAVEPOINT, and its events roll back with it.
//   - ent: generate the client with the sql/execquery feature; the
//     generated *ent.Tx then has ExecContext and Commit and is a
//     store.ExecTx for a publisher from pg.ORM(). ent has no nested
//     transactions: Tx on a transactional client is ent.ErrTxStarted.
//
// This is a module of its own (examples/orm/go.mod), so that txbox
// itself gains no ORM dependency; `make test` generates its ent client
// (go generate ./ent), then vets and tests it.
package orm
