package pgdrop_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/internal/testenv/pgdrop"
)

// TestDropDatabaseWithSlots: a database with two logical slots, one of
// them streamed by a walsender, and an open session, which DROP DATABASE
// ... WITH (FORCE) alone refuses to drop, is dropped cleanly, slots and
// all.
func TestDropDatabaseWithSlots(t *testing.T) {
	t.Parallel()
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin, err := sql.Open("pgx", testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	name, dbURL := testenv.PostgresDatabase(t, admin)
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	active, idle := testenv.UniqueName("drop_a_"), testenv.UniqueName("drop_i_")
	// Creating a logical slot waits for every transaction of the cluster
	// that is running: other tests' included, hence ctx's deadline.
	for _, q := range []string{
		`CREATE PUBLICATION p FOR ALL TABLES`,
		`SELECT pg_create_logical_replication_slot('` + active + `', 'pgoutput')`,
		`SELECT pg_create_logical_replication_slot('` + idle + `', 'pgoutput')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	pid := testenv.PostgresWalsender(t, dbURL, active, `(proto_version '1', publication_names 'p')`)
	var streaming int
	if err := admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid = $2`, active, pid).Scan(&streaming); err != nil || streaming != 1 {
		t.Fatalf("the walsender %d streams %s: %d, %v", pid, active, streaming, err)
	}
	if _, err := admin.ExecContext(ctx, `DROP DATABASE `+name+` WITH (FORCE)`); err == nil {
		t.Fatal("DROP DATABASE WITH (FORCE) dropped a database with slots: the test proves nothing")
	}

	if err := pgdrop.DropDatabase(ctx, pgdrop.DB(admin), name); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := admin.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM pg_database WHERE datname = $1) + (SELECT count(*) FROM pg_replication_slots WHERE database = $1 OR slot_name IN ($2, $3))`, name, active, idle).Scan(&left); err != nil || left != 0 {
		t.Fatalf("database and slots left: %d, %v", left, err)
	}
	// Dropping what is gone is not an error.
	if err := pgdrop.DropDatabase(ctx, pgdrop.DB(admin), name); err != nil {
		t.Fatal(err)
	}
	if err := pgdrop.DropDatabase(ctx, pgdrop.DB(admin), ""); err == nil {
		t.Fatal("an empty name was accepted")
	}
}
