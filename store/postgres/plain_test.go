package postgres_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox/store/postgres"
)

// writeMigrations writes the migrations for schema (empty: unqualified)
// and the default prefix into a fresh folder, as `txbox migrate get`
// does, and returns the folder.
func writeMigrations(t *testing.T, schema string) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := postgres.WriteMigrations(dir, schema, ""); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPlainMigrationsUpDown applies the files `txbox migrate get` writes
// the way golang-migrate does, on a fresh schema: every up in order, every
// down in reverse order, then every up again. The ups leave txbox's
// tables and functions; the downs leave nothing.
func TestPlainMigrationsUpDown(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool := newPool(t, 2)
	schema := newSchema(t)
	migs, err := postgres.Migrations(schema, "")
	if err != nil {
		t.Fatal(err)
	}
	dir := writeMigrations(t, schema)
	apply := func(name string) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, string(b), pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	file := func(m postgres.Migration, suffix string) string { return pad(m.Version) + "_" + m.Name + suffix }
	up := func() {
		t.Helper()
		for _, m := range migs {
			apply(file(m, ".up.sql"))
		}
		want := "txbox_audit,txbox_dead_letter,txbox_emit,txbox_inbox,txbox_instance,txbox_lease,txbox_outbox,txbox_outbox_notify,txbox_uuidv7,txbox_wal_check,txbox_wal_guard,txbox_wal_state"
		if got := schemaObjects(ctx, t, pool, schema); got != want {
			t.Fatalf("after every up: %s, want %s", got, want)
		}
	}
	up()
	for _, m := range slices.Backward(migs) {
		apply(file(m, ".down.sql"))
	}
	if got := schemaObjects(ctx, t, pool, schema); got != "" {
		t.Fatalf("after every down: %s left", got)
	}
	up()
}

// schemaObjects returns the tables and functions in schema, sorted and
// joined by commas.
func schemaObjects(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string) string {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT relname::text FROM pg_class WHERE relnamespace = $1::regnamespace AND relkind IN ('r', 'p')
		UNION SELECT proname::text FROM pg_proc WHERE pronamespace = $1::regnamespace ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(names, ",")
}
