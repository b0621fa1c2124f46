package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
)

// benchPayload is the body of every benchmark event (the size of a small
// domain event).
const benchPayload = `{"order_id":12345,"amount":"99.90","currency":"EUR","customer":"c-778"}`

// benchType is the event type of every drain backlog.
const benchType = "orders"

func uniqueName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// db is the parent's connection pool to the benchmark database.
type db struct {
	pool *pgxpool.Pool
	dsn  string
}

func openDB(ctx context.Context, dsn string, conns int32) (*db, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, usagef("--dsn: %v", err)
	}
	cfg.MaxConns = conns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("PostgreSQL at --dsn: %w", err)
	}
	return &db{pool: pool, dsn: dsn}, nil
}

// newSchema creates a schema for one run; drop removes it.
func (d *db) newSchema(ctx context.Context) (string, error) {
	s := uniqueName("bench_")
	_, err := d.pool.Exec(ctx, "CREATE SCHEMA "+s)
	return s, err
}

func (d *db) drop(schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _ = d.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
}

// copyRows loads n rows with COPY in one transaction, reporting progress.
func (d *db) copyRows(ctx context.Context, table pgx.Identifier, cols []string, n int, row func(i int) []any, p *progress) error {
	i := 0
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if i >= n {
			return nil, nil
		}
		r := row(i)
		i++
		if i%20_000 == 0 {
			p.count(int64(i), int64(n))
		}
		return r, nil
	})
	got, err := d.pool.CopyFrom(ctx, table, cols, src)
	if err != nil {
		return fmt.Errorf("COPY into %s: %w", table.Sanitize(), err)
	}
	if int(got) != n {
		return fmt.Errorf("COPY into %s: %d rows of %d", table.Sanitize(), got, n)
	}
	// Fresh statistics, as a long-running table would have.
	_, err = d.pool.Exec(ctx, "ANALYZE "+table.Sanitize())
	return err
}

// fillOutbox loads n events into txbox's outbox table with plain-SQL COPY
// (the columns a non-Go producer writes; the rest are the table's
// defaults, docs/schema.md).
func (d *db) fillOutbox(ctx context.Context, schema string, n int, p *progress) error {
	payload := []byte(benchPayload)
	return d.copyRows(ctx, pgx.Identifier{schema, "txbox_outbox"}, []string{"id", "event_type", "payload", "headers"}, n,
		func(int) []any {
			return []any{[16]byte(txbox.NewID()), benchType, payload, `{"content-type":"application/json"}`}
		}, p)
}

// naiveTable creates the naive loop's own table of docs/benchmarks.md
// "Targets" and loads n rows into it with COPY.
func (d *db) naiveTable(ctx context.Context, schema string, n int, p *progress) (string, error) {
	t := schema + ".naive_outbox"
	_, err := d.pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %[1]s (
	id uuid PRIMARY KEY,
	event_type text NOT NULL,
	payload jsonb NOT NULL,
	status smallint NOT NULL DEFAULT 0,
	created_at timestamptz NOT NULL DEFAULT now(),
	attempts integer NOT NULL DEFAULT 0);
CREATE INDEX naive_outbox_pending ON %[1]s (created_at) WHERE status = 0`, t))
	if err != nil {
		return "", err
	}
	payload := benchPayload
	err = d.copyRows(ctx, pgx.Identifier{schema, "naive_outbox"}, []string{"id", "event_type", "payload"}, n,
		func(int) []any { return []any{[16]byte(txbox.NewID()), benchType, payload} }, p)
	return t, err
}

// outboxLeft counts the rows of txbox's outbox not yet delivered.
func (d *db) outboxLeft(ctx context.Context, schema string) (int64, error) {
	var n int64
	err := d.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s.txbox_outbox WHERE status IN ('PENDING', 'IN_PROCESS')`, schema)).Scan(&n)
	return n, err
}

func (d *db) rowCount(ctx context.Context, table string) (int64, error) {
	var n int64
	err := d.pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n)
	return n, err
}

// relayYAML is the configuration of a relay child: the database block,
// the target's sender and route, plus only the settings a variant
// changes. Everything else is txbox's default.
func relayYAML(database string, t target, settings string) string {
	return fmt.Sprintf(`database:
%s
senders:
  main:
%s
defaults:
  route: %s
%s
events:
  %s: { sender: main }
`, indent(database, "  "), indent(t.senderYAML(), "    "), t.routeYAML(), indent(settings, "  "), benchType)
}

// pgDatabase is the database block for a PostgreSQL schema.
func pgDatabase(dsn, schema string) string {
	return fmt.Sprintf("dialect: postgres\ndsn: %q\nschema: %s", dsn, schema)
}

func indent(s, pre string) string {
	if strings.TrimSpace(s) == "" {
		return ""
	}
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = pre + lines[i]
	}
	return strings.Join(lines, "\n")
}

// writeConfig writes a relay configuration into the run's scratch
// directory.
func (r *runner) writeConfig(name, yaml string) (string, error) {
	p := filepath.Join(r.scratch, name+".yaml")
	return p, os.WriteFile(p, []byte(yaml), 0o600)
}

// migrate creates txbox's tables in schema with `txbox migrate`, run as a
// child like the relay.
func (r *runner) migrate(ctx context.Context, cfgPath string) error {
	c, err := r.o.startChild("txbox migrate", "", "migrate", "--config", cfgPath)
	if err != nil {
		return err
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		_, _ = c.stop()
		return ctx.Err()
	}
	if c.err != nil {
		return fmt.Errorf("txbox migrate: %v\n%s", c.err, c.out)
	}
	return nil
}

// dsnWithDatabase returns dsn pointing at another database.
func dsnWithDatabase(dsn, dbname string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	u.Path = "/" + dbname
	return u.String(), nil
}
