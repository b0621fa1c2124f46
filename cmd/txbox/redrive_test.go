package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
	"github.com/txbox/txbox/store/sqlite"
)

// delivered publishes n events of type typ into the SQLite database at
// path and acks them, as a relay with a retention leaves them: PROCESSED.
// It returns their ids, sorted.
func delivered(t *testing.T, path, typ string, n int) []string {
	t.Helper()
	ctx := context.Background()
	d, err := sqlite.Open(path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err := d.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var evs []*txbox.Event
	var ids []string
	for range n {
		ev := &txbox.Event{ID: txbox.NewID(), Type: typ, Payload: []byte(`{"n":1}`)}
		evs = append(evs, ev)
		ids = append(ids, ev.ID.String())
	}
	if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: evs}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	rows, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: typ, Limit: n, LeaseDuration: time.Minute})
	if err != nil || len(rows) != n {
		t.Fatalf("claim: %d rows, %v", len(rows), err)
	}
	var items []store.OutboxFinishItem
	for _, r := range rows {
		items = append(items, store.OutboxFinishItem{ID: r.ID, LeaseToken: r.LeaseToken, Outcome: store.OutcomeAcked})
	}
	if _, err := d.OutboxFinish(ctx, &store.OutboxFinishParams{Items: items}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	return ids
}

// pendingIDs returns the ids of the PENDING rows of typ, sorted.
func pendingIDs(t *testing.T, path, typ string) []string {
	t.Helper()
	d, err := sqlite.Open(path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	rows, err := d.DB().Query(`SELECT id FROM txbox_outbox WHERE event_type = ? AND status = 'PENDING' AND attempts = 0 ORDER BY id`, typ)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// TestRedriveCommand: --dry-run lists and changes nothing; a run without a
// narrowing flag needs --yes; a run re-pends every kept event with its id
// and prints progress per page; the configuration's retention is checked.
func TestRedriveCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "redrive.db")
	ids := delivered(t, db, "kept", 3)
	delivered(t, db, "nokeep", 1)
	cfg := filepath.Join(dir, "txbox.yaml")
	if err := os.WriteFile(cfg, []byte("database: { dialect: sqlite, dsn: "+db+" }\nevents:\n  kept: { retention: 1h }\n  nokeep: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	redrive := func(args ...string) (int, string, string) {
		return runInProcess(t, nil, append([]string{"redrive", "--config", cfg}, args...)...)
	}

	code, out, errOut := redrive("--type", "kept", "--dry-run", "--json")
	var res redriveResult
	if code != exitOK || json.Unmarshal([]byte(out), &res) != nil {
		t.Fatalf("dry run: %d %q %q", code, out, errOut)
	}
	if res.Matched != 3 || res.Changed != 0 || !res.DryRun || !slices.Equal(res.IDs, ids) {
		t.Fatalf("dry run: %+v, want ids %v", res, ids)
	}
	if !strings.Contains(errOut, "page 1: 3 matched") {
		t.Fatalf("dry run stderr: %q", errOut)
	}
	code, out, _ = runInProcess(t, nil, "dlq", "audit", "--config", cfg, "--action", "redrive", "--json")
	if code != exitOK || !strings.Contains(out, `"who":"cli:`) || !strings.Contains(out, `"dry_run":true`) || !strings.Contains(out, `\"type\":\"kept\"`) {
		t.Fatalf("the dry run's audit entry: %d %q", code, out)
	}
	if got := pendingIDs(t, db, "kept"); len(got) != 0 {
		t.Fatalf("a dry run re-pended %v", got)
	}

	if code, _, errOut := redrive("--type", "kept"); code != exitUsage || !strings.Contains(errOut, "--yes") {
		t.Fatalf("redrive of every kept event without --yes: %d %q", code, errOut)
	}
	code, out, errOut = redrive("--type", "kept", "--yes")
	if code != exitOK || !strings.Contains(out, "redriven 3 of 3 kept events of kept") {
		t.Fatalf("redrive: %d %q %q", code, out, errOut)
	}
	if got := pendingIDs(t, db, "kept"); !slices.Equal(got, ids) {
		t.Fatalf("pending after the redrive: %v, want %v", got, ids)
	}
	if code, out, _ := runInProcess(t, nil, "dlq", "audit", "--config", cfg, "--action", "redrive", "--limit", "1", "--json"); code != exitOK ||
		!strings.Contains(out, `"changed":3`) || !strings.Contains(out, `"dry_run":false`) || !strings.Contains(out, `"who":"cli:`) {
		t.Fatalf("no audit entry for the redrive: %d %q", code, out)
	}
	// Pending now, not kept: nothing more to redrive.
	if code, out, _ := redrive("--type", "kept", "--since", "1h", "--json"); code != exitOK || !strings.Contains(out, `"matched":0`) {
		t.Fatalf("second redrive: %d %q", code, out)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--dry-run"}, "--type is required"},
		{[]string{"--type", "nokeep", "--dry-run"}, "retention 0"},
		{[]string{"--type", "unknown", "--dry-run"}, "not in the configuration"},
		{[]string{"--type", "kept", "--since", "1h", "--processed-after", "2026-01-01T00:00:00Z"}, "not both"},
		{[]string{"--type", "kept", "--processed-after", "yesterday"}, "--processed-after must be an RFC 3339 time"},
		{[]string{"--type", "kept", "--processed-after", "2026-01-02T00:00:00Z", "--processed-before", "2026-01-01T00:00:00Z"}, "--processed-after must be before --processed-before"},
		{[]string{"--type", "kept", "--id", "x"}, "--id"},
		{[]string{"--type", "kept", "--rate", "-1", "--yes"}, "--rate"},
	} {
		if code, _, errOut := redrive(c.args...); code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("redrive %v: %d %q, want exit 2 with %q", c.args, code, errOut, c.want)
		}
	}
}

