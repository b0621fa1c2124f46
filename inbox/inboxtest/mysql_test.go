package inboxtest_test

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
)

// mysqlAdmins holds one pool per test database (keyed by DSN) for the
// harness's own statements.
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

func mysqlHarness() inboxtest.Harness {
	return inboxtest.Harness{
		Name: "mysql",
		NewNamespace: func(t testing.TB) string {
			_, dsn := testenv.MySQLDatabase(t, func(dsn string) (*sql.DB, error) { return sql.Open("mysql", dsn) }, "")
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
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := d.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			return d
		},
		CreateEffectTable: func(t testing.TB, ns string) {
			if _, err := mysqlAdmin(t, ns).Exec("CREATE TABLE inbox_effect (consumer VARCHAR(200) NOT NULL, event_id CHAR(36) NOT NULL, KEY (consumer)) ENGINE=InnoDB"); err != nil {
				t.Fatal(err)
			}
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
			rows, err := mysqlAdmin(t, ns).Query("SELECT event_id, count(*) FROM inbox_effect WHERE consumer = ? GROUP BY event_id", consumer)
			if err != nil {
				t.Fatal(err)
			}
			return scanCounts(t, rows)
		},
		CountInbox: func(t testing.TB, ns, consumer string) int {
			var n int
			if err := mysqlAdmin(t, ns).QueryRow("SELECT count(*) FROM "+mysqlInboxTable+" WHERE consumer_name = ?", consumer).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		},
		AgeInbox: func(t testing.TB, ns, consumer string, id txbox.ID, age time.Duration) {
			res, err := mysqlAdmin(t, ns).Exec("UPDATE "+mysqlInboxTable+" SET processed_at = UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND WHERE consumer_name = ? AND event_id = ?",
				age.Microseconds(), consumer, id.String())
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				t.Fatalf("age inbox row %s: %d rows", id, n)
			}
		},
	}
}

func TestMySQL(t *testing.T) {
	t.Parallel()
	inboxtest.Run(t, mysqlHarness())
}
