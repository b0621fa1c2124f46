package orm_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/txbox/txbox/store/postgres"
)

// postgresURL is the local PostgreSQL the tests use
// (TXBOX_TEST_POSTGRES_URL overrides it, as for txbox's own tests).
func postgresURL() string {
	if v := os.Getenv("TXBOX_TEST_POSTGRES_URL"); v != "" {
		return v
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// env is one example's database: a fresh schema holding txbox's tables
// and the ORM's, a *sql.DB for the ORMs and txbox's store.
type env struct {
	ctx    context.Context
	db     *sql.DB
	store  *postgres.Driver
	schema string
	close  func()
}

// open creates a fresh schema, migrates txbox's tables into it and
// returns the database whose search_path is that schema. It panics on an
// error: the examples have no *testing.T, and a missing PostgreSQL must
// fail them, never skip them.
func open() *env {
	ctx := context.Background()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "orm_" + hex.EncodeToString(b)
	sep := "?"
	if strings.Contains(postgresURL(), "?") {
		sep = "&"
	}
	url := postgresURL() + sep + "search_path=" + schema
	admin, err := sql.Open("pgx", postgresURL())
	must(err)
	_, err = admin.ExecContext(ctx, "CREATE SCHEMA "+schema)
	must(err)
	db, err := sql.Open("pgx", url)
	must(err)
	pool, err := pgxpool.New(ctx, url)
	must(err)
	st, err := postgres.New(pool, postgres.Config{Schema: schema})
	must(err)
	must(st.Migrate(ctx))
	return &env{ctx: ctx, db: db, store: st, schema: schema, close: func() {
		_ = st.Close()
		pool.Close()
		_ = db.Close()
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = admin.ExecContext(cctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		_ = admin.Close()
	}}
}

// count returns how many rows of table match where.
func (e *env) count(table, where string, args ...any) int {
	var n int
	must(e.db.QueryRowContext(e.ctx, fmt.Sprintf("SELECT count(*) FROM %s WHERE %s", table, where), args...).Scan(&n))
	return n
}

// events counts the outbox rows of eventType with key.
func (e *env) events(eventType, key string) int {
	return e.count("txbox_outbox", "event_type = $1 AND event_key = $2", eventType, key)
}

// expect checks, for each customer, that table holds want orders of it
// and the outbox want events keyed by it: rows and events together.
func (e *env) expect(t *testing.T, table string, want map[string]int) {
	t.Helper()
	for customer, n := range want {
		if rows, events := e.count(table, "customer = $1", customer), e.events("order-created", customer); rows != n || events != n {
			t.Errorf("%s: %d rows, %d events, want %d of each", customer, rows, events, n)
		}
	}
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