// TestRedriveCommandWakesTheRelay: on PostgreSQL, `txbox redrive` from
// another command wakes a running `txbox relay` (NOTIFY) that polls only
// once a minute: the kept events of the window go to the webhook again,
// with the same ids, within seconds. A dry run before sends nothing.
func TestRedriveCommandWakesTheRelay(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, schema := postgresSchema(t, ctx, "redrive_")
	var mu sync.Mutex
	got := map[string]int{}
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		got[r.Header.Get("Txbox-Event-Id")]++
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer hook.Close()
	deliveries := func(ids []txbox.ID, want int) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if got[id.String()] != want {
				return false
			}
		}
		return true
	}
	yml := fmt.Sprintf(`
database: { dialect: postgres, dsn: %q, schema: %s }
senders:
  hooks: { type: webhook, url: "%s/in" }
defaults:
  sender: hooks
  polling: { min-delay: 1m, max-delay: 1m }
events:
  kept: { retention: 1h }
relay: { shutdown-timeout: 20s }
health: { listen: "127.0.0.1:0" }
`, testenv.PostgresURL, schema, hook.URL)
	rel := startInProcessRelay(t, ctx, yml)
	cfgPath := filepath.Join(t.TempDir(), "txbox.yaml")
	if err := os.WriteFile(cfgPath, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := postgres.New(pool, postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := outbox.NewPublisher(d, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(n int) []txbox.ID {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		var ids []txbox.ID
		for range n {
			id, err := pub.Publish(ctx, tx, txbox.Event{Type: "kept", Payload: []byte(`{}`)})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id...)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	// The relay polls once a minute: the publishes' NOTIFY wakes it (one
	// sent before it listens is made up for when it starts listening).
	old := publish(2)
	testenv.WaitFor(t, 20*time.Second, "the first events delivered", func() bool { return deliveries(old, 1) })
	// The cut comes after the first events' finish committed (their
	// processed_at), on the database's clock: the webhook sees an event
	// before the relay's finish stamps it, by a lot on a loaded machine.
	var cut time.Time
	testenv.WaitFor(t, 20*time.Second, "the first events kept", func() bool {
		var kept int
		err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*), clock_timestamp() FROM %s.txbox_outbox WHERE status = 'PROCESSED'`, schema)).Scan(&kept, &cut)
		return err == nil && kept == 2
	})
	cut = cut.UTC()
	time.Sleep(10 * time.Millisecond)
	recent := publish(3)
	testenv.WaitFor(t, 20*time.Second, "the recent events delivered", func() bool { return deliveries(recent, 1) })
	var processed int
	testenv.WaitFor(t, 20*time.Second, "the recent events kept", func() bool {
		err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s.txbox_outbox WHERE status = 'PROCESSED'`, schema)).Scan(&processed)
		return err == nil && processed == 5
	})

	after := cut.Format(time.RFC3339Nano)
	code, out, errOut := runInProcess(t, nil, "redrive", "--config", cfgPath, "--type", "kept", "--processed-after", after, "--dry-run", "--json")
	var res redriveResult
	if code != exitOK || json.Unmarshal([]byte(out), &res) != nil || res.Matched != 3 || res.Changed != 0 {
		t.Fatalf("dry run: %d %q %q", code, out, errOut)
	}
	start := time.Now()
	code, out, errOut = runInProcess(t, nil, "redrive", "--config", cfgPath, "--type", "kept", "--processed-after", after)
	if code != exitOK || !strings.Contains(out, "redriven 3 of 3") {
		t.Fatalf("redrive: %d %q %q", code, out, errOut)
	}
	testenv.WaitFor(t, 20*time.Second, "the redriven events delivered again", func() bool { return deliveries(recent, 2) })
	t.Logf("redriven events delivered again %v after the command started", time.Since(start))
	if !deliveries(old, 1) {
		t.Errorf("events outside the window were sent again: %v", got)
	}
	rel.stop(t)
}
