package storeharness

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/txbox/txbox"
)

// migrator is what every dialect's driver has.
type migrator interface {
	Migrate(ctx context.Context) error
}

// migrate applies d's migrations within timeout or fails t.
func migrate(t testing.TB, d migrator, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := d.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
}

// sqlTx adapts *sql.Tx to storetest.Tx.
type sqlTx struct{ tx *sql.Tx }

func (s sqlTx) Native() any     { return s.tx }
func (s sqlTx) Commit() error   { return s.tx.Commit() }
func (s sqlTx) Rollback() error { return s.tx.Rollback() }

// beginSQL starts a transaction on db, rolled back when t ends unless it
// was committed.
func beginSQL(t *testing.T, db *sql.DB) sqlTx {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	return sqlTx{tx}
}

// queryStrings returns the one text column of query's rows, in order.
func queryStrings(t testing.TB, db *sql.DB, query string, args ...any) []string {
	t.Helper()
	rows, err := db.Query(query, args...)
	if err != nil {
		t.Fatalf("query %q: %v", query, err)
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
}

// QueryCounts runs query, whose rows are (event id, count), and returns
// them as a map: how many effects, inbox rows or deliveries each event has.
func QueryCounts(t testing.TB, db *sql.DB, query string, args ...any) map[txbox.ID]int {
	t.Helper()
	rows, err := db.Query(query, args...)
	if err != nil {
		t.Fatal(err)
	}
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

// queryInt runs a one-row, one-column query.
func queryInt(t testing.TB, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// execOne runs an UPDATE that must change exactly one row.
func execOne(t testing.TB, db *sql.DB, what, query string, args ...any) {
	t.Helper()
	res, err := db.Exec(query, args...)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("%s: %d rows", what, n)
	}
}

// execOrFail runs a statement or fails t.
func execOrFail(t testing.TB, db *sql.DB, query string, args ...any) {
	t.Helper()
	if _, err := db.Exec(query, args...); err != nil {
		t.Fatal(err)
	}
}
