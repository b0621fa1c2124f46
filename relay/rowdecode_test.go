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
	"github.com/txbox/txbox/relay/relaytest"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/mysql"
	"github.com/txbox/txbox/store/sqlite"
)

// plainDialect is a migrated store of one dialect and a way to write rows
// into its outbox with plain SQL, as a non-Go producer does.
type plainDialect struct {
	store store.Driver
	// insert writes one row with the given id, type, key ("" for none)
	// and headers text.
	// preV2 writes it into a schema still at version 1, whose outbox has
	// no check that headers are a JSON object: a relay of this version may
	// run before the schema is upgraded (plain SQL files applied by hand,
	// say). The dialect's version-2 check is dropped first (on MySQL the
	// schema is at version 1 throughout).
	insert func(t *testing.T, id txbox.ID, typ, key, headers string, preV2 bool)
}

func postgresPlain(t *testing.T) plainDialect {
	b := setup(t)
	table := pgx.Identifier{b.schema, "txbox_outbox"}.Sanitize()
	return plainDialect{store: b.store, insert: func(t *testing.T, id txbox.ID, typ, key, headers string, preV2 bool) {
		t.Helper()
		ctx := context.Background()
		if preV2 {
			if _, err := b.pool.Exec(ctx, `ALTER TABLE `+table+` DROP CONSTRAINT IF EXISTS txbox_outbox_headers_chk`); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := b.pool.Exec(ctx, `INSERT INTO `+table+` (id, event_type, event_key, payload, headers) VALUES ($1, $2, NULLIF($3, ''), 'p', $4::jsonb)`, id.String(), typ, key, headers); err != nil {
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
	// And the route columns of version 7, which every claim and move
	// reads (version 7 itself also needs version 3's index).
	for _, table := range []string{"txbox_outbox", "txbox_dead_letter"} {
		if _, err := d.DB().Exec("ALTER TABLE " + table + " ADD COLUMN route VARCHAR(200) NOT NULL DEFAULT '', ADD COLUMN event_id CHAR(36) NULL"); err != nil {
			t.Fatalf("route columns: %v", err)
		}
	}
	return plainDialect{store: d, insert: func(t *testing.T, id txbox.ID, typ, key, headers string, _ bool) {
		t.Helper()
		if _, err := d.DB().Exec("INSERT INTO txbox_outbox (id, event_type, event_key, payload, headers) VALUES (?, ?, NULLIF(?, ''), 'p', ?)", id.String(), typ, key, headers); err != nil {
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
	return plainDialect{store: d, insert: func(t *testing.T, id txbox.ID, typ, key, headers string, preV2 bool) {
		t.Helper()
		if preV2 {
			if _, err := d.DB().Exec(`DROP TRIGGER IF EXISTS txbox_outbox_check_insert`); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := d.DB().Exec(`INSERT INTO txbox_outbox (id, event_type, event_key, payload, headers) VALUES (?, ?, NULLIF(?, ''), 'p', ?)`, id.String(), typ, key, headers); err != nil {
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
			pd.insert(t, good[0], typ, "", `{}`, false)
			pd.insert(t, numeric, typ, "", `{"retries": 3, "ok": true, "o": {"a": 1}, "s": "x", "n": null}`, false)
			pd.insert(t, bad, typ, "", `[1, 2]`, true)
			pd.insert(t, good[1], typ, "", `{"k": "v"}`, false)
			pd.insert(t, good[2], typ, "", `{}`, false)

			rec := newTestSender()
			batch := 10
			cfg := fastConfig(pd.store, map[string]sender.Sender{"test": rec})
			cfg.Defaults.BatchSize = &batch
			cfg.Events = map[string]relay.EventSettings{typ: {}}
			relaytest.Start(t, cfg)

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

// TestInvalidRowParksItsKey: on an ordered type an undecodable row is
// dead-lettered like any other and so parks its key. The rows of that key
// behind it, claimed in the same key run, must not be sent; those of other
// keys are. Resolving the dead letter releases the key, in order.
func TestInvalidRowParksItsKey(t *testing.T) {
	t.Parallel()
	for _, dialect := range plainDialects {
		t.Run(dialect.name, func(t *testing.T) {
			t.Parallel()
			pd := dialect.open(t)
			const typ = "ordered-plain"
			k1, bad, k3, k4, other := txbox.NewID(), txbox.NewID(), txbox.NewID(), txbox.NewID(), txbox.NewID()
			insertKeyed := func(id txbox.ID, key, headers string, preV2 bool) {
				t.Helper()
				pd.insert(t, id, typ, key, headers, preV2)
			}
			insertKeyed(k1, "k", `{}`, false)
			insertKeyed(bad, "k", `[1, 2]`, true)
			insertKeyed(k3, "k", `{}`, false)
			insertKeyed(k4, "k", `{}`, false)
			insertKeyed(other, "j", `{}`, false)

			rec := newTestSender()
			cfg := fastConfig(pd.store, map[string]sender.Sender{"test": rec})
			ordered := txbox.OrderingKey
			cfg.Events = map[string]relay.EventSettings{typ: {Ordering: &ordered}}
			r := relaytest.Start(t, cfg)
			ctx := context.Background()
			defer func() {
				if t.Failed() {
					st, _ := pd.store.OutboxStats(ctx)
					for _, x := range st {
						t.Logf("stats %+v", *x)
					}
					t.Logf("k1 %d j %d bad %d k3 %d", len(rec.deliveries(k1)), len(rec.deliveries(other)), len(rec.deliveries(bad)), len(rec.deliveries(k3)))
				}
			}()
			testenv.WaitFor(t, 20*time.Second, "k1 and j delivered, the bad row dead-lettered", func() bool {
				if len(rec.deliveries(k1)) == 0 || len(rec.deliveries(other)) == 0 {
					return false
				}
				_, err := pd.store.DeadLetterGet(ctx, bad)
				return err == nil
			})
			// The key is parked: k3 and k4 stay PENDING however long the
			// relay runs; waiting for the type's other work to settle
			// first keeps this from passing by luck.
			testenv.WaitFor(t, 10*time.Second, "only the parked rows left pending", func() bool {
				st, err := pd.store.OutboxStats(ctx)
				if err != nil {
					return false
				}
				for _, s := range st {
					if s.EventType == typ {
						return s.Pending == 2 && s.InProcess == 0 && s.Failed == 0
					}
				}
				return false
			})
			if n := len(rec.deliveries(k3)) + len(rec.deliveries(k4)); n != 0 {
				t.Fatalf("rows behind the dead-lettered head of their key were sent %d times", n)
			}
			if _, err := pd.store.DeadLetterResolve(ctx, []txbox.ID{bad}); err != nil {
				t.Fatal(err)
			}
			r.Wake(typ)
			testenv.WaitFor(t, 20*time.Second, "the key released after the resolve", func() bool {
				return len(rec.deliveries(k3)) > 0 && len(rec.deliveries(k4)) > 0
			})
			if got := rec.order(k3, k4); got != "k3 k4" {
				t.Errorf("after the resolve the key was delivered as %q, want k3 then k4", got)
			}
		})
	}
}
