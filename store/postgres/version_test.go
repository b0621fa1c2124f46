package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox/internal/pgcluster"
	"github.com/txbox/txbox/store/postgres"
)

// TestOldestServer: PostgreSQL 14, the oldest of the version matrix
// (docs/operations.md, "Supported PostgreSQL versions"), migrates in table
// mode, and WAL mode's stream set-up (the second step of `txbox migrate`)
// refuses it with the reason and the version it needs, before it creates
// a publication or a slot. The tables are the same in both modes. `make
// pg-matrix` runs the whole table-mode suite on it.
func TestOldestServer(t *testing.T) {
	p := pgcluster.Start(t, pgcluster.V14, pgcluster.Options{})
	pool, err := pgxpool.New(context.Background(), p.DSN("test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	table, err := postgres.New(pool, postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Migrate(ctxT(t)); err != nil {
		t.Fatalf("table mode on PostgreSQL 14: %v", err)
	}

	wal, err := postgres.New(pool, postgres.Config{Source: postgres.SourceWAL, TablePrefix: "w_"})
	if err != nil {
		t.Fatal(err)
	}
	if err := wal.Migrate(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	_, err = wal.CreateStreamWith(ctxT(t), postgres.CreateStreamParams{Timeout: 30 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "WAL mode needs PostgreSQL 15 or later") || !strings.Contains(err.Error(), "140") {
		t.Fatalf("WAL mode on PostgreSQL 14: want the version refusal, got %v", err)
	}
	var slots, pubs int
	if err := pool.QueryRow(ctxT(t), `SELECT (SELECT count(*) FROM pg_replication_slots), (SELECT count(*) FROM pg_publication)`).Scan(&slots, &pubs); err != nil {
		t.Fatal(err)
	}
	if slots != 0 || pubs != 0 {
		t.Fatalf("a refused stream set-up left %d replication slots and %d publications", slots, pubs)
	}
}
