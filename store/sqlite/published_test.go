package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/txbox/txbox"
)

// TestPublishedSQL checks the files `txbox migrate get` writes for goose /
// golang-migrate / atlas users: the embedded migrations rendered for the
// default prefix, each with its revert, that apply cleanly up, down and up
// again.
func TestPublishedSQL(t *testing.T) {
	t.Parallel()
	migs, err := Migrations("")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range migs {
		if !strings.HasSuffix(m.Name, ".sql") || strings.Contains(m.SQL+m.Down, `"{prefix}`) || strings.TrimSpace(m.Down) == "" {
			t.Fatalf("migration %s: want a file name, both steps rendered", m.Name)
		}
	}
	dir := t.TempDir()
	if _, err := WriteMigrations(dir, ""); err != nil {
		t.Fatal(err)
	}

	other, err := Migrations("app_")
	if err != nil {
		t.Fatal(err)
	}
	if s := other[0].SQL; strings.Contains(s, `"{prefix}`) || strings.Contains(s, `"txbox_`) || !strings.Contains(s, `"app_outbox_claim"`) {
		t.Fatal("Migrations(app_) left a placeholder or the default prefix in a name")
	}
	if _, err := Migrations(`x"; DROP TABLE t;--`); !errors.Is(err, txbox.ErrInvalidIdentifier) {
		t.Fatalf("hostile prefix: %v", err)
	}

	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "plain.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	apply := func(file string) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, string(b)); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	apply("0001_initial.up.sql")
	apply("0002_checks.up.sql")
	apply("0003_instance.up.sql")
	want := []string{"txbox_dead_letter", "txbox_inbox", "txbox_instance", "txbox_lease", "txbox_outbox"}
	if got := tableNames(t, db); !slices.Equal(got, want) {
		t.Fatalf("after up: %v, want %v", got, want)
	}
	if _, err := db.Exec(`INSERT INTO txbox_outbox (event_type, payload, headers) VALUES ('t', 'p', '[1]')`); err == nil {
		t.Fatal("0002_checks.up.sql: headers [1] accepted")
	}
	// The audit trail's table comes and goes with its own files.
	apply("0006_audit.up.sql")
	if got := tableNames(t, db); !slices.Contains(got, "txbox_audit") {
		t.Fatalf("after 0006_audit.up.sql: %v", got)
	}
	if _, err := db.Exec(`INSERT INTO txbox_audit (who, action) VALUES ('cli:ops', 'retry')`); err != nil {
		t.Fatalf("audit row: %v", err)
	}
	apply("0006_audit.down.sql")
	if got := tableNames(t, db); !slices.Equal(got, want) {
		t.Fatalf("after 0006_audit.down.sql: %v, want %v", got, want)
	}
	apply("0003_instance.down.sql")
	apply("0002_checks.down.sql")
	if _, err := db.Exec(`INSERT INTO txbox_outbox (event_type, payload, headers) VALUES ('t', 'p', '[1]')`); err != nil {
		t.Fatalf("after 0002_checks.down.sql: %v", err)
	}
	apply("0001_initial.down.sql")
	if got := tableNames(t, db); len(got) != 0 {
		t.Fatalf("after down: %v", got)
	}
	apply("0001_initial.up.sql")
	// A plain-SQL producer gets the defaults, and the event type check.
	if _, err := db.Exec(`INSERT INTO txbox_outbox (event_type, payload) VALUES ('order-created', '{}')`); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "has space", "semi;colon", string(make([]byte, 201))} {
		if _, err := db.Exec(`INSERT INTO txbox_outbox (event_type, payload) VALUES (?, '{}')`, bad); err == nil {
			t.Errorf("event type %q accepted by the CHECK constraint", bad)
		}
	}
	for due, ok := range map[string]bool{"2026-01-01 00:00:00": true, "2026-01-01 00:00:00.123": true, "2026-01-01T00:00:00Z": false, "tomorrow": false} {
		_, err := db.Exec(`INSERT INTO txbox_outbox (event_type, payload, due_at) VALUES ('t', '{}', ?)`, due)
		if (err == nil) != ok {
			t.Errorf("due_at %q: error %v, want accepted=%v", due, err, ok)
		}
	}
	for _, good := range []string{"a", "order.created:v1_x-y", string(slices.Repeat([]byte("a"), 200))} {
		if _, err := db.Exec(`INSERT INTO txbox_outbox (event_type, payload) VALUES (?, '{}')`, good); err != nil {
			t.Errorf("event type %q refused: %v", good, err)
		}
	}
}
