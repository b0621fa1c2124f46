package inboxtest_test

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
)

// sqliteAdmins holds one driver per database file for the harness's own
// statements (effect table, inspection), opened lazily so the child
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

func sqliteInboxTable() string { return `"` + store.DefaultTablePrefix + `inbox"` }

func sqliteHarness() inboxtest.Harness {
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
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := d.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			return d
		},
		CreateEffectTable: func(t testing.TB, ns string) {
			if _, err := sqliteAdmin(t, ns).Exec(`CREATE TABLE inbox_effect (consumer TEXT NOT NULL, event_id TEXT NOT NULL)`); err != nil {
				t.Fatal(err)
			}
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
			rows, err := sqliteAdmin(t, ns).Query(`SELECT event_id, count(*) FROM inbox_effect WHERE consumer = ? GROUP BY event_id`, consumer)
			if err != nil {
				t.Fatal(err)
			}
			return scanCounts(t, rows)
		},
		CountInbox: func(t testing.TB, ns, consumer string) int {
			var n int
			if err := sqliteAdmin(t, ns).QueryRow(`SELECT count(*) FROM `+sqliteInboxTable()+` WHERE consumer_name = ?`, consumer).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		},
		AgeInbox: func(t testing.TB, ns, consumer string, id txbox.ID, age time.Duration) {
			res, err := sqliteAdmin(t, ns).Exec(`UPDATE `+sqliteInboxTable()+` SET processed_at = strftime('%Y-%m-%d %H:%M:%f', 'now', ?) WHERE consumer_name = ? AND event_id = ?`,
				fmt.Sprintf("%+.3f seconds", -age.Seconds()), consumer, id.String())
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				t.Fatalf("age inbox row %s: %d rows", id, n)
			}
		},
	}
}

func scanCounts(t testing.TB, rows *sql.Rows) map[txbox.ID]int {
	t.Helper()
	defer rows.Close()
	out := map[txbox.ID]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		id, err := txbox.ParseID(s)
		if err != nil {
			t.Fatal(err)
		}
		out[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSQLite(t *testing.T) {
	t.Parallel()
	inboxtest.Run(t, sqliteHarness())
}
