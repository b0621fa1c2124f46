package postgres

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
)

// TestSpillPlans proves with EXPLAIN (ANALYZE, BUFFERS) on 100k outbox
// rows and 10k dead letters that a page of StreamSpilledKeys and WAL
// mode's claims read indexes, not tables: spilled rows over 5,000 keys,
// 40,000 rows the stream still owns (another type), a processed history
// and dead letters. TXBOX_PRINT_PLANS=1 prints the plans.
func TestSpillPlans(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	td := migratedDriver(ctx, t)
	d, err := New(td.pool, Config{Schema: td.tables.Schema, Source: SourceWAL, WAL: WALConfig{Slot: testenv.UniqueName("plan_slot_")}})
	if err != nil {
		t.Fatal(err)
	}
	ob, dl := d.table(d.tables.Outbox), d.table(d.tables.DeadLetter)
	if _, err := d.pool.Exec(ctx, `INSERT INTO `+d.walStateTable()+` (slot_name, publication, snapshot) VALUES ($1, 'p', pg_current_snapshot())`, d.wal.Slot); err != nil {
		t.Fatal(err)
	}
	fill := fmt.Sprintf(`
		INSERT INTO %[1]s (event_type, event_key, payload, stream_pos)
		SELECT 'spill', 'key-' || (g %% 5000), '\x00'::bytea, g FROM generate_series(1, 50000) g;
		INSERT INTO %[1]s (event_type, payload, stream_pos)
		SELECT 'spill', '\x00'::bytea, g FROM generate_series(1, 1000) g;
		INSERT INTO %[1]s (event_type, event_key, payload)
		SELECT 'zstream', 'key-' || (g %% 1000), '\x00'::bytea FROM generate_series(1, 40000) g;
		INSERT INTO %[1]s (event_type, event_key, payload, status, processed_at, stream_pos)
		SELECT 'spill', 'done-' || g, '\x00'::bytea, 'PROCESSED', now(), g FROM generate_series(1, 9000) g;
		INSERT INTO %[2]s (id, event_type, event_key, payload, created_at, status)
		SELECT gen_random_uuid(), 'spill', 'dl-' || g, '\x00'::bytea, now(), CASE WHEN g %% 2 = 0 THEN 'UNRESOLVED' ELSE 'RESOLVED' END
		FROM generate_series(1, 10000) g;
		ANALYZE %[1]s; ANALYZE %[2]s;`, ob, dl)
	if _, err := d.pool.Exec(ctx, fill, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	var filled string
	if err := d.pool.QueryRow(ctx, `SELECT txid::text FROM `+ob+` ORDER BY txid DESC LIMIT 1`).Scan(&filled); err != nil { // no max(xid8) before PostgreSQL 16
		t.Fatal(err)
	}
	testenv.WaitFor(t, 2*time.Minute, "the commit horizon to pass the rows", func() bool {
		var past bool
		err := d.pool.QueryRow(ctx, `SELECT $1::xid8 < pg_snapshot_xmin(pg_current_snapshot())`, filled).Scan(&past)
		return err == nil && past
	})

	const limit = 1000
	full := pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	cases := []struct {
		name     string
		query    string
		args     []any
		indexes  []string
		wantRows float64
		pages    float64
	}{
		{"spilled keys, first page", d.spill.keys, []any{"", "", limit},
			[]string{d.prefix + "outbox_route_key_idx", d.prefix + "dead_letter_route_park_idx"}, limit, 10 * limit},
		{"spilled keys, a later page", d.spill.keys, []any{"spill", "key-1", limit},
			[]string{d.prefix + "outbox_route_key_idx", d.prefix + "dead_letter_route_park_idx"}, limit, 10 * limit},
		// Past the last spilled key: the 40,000 rows the stream owns are
		// read (one heap fetch each) to find that none is the poller's.
		{"spilled keys, past the stream's rows", d.spill.keys, []any{"spill", "key-999", limit},
			[]string{d.prefix + "outbox_route_key_idx"}, 0, -1},
		{"claim", d.q.claim, []any{"spill", 100, int64(time.Minute / time.Microsecond), txbox.NewID(), full, pgtype.UUID{Valid: true}, int64(0), ""},
			[]string{d.prefix + "outbox_route_claim_idx"}, 100, 40 * 100},
		{"ordered claim", d.claimOrdered(1, false, true), orderedArgs("spill", 100, 1, pgtype.Text{}, full, ""),
			[]string{d.prefix + "outbox_route_key_idx"}, 101, 40 * 100},
		// The stream's rows: nothing to claim, and the claim still reads
		// no table.
		{"claim of the stream's rows", d.q.claim, []any{"zstream", 100, int64(time.Minute / time.Microsecond), txbox.NewID(), full, pgtype.UUID{Valid: true}, int64(0), ""},
			[]string{d.prefix + "outbox_route_claim_idx"}, 0, -1},
	}
	for _, c := range cases {
		plan, text := explain(ctx, t, d.pool, c.query, c.args)
		if os.Getenv("TXBOX_PRINT_PLANS") != "" {
			t.Logf("%s:\n%s", c.name, text)
		}
		used := map[string]bool{}
		seqScan := ""
		walk(plan, func(n map[string]any) {
			if name, ok := n["Index Name"].(string); ok {
				used[name] = true
			}
			if n["Node Type"] == "Seq Scan" && n["Relation Name"] != d.prefix+"wal_state" {
				seqScan = fmt.Sprint(n["Relation Name"])
			}
		})
		for _, idx := range c.indexes {
			if !used[idx] {
				t.Errorf("%s does not use %s:\n%s", c.name, idx, text)
			}
		}
		if seqScan != "" {
			t.Errorf("%s seq-scans %s:\n%s", c.name, seqScan, text)
		}
		if got, _ := plan["Actual Rows"].(float64); got != c.wantRows {
			t.Errorf("%s: %.0f rows, want %.0f:\n%s", c.name, got, c.wantRows, text)
		}
		hit, _ := plan["Shared Hit Blocks"].(float64)
		read, _ := plan["Shared Read Blocks"].(float64)
		if c.pages > 0 && hit+read > c.pages {
			t.Errorf("%s touched %.0f pages:\n%s", c.name, hit+read, text)
		}
		t.Logf("%s: %.0f rows, %.0f buffers", c.name, plan["Actual Rows"], hit+read)
	}
}
