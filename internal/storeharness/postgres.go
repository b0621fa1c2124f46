package storeharness

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver of PostgresAdmin

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox/inboxtest"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
	"github.com/txbox/txbox/store/storetest"
)

var pgAdmin sharedDB

// PostgresAdmin returns a shared database/sql handle (4 connections) on the
// local PostgreSQL, for creating and dropping schemas and inspecting
// tables.
func PostgresAdmin(t testing.TB) *sql.DB {
	t.Helper()
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	return pgAdmin.open(t, "pgx", testenv.PostgresURL)
}

// PostgresPool opens a pgx pool of at most maxConns connections, closed
// when t ends. Many tests run in parallel against one server shared with
// other packages, so pools stay small.
func PostgresPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
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

// PostgresSchema creates a fresh schema, dropped when t ends.
func PostgresSchema(t testing.TB) string {
	t.Helper()
	return testenv.PostgresSchema(t, PostgresAdmin(t))
}

// PostgresDriver returns a migrated driver (a pool of 10) on a fresh
// schema.
func PostgresDriver(t testing.TB) *postgres.Driver {
	t.Helper()
	return postgresDriver(t, 10, PostgresSchema(t))
}

func postgresDriver(t testing.TB, maxConns int32, schema string) *postgres.Driver {
	t.Helper()
	d, err := postgres.New(PostgresPool(t, maxConns), postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	migrate(t, d, 30*time.Second)
	return d
}

type pgxTx struct{ tx pgx.Tx }

func (p pgxTx) Native() any     { return p.tx }
func (p pgxTx) Commit() error   { return p.tx.Commit(context.Background()) }
func (p pgxTx) Rollback() error { return p.tx.Rollback(context.Background()) }

// Postgres is the outbox suite's harness: a schema per namespace,
// a pool of 10 per driver.
func Postgres() storetest.Harness {
	return storetest.Harness{
		NewNamespace: func(t *testing.T) string { return PostgresSchema(t) },
		Open: func(t *testing.T, ns, prefix string) (store.Driver, error) {
			d, err := postgres.New(PostgresPool(t, 10), postgres.Config{Schema: ns, TablePrefix: prefix})
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
		WaitHorizon: func(t *testing.T, d store.Driver) { PostgresWaitHorizon(t, d.(*postgres.Driver).Pool()) },
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
			return queryStrings(t, PostgresAdmin(t), `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name`, ns)
		},
	}
}

// PostgresInbox is the inbox suite's harness: a schema per namespace and
// a pool of 18 per store (the concurrency test holds 16 transactions).
func PostgresInbox() inboxtest.Harness {
	effect := func(ns string) string { return pgx.Identifier{ns, "inbox_effect"}.Sanitize() }
	inboxTable := func(ns string) string { return pgx.Identifier{ns, store.DefaultTablePrefix + "inbox"}.Sanitize() }
	return inboxtest.Harness{
		Name:         "postgres",
		NewNamespace: func(t testing.TB) string { return PostgresSchema(t) },
		Open: func(t testing.TB, ns string) inboxtest.Store {
			// 16 goroutines hold a transaction each in the concurrency test.
			return postgresDriver(t, 18, ns)
		},
		CreateEffectTable: func(t testing.TB, ns string) {
			execOrFail(t, PostgresAdmin(t), `CREATE TABLE `+effect(ns)+` (consumer text NOT NULL, event_id text NOT NULL)`)
		},
		InsertEffect: func(ctx context.Context, tx any, ns, consumer string, id txbox.ID) error {
			ptx, err := postgres.PgxTx(tx)
			if err != nil {
				return err
			}
			_, err = ptx.Exec(ctx, `INSERT INTO `+effect(ns)+` (consumer, event_id) VALUES ($1, $2)`, consumer, id.String())
			return err
		},
		CountEffects: func(t testing.TB, ns, consumer string) map[txbox.ID]int {
			return QueryCounts(t, PostgresAdmin(t), `SELECT event_id, count(*) FROM `+effect(ns)+` WHERE consumer = $1 GROUP BY event_id`, consumer)
		},
		CountInbox: func(t testing.TB, ns, consumer string) int {
			return queryInt(t, PostgresAdmin(t), `SELECT count(*) FROM `+inboxTable(ns)+` WHERE consumer_name = $1`, consumer)
		},
		AgeInbox: func(t testing.TB, ns, consumer string, id txbox.ID, age time.Duration) {
			execOne(t, PostgresAdmin(t), "age inbox row "+id.String(),
				`UPDATE `+inboxTable(ns)+` SET processed_at = now() - $3::bigint * interval '1 microsecond' WHERE consumer_name = $1 AND event_id = $2`,
				consumer, id.String(), age.Microseconds())
		},
	}
}

// Publisher is what PostgresPublish publishes through: an
// *outbox.Publisher. The harness names only the method: it builds on the
// store layer and on inbox/inboxtest's harness type alone, and imports
// neither the outbox nor anything above it (see the layer test in
// layers_test.go at the module root).
type Publisher interface {
	Publish(ctx context.Context, tx any, events ...txbox.Event) ([]txbox.ID, error)
}

// PostgresPublish publishes evs through pub in one committed transaction
// on d's pool.
func PostgresPublish(t testing.TB, d *postgres.Driver, pub Publisher, evs ...txbox.Event) {
	t.Helper()
	ctx := context.Background()
	tx, err := d.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := pub.Publish(ctx, tx, evs...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// PostgresWaitHorizon waits until every transaction that had an xid when it
// was called has ended, so that the rows they inserted are below the
// ordered claim's commit horizon (docs/concepts.md, "Ordering"). The
// horizon is cluster-wide: any test holding a write transaction open holds
// it back, hence the generous deadline.
func PostgresWaitHorizon(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	var xmax uint64
	if err := pool.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&xmax); err != nil {
		t.Fatalf("read the snapshot: %v", err)
	}
	testenv.WaitFor(t, 2*time.Minute, "the commit horizon to pass the committed rows", func() bool {
		var xmin uint64
		if err := pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint`).Scan(&xmin); err != nil {
			t.Fatalf("read the snapshot: %v", err)
		}
		return xmin >= xmax
	})
}
