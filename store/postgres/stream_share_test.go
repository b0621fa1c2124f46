package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// TestClaimShareOnlyInWALMode: the poller's share (ownedSQL) is in every
// claim statement of WAL mode, lease and lock, ordered or not, and in no
// statement of table mode, whose text stays what it was.
func TestClaimShareOnlyInWALMode(t *testing.T) {
	t.Parallel()
	// The pool is never used: New does not connect.
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	claims := func(d *Driver) map[string]string {
		m := map[string]string{"claim": d.q.claim, "lock claim": d.q.lockClaim}
		for _, run := range []int{1, 4} {
			for _, lock := range []bool{false, true} {
				for _, horizon := range []bool{false, true} {
					m[fmt.Sprintf("ordered run %d lock %v horizon %v", run, lock, horizon)] = d.claimOrdered(run, lock, horizon)
				}
			}
		}
		return m
	}
	table, err := New(pool, Config{Schema: "s"})
	if err != nil {
		t.Fatal(err)
	}
	all := fmt.Sprintf("%#v", table.q)
	for name, q := range claims(table) {
		all += q
		if strings.Contains(q, "stream_pos") {
			t.Errorf("table mode's %s reads stream_pos:\n%s", name, q)
		}
	}
	if strings.Contains(all, "wal_state") || strings.Contains(all, "pg_visible_in_snapshot") {
		t.Error("a table mode statement reads the stream state")
	}
	wal, err := New(pool, Config{Schema: "s", Source: SourceWAL})
	if err != nil {
		t.Fatal(err)
	}
	for name, q := range claims(wal) {
		// The ordered claim carries it in the keyless window and in
		// each of the walk's three row tests (ok and cut).
		want := 1
		if strings.HasPrefix(name, "ordered") {
			want = 7
		}
		if n := strings.Count(q, "pg_visible_in_snapshot"); n != want {
			t.Errorf("WAL mode's %s has the poller's share %d times, want %d:\n%s", name, n, want, q)
		}
	}
}
