package storeharness

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox/inboxtest"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/mysql"
	"github.com/txbox/txbox/store/storetest"
)

var myAdmin sharedDB

// MySQLAdmin returns a shared handle (4 connections) on the local MariaDB
// server, naming no database, for inspecting information_schema.
func MySQLAdmin(t testing.TB) *sql.DB {
	t.Helper()
	testenv.RequireTCP(t, "MariaDB", "127.0.0.1:3306")
	return myAdmin.open(t, "mysql", testenv.MySQLDSN)
}

// MySQLDatabase creates a fresh database, dropped when t ends, and returns
// its name and a DSN that selects it (testenv.MySQLDatabase).
func MySQLDatabase(t testing.TB) (name, dsn string) {
	t.Helper()
	return testenv.MySQLDatabase(t, func(dsn string) (*sql.DB, error) { return sql.Open("mysql", dsn) }, "")
}

// NoDeadlocks fails t when d retried a deadlock: every conformance
// scenario, the concurrent ones included, must run without one.
func NoDeadlocks(t testing.TB, d *mysql.Driver) {
	t.Helper()
	if n := d.DeadlockRetries(); n != 0 {
		t.Errorf("%d deadlocks were retried", n)
	}
}

// MySQL is the outbox suite's harness. It opens drivers with Open on
// a DSN without a database, naming the test's database through
// Config.Schema, so every query goes through the schema-qualified table
// names.
func MySQL() storetest.Harness {
	return storetest.Harness{
		NewNamespace: func(t *testing.T) string {
			name, _ := MySQLDatabase(t)
			return name
		},
		Open: func(t *testing.T, ns, prefix string) (store.Driver, error) {
			d, err := mysql.Open(testenv.MySQLDSN, mysql.Config{Schema: ns, TablePrefix: prefix})
			if err != nil {
				return nil, err
			}
			d.DB().SetMaxOpenConns(10)
			t.Cleanup(func() {
				NoDeadlocks(t, d)
				_ = d.Close()
			})
			return d, nil
		},
		Begin: func(t *testing.T, d store.Driver) storetest.Tx {
			return beginSQL(t, d.(*mysql.Driver).DB())
		},
		OutboxLastError: func(t *testing.T, d store.Driver, id txbox.ID) string {
			md := d.(*mysql.Driver)
			tb := md.Tables()
			var s string
			err := md.DB().QueryRow("SELECT COALESCE(MAX(last_error), '') FROM `"+tb.Schema+"`.`"+tb.Outbox+"` WHERE id = ?", id.String()).Scan(&s)
			if err != nil {
				t.Fatalf("read last_error: %v", err)
			}
			return s
		},
		Tables: func(t *testing.T, ns string) []string {
			return queryStrings(t, MySQLAdmin(t), "SELECT table_name FROM information_schema.tables WHERE table_schema = ? ORDER BY table_name", ns)
		},
	}
}

// mysqlAdmins holds one pool per test database (keyed by DSN) for the
// inbox harness's own statements.
var mysqlAdmins sync.Map // dsn → *sql.DB

func mysqlAdmin(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	if db, ok := mysqlAdmins.Load(dsn); ok {
		return db.(*sql.DB)
	}
	db, err := mysql.OpenDB(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(4)
	if prev, loaded := mysqlAdmins.LoadOrStore(dsn, db); loaded {
		db.Close()
		return prev.(*sql.DB)
	}
	return db
}

const mysqlInboxTable = "`" + store.DefaultTablePrefix + "inbox`"

// MySQLInbox is the inbox suite's harness: a database per namespace (the
// namespace is its DSN) and a pool of 18 per store.
func MySQLInbox() inboxtest.Harness {
	return inboxtest.Harness{
		Name: "mysql",
		NewNamespace: func(t testing.TB) string {
			_, dsn := MySQLDatabase(t)
			// Registered after MySQLDatabase's own cleanup, so this runs
			// first: the pool closes before the database is dropped.
			t.Cleanup(func() {
				if db, ok := mysqlAdmins.LoadAndDelete(dsn); ok {
					db.(*sql.DB).Close()
				}
			})
			return dsn
		},
		Open: func(t testing.TB, ns string) inboxtest.Store {
			d, err := mysql.Open(ns, mysql.Config{})
			if err != nil {
				t.Fatal(err)
			}
			d.DB().SetMaxOpenConns(18)
			t.Cleanup(func() { _ = d.Close() })
			migrate(t, d, 60*time.Second)
			return d
		},
		CreateEffectTable: func(t testing.TB, ns string) {
			execOrFail(t, mysqlAdmin(t, ns), "CREATE TABLE inbox_effect (consumer VARCHAR(200) NOT NULL, event_id CHAR(36) NOT NULL, KEY (consumer)) ENGINE=InnoDB")
		},
		InsertEffect: func(ctx context.Context, tx any, ns, consumer string, id txbox.ID) error {
			stx, err := mysql.SQLTx(tx)
			if err != nil {
				return err
			}
			_, err = stx.ExecContext(ctx, "INSERT INTO inbox_effect (consumer, event_id) VALUES (?, ?)", consumer, id.String())
			return err
		},
		CountEffects: func(t testing.TB, ns, consumer string) map[txbox.ID]int {
			return QueryCounts(t, mysqlAdmin(t, ns), "SELECT event_id, count(*) FROM inbox_effect WHERE consumer = ? GROUP BY event_id", consumer)
		},
		CountInbox: func(t testing.TB, ns, consumer string) int {
			return queryInt(t, mysqlAdmin(t, ns), "SELECT count(*) FROM "+mysqlInboxTable+" WHERE consumer_name = ?", consumer)
		},
		AgeInbox: func(t testing.TB, ns, consumer string, id txbox.ID, age time.Duration) {
			execOne(t, mysqlAdmin(t, ns), "age inbox row "+id.String(),
				"UPDATE "+mysqlInboxTable+" SET processed_at = UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND WHERE consumer_name = ? AND event_id = ?",
				age.Microseconds(), consumer, id.String())
		},
	}
}
