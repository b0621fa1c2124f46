package inboxtest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/inbox/inboxtest"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

var (
	pgAdminOnce sync.Once
	pgAdminDB   *sql.DB
	pgAdminErr  error
)

// pgAdmin is a shared database/sql handle for schemas and inspection.
func pgAdmin(t testing.TB) *sql.DB {
	t.Helper()
	testenv.RequireTCP(t, "PostgreSQL", "127.0.0.1:5432")
	pgAdminOnce.Do(func() {
		pgAdminDB, pgAdminErr = sql.Open("pgx", testenv.PostgresURL)
		if pgAdminErr == nil {
			pgAdminDB.SetMaxOpenConns(4)
			pgAdminErr = pgAdminDB.Ping()
		}
	})
	if pgAdminErr != nil {
		t.Fatalf("open postgres: %v", pgAdminErr)
	}
	return pgAdminDB
}

func pgPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgxpool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func pgHarness() inboxtest.Harness {
	return inboxtest.Harness{
		Name:         "postgres",
		NewNamespace: func(t testing.TB) string { return testenv.PostgresSchema(t, pgAdmin(t)) },
		Open: func(t testing.TB, ns string) inboxtest.Store {
			// 16 goroutines hold a transaction each in the concurrency test.
			d, err := postgres.New(pgPool(t, 18), postgres.Config{Schema: ns})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := d.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			return d
		},
		CreateEffectTable: func(t testing.TB, ns string) {
			if _, err := pgAdmin(t).Exec(`CREATE TABLE ` + pgx.Identifier{ns, "inbox_effect"}.Sanitize() + ` (consumer text NOT NULL, event_id text NOT NULL)`); err != nil {
				t.Fatal(err)
			}
		},
		InsertEffect: func(ctx context.Context, tx any, ns, consumer string, id txbox.ID) error {
			ptx, err := postgres.PgxTx(tx)
			if err != nil {
				return err
			}
			_, err = ptx.Exec(ctx, `INSERT INTO `+pgx.Identifier{ns, "inbox_effect"}.Sanitize()+` (consumer, event_id) VALUES ($1, $2)`, consumer, id.String())
			return err
		},
		CountEffects: func(t testing.TB, ns, consumer string) map[txbox.ID]int {
			rows, err := pgAdmin(t).Query(`SELECT event_id, count(*) FROM `+pgx.Identifier{ns, "inbox_effect"}.Sanitize()+` WHERE consumer = $1 GROUP BY event_id`, consumer)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			out := map[txbox.ID]int{}
			for rows.Next() {
				var s string
				var n int
				if err := rows.Scan(&s, &n); err != nil {
					t.Fatal(err)
				}
				id, err := txbox.ParseID(s)
				if err != nil {
					t.Fatal(err)
				}
				out[id] = n
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return out
		},
		CountInbox: func(t testing.TB, ns, consumer string) int {
			var n int
			if err := pgAdmin(t).QueryRow(`SELECT count(*) FROM `+pgx.Identifier{ns, store.DefaultTablePrefix + "inbox"}.Sanitize()+` WHERE consumer_name = $1`, consumer).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		},
		AgeInbox: func(t testing.TB, ns, consumer string, id txbox.ID, age time.Duration) {
			res, err := pgAdmin(t).Exec(`UPDATE `+pgx.Identifier{ns, store.DefaultTablePrefix + "inbox"}.Sanitize()+` SET processed_at = now() - $3::bigint * interval '1 microsecond' WHERE consumer_name = $1 AND event_id = $2`, consumer, id.String(), age.Microseconds())
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				t.Fatalf("age inbox row %s: %d rows", id, n)
			}
		},
	}
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	inboxtest.Run(t, pgHarness())
}

// TestInboxRecordDatabaseSQL records through a *sql.Tx of the pgx stdlib
// driver, the path ORMs take.
func TestPostgresRecordDatabaseSQL(t *testing.T) {
	t.Parallel()
	ns := testenv.PostgresSchema(t, pgAdmin(t))
	d := pgHarness().Open(t, ns)
	ctx := context.Background()
	db := pgAdmin(t)
	a, b := txbox.NewID(), txbox.NewID()
	for round, want := range [][]txbox.ID{{a, b}, {}} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := d.InboxRecord(ctx, tx, &store.InboxRecordParams{Consumer: "std", IDs: []txbox.ID{a, b, a}})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("round %d: InboxRecord = %v, want %v", round, got, want)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.InboxRecord(ctx, db, &store.InboxRecordParams{Consumer: "std", IDs: []txbox.ID{a}}); !errors.Is(err, txbox.ErrNoTransaction) {
		t.Errorf("*sql.DB: err = %v, want ErrNoTransaction", err)
	}
}

// TestInboxTyped shows inbox.Typed handing the handler a pgx.Tx.
func TestPostgresTyped(t *testing.T) {
	t.Parallel()
	h := pgHarness()
	ns := h.NewNamespace(t)
	d := h.Open(t, ns)
	h.CreateEffectTable(t, ns)
	in, err := inbox.New(d, inbox.Config{Consumer: "typed"})
	if err != nil {
		t.Fatal(err)
	}
	id := txbox.NewID()
	r, err := in.Handle(context.Background(), inbox.Message{ID: id}, inbox.Typed(func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+pgx.Identifier{ns, "inbox_effect"}.Sanitize()+` VALUES ('typed', $1)`, m.ID.String())
		return err
	}))
	if err != nil || r != inbox.Processed {
		t.Fatalf("Handle = %v, %v", r, err)
	}
	if got := h.CountEffects(t, ns, "typed"); got[id] != 1 {
		t.Errorf("effects = %v", got)
	}
}
