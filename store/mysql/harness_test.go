package mysql_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/mysql"
	"github.com/txbox/txbox/store/storetest"
)

var (
	adminOnce sync.Once
	adminDB   *sql.DB
	adminErr  error
)

// admin is a shared handle for listing tables.
func admin(t testing.TB) *sql.DB {
	t.Helper()
	testenv.RequireTCP(t, "MariaDB", "127.0.0.1:3306")
	adminOnce.Do(func() {
		adminDB, adminErr = sql.Open("mysql", testenv.MySQLDSN)
		if adminErr == nil {
			adminDB.SetMaxOpenConns(4)
			adminErr = adminDB.Ping()
		}
	})
	if adminErr != nil {
		t.Fatalf("open mysql: %v", adminErr)
	}
	return adminDB
}

type sqlTx struct{ tx *sql.Tx }

func (s sqlTx) Native() any     { return s.tx }
func (s sqlTx) Commit() error   { return s.tx.Commit() }
func (s sqlTx) Rollback() error { return s.tx.Rollback() }

// harness opens drivers with Open on a DSN without a database, naming the
// test's database through Config.Schema, so every query goes through the
// schema-qualified table names.
func harness() storetest.Harness {
	return storetest.Harness{
		NewNamespace: func(t *testing.T) string {
			name, _ := testenv.MySQLDatabase(t, func(dsn string) (*sql.DB, error) { return sql.Open("mysql", dsn) }, "")
			return name
		},
		Open: func(t *testing.T, ns, prefix string) (store.Driver, error) {
			d, err := mysql.Open(testenv.MySQLDSN, mysql.Config{Schema: ns, TablePrefix: prefix})
			if err != nil {
				return nil, err
			}
			d.DB().SetMaxOpenConns(10)
			t.Cleanup(func() {
				// Every conformance scenario, the concurrent ones included,
				// must run without a single deadlock.
				if n := d.DeadlockRetries(); n != 0 {
					t.Errorf("%d deadlocks were retried", n)
				}
				_ = d.Close()
			})
			return d, nil
		},
		Begin: func(t *testing.T, d store.Driver) storetest.Tx {
			tx, err := d.(*mysql.Driver).DB().BeginTx(context.Background(), nil)
			if err != nil {
				t.Fatalf("begin: %v", err)
			}
			t.Cleanup(func() { _ = tx.Rollback() })
			return sqlTx{tx}
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
			rows, err := admin(t).Query("SELECT table_name FROM information_schema.tables WHERE table_schema = ? ORDER BY table_name", ns)
			if err != nil {
				t.Fatalf("list tables: %v", err)
			}
			defer rows.Close()
			var out []string
			for rows.Next() {
				var s string
				if err := rows.Scan(&s); err != nil {
					t.Fatal(err)
				}
				out = append(out, s)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return out
		},
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, harness())
}

// TestConformanceOnPlainPool runs the suite again through New on a plain
// go-sql-driver pool left at the server's REPEATABLE READ default, without
// interpolateParams: the path where the driver sets READ COMMITTED per
// transaction and every statement is prepared.
func TestConformanceOnPlainPool(t *testing.T) {
	t.Parallel()
	h := harness()
	h.Open = func(t *testing.T, ns, prefix string) (store.Driver, error) {
		db, err := sql.Open("mysql", testenv.MySQLDSN+"?parseTime=true")
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(10)
		d, err := mysql.New(db, mysql.Config{Schema: ns, TablePrefix: prefix})
		if err != nil {
			db.Close()
			return nil, err
		}
		t.Cleanup(func() {
			if n := d.DeadlockRetries(); n != 0 {
				t.Errorf("%d deadlocks were retried", n)
			}
			_ = db.Close()
		})
		return d, nil
	}
	storetest.Exercise(t, h)
}
