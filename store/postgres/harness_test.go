package postgres_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
	"github.com/txbox/txbox/store/storetest"
)

var (
	adminOnce sync.Once
	adminDB   *sql.DB
	adminErr  error
)

// admin returns a shared database/sql handle used to create and drop
// schemas and to inspect tables.
func admin(t testing.TB) *sql.DB {
	t.Helper()
	testenv.RequireTCP(t, "PostgreSQL", "127.0.0.1:5432")
	adminOnce.Do(func() {
		adminDB, adminErr = sql.Open("pgx", testenv.PostgresURL)
		if adminErr == nil {
			adminDB.SetMaxOpenConns(4)
			adminErr = adminDB.Ping()
		}
	})
	if adminErr != nil {
		t.Fatalf("open postgres: %v", adminErr)
	}
	return adminDB
}

// newPool opens a small pool closed when t ends. Many tests run in
// parallel against one server shared with other packages, so pools stay
// small.
func newPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	testenv.RequireTCP(t, "PostgreSQL", "127.0.0.1:5432")
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgxpool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// newSchema creates a fresh schema dropped when t ends.
func newSchema(t testing.TB) string {
	t.Helper()
	return testenv.PostgresSchema(t, admin(t))
}

// open returns a migrated driver on a fresh schema.
func open(t testing.TB) *postgres.Driver {
	t.Helper()
	d, err := postgres.New(newPool(t, 10), postgres.Config{Schema: newSchema(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return d
}

type pgxTx struct{ tx pgx.Tx }

func (p pgxTx) Native() any     { return p.tx }
func (p pgxTx) Commit() error   { return p.tx.Commit(context.Background()) }
func (p pgxTx) Rollback() error { return p.tx.Rollback(context.Background()) }

func harness() storetest.Harness {
	return storetest.Harness{
		NewNamespace: func(t *testing.T) string { return newSchema(t) },
		Open: func(t *testing.T, ns, prefix string) (store.Driver, error) {
			d, err := postgres.New(newPool(t, 10), postgres.Config{Schema: ns, TablePrefix: prefix})
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { _ = d.Close() })
			return d, nil
		},
		Begin: func(t *testing.T, d store.Driver) storetest.Tx {
			tx, err := d.(*postgres.Driver).Pool().Begin(context.Background())
			if err != nil {
				t.Fatalf("begin: %v", err)
			}
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
			return pgxTx{tx}
		},
		OutboxLastError: func(t *testing.T, d store.Driver, id txbox.ID) string {
			pd := d.(*postgres.Driver)
			tb := pd.Tables()
			var s string
			err := pd.Pool().QueryRow(context.Background(),
				`SELECT COALESCE(max(last_error), '') FROM `+pgx.Identifier{tb.Schema, tb.Outbox}.Sanitize()+` WHERE id = $1`, id.String()).Scan(&s)
			if err != nil {
				t.Fatalf("read last_error: %v", err)
			}
			return s
		},
		Tables: func(t *testing.T, ns string) []string {
			rows, err := admin(t).Query(`SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name`, ns)
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
