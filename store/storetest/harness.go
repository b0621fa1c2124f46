package storetest

import (
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// Harness adapts one dialect to the outbox suite ([Exercise]). Every
// function must use the real database and isolate each namespace from
// every other.
type Harness struct {
	// NewNamespace creates an isolated, empty namespace (a PostgreSQL
	// schema, a MySQL database, a SQLite file) that is dropped when t ends,
	// and returns a handle Open understands.
	NewNamespace func(t *testing.T) string
	// Open opens a driver on namespace ns with the given table prefix
	// (empty = default). It does not migrate. It returns the driver
	// constructor's error unchanged for an invalid prefix. The driver is
	// closed when t ends.
	Open func(t *testing.T, ns, prefix string) (store.Driver, error)
	// Begin starts a transaction on d's database, of a type d's
	// OutboxInsert accepts.
	Begin func(t *testing.T, d store.Driver) Tx
	// Tables lists the table names in namespace ns, sorted.
	Tables func(t *testing.T, ns string) []string
	// OutboxLastError returns the last_error column of the outbox row id
	// ("" when NULL or when there is no such row): a column the store seam
	// does not read back, which the suite checks after finishes and
	// dead-letter retries.
	OutboxLastError func(t *testing.T, d store.Driver, id txbox.ID) string
	// WaitHorizon, when the dialect has a commit horizon for ordered
	// claims (PostgreSQL), waits until every transaction committed so far
	// is below it, so an ordered claim right after sees its rows. Nil
	// for dialects without one.
	WaitHorizon func(t *testing.T, d store.Driver)
	// WaitFence is the former name of WaitHorizon, used when WaitHorizon
	// is nil.
	//
	// Deprecated: use WaitHorizon.
	WaitFence func(t *testing.T, d store.Driver)
	// SerialWriter is true for dialects with one writer at a time
	// (SQLite): the suite still claims concurrently and checks exclusivity.
	SerialWriter bool
}

// Tx is a transaction opened by Harness.Begin.
type Tx interface {
	// Native is what OutboxInsert takes (pgx.Tx, *sql.Tx).
	Native() any
	Commit() error
	Rollback() error
}
