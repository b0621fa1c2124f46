package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/sqlite"
	"github.com/txbox/txbox/store/storetest"
)

// sqlTx adapts *sql.Tx to storetest.Tx.
type sqlTx struct{ tx *sql.Tx }

func (s sqlTx) Native() any     { return s.tx }
func (s sqlTx) Commit() error   { return s.tx.Commit() }
func (s sqlTx) Rollback() error { return s.tx.Rollback() }

// harness gives every namespace its own database file in a temporary
// directory that the test removes.
func harness() storetest.Harness {
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
			tx, err := d.(*sqlite.Driver).DB().BeginTx(context.Background(), nil)
			if err != nil {
				t.Fatalf("begin: %v", err)
			}
			t.Cleanup(func() { _ = tx.Rollback() })
			return sqlTx{tx}
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
			rows, err := db.Query(`SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\' ORDER BY name`)
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
		SerialWriter: true,
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, harness())
}
