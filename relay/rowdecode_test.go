package relay_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/mysql"
	"github.com/txbox/txbox/store/sqlite"
)

// plainDialect is a migrated store of one dialect and a way to write rows
// into its outbox with plain SQL, as a non-Go producer does.
type plainDialect struct {
	store store.Driver
	// insert writes one row with the given id, type and headers text.
	// preV2 writes it into a schema still at version 1, whose outbox has
	// no check that headers are a JSON object: a relay of this version may
	// run before the schema is upgraded (plain SQL files applied by hand,
	// say). The dialect's version-2 check is dropped first (on MySQL the
	// schema is at version 1 throughout).
	insert func(t *testing.T, id txbox.ID, typ, headers string, preV2 bool)
}

func postgresPlain(t *testing.T) plainDialect {
	b := setup(t)
	table := pgx.Identifier{b.schema, "txbox_outbox"}.Sanitize()
	return plainDialect{store: b.store, insert: func(t *testing.T, id txbox.ID, typ, headers string, preV2 bool) {
		t.Helper()
		ctx := context.Background()
		if preV2 {
			if _, err := b.pool.Exec(ctx, `ALTER TABLE `+table+` DROP CONSTRAINT IF EXISTS txbox_outbox_headers_chk`); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := b.pool.Exec(ctx, `INSERT INTO `+table+` (id, event_type, payload, headers) VALUES ($1, $2, 'p', $3::jsonb)`, id.String(), typ, headers); err != nil {
			t.Fatalf("plain-SQL insert of headers %s: %v", headers, err)
		}
	}}
}

func mysqlPlain(t *testing.T) plainDialect {
	_, dsn := testenv.MySQLDatabase(t, func(dsn string) (*sql.DB, error) { return sql.Open("mysql", dsn) }, "")
	d, err := mysql.Open(dsn, mysql.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	// Schema version 1 only: MySQL and MariaDB check every row against
	// every CHECK on UPDATE, so dropping version 2's would leave a table
	// no migration produces. (Upgrading dead-letters such rows itself:
	// store/mysql's TestUpgradeToVersion2DeadLettersBadHeaders.)
	migs, err := mysql.RenderMigrations(mysql.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range splitMySQL(migs[0]) {
		if _, err := d.DB().Exec(stmt); err != nil {
			t.Fatalf("schema version 1: %v", err)
		}
	}
	return plainDialect{store: d, insert: func(t *testing.T, id txbox.ID, typ, headers string, _ bool) {
		t.Helper()
		if _, err := d.DB().Exec("INSERT INTO txbox_outbox (id, event_type, payload, headers) VALUES (?, ?, 'p', ?)", id.String(), typ, headers); err != nil {
			t.Fatalf("plain-SQL insert of headers %s: %v", headers, err)
		}
	}}
}

// splitMySQL splits a rendered MySQL migration into statements the way
// the driver does: comment lines dropped, statements ending with ";" at
// the end of a line.
func splitMySQL(text string) []string {
	var b strings.Builder
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line + "\n")
		}
	}
	var out []string
	for _, s := range strings.Split(b.String(), ";\n") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func sqlitePlain(t *testing.T) plainDialect {
	d, err := sqlite.Open(filepath.Join(t.TempDir(), "plain.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return plainDialect{store: d, insert: func(t *testing.T, id txbox.ID, typ, headers string, preV2 bool) {
		t.Helper()
		if preV2 {
			if _, err := d.DB().Exec(`DROP TRIGGER IF EXISTS txbox_outbox_check_insert`); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := d.DB().Exec(`INSERT INTO txbox_outbox (id, event_type, payload, headers) VALUES (?, ?, 'p', ?)`, id.String(), typ, headers); err != nil {
			t.Fatalf("plain-SQL insert of headers %s: %v", headers, err)
		}
	}}
}

var plainDialects = []struct {
	name string
	open func(t *testing.T) plainDialect
}{
	{"postgres", postgresPlain},
	{"mysql", mysqlPlain},
	{"sqlite", sqlitePlain},
}

// TestPlainSQLRowsNeverBlockTheirBatch (docs/concepts.md, "Plain-SQL
// producers"): in one batch, a plain-SQL row with non-string header values
// is delivered with their JSON text, a row whose headers are not a JSON
// object at all (possible while the schema is at version 1) is
// dead-lettered with the reason without being sent, and every neighbour
// is delivered once. On PostgreSQL the whole batch used to stay
// IN_PROCESS forever.
func TestPlainSQLRowsNeverBlockTheirBatch(t *testing.T) {
	t.Parallel()
	for _, dialect := range plainDialects {
		t.Run(dialect.name, func(t *testing.T) {
			t.Parallel()
			pd := dialect.open(t)
			const typ = "plain"
			numeric, bad := txbox.NewID(), txbox.NewID()
			good := []txbox.ID{txbox.NewID(), txbox.NewID(), txbox.NewID()}
			pd.insert(t, good[0], typ, `{}`, false)
			pd.insert(t, numeric, typ, `{"retries": 3, "ok": true, "o": {"a": 1}, "s": "x", "n": null}`, false)
			pd.insert(t, bad, typ, `[1, 2]`, true)
			pd.insert(t, good[1], typ, `{"k": "v"}`, false)
			pd.insert(t, good[2], typ, `{}`, false)

			rec := newTestSender()
			batch := 10
			cfg := fastConfig(pd.store, map[string]sender.Sender{"test": rec})
			cfg.Defaults.BatchSize = &batch
			cfg.Events = map[string]relay.EventSettings{typ: {}}
			r, err := relay.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				if err := r.Stop(ctx); err != nil {
					t.Errorf("stop: %v", err)
				}
			})

			ctx := context.Background()
			var dl *store.DeadLetter
			testenv.WaitFor(t, 20*time.Second, "the neighbours delivered and the bad row dead-lettered", func() bool {
				if ids, _ := rec.distinct(); ids < 4 {
					return false
				}
				d, err := pd.store.DeadLetterGet(ctx, bad)
				if err != nil {
					return false
				}
				dl = d
				return true
			})
			for _, id := range append([]txbox.ID{numeric}, good...) {
				if n := len(rec.deliveries(id)); n != 1 {
					t.Errorf("%s delivered %d times, want 1", id, n)
				}
			}
			if n := len(rec.deliveries(bad)); n != 0 {
				t.Errorf("the row with headers [1, 2] was sent %d times", n)
			}
			if !strings.Contains(dl.LastError, "not a JSON object") || !strings.Contains(dl.LastError, "[1, 2]") {
				t.Errorf("dead letter's last error %q does not give the reason", dl.LastError)
			}
			if dl.Attempts != 1 {
				t.Errorf("dead letter attempts = %d, want 1", dl.Attempts)
			}
			h := rec.deliveries(numeric)[0].msg.Headers
			want := map[string]string{"retries": "3", "ok": "true", "o": `{"a":1}`, "s": "x", "n": ""}
			for k, v := range want {
				// MySQL and PostgreSQL may re-space JSON they normalise.
				if got, ok := h[k]; !ok || strings.ReplaceAll(got, " ", "") != v {
					t.Errorf("header %s = %q (present %v), want %q", k, got, ok, v)
				}
			}
			if got := rec.deliveries(good[1])[0].msg.Headers["k"]; got != "v" {
				t.Errorf("string header = %q, want v", got)
			}
			testenv.WaitFor(t, 10*time.Second, "nothing left unfinished", func() bool {
				st, err := pd.store.OutboxStats(ctx)
				if err != nil {
					return false
				}
				for _, s := range st {
					if s.EventType == typ && s.Pending+s.InProcess+s.Failed != 0 {
						return false
					}
				}
				return true
			})
		})
	}
}
