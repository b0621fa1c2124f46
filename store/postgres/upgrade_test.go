package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// TestUpgradeToVersion2DeadLettersBadHeaders: upgrading a database that
// already holds rows whose headers are not a JSON object succeeds. The
// check is enforced on every UPDATE, so such a row could never be claimed
// again: the migration dead-letters an unfinished one with the reason and
// gives a PROCESSED one {}; a plain-SQL {"retries": 3} decodes as "3"; new
// rows with such headers are refused.
func TestUpgradeToVersion2DeadLettersBadHeaders(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool := newPool(t, 4)
	schema := newSchema(t)
	migs, err := postgres.Migrations(schema, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, migs[0].SQL, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("version 1: %v", err)
	}
	table := pgx.Identifier{schema, "txbox_outbox"}.Sanitize()
	insert := func(headers, status string) (txbox.ID, error) {
		id := txbox.NewID()
		_, err := pool.Exec(ctx, `INSERT INTO `+table+` (id, event_type, payload, headers, status) VALUES ($1, 'up', 'p', $2::jsonb, $3)`, id.String(), headers, status)
		return id, err
	}
	bad, err := insert(`[1, 2]`, store.StatusPending)
	if err != nil {
		t.Fatal(err)
	}
	done, err := insert(`"text"`, store.StatusProcessed)
	if err != nil {
		t.Fatal(err)
	}
	good, err := insert(`{"retries": 3, "s": "x"}`, store.StatusPending)
	if err != nil {
		t.Fatal(err)
	}
	d, err := postgres.New(pool, postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatalf("upgrade with non-object headers present: %v", err)
	}
	// Every later migration is applied too.
	if v, err := d.SchemaVersion(ctx); err != nil || v != len(migs) {
		t.Fatalf("schema version = %d, %v; want %d (through version 2 and every later one)", v, err, len(migs))
	}
	for _, h := range []string{`[1]`, `"text"`, `3`, `null`} {
		if _, err := insert(h, store.StatusPending); err == nil {
			t.Errorf("headers %s accepted after the upgrade", h)
		}
	}
	var headers string
	if err := pool.QueryRow(ctx, `SELECT headers::text FROM `+table+` WHERE id = $1`, done.String()).Scan(&headers); err != nil || headers != "{}" {
		t.Errorf("processed row's headers = %q, %v; want {}", headers, err)
	}
	dl, err := d.DeadLetterGet(ctx, bad)
	if err != nil {
		t.Fatalf("the pending row was not dead-lettered: %v", err)
	}
	if !strings.Contains(dl.LastError, "not a JSON object") || !strings.Contains(dl.LastError, "[1, 2]") || dl.Attempts != 1 || len(dl.Headers) != 0 {
		t.Errorf("dead letter = %+v", dl)
	}
	rows := claimAll(t, d, "up")
	if len(rows) != 1 || rows[0].ID != good || rows[0].Invalid != "" || rows[0].Headers["retries"] != "3" || rows[0].Headers["s"] != "x" {
		t.Fatalf("claim after the upgrade = %+v; want the good row, retries=3", rows)
	}
	// The dead letter cannot go back (the check would refuse it): a retry
	// leaves it where it is, without failing.
	if n, err := d.DeadLetterRetry(ctx, []txbox.ID{bad}); err != nil || n != 0 {
		t.Fatalf("retry of the bad dead letter = %d, %v; want 0 and no error", n, err)
	}
}

