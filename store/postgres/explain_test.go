package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
)

// TestClaimPlanIsOBatch proves with EXPLAIN (ANALYZE, BUFFERS) that the
// claim reads O(batch) rows and pages however large the backlog and the
// processed history are: 100k pending rows over several types plus 100k
// processed rows by default, 1M pending with TXBOX_CHAOS=1. Set
// TXBOX_PRINT_PLANS=1 to print the text plans (copied into docs/schema/postgres.md).
func TestClaimPlanIsOBatch(t *testing.T) {
	t.Parallel()
	pending, processed := 100_000, 100_000
	if os.Getenv("TXBOX_CHAOS") != "" {
		pending, processed = 1_000_000, 200_000
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d := migratedDriver(ctx, t)
	pool := d.Pool()
	ob := d.table(d.tables.Outbox)
	// Five types, one of them keyed (1,000 keys), a processed history, and
	// some rows of other states, generated server-side. type-1 and type-4
	// are fan-out types: every row of theirs has three routes, and a few
	// of them wait unexpanded (route '').
	fill := fmt.Sprintf(`
		INSERT INTO %[1]s (event_type, event_key, payload, route)
		SELECT 'type-' || (g %% 5), CASE WHEN g %% 5 = 4 THEN 'key-' || (g %% 1000) END, '\x00'::bytea,
			CASE WHEN g %% 5 IN (1, 4) AND g %% 97 <> 0 THEN (ARRAY['kafka', 'hook', 'nats'])[1 + (g / 5) %% 3] ELSE '' END
		FROM generate_series(1, %[2]d) g;
		INSERT INTO %[1]s (event_type, payload, status, processed_at)
		SELECT 'type-' || (g %% 5), '\x00'::bytea, 'PROCESSED', now()
		FROM generate_series(1, %[3]d) g;
		ANALYZE %[1]s;`, ob, pending, processed)
	if _, err := pool.Exec(ctx, fill, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}

	const limit = 100
	full := pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	cases := []struct {
		name  string
		query string
		args  []any
		index string
	}{
		{"claim", d.q.claim, []any{"type-2", limit, int64(time.Minute / time.Microsecond), txbox.NewID(), full, uuid.UUID{}, int64(0), ""}, d.prefix + "outbox_route_claim_idx"},
		{"claim after a cursor", d.q.claim, []any{"type-2", limit, int64(time.Minute / time.Microsecond), txbox.NewID(), time.Now().Add(-time.Hour), uuid.UUID{}, int64(time.Second / time.Microsecond), ""}, d.prefix + "outbox_route_claim_idx"},
		{"claim of a route", d.q.claim, []any{"type-1", limit, int64(time.Minute / time.Microsecond), txbox.NewID(), full, uuid.UUID{}, int64(0), "hook"}, d.prefix + "outbox_route_claim_idx"},
		{"lock claim of a route", d.q.lockClaim, []any{"type-1", limit, full, uuid.UUID{}, int64(0), "hook"}, d.prefix + "outbox_route_claim_idx"},
		{"claim ordered by key", d.claimOrdered(1, false, true), orderedArgs("type-4", limit, 1, pgtype.Text{}, full, ""), d.prefix + "outbox_route_key_idx"},
		{"claim of a route ordered by key", d.claimOrdered(1, false, true), orderedArgs("type-4", limit, 1, pgtype.Text{}, full, "nats"), d.prefix + "outbox_route_key_idx"},
		{"claim of a route ordered by key, runs of 4", d.claimOrdered(4, false, true), orderedArgs("type-4", limit, 4, pgtype.Text{}, full, "kafka"), d.prefix + "outbox_route_key_idx"},
		{"pending types", d.q.pendingTypes, nil, d.prefix + "outbox_route_claim_idx"},
		// Each pair's count reads up to its bound ($1) index entries:
		// bounded here by 50 so that the six pairs stay within a batch.
		{"pending routes", d.fanout.pendingRoutes, []any{50}, d.prefix + "outbox_route_claim_idx"},
		{"expand", d.fanout.expand, []any{"type-1", []string{"kafka", "hook", "nats"}, limit, "taken"}, d.prefix + "outbox_route_claim_idx"},
		{"drop a route", d.fanout.dropRoute, []any{"type-4", "hook", "gone", limit}, d.prefix + "outbox_route_claim_idx"},
	}
	for _, c := range cases {
		plan, text := explain(ctx, t, pool, c.query, c.args)
		if os.Getenv("TXBOX_PRINT_PLANS") != "" {
			t.Logf("%s at %d pending + %d processed rows:\n%s", c.name, pending, processed, text)
		}
		var (
			usesIndex bool
			maxRows   float64
			seqScan   string
		)
		walk(plan, func(n map[string]any) {
			if n["Index Name"] == c.index {
				usesIndex = true
			}
			if n["Node Type"] == "Seq Scan" {
				seqScan = fmt.Sprint(n["Relation Name"])
			}
			if strings.Contains(fmt.Sprint(n["Node Type"]), "Scan") {
				loops, _ := n["Actual Loops"].(float64)
				rows, _ := n["Actual Rows"].(float64)
				maxRows = max(maxRows, rows*loops)
			}
		})
		hit, _ := plan["Shared Hit Blocks"].(float64)
		read, _ := plan["Shared Read Blocks"].(float64)
		if !usesIndex {
			t.Errorf("%s does not use %s:\n%s", c.name, c.index, text)
		}
		if seqScan != "" {
			t.Errorf("%s seq-scans %s:\n%s", c.name, seqScan, text)
		}
		// O(batch): a scan node returns at most a few rows per claimed
		// row (the key check probes one index entry per candidate); the
		// whole statement touches a bounded number of pages.
		if maxRows > 5*limit {
			t.Errorf("%s: a scan node produced %.0f rows for a batch of %d:\n%s", c.name, maxRows, limit, text)
		}
		if hit+read > 40*limit {
			t.Errorf("%s touched %.0f pages for a batch of %d:\n%s", c.name, hit+read, limit, text)
		}
	}
}

// orderedArgs are the parameters of the ordered claim (claimOrderedSQL)
// of route starting after key cursor after, with the keyless sweep from
// lower.
func orderedArgs(typ string, limit, run int, after pgtype.Text, lower pgtype.Timestamptz, route string) []any {
	return []any{typ, limit, int64(time.Minute / time.Microsecond), txbox.NewID(), after, run, maxWalk(limit), lower, uuid.UUID{}, route}
}

// TestOrderedClaimPlanIsOBatch proves with EXPLAIN (ANALYZE, BUFFERS) that
// the ordered claim reads O(batch) pages however many rows wait behind one
// key: 50k rows behind one hot key whose head is in process (the claim
// used to read every one of them, ~200k buffers), and 50 keys with 2,000
// rows each, claimed in runs. TXBOX_PRINT_PLANS=1 prints the plans
// (copied into docs/schema/postgres.md).
func TestOrderedClaimPlanIsOBatch(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d := migratedDriver(ctx, t)
	pool := d.Pool()
	ob := d.table(d.tables.Outbox)
	// "hot": 50k rows of one key, its head in process, then one row for
	// each of 50 other keys. "many": 50 keys x 2,000 rows, interleaved.
	fill := fmt.Sprintf(`
		INSERT INTO %[1]s (event_type, event_key, payload)
		SELECT 'hot', 'hot', '\x00'::bytea FROM generate_series(1, 50000) g;
		UPDATE %[1]s SET status = 'IN_PROCESS', lease_until = now() + interval '1 hour'
		WHERE id = (SELECT id FROM %[1]s WHERE event_type = 'hot' ORDER BY id LIMIT 1);
		INSERT INTO %[1]s (event_type, event_key, payload)
		SELECT 'hot', 'key-' || g, '\x00'::bytea FROM generate_series(1, 50) g;
		INSERT INTO %[1]s (event_type, event_key, payload)
		SELECT 'many', 'key-' || (g %% 50), '\x00'::bytea FROM generate_series(1, 100000) g;
		ANALYZE %[1]s;`, ob)
	if _, err := pool.Exec(ctx, fill, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	// The rows pass the commit horizon once every transaction of the
	// cluster older than them has ended.
	var filled string
	if err := pool.QueryRow(ctx, `SELECT txid::text FROM `+ob+` ORDER BY txid DESC LIMIT 1`).Scan(&filled); err != nil { // no max(xid8) before PostgreSQL 16
		t.Fatal(err)
	}
	testenv.WaitFor(t, 2*time.Minute, "the commit horizon to pass the rows", func() bool {
		var past bool
		err := pool.QueryRow(ctx, `SELECT $1::xid8 < pg_snapshot_xmin(pg_current_snapshot())`, filled).Scan(&past)
		return err == nil && past
	})
	full := pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	cases := []struct {
		name       string
		args       []any
		limit      int
		wantRows   float64
		maxScanned float64 // rows any one scan node may produce
	}{
		// 50 heads; the hot key costs one probe.
		{"50k rows behind one hot key", orderedArgs("hot", 200, 1, pgtype.Text{}, full, ""), 200, 50, 1000},
		// Runs of 4: 50 keys x 4 rows = a full batch.
		{"50 keys x 2,000 rows, runs of 4", orderedArgs("many", 200, 4, pgtype.Text{}, full, ""), 200, 200, 1000},
		{"50 keys x 2,000 rows, after a key cursor", orderedArgs("many", 200, 4, pgtype.Text{String: "key-25", Valid: true}, full, ""), 200, 200, 1000},
	}
	for _, c := range cases {
		plan, text := explain(ctx, t, pool, d.claimOrdered(c.args[5].(int), false, true), c.args)
		if os.Getenv("TXBOX_PRINT_PLANS") != "" {
			t.Logf("ordered claim, %s:\n%s", c.name, text)
		}
		var (
			maxRows float64
			seqScan string
			keyIdx  bool
		)
		walk(plan, func(n map[string]any) {
			if n["Index Name"] == d.prefix+"outbox_route_key_idx" {
				keyIdx = true
			}
			if n["Node Type"] == "Seq Scan" {
				seqScan = fmt.Sprint(n["Relation Name"])
			}
			if strings.Contains(fmt.Sprint(n["Node Type"]), "Scan") && n["Node Type"] != "CTE Scan" && n["Node Type"] != "WorkTable Scan" {
				loops, _ := n["Actual Loops"].(float64)
				rows, _ := n["Actual Rows"].(float64)
				maxRows = max(maxRows, rows*loops)
			}
		})
		// The top node is the Append of the claimed rows and the marker.
		if got, _ := plan["Actual Rows"].(float64); got != c.wantRows+1 {
			t.Errorf("%s: claimed %.0f rows, want %.0f:\n%s", c.name, got-1, c.wantRows, text)
		}
		hit, _ := plan["Shared Hit Blocks"].(float64)
		read, _ := plan["Shared Read Blocks"].(float64)
		if !keyIdx {
			t.Errorf("%s does not use the key index:\n%s", c.name, text)
		}
		if seqScan != "" {
			t.Errorf("%s seq-scans %s:\n%s", c.name, seqScan, text)
		}
		if maxRows > c.maxScanned {
			t.Errorf("%s: a scan node produced %.0f rows for a batch of %d:\n%s", c.name, maxRows, c.limit, text)
		}
		if hit+read > 40*float64(c.limit) {
			t.Errorf("%s touched %.0f pages for a batch of %d:\n%s", c.name, hit+read, c.limit, text)
		}
		t.Logf("%s: %.0f buffers for %.0f rows", c.name, hit+read, c.wantRows)
	}
}

// explain runs EXPLAIN (ANALYZE, BUFFERS) of query in a transaction it
// rolls back, so the claim's update leaves nothing behind. It returns the
// JSON plan's top node and the text form.
func explain(ctx context.Context, t *testing.T, pool *pgxpool.Pool, query string, args []any) (map[string]any, string) {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// Force the generic-plan shape the relay gets once the statement is
	// cached, and make sure the plan is what the planner picks by itself.
	var raw []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+query, args...).Scan(&raw); err != nil {
		t.Fatalf("explain: %v", err)
	}
	var doc []map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "ROLLBACK AND CHAIN"); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF) "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return doc[0]["Plan"].(map[string]any), strings.Join(lines, "\n")
}

func walk(n map[string]any, fn func(map[string]any)) {
	fn(n)
	kids, _ := n["Plans"].([]any)
	for _, k := range kids {
		if m, ok := k.(map[string]any); ok {
			walk(m, fn)
		}
	}
}

// migratedDriver returns a migrated driver on a fresh schema, dropped when
// t ends. The in-package tests cannot use internal/storeharness, which
// imports this package.
func migratedDriver(ctx context.Context, t *testing.T) *Driver {
	t.Helper()
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	db, err := sql.Open("pgx", testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	// Registered before the schema's cleanup, so it runs after the schema
	// is dropped (a deferred Close ran first and left the schema behind).
	t.Cleanup(func() { _ = db.Close() })
	schema := testenv.PostgresSchema(t, db)
	pool, err := pgxpool.New(ctx, testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	d, err := New(pool, Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return d
}
