// Package ent is the ent client generated from ./schema, committed so
// that nothing is generated when the examples are built or tested. After
// changing the schema, regenerate from examples/orm with
//
//	go run entgo.io/ent/cmd/ent@v0.14.5 generate --feature sql/execquery ./ent/schema
//
// The sql/execquery feature gives the client and its Tx an ExecContext
// method, which is what makes an ent Tx a store.ExecTx that
// outbox.NewTxPublisher accepts (docs/orm.md).
package ent
