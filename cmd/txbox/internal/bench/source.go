package bench

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	_ "modernc.org/sqlite"

	"github.com/txbox/txbox"
)

// source is the database side of one drain run: a fresh namespace (a
// PostgreSQL schema, a MariaDB database, an SQLite file) holding the
// backlog, for the relay (txbox's outbox table) or the naive loop (its own
// table).
type source interface {
	// databaseYAML is the relay configuration's database block.
	databaseYAML() string
	fillOutbox(ctx context.Context, n int, p *progress) error
	// naiveTable creates the naive loop's table with n rows and returns
	// the naive child's flags naming it.
	naiveTable(ctx context.Context, n int, p *progress) ([]string, error)
	outboxLeft(ctx context.Context) (int64, error)
	naiveLeft(ctx context.Context) (int64, error)
	close()
}

// Dialects the drain scenario can run on.
const (
	dialectPostgres = "postgres"
	dialectMySQL    = "mysql"
	dialectSQLite   = "sqlite"
)

// AllDialects are the values of --dialects.
var AllDialects = []string{dialectPostgres, dialectMySQL, dialectSQLite}

func (r *runner) newSource(ctx context.Context, dialect string) (source, error) {
	switch dialect {
	case dialectPostgres:
		schema, err := r.db.newSchema(ctx)
		if err != nil {
			return nil, err
		}
		return &pgSource{db: r.db, schema: schema}, nil
	case dialectMySQL:
		admin, err := sql.Open("mysql", r.o.MySQLDSN)
		if err != nil {
			return nil, usagef("--mysql-dsn: %v", err)
		}
		name := uniqueName("bench_")
		if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
			admin.Close()
			return nil, fmt.Errorf("MariaDB at --mysql-dsn: %w", err)
		}
		cfg, err := gomysql.ParseDSN(r.o.MySQLDSN)
		if err != nil {
			admin.Close()
			return nil, usagef("--mysql-dsn: %v", err)
		}
		cfg.DBName, cfg.ParseTime = name, true
		dsn := cfg.FormatDSN()
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			admin.Close()
			return nil, err
		}
		db.SetMaxOpenConns(4)
		return &sqlSource{dialect: dialectMySQL, admin: admin, db: db, dsn: dsn, name: name}, nil
	case dialectSQLite:
		path := filepath.Join(r.scratch, uniqueName("bench_")+".db")
		v := url.Values{}
		v.Set("_txlock", "immediate")
		v.Add("_pragma", "busy_timeout(10000)")
		v.Add("_pragma", "journal_mode(WAL)")
		v.Add("_pragma", "synchronous(NORMAL)")
		dsn := "file:" + path + "?" + v.Encode()
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			return nil, err
		}
		db.SetMaxOpenConns(1)
		return &sqlSource{dialect: dialectSQLite, db: db, dsn: dsn, name: path}, nil
	}
	return nil, fmt.Errorf("unknown dialect %q", dialect)
}

type pgSource struct {
	db     *db
	schema string
	// publish fills the outbox through the Go publisher instead of COPY
	// (publishFill).
	publish bool
	// wal is WAL mode: database.source wal, the slot txbox migrate
	// creates is dropped by close.
	wal bool
	// walSettings are database.wal keys (YAML) in WAL mode.
	walSettings string
	// lastLSN is the WAL position read inside the last producing
	// transaction (publishFill), and slotName WAL mode's slot.
	lastLSN, slotName string
	// xids are the producing transactions' ids (publishFill).
	xids []int64
}

func (s *pgSource) databaseYAML() string {
	y := pgDatabase(s.db.dsn, s.schema)
	if s.wal {
		y += "\nsource: wal"
		if s.walSettings != "" {
			y += "\nwal:\n" + indent(s.walSettings, "  ")
		}
	}
	return y
}
func (s *pgSource) fillOutbox(ctx context.Context, n int, p *progress) error {
	if !s.publish {
		return s.db.fillOutbox(ctx, s.schema, n, p)
	}
	lsn, err := s.publishFill(ctx, n, p)
	s.lastLSN = lsn
	return err
}
func (s *pgSource) naiveTable(ctx context.Context, n int, p *progress) ([]string, error) {
	t, err := s.db.naiveTable(ctx, s.schema, n, p)
	return []string{"--dialect", dialectPostgres, "--dsn", s.db.dsn, "--table", t}, err
}
func (s *pgSource) outboxLeft(ctx context.Context) (int64, error) {
	n, err := s.db.outboxLeft(ctx, s.schema)
	if err != nil || n > 0 || !s.wal || s.lastLSN == "" {
		return n, err
	}
	return s.streamLeft(ctx)
}
func (s *pgSource) naiveLeft(ctx context.Context) (int64, error) {
	return s.db.rowCount(ctx, s.schema+".naive_outbox")
}
func (s *pgSource) close() {
	if s.wal {
		s.dropSlot()
	}
	s.db.drop(s.schema)
}

