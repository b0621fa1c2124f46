package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
	"github.com/txbox/txbox/store/storeharness"
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
// configured schema; version 6 drops it by its qualified name.
func TestSchemaInstallDropsTheReplacedKeyIndex(t *testing.T) {
	d := storeharness.PostgresDriver(t)
	var gone bool
	q := fmt.Sprintf("SELECT to_regclass('%s.txbox_outbox_key_idx') IS NULL AND to_regclass('%s.txbox_outbox_key_order_idx') IS NOT NULL", d.Tables().Schema, d.Tables().Schema)
	if err := d.Pool().QueryRow(context.Background(), q).Scan(&gone); err != nil {
		t.Fatal(err)
	}
	if !gone {
		t.Error("the version 1 key index is still in the schema after migrating to the latest version")
	}
}
