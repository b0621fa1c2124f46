package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox/internal/testenv"
)

// dlqGroupCount is how many failure groups TestDeadLetterGroupsMemory
// seeds: a tenth of the dead letters in the largest, the rest spread over
// the others.
const dlqGroupCount = 20

// TestDeadLetterGroupsMemory runs a real `txbox relay` on PostgreSQL with
// N dead letters in 20 failure groups (20,000; 500,000 with TXBOX_CHAOS=1
// or `make dlq-memory`), stored without fingerprints as a version before
// the groups would have left them. 4 clients list the groups until every
// dead letter is fingerprinted (the relay's job and the listings share the
// work), then all 4 retry the largest group at once. The relay's peak RSS
// must stay under 150 MiB; the groups must be the 20 seeded with their
// counts; the clients' retries must add up to the group exactly; the
// relay must send exactly the group's events (the retry's NOTIFY wakes
// it: the type has no poller otherwise). The groups query's plan must read
// the fingerprint index; its time is logged (docs/benchmarks.md).
func TestDeadLetterGroupsMemory(t *testing.T) {
	t.Parallel()
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	n := 20_000
	if os.Getenv("TXBOX_CHAOS") != "" {
		n = 500_000
	}
	if v := os.Getenv("TXBOX_DLQ_GROUPS_ROWS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < dlqGroupCount*10 {
			t.Fatalf("TXBOX_DLQ_GROUPS_ROWS=%q: want a count of at least %d", v, dlqGroupCount*10)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	bin := buildTxbox(t, ctx)
	db, schema, _, _ := memoryTestDatabase(t, ctx)
	// Group 0 (every tenth row) is the largest; each cause is a word, and
	// the numbers in the texts differ row by row, as real ones do.
	seedStart := time.Now()
	const chunk = 50_000
	for from := 0; from < n; from += chunk {
		if _, err := db.ExecContext(ctx, fmt.Sprintf(`
		INSERT INTO %s.txbox_dead_letter (id, event_type, event_key, payload, headers, attempts, last_error, created_at, failed_at)
		SELECT gen_random_uuid(), 'grouped', 'k' || (i %% 97), convert_to('{"order":' || i || '}', 'UTF8'), '{}', 5,
		       'HTTP 422 Unprocessable Entity: order ' || i || ' rejected by rule cause' || chr(97 + CASE WHEN i %% 10 = 0 THEN 0 ELSE 1 + i %% %d END) || ' at 10.1.' || (i %% 250) || '.7:443',
		       now() - interval '2 hours', now() - i * interval '1 millisecond'
		FROM generate_series($1::int, $2::int) AS i`, schema, dlqGroupCount-1), from, min(from+chunk, n)-1); err != nil {
			t.Fatal(err)
		}
	}
	largest := 0
	for i := 0; i < n; i += 10 {
		largest++
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`VACUUM ANALYZE %s.txbox_dead_letter`, schema)); err != nil {
		t.Fatal(err)
	}
	t.Logf("seeded %d dead letters in %d causes, %d in the largest, in %s", n, dlqGroupCount, largest, time.Since(seedStart).Round(time.Millisecond))

	var hooked atomic.Int64
	var firstAt atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hooked.Add(1) == 1 {
			firstAt.Store(time.Now().UnixNano())
		}
	}))
	defer hook.Close()
	const readTok, adminTok = "dlq-groups-read-token-0123456789", "dlq-groups-admin-token-0123456789"
	m := startMemoryRelay(t, ctx, bin, fmt.Sprintf(`
database: { dialect: postgres, dsn: %q, schema: %s }
senders:
  hook: { type: webhook, url: %q }
relay: { discover-interval: 24h, discover-max-interval: 24h, heartbeat-interval: 1s }
defaults: { batch-size: 100, in-flight: 4 }
`, testenv.PostgresURL, schema, hook.URL), readTok, adminTok)
	defer m.stop()
	api := &dlqClient{ctx: ctx, base: "http://" + m.addr}

	type group struct {
		Fingerprint string
		Count       int
		Message     string
		Class       string
	}
	type groupPage struct {
		Groups   []group
		Complete bool
	}
	// Every client lists until the listing is complete: their requests
	// fingerprint what the relay's job has not yet, 3 s at most each.
	printStart := time.Now()
	var final groupPage
	var finalOnce sync.Once
	run := func(name string, each func() error) {
		t.Helper()
		m.step(t, name, func(int) error { return each() })
	}
	run("list the groups until fingerprinted", func() error {
		for {
			var p groupPage
			if err := api.try("GET", "/api/v1/dead-letters/groups?limit=100", readTok, "", &p); err != nil {
				return err
			}
			if p.Complete {
				finalOnce.Do(func() { final = p })
				return nil
			}
		}
	})
	t.Logf("every dead letter fingerprinted in %s", time.Since(printStart).Round(time.Millisecond))
	if len(final.Groups) != dlqGroupCount {
		t.Fatalf("%d groups, want %d: %+v", len(final.Groups), dlqGroupCount, final.Groups)
	}
	total := 0
	for _, g := range final.Groups {
		total += g.Count
		if !strings.HasPrefix(g.Message, "HTTP 422 Unprocessable Entity: order <n> rejected by rule cause") || !strings.HasSuffix(g.Message, " at <addr>") {
			t.Fatalf("group title %q", g.Message)
		}
	}
	top := final.Groups[0]
	if total != n || top.Count != largest || top.Class != "attempts_exhausted" {
		t.Fatalf("groups hold %d of %d; the largest %+v, want %d attempts_exhausted", total, n, top, largest)
	}

	// The groups query's plan and time: right after the fingerprints were
	// written (the visibility map not yet set: each index entry visits
	// the heap), after a VACUUM ANALYZE as autovacuum leaves the table
	// (the planner may then prefer a parallel scan of a table this small),
	// and with sequential scans off, which must read the fingerprint
	// index (docs/benchmarks.md, "Failure groups").
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, state := range []string{"just fingerprinted", "after VACUUM ANALYZE", "sequential scans off"} {
		switch state {
		case "after VACUUM ANALYZE":
			if _, err := conn.ExecContext(ctx, fmt.Sprintf(`VACUUM ANALYZE %s.txbox_dead_letter`, schema)); err != nil {
				t.Fatal(err)
			}
		case "sequential scans off":
			if _, err := conn.ExecContext(ctx, `SET enable_seqscan = off`); err != nil {
				t.Fatal(err)
			}
		}
		var plan []string
		timed := time.Now()
		rows, err := conn.QueryContext(ctx, fmt.Sprintf(`EXPLAIN (ANALYZE, BUFFERS) SELECT fingerprint, count(*), min(failed_at), max(failed_at)
			FROM %s.txbox_dead_letter WHERE fingerprint IS NOT NULL AND status = 'UNRESOLVED'
			GROUP BY fingerprint ORDER BY count(*) DESC, fingerprint DESC LIMIT 21`, schema))
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		rows.Close()
		t.Logf("groups query over %d dead letters, %s: %s\n%s", n, state, time.Since(timed).Round(time.Millisecond), strings.Join(plan, "\n"))
		if state == "sequential scans off" && !strings.Contains(strings.Join(plan, "\n"), "txbox_dead_letter_group_idx") {
			t.Errorf("the groups query cannot read txbox_dead_letter_group_idx")
		}
	}
	listed := time.Now()
	var p groupPage
	if err := api.try("GET", "/api/v1/dead-letters/groups?limit=20", readTok, "", &p); err != nil {
		t.Fatal(err)
	}
	t.Logf("GET /api/v1/dead-letters/groups (20 groups, %d dead letters): %s", n, time.Since(listed).Round(time.Millisecond))

	// 4 clients retry the largest group at once, each going on until its
	// action finds no more.
	var changed atomic.Int64
	retried := time.Now()
	run("retry the largest group", func() error {
		for {
			var res struct {
				Matched, Changed int
				More             bool
			}
			if err := api.try("POST", "/api/v1/dead-letters/retry", adminTok, `{"filter":{"group":"`+top.Fingerprint+`"}}`, &res); err != nil {
				return err
			}
			changed.Add(int64(res.Changed))
			if !res.More {
				return nil
			}
		}
	})
	if got := changed.Load(); got != int64(largest) {
		t.Fatalf("the clients retried %d in all, want the group's %d", got, largest)
	}
	testenv.WaitFor(t, 10*time.Minute, "the relay sending the retried group", func() bool { return hooked.Load() >= int64(largest) })
	time.Sleep(time.Second)
	if got := hooked.Load(); got != int64(largest) {
		t.Fatalf("the relay sent %d events, want the group's %d", got, largest)
	}
	var left int
	if err := db.QueryRowContext(ctx, fmt.Sprintf(`SELECT count(*) FROM %s.txbox_dead_letter`, schema)).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != n-largest {
		t.Fatalf("%d dead letters left, want %d", left, n-largest)
	}
	peak := procStatus(t, m.pid, "VmHWM")
	t.Logf("%d dead letters in %d groups, %d clients: first retried event sent %s after the retry began; all %d sent in %s; relay peak RSS (VmHWM) %s",
		n, dlqGroupCount, dlqMemoryClients, time.Duration(firstAt.Load()-retried.UnixNano()).Round(time.Millisecond), largest, time.Since(retried).Round(time.Millisecond), mib(peak))
	if peak >= dlqMemoryPeakLimit {
		t.Fatalf("relay peak RSS %s, want < %s", mib(peak), mib(dlqMemoryPeakLimit))
	}
}