// TestSchemaInstallDropsTheReplacedKeyIndex: version 5 replaced the key
// index, but dropped the old one by its bare name, which missed it in a
// configured schema; version 6 drops it by its qualified name. Version 11
// replaces the claim, key and park indexes, dropping the old ones by
// their qualified names.
func TestSchemaInstallDropsTheReplacedKeyIndex(t *testing.T) {
	d := storeharness.PostgresDriver(t)
	s := d.Tables().Schema
	for name, want := range map[string]bool{
		"txbox_outbox_key_idx": false, "txbox_outbox_key_order_idx": false, "txbox_outbox_claim_idx": false, "txbox_dead_letter_park_idx": false,
		"txbox_outbox_route_key_idx": true, "txbox_outbox_route_claim_idx": true, "txbox_dead_letter_route_park_idx": true,
	} {
		var exists bool
		if err := d.Pool().QueryRow(context.Background(), fmt.Sprintf("SELECT to_regclass('%s.%s') IS NOT NULL", s, name)).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if exists != want {
			t.Errorf("index %s exists = %v after migrating to the latest version, want %v", name, exists, want)
		}
	}
}

// TestUpgradeToVersion11KeepsRows: a database at version 10 with a
// pending keyed row, a parking dead letter and a processed row upgrades to
// 11; the rows get route "" and behave as before (the dead letter parks
// its key, retried it goes first), and running version 11's file again
// changes nothing.
func TestUpgradeToVersion11KeepsRows(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool := newPool(t, 4)
	schema := newSchema(t)
	migs, err := postgres.Migrations(schema, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(migs) < 11 || migs[10].Name != "fanout" {
		t.Fatalf("migration 11 is %+v", migs[min(10, len(migs)-1)])
	}
	sv := pgx.Identifier{schema, "txbox_schema_version"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+sv+` (version integer NOT NULL PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	for _, m := range migs[:10] {
		if _, err := pool.Exec(ctx, m.SQL, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("version %d: %v", m.Version, err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO `+sv+` (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	outbox := pgx.Identifier{schema, "txbox_outbox"}.Sanitize()
	dead := pgx.Identifier{schema, "txbox_dead_letter"}.Sanitize()
	parked, waiting, done := txbox.NewID(), txbox.NewID(), txbox.NewID()
	if _, err := pool.Exec(ctx, `INSERT INTO `+dead+` (id, event_type, event_key, payload, created_at) VALUES ($1, 'up', 'k', 'p', now())`, parked); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+outbox+` (id, event_type, event_key, payload) VALUES ($1, 'up', 'k', 'p')`, waiting); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+outbox+` (id, event_type, payload, status, processed_at) VALUES ($1, 'up', 'p', 'PROCESSED', now())`, done); err != nil {
		t.Fatal(err)
	}
	d, err := postgres.New(pool, postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := d.SchemaVersion(ctx); err != nil || v != len(migs) {
		t.Fatalf("schema version = %d, %v; want %d", v, err, len(migs))
	}
	// Again, by hand: IF NOT EXISTS / IF EXISTS make it a no-op.
	if _, err := pool.Exec(ctx, migs[10].SQL, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("version 11 run twice: %v", err)
	}
	var routes int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+outbox+` WHERE route <> '' OR event_id IS NOT NULL) + (SELECT count(*) FROM `+dead+` WHERE route <> '' OR event_id IS NOT NULL)`).Scan(&routes); err != nil || routes != 0 {
		t.Fatalf("rows with a route after the upgrade: %d, %v", routes, err)
	}
	claim := func() []*store.OutboxRow {
		t.Helper()
		rows, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "up", Limit: 10, LeaseDuration: time.Minute, OrderedByKey: true, HorizonOff: true})
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	if rows := claim(); len(rows) != 0 {
		t.Fatalf("the old dead letter must park its key: claimed %v", ids(rows))
	}
	if n, err := d.DeadLetterRetry(ctx, []txbox.ID{parked}); err != nil || n != 1 {
		t.Fatalf("retry: %d, %v", n, err)
	}
	if rows := claim(); len(rows) != 1 || rows[0].ID != parked || rows[0].Route != "" || rows[0].EventID != (txbox.ID{}) {
		t.Fatalf("after the retry: %+v, want the retried row first", rows)
	}
}

// TestUpgradeToVersion7EmitsDeferred: a database at version 6 upgrades to
// 7, whose txbox_emit no longer inserts a future not-before into the
// table; a row version 6 wrote that way (stream_pos 0) stays the
// poller's. The down file `txbox migrate get` writes puts version 6's
// function back as it was.
func TestUpgradeToVersion7EmitsDeferred(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool := newPool(t, 4)
	schema := newSchema(t)
	migs, err := postgres.Migrations(schema, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(migs) < 7 || migs[6].Name != "emit_deferred" {
		t.Fatalf("migration 7 is %+v", migs[min(6, len(migs)-1)])
	}
	// Version 6 as Migrate leaves it, recorded in the version table.
	sv := pgx.Identifier{schema, "txbox_schema_version"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+sv+` (version integer NOT NULL PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	for _, m := range migs[:6] {
		if _, err := pool.Exec(ctx, m.SQL, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("version %d: %v", m.Version, err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO `+sv+` (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	emit := pgx.Identifier{schema, "txbox_emit"}.Sanitize()
	source := func() string {
		t.Helper()
		var src string
		if err := pool.QueryRow(ctx, `SELECT prosrc || pg_get_function_arguments(oid) FROM pg_proc WHERE oid = $1::regprocedure`,
			emit+"(text, text, bytea, jsonb, timestamptz, uuid)").Scan(&src); err != nil {
			t.Fatal(err)
		}
		return src
	}
	v6 := source()
	// Version 6's deferred insert: a row for the poller, no slot needed.
	var old txbox.ID
	if err := pool.QueryRow(ctx, `SELECT `+emit+`('acct', 'k', 'p'::bytea, '{}', now() + interval '1 hour')`).Scan(&old); err != nil {
		t.Fatal(err)
	}
	// With a slot configured the upgrade is what the driver migrates.
	d, err := postgres.New(pool, postgres.Config{Schema: schema, Source: postgres.SourceWAL,
		WAL: postgres.WALConfig{Slot: "t_up7_" + strings.TrimPrefix(testenv.UniqueName("x"), "x")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := d.SchemaVersion(ctx); err != nil || v != len(migs) {
		t.Fatalf("schema version = %d, %v; want %d", v, err, len(migs))
	}
	if strings.Contains(source(), "stream_pos") {
		t.Fatal("version 7's txbox_emit still inserts into the table")
	}
	// No slot: version 7 refuses the deferred emit (the check runs),
	// where version 6 inserted a row.
	_, err = pool.Exec(ctx, `SELECT `+emit+`('acct', 'k', 'p'::bytea, '{}', now() + interval '1 hour')`)
	if pe := (*pgconn.PgError)(nil); !errors.As(err, &pe) || pe.Code != "42704" || pe.ConstraintName != "txbox_wal_check" {
		t.Fatalf("deferred emit without a slot at version 7: %v, want the emit check's 42704", err)
	}
	// The version 6 row is the poller's: due in an hour, then claimable.
	outbox := pgx.Identifier{schema, "txbox_outbox"}.Sanitize()
	if _, err := pool.Exec(ctx, `UPDATE `+outbox+` SET due_at = now() WHERE id = $1 AND stream_pos = 0`, old); err != nil {
		t.Fatal(err)
	}
	if rows := claimAll(t, d, "acct"); len(rows) != 1 || rows[0].ID != old {
		t.Fatalf("claim of version 6's deferred row: %v", ids(rows))
	}

	down, err := os.ReadFile(filepath.Join(writeMigrations(t, ""), "0007_emit_deferred.down.sql"))
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SET LOCAL search_path = `+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, string(down), pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("down file: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Rendered without a schema, the down file names the uuidv7 default
	// unqualified: compare the body and the arguments past it.
	got := source()
	if unq := strings.ReplaceAll(v6, pgx.Identifier{schema}.Sanitize()+".", ""); got != v6 && got != unq {
		t.Fatalf("after the down file txbox_emit is\n%s\nwant version 6's\n%s", got, v6)
	}
}
