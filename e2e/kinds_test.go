package e2e

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/mysql"
	"github.com/txbox/txbox/store/postgres"
	"github.com/txbox/txbox/store/sqlite"
)

func init() {
	storeKinds = append(storeKinds, mysqlKind, sqliteKind)
	lockKinds = append(lockKinds, lockKind(mysqlKind))
}

// sqlTxPublish publishes through a database/sql transaction, as both
// MySQL and SQLite producers do.
func sqlTxPublish(db func(store.Driver) *sql.DB) func(context.Context, store.Driver, []*txbox.Event, bool) error {
	return func(ctx context.Context, d store.Driver, evs []*txbox.Event, commit bool) error {
		tx, err := db(d).BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: evs}); err != nil {
			return err
		}
		if !commit {
			return tx.Rollback()
		}
		return tx.Commit()
	}
}

// mysqlKind runs on the local MariaDB; the namespace is the DSN of a
// fresh database (no password on the test server, so nothing secret).
var mysqlKind = storeKind{
	name:  "mysql",
	claim: txbox.ClaimLease,
	newNamespace: func(t testing.TB) string {
		t.Helper()
		_, dsn := testenv.MySQLDatabase(t, mysql.OpenDB, "")
		d, closeFn, err := openMySQL(dsn, 2)
		if err != nil {
			t.Fatal(err)
		}
		defer closeFn()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := d.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		return dsn
	},
	open:    openMySQL,
	publish: sqlTxPublish(func(d store.Driver) *sql.DB { return d.(*mysql.Driver).DB() }),
}

func openMySQL(dsn string, conns int) (store.Driver, func(), error) {
	d, err := mysql.Open(dsn, mysql.Config{})
	if err != nil {
		return nil, nil, err
	}
	d.DB().SetMaxOpenConns(conns)
	return d, func() { _ = d.Close() }, nil
}

// sqliteKind runs on a database file in the test's temporary directory;
// child relay processes open the same file.
var sqliteKind = storeKind{
	name:  "sqlite",
	claim: txbox.ClaimLease,
	newNamespace: func(t testing.TB) string {
		t.Helper()
		path := filepath.Join(t.TempDir(), "e2e.db")
		d, closeFn, err := openSQLite(path, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer closeFn()
		if err := d.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		return path
	},
	open:         openSQLite,
	publish:      sqlTxPublish(func(d store.Driver) *sql.DB { return d.(*sqlite.Driver).DB() }),
	scale:        5,
	serialWriter: true,
}

func openSQLite(path string, conns int) (store.Driver, func(), error) {
	d, err := sqlite.Open(path, sqlite.Config{MaxOpenConns: conns})
	if err != nil {
		return nil, nil, err
	}
	return d, func() { _ = d.Close() }, nil
}

// openClaimTransactions counts the lock claims in flight on d's
// namespace: transactions that hold row locks and wait, idle, for their
// batch's send. A relay stopped while one is open was stopped mid-batch.
func openClaimTransactions(t testing.TB, d store.Driver, ns string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	var err error
	switch d := d.(type) {
	case *postgres.Driver:
		err = d.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND state = 'idle in transaction' AND backend_xid IS NOT NULL`, appName(ns)).Scan(&n)
	case *mysql.Driver:
		err = d.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.innodb_trx t
			JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id
			WHERE p.db = DATABASE() AND t.trx_rows_locked > 0 AND p.command = 'Sleep'`).Scan(&n)
	default:
		t.Fatalf("no lock claim to count on %T", d)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}
