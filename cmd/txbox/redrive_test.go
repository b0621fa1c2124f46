package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
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
	if !strings.Contains(errOut, "page 1: 3 matched") || !strings.Contains(errOut, `cli audit: redrive`) {
		t.Fatalf("dry run stderr: %q", errOut)
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
	if !strings.Contains(errOut, "changed=3") || !strings.Contains(errOut, "who=cli") {
		t.Fatalf("no audit line: %q", errOut)
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
