package storeharness

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox/inboxtest"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/sqlite"
	"github.com/txbox/txbox/store/storetest"
)

// SQLite is the outbox suite's harness: every namespace is its own
// database file in a temporary directory that the test removes.
func SQLite() storetest.Harness {
	return storetest.Harness{
		NewNamespace: func(t *testing.T) string {
			return filepath.Join(t.TempDir(), "txbox.db")
		},
		Open: func(t *testing.T, ns, prefix string) (store.Driver, error) {
			d, err := sqlite.Open(ns, sqlite.Config{TablePrefix: prefix})
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { _ = d.Close() })
			return d, nil
		},
		Begin: func(t *testing.T, d store.Driver) storetest.Tx {
			return beginSQL(t, d.(*sqlite.Driver).DB())
		},
		OutboxLastError: func(t *testing.T, d store.Driver, id txbox.ID) string {
			sd := d.(*sqlite.Driver)
			var s string
			err := sd.DB().QueryRow(`SELECT coalesce(max(last_error), '') FROM "`+sd.Tables().Outbox+`" WHERE id = ?`, id.String()).Scan(&s)
			if err != nil {
				t.Fatalf("read last_error: %v", err)
			}
			return s
		},
		Tables: func(t *testing.T, ns string) []string {
			db, err := sql.Open("sqlite", "file:"+ns+"?mode=ro&_pragma=busy_timeout(10000)")
			if err != nil {
				t.Fatalf("open %s: %v", ns, err)
			}
			defer db.Close()
			return queryStrings(t, db, `SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\' ORDER BY name`)
		},
		SerialWriter: true,
	}
}

// SQLiteDriver returns a migrated driver on a database file in t's
// temporary directory, closed when t ends.
func SQLiteDriver(t testing.TB) *sqlite.Driver {
	t.Helper()
	d := sqliteOpen(t, filepath.Join(t.TempDir(), "txbox.db"))
	t.Cleanup(func() { _ = d.Close() })
	migrate(t, d, 30*time.Second)
	return d
}

// sqliteAdmins holds one driver per database file for the inbox harness's
// own statements (effect table, inspection), opened lazily so the child
// process of the concurrency test gets its own.
var sqliteAdmins sync.Map // path → *sqlite.Driver

func sqliteOpen(t testing.TB, path string) *sqlite.Driver {
	t.Helper()
	d, err := sqlite.Open(path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func sqliteAdmin(t testing.TB, path string) *sql.DB {
	t.Helper()
	if d, ok := sqliteAdmins.Load(path); ok {
		return d.(*sqlite.Driver).DB()
	}
	d := sqliteOpen(t, path)
	if prev, loaded := sqliteAdmins.LoadOrStore(path, d); loaded {
		_ = d.Close()
		return prev.(*sqlite.Driver).DB()
	}
	return d.DB()
}

const sqliteInboxTable = `"` + store.DefaultTablePrefix + `inbox"`

// SQLiteInbox is the inbox suite's harness: a database file per namespace
// (the namespace is its path).
func SQLiteInbox() inboxtest.Harness {
	return inboxtest.Harness{
		Name: "sqlite",
		NewNamespace: func(t testing.TB) string {
			path := filepath.Join(t.TempDir(), testenv.UniqueName("inbox_")+".db")
			t.Cleanup(func() {
				if d, ok := sqliteAdmins.LoadAndDelete(path); ok {
					_ = d.(*sqlite.Driver).Close()
				}
			})
			return path
		},
		Open: func(t testing.TB, ns string) inboxtest.Store {
			d := sqliteOpen(t, ns)
			t.Cleanup(func() { _ = d.Close() })
			migrate(t, d, 30*time.Second)
			return d
		},
		CreateEffectTable: func(t testing.TB, ns string) {
			execOrFail(t, sqliteAdmin(t, ns), `CREATE TABLE inbox_effect (consumer TEXT NOT NULL, event_id TEXT NOT NULL)`)
		},
		InsertEffect: func(ctx context.Context, tx any, ns, consumer string, id txbox.ID) error {
			stx, err := sqlite.SQLTx(tx)
			if err != nil {
				return err
			}
			_, err = stx.ExecContext(ctx, `INSERT INTO inbox_effect (consumer, event_id) VALUES (?, ?)`, consumer, id.String())
			return err
		},
		CountEffects: func(t testing.TB, ns, consumer string) map[txbox.ID]int {
			return QueryCounts(t, sqliteAdmin(t, ns), `SELECT event_id, count(*) FROM inbox_effect WHERE consumer = ? GROUP BY event_id`, consumer)
		},
		CountInbox: func(t testing.TB, ns, consumer string) int {
			return queryInt(t, sqliteAdmin(t, ns), `SELECT count(*) FROM `+sqliteInboxTable+` WHERE consumer_name = ?`, consumer)
		},
		AgeInbox: func(t testing.TB, ns, consumer string, id txbox.ID, age time.Duration) {
			execOne(t, sqliteAdmin(t, ns), "age inbox row "+id.String(),
				`UPDATE `+sqliteInboxTable+` SET processed_at = strftime('%Y-%m-%d %H:%M:%f', 'now', ?) WHERE consumer_name = ? AND event_id = ?`,
				fmt.Sprintf("%+.3f seconds", -age.Seconds()), consumer, id.String())
		},
	}
}
