package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
	"github.com/txbox/txbox/store/sqlite"
)

// seeded is a database for the CLI tests: a driver to seed it through,
// a way to open a transaction on it, and the YAML naming it.
type seeded struct {
	d     store.Driver
	begin func(t *testing.T) (tx any, commit func() error)
	yaml  string
}

func sqliteSeeded(t *testing.T) seeded {
	path := t.TempDir() + "/cli.db"
	d, err := sqlite.Open(path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return seeded{d: d, yaml: fmt.Sprintf("database: { dialect: sqlite, dsn: %q }\n", path),
		begin: func(t *testing.T) (any, func() error) {
			tx, err := d.DB().BeginTx(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			return tx, tx.Commit
		}}
}

func postgresSeeded(t *testing.T) seeded {
	schema := storeharness.PostgresSchema(t)
	pool, err := pgxpool.New(context.Background(), testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	d, err := postgres.New(pool, postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return seeded{d: d, yaml: fmt.Sprintf("database: { dialect: postgres, dsn: %q, schema: %s }\n", testenv.PostgresURL, schema),
		begin: func(t *testing.T) (any, func() error) {
			tx, err := pool.Begin(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			return tx, func() error { return tx.Commit(context.Background()) }
		}}
}

// insert publishes evs in one transaction.
func (s seeded) insert(t *testing.T, evs ...*txbox.Event) {
	t.Helper()
	tx, commit := s.begin(t)
	for _, ev := range evs {
		if ev.ID == (txbox.ID{}) {
			ev.ID = txbox.NewID()
		}
	}
	if err := s.d.OutboxInsert(context.Background(), tx, &store.OutboxInsertParams{Events: evs}); err != nil {
		t.Fatal(err)
	}
	if err := commit(); err != nil {
		t.Fatal(err)
	}
}

// fail claims every due row of typ and finishes it with outcome and msg;
// failed rows are then moved to the dead-letter table.
func (s seeded) fail(t *testing.T, typ string, outcome store.Outcome, retryAfter time.Duration, msg string) {
	t.Helper()
	ctx := context.Background()
	rows, err := s.d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: typ, Limit: 100, LeaseDuration: time.Minute})
	if err != nil || len(rows) == 0 {
		t.Fatalf("claim %s: %d rows, %v", typ, len(rows), err)
	}
	var items []store.OutboxFinishItem
	for _, r := range rows {
		items = append(items, store.OutboxFinishItem{ID: r.ID, LeaseToken: r.LeaseToken, Outcome: outcome, RetryAfter: retryAfter, Error: msg})
	}
	if _, err := s.d.OutboxFinish(ctx, &store.OutboxFinishParams{Items: items}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.d.DeadLetterMove(ctx, &store.DeadLetterMoveParams{Limit: 100}); err != nil {
		t.Fatal(err)
	}
}

func TestDLQParity(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(*testing.T) seeded{"sqlite": sqliteSeeded, "postgres": postgresSeeded} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testDLQParity(t, open(t))
		})
	}
}

func testDLQParity(t *testing.T, s seeded) {
	if err := s.d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfgPath := t.TempDir() + "/txbox.yaml"
	yml := s.yaml + "events: { order: { ordering: key } }\n"
	if err := os.WriteFile(cfgPath, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	dlq := func(args ...string) (int, string, string) {
		return runInProcess(t, nil, append([]string{"dlq", args[0], "--config", cfgPath}, args[1:]...)...)
	}
	start := time.Now().UTC()
	big := &txbox.Event{Type: "mail", Payload: []byte(strings.Repeat("é", 5000))} // 10000 bytes
	s.insert(t, &txbox.Event{Type: "order", Key: "a", Payload: []byte(`{}`)}, &txbox.Event{Type: "order", Key: "a", Payload: []byte(`{}`)},
		&txbox.Event{Type: "order", Key: "b", Payload: []byte(`{}`)})
	s.fail(t, "order", store.OutcomeFailed, 0, "receiver said 422: bad order")
	s.insert(t, big)
	s.fail(t, "mail", store.OutcomeFailed, 0, "smtp 550")

	listJSON := func(args ...string) []dlqJSON {
		t.Helper()
		code, out, errOut := dlq(append([]string{"list", "--json"}, args...)...)
		var got []dlqJSON
		if code != exitOK || json.Unmarshal([]byte(out), &got) != nil {
			t.Fatalf("list %v: %d %q %q", args, code, out, errOut)
		}
		return got
	}
	if got := listJSON("--error-contains", "422"); len(got) != 3 || got[0].EventType != "order" {
		t.Errorf("--error-contains 422: %+v", got)
	}
	if got := listJSON("--key", "b"); len(got) != 1 || got[0].Key != "b" {
		t.Errorf("--key b: %+v", got)
	}
	if got := listJSON("--failed-after", start.Add(-time.Minute).Format(time.RFC3339Nano), "--failed-before", time.Now().Add(time.Minute).Format(time.RFC3339)); len(got) != 4 {
		t.Errorf("failed window around now: %d, want 4", len(got))
	}
	if got := listJSON("--failed-after", time.Now().Add(time.Hour).Format(time.RFC3339)); len(got) != 0 {
		t.Errorf("failed after an hour from now: %d, want 0", len(got))
	}

	// Parked keys: the ordered type's keys, with the oldest dead letter
	// and the rows waiting behind it.
	s.insert(t, &txbox.Event{Type: "order", Key: "a", Payload: []byte(`{}`)})
	code, out, errOut := dlq("parked", "--json")
	var parked []parkedKey
	if code != exitOK || json.Unmarshal([]byte(out), &parked) != nil {
		t.Fatalf("parked: %d %q %q", code, out, errOut)
	}
	if len(parked) != 2 || parked[0].Key != "a" || parked[0].DeadLetters != 2 || parked[1].Key != "b" || parked[1].DeadLetters != 1 || parked[0].Holding == "" || parked[0].Waiting != 1 || parked[1].Waiting != 0 {
		t.Errorf("parked = %+v, want order/a (2) and order/b (1), not mail", parked)
	}
	if code, out, _ := dlq("parked"); code != exitOK || !strings.Contains(out, "HOLDING ID") || !strings.Contains(out, "receiver said 422") {
		t.Errorf("parked table: %d %q", code, out)
	}

	// show cuts a large payload short unless --full.
	code, out, _ = dlq("show", big.ID.String())
	if code != exitOK || !strings.Contains(out, "payload (10000 bytes)") || !strings.Contains(out, "5904 more bytes not shown") || len(out) > dlqPreview+1000 {
		t.Errorf("show: %d, %d bytes: %.300q", code, len(out), out)
	}
	if code, out, _ = dlq("show", big.ID.String(), "--full"); code != exitOK || !strings.Contains(out, string(big.Payload)) {
		t.Errorf("show --full lacks the payload: %d, %d bytes", code, len(out))
	}
	code, out, _ = dlq("show", big.ID.String(), "--json")
	var shown dlqJSON
	if code != exitOK || json.Unmarshal([]byte(out), &shown) != nil || !shown.PayloadTruncated || *shown.PayloadSize != 10000 || len(*shown.Payload) > dlqPreview {
		t.Errorf("show --json: %d %.300q", code, out)
	}

	// Bulk: no filter needs --yes, except for a dry run.
	if code, _, errOut := dlq("retry", "--all"); code != exitUsage || !strings.Contains(errOut, "--yes") {
		t.Errorf("retry --all without a filter: %d %q", code, errOut)
	}
	code, out, _ = dlq("retry", "--all", "--dry-run", "--json")
	var rep struct {
		Action  string
		DryRun  bool `json:"dry_run"`
		Matched int
		Changed int
		IDs     []string
	}
	if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil || !rep.DryRun || rep.Matched != 4 || rep.Changed != 0 || len(rep.IDs) != 4 {
		t.Errorf("retry --all --dry-run --json: %d %q", code, out)
	}
	if len(listJSON()) != 4 {
		t.Error("the dry run changed something")
	}
	code, out, _ = dlq("resolve", "--all", "--type", "mail", "--json")
	if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil || rep.Action != "resolve" || rep.Changed != 1 {
		t.Errorf("resolve --all --type mail: %d %q", code, out)
	}
	code, out, _ = dlq("retry", "--all", "--yes")
	if code != exitOK || !strings.Contains(out, "retried 3 of 3") {
		t.Errorf("retry --all --yes: %d %q", code, out)
	}
	if code, out, _ := dlq("parked", "--json"); code != exitOK || strings.TrimSpace(out) != "[]" {
		t.Errorf("parked after the retry: %d %q", code, out)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"list", "--failed-after", "yesterday"}, "--failed-after must be an RFC 3339 time"},
		{[]string{"list", "--failed-before", "2026-13-01T00:00:00Z"}, "--failed-before must be an RFC 3339 time"},
		{[]string{"list", "--failed-after", "2026-02-01T00:00:00Z", "--failed-before", "2026-01-01T00:00:00Z"}, "--failed-after must be before --failed-before"},
		{[]string{"list", "--since", "1h", "--failed-after", "2026-01-01T00:00:00Z"}, "not both"},
		// Year 10000 once in UTC: refused, not compared wrongly.
		{[]string{"list", "--failed-after", "9999-12-31T23:59:59-14:00"}, "--failed-after must be from 1000-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z once in UTC"},
		{[]string{"delete", "--all", "--failed-before", "1000-01-01T00:30:00+02:00", "--dry-run"}, "--failed-before must be from"},
		{[]string{"parked", txbox.NewID().String()}, "parked takes no ids"},
		{[]string{"parked", "--error-contains", "x"}, "parked takes --type and --key only"},
		{[]string{"delete", "--all", "--status", "all"}, "--yes"},
		{[]string{"retry", "--limit", "0", "x"}, "--limit ≥ 1"},
	} {
		code, _, errOut := dlq(tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("dlq %v: %d %q, want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

func TestStatusLagExcludesScheduled(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(*testing.T) seeded{"sqlite": sqliteSeeded, "postgres": postgresSeeded} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			if err := s.d.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			cfgPath := t.TempDir() + "/txbox.yaml"
			if err := os.WriteFile(cfgPath, []byte(s.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			status := func() statusType {
				t.Helper()
				code, out, errOut := runInProcess(t, nil, "status", "--config", cfgPath, "--json")
				var got struct{ Types []statusType }
				if code != exitOK || json.Unmarshal([]byte(out), &got) != nil {
					t.Fatalf("status: %d %q %q", code, out, errOut)
				}
				for _, st := range got.Types {
					if st.EventType == "late" {
						return st
					}
				}
				return statusType{}
			}
			s.insert(t, &txbox.Event{Type: "late", Payload: []byte(`{}`), NotBefore: time.Now().Add(time.Hour)})
			if st := status(); st.Pending != 1 || st.Scheduled != 1 || st.LagSeconds != 0 || st.NextDueSeconds == nil || *st.NextDueSeconds < 3000 {
				t.Errorf("only a scheduled row: %+v, want no lag and next due in about an hour", st)
			}
			code, out, _ := runInProcess(t, nil, "status", "--config", cfgPath)
			if code != exitOK || !strings.Contains(out, "LAG") || !regexpLine(out, `^late\s+0\s+1\s+0\s+0\s+0s\s+59m`) {
				t.Errorf("status table with only a scheduled row:\n%s", out)
			}
			s.insert(t, &txbox.Event{Type: "late", Payload: []byte(`{}`)})
			s.fail(t, "late", store.OutcomeRetry, 0, "broker said no")
			testenv.WaitFor(t, 10*time.Second, "the retried row due with lag", func() bool {
				st := status()
				return st.Due == 1 && st.LagSeconds > 0
			})
			if st := status(); len(st.Attempts) < 2 || st.Attempts[0] != 1 || st.Attempts[1] != 1 || st.LastError != "broker said no" || st.Scheduled != 1 {
				t.Errorf("after a retry: %+v, want one row with 0 attempts and one with 1 and its error", st)
			}
			code, out, _ = runInProcess(t, nil, "status", "--config", cfgPath)
			if code != exitOK || !regexpLine(out, `^late\s+1\s+1\s+0\s+0\s+\S+\s+\S+\s+0×1 1×1\s+broker said no`) {
				t.Errorf("status table after a retry:\n%s", out)
			}
		})
	}
}

// regexpLine reports whether a line of out matches pattern.
func regexpLine(out, pattern string) bool {
	re := regexp.MustCompile(pattern)
	for _, l := range strings.Split(out, "\n") {
		if re.MatchString(l) {
			return true
		}
	}
	return false
}