// sqlSource is MariaDB or SQLite through database/sql. These have no
// COPY: the backlog is loaded with multi-row INSERTs of 1,000 rows, 10 to
// a transaction, the plain-SQL bulk load of each.
type sqlSource struct {
	dialect string
	admin   *sql.DB // MariaDB: drops the database
	db      *sql.DB
	dsn     string
	name    string // database name or file path
}

func (s *sqlSource) databaseYAML() string {
	if s.dialect == dialectMySQL {
		return fmt.Sprintf("dialect: mysql\ndsn: %q", s.dsn)
	}
	return fmt.Sprintf("dialect: sqlite\ndsn: %q", s.name)
}

// insertRows loads n rows into table with multi-row INSERTs.
func (s *sqlSource) insertRows(ctx context.Context, table string, cols []string, n int, row func() []any, p *progress) error {
	const per = 1000
	ph := "(" + strings.TrimSuffix(strings.Repeat("?,", len(cols)), ",") + ")"
	var tx *sql.Tx
	var err error
	for done := 0; done < n; {
		if done%(10*per) == 0 {
			if tx != nil {
				if err := tx.Commit(); err != nil {
					return err
				}
			}
			if tx, err = s.db.BeginTx(ctx, nil); err != nil {
				return err
			}
		}
		k := min(per, n-done)
		args := make([]any, 0, k*len(cols))
		for range k {
			args = append(args, row()...)
		}
		q := "INSERT INTO " + table + " (" + strings.Join(cols, ", ") + ") VALUES " + strings.TrimSuffix(strings.Repeat(ph+",", k), ",")
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("load %s: %w", table, err)
		}
		done += k
		p.count(int64(done), int64(n))
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, "ANALYZE "+map[bool]string{true: "TABLE ", false: ""}[s.dialect == dialectMySQL]+table)
	return err
}

func (s *sqlSource) fillOutbox(ctx context.Context, n int, p *progress) error {
	payload := []byte(benchPayload)
	return s.insertRows(ctx, "txbox_outbox", []string{"id", "event_type", "payload", "headers"}, n, func() []any {
		return []any{txbox.NewID().String(), benchType, payload, `{"content-type":"application/json"}`}
	}, p)
}

func (s *sqlSource) naiveTable(ctx context.Context, n int, p *progress) ([]string, error) {
	ddl := []string{`CREATE TABLE naive_outbox (
	id CHAR(36) PRIMARY KEY,
	event_type VARCHAR(200) NOT NULL,
	payload JSON NOT NULL,
	status SMALLINT NOT NULL DEFAULT 0,
	created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
	attempts INT NOT NULL DEFAULT 0,
	KEY naive_outbox_pending (status, created_at))`}
	if s.dialect == dialectSQLite {
		ddl = []string{`CREATE TABLE naive_outbox (
	id TEXT PRIMARY KEY,
	event_type TEXT NOT NULL,
	payload TEXT NOT NULL,
	status INTEGER NOT NULL DEFAULT 0,
	created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
	attempts INTEGER NOT NULL DEFAULT 0)`,
			`CREATE INDEX naive_outbox_pending ON naive_outbox (created_at) WHERE status = 0`}
	}
	for _, q := range ddl {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return nil, err
		}
	}
	err := s.insertRows(ctx, "naive_outbox", []string{"id", "event_type", "payload"}, n, func() []any {
		return []any{txbox.NewID().String(), benchType, benchPayload}
	}, p)
	return []string{"--dialect", s.dialect, "--dsn", s.dsn, "--table", "naive_outbox"}, err
}

func (s *sqlSource) count(ctx context.Context, q string) (int64, error) {
	var n int64
	err := s.db.QueryRowContext(ctx, q).Scan(&n)
	return n, err
}
func (s *sqlSource) outboxLeft(ctx context.Context) (int64, error) {
	return s.count(ctx, `SELECT count(*) FROM txbox_outbox WHERE status IN ('PENDING', 'IN_PROCESS')`)
}
func (s *sqlSource) naiveLeft(ctx context.Context) (int64, error) {
	return s.count(ctx, "SELECT count(*) FROM naive_outbox")
}
func (s *sqlSource) close() {
	s.db.Close()
	if s.admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = s.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+s.name)
		s.admin.Close()
	}
}
