// Package storeharness is the former home of txbox's own store test
// set-up, now internal/storeharness.
//
// Deprecated: it was only ever the set-up of txbox's own tests, tied to
// their services, and moved under internal/; this package goes in the
// next release. A dialect or a cache outside this module runs the public
// suites (store/storetest, inbox/inboxtest) with a storetest.Harness or
// inboxtest.Harness of its own. Its *Inbox functions return an
// inboxtest.Harness, the former storetest.InboxHarness, which moved with
// the inbox suite (docs/upgrading.md).
package storeharness

import (
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox/inboxtest"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/store/mysql"
	"github.com/txbox/txbox/store/postgres"
	"github.com/txbox/txbox/store/sqlite"
	"github.com/txbox/txbox/store/storetest"
)

// Publisher is what PostgresPublish publishes through.
//
// Deprecated: internal, see the package comment.
type Publisher = storeharness.Publisher

// QueryCounts returns query's (event id, count) rows as a map.
//
// Deprecated: internal, see the package comment.
func QueryCounts(t testing.TB, db *sql.DB, query string, args ...any) map[txbox.ID]int {
	t.Helper()
	return storeharness.QueryCounts(t, db, query, args...)
}

// CloseShared closes the admin handles shared by the test process.
//
// Deprecated: internal, see the package comment.
func CloseShared() { storeharness.CloseShared() }

// MySQLAdmin returns a shared handle on the local MariaDB server.
//
// Deprecated: internal, see the package comment.
func MySQLAdmin(t testing.TB) *sql.DB {
	t.Helper()
	return storeharness.MySQLAdmin(t)
}

// MySQLDatabase creates a fresh database, dropped when t ends.
//
// Deprecated: internal, see the package comment.
func MySQLDatabase(t testing.TB) (name, dsn string) {
	t.Helper()
	return storeharness.MySQLDatabase(t)
}

// NoDeadlocks fails t when d retried a deadlock.
//
// Deprecated: internal, see the package comment.
func NoDeadlocks(t testing.TB, d *mysql.Driver) {
	t.Helper()
	storeharness.NoDeadlocks(t, d)
}

// MySQL is the outbox suite's harness for MariaDB.
//
// Deprecated: internal, see the package comment.
func MySQL() storetest.Harness { return storeharness.MySQL() }

// MySQLInbox is the inbox suite's harness for MariaDB.
//
// Deprecated: internal, see the package comment.
func MySQLInbox() inboxtest.Harness { return storeharness.MySQLInbox() }

// PostgresAdmin returns a shared handle on the local PostgreSQL.
//
// Deprecated: internal, see the package comment.
func PostgresAdmin(t testing.TB) *sql.DB {
	t.Helper()
	return storeharness.PostgresAdmin(t)
}

// PostgresPool opens a pgx pool of at most maxConns connections.
//
// Deprecated: internal, see the package comment.
func PostgresPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	return storeharness.PostgresPool(t, maxConns)
}

// PostgresSchema creates a fresh schema, dropped when t ends.
//
// Deprecated: internal, see the package comment.
func PostgresSchema(t testing.TB) string {
	t.Helper()
	return storeharness.PostgresSchema(t)
}

// PostgresDriver returns a migrated driver on a fresh schema.
//
// Deprecated: internal, see the package comment.
func PostgresDriver(t testing.TB) *postgres.Driver {
	t.Helper()
	return storeharness.PostgresDriver(t)
}

// Postgres is the outbox suite's harness for PostgreSQL.
//
// Deprecated: internal, see the package comment.
func Postgres() storetest.Harness { return storeharness.Postgres() }

// PostgresInbox is the inbox suite's harness for PostgreSQL.
//
// Deprecated: internal, see the package comment.
func PostgresInbox() inboxtest.Harness { return storeharness.PostgresInbox() }

// PostgresPublish publishes evs through pub in one committed transaction.
//
// Deprecated: internal, see the package comment.
func PostgresPublish(t testing.TB, d *postgres.Driver, pub Publisher, evs ...txbox.Event) {
	t.Helper()
	storeharness.PostgresPublish(t, d, pub, evs...)
}

// PostgresWaitHorizon waits until the rows inserted so far are below the
// ordered claim's commit horizon.
//
// Deprecated: internal, see the package comment.
func PostgresWaitHorizon(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	storeharness.PostgresWaitHorizon(t, pool)
}

// PostgresWaitFence is the former name of PostgresWaitHorizon.
//
// Deprecated: internal, see the package comment; use PostgresWaitHorizon.
func PostgresWaitFence(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	storeharness.PostgresWaitHorizon(t, pool)
}

// SQLite is the outbox suite's harness for SQLite.
//
// Deprecated: internal, see the package comment.
func SQLite() storetest.Harness { return storeharness.SQLite() }

// SQLiteDriver returns a migrated driver on a database file in t's
// temporary directory.
//
// Deprecated: internal, see the package comment.
func SQLiteDriver(t testing.TB) *sqlite.Driver {
	t.Helper()
	return storeharness.SQLiteDriver(t)
}

// SQLiteInbox is the inbox suite's harness for SQLite.
//
// Deprecated: internal, see the package comment.
func SQLiteInbox() inboxtest.Harness { return storeharness.SQLiteInbox() }
