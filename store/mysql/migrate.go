package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/txbox/txbox/internal/migfiles"
	"github.com/txbox/txbox/store"
)

//go:embed migrations/*.sql migrations/down/*.sql
var migrationFS embed.FS

// migration is one embedded, versioned schema change.
type migration struct {
	file        string
	version     int
	description string
	sql         string // template with {{table}} markers
	down        string // its revert, a template too
}

// migrations returns the embedded migrations in version order.
func migrations() ([]migration, error) {
	ms, err := migfiles.Read(migrationFS, "mysql")
	if err != nil {
		return nil, err
	}
	out := make([]migration, len(ms))
	for i, m := range ms {
		out[i] = migration{file: fmt.Sprintf("%04d_%s.sql", m.Version, m.Name), version: m.Version, description: m.Name, sql: m.Up, down: m.Down}
	}
	return out, nil
}

// statements splits rendered SQL into statements: comment lines are dropped
// and statements end with a semicolon at the end of a line. The embedded
// files contain no semicolon inside a statement.
func statements(sqlText string) []string {
	var b strings.Builder
	for _, line := range strings.Split(sqlText, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	var out []string
	for _, s := range strings.Split(b.String(), ";\n") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// migrateLockWait is how long one GET_LOCK call waits before Migrate checks
// its context and tries again.
const migrateLockWait = 5

// Migrate applies the embedded migrations that are not yet applied. It
// holds a named lock (GET_LOCK) on one connection for the whole run, so
// instances starting together apply each migration once; the others wait
// and then find nothing to do. MySQL commits DDL implicitly, so each
// migration is written to be re-runnable (CREATE ... IF NOT EXISTS) and is
// recorded in the schema_version table after it succeeded.
func (d *Driver) Migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return wrap("migrate", err)
	}
	defer conn.Close()

	if err := checkVersion(ctx, conn); err != nil {
		return err
	}

	// Lock names are limited to 64 characters; hash schema and prefix.
	sum := sha256.Sum256([]byte(d.tables.Schema + "." + d.tables.Outbox))
	lockName := "txbox_migrate_" + hex.EncodeToString(sum[:16])
	for {
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, migrateLockSQL, lockName, migrateLockWait).Scan(&got); err != nil {
			return wrap("migrate: lock", err)
		}
		if got.Valid && got.Int64 == 1 {
			break
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("mysql: migrate: waiting for the migration lock: %w", err)
		}
	}
	defer func() {
		// conn.Close returns the connection to the pool with its session,
		// and a session keeps its named locks: release explicitly, even
		// when ctx is already cancelled.
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), migrateUnlockSQL, lockName)
	}()

	if d.tables.Schema == "" {
		var db sql.NullString
		if err := conn.QueryRowContext(ctx, currentDBSQL).Scan(&db); err != nil {
			return wrap("migrate", err)
		}
		if !db.Valid {
			return fmt.Errorf("%w: no database selected: name one in the DSN (…/dbname) or in Config.Schema", ErrInvalidParams)
		}
	}
	if d.tables.Schema != "" {
		var n int
		err := conn.QueryRowContext(ctx, schemaExistsSQL, d.tables.Schema).Scan(&n)
		if err != nil {
			return wrap("migrate", err)
		}
		if n == 0 {
			if _, err := conn.ExecContext(ctx, createDatabaseSQL(d.tables.Schema)); err != nil {
				return wrap("migrate: create database", err)
			}
		}
	}
	if _, err := conn.ExecContext(ctx, d.q.schemaVersionCreate); err != nil {
		return wrap("migrate: schema_version", err)
	}
	var current int
	if err := conn.QueryRowContext(ctx, d.q.schemaVersionMax).Scan(&current); err != nil {
		return wrap("migrate", err)
	}
	for _, m := range ms {
		if m.version <= current {
			continue
		}
		for _, stmt := range statements(d.render(m.sql)) {
			if _, err := conn.ExecContext(ctx, stmt); err != nil && !alreadyApplied(err) {
				return wrap(fmt.Sprintf("migrate: version %d", m.version), err)
			}
		}
		if _, err := conn.ExecContext(ctx, d.q.schemaVersionInsert, m.version, m.description); err != nil {
			return wrap(fmt.Sprintf("migrate: record version %d", m.version), err)
		}
	}
	return nil
}

// alreadyApplied reports whether a migration statement failed only because
// what it adds exists: a migration interrupted after its ALTER TABLE ...
// ADD CONSTRAINT and before its version was recorded is run again, and
// neither MySQL 8 nor MariaDB has ADD CONSTRAINT IF NOT EXISTS for checks
// in a form both accept. The same holds for ADD COLUMN (MySQL 8 has no IF
// NOT EXISTS there), whose statements add all their columns or none.
func alreadyApplied(err error) bool {
	switch mysqlErrno(err) {
	case errDupCheckMySQL, errDupCheckMariaDB, errDupColumn:
		return true
	}
	return false
}

// SchemaVersion returns the highest applied migration version, 0 when none
// is applied.
func (d *Driver) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := d.db.QueryRowContext(ctx, d.q.schemaVersionMax).Scan(&v)
	if err != nil {
		return 0, wrap("schema version", err)
	}
	return v, nil
}

// Migration is one versioned schema change, rendered for the table names
// a Config names.
type Migration struct {
	// Version numbers migrations from 1 with no gaps.
	Version int
	// Name is the file's name without the version and extension ("init").
	Name string
	// SQL is the rendered DDL, several statements, each ending with a
	// semicolon at the end of a line.
	SQL string
	// Down reverts SQL's schema change, for tools that migrate down
	// (golang-migrate's NNNN_name.down.sql); Migrate never runs it.
	Down string
}

// Migrations returns every embedded migration and its revert with the
// table names cfg configures, in version order: the plain files to hand
// to goose, golang-migrate or atlas instead of calling Migrate (`txbox
// migrate get` writes them). The schema_version table is Migrate's own
// bookkeeping and is not included.
func Migrations(cfg Config) ([]Migration, error) {
	tables, err := store.NewTables(cfg.Schema, cfg.TablePrefix)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	d := &Driver{tables: tables}
	d.setNames()
	ms, err := migrations()
	if err != nil {
		return nil, err
	}
	out := make([]Migration, len(ms))
	for i, m := range ms {
		out[i] = Migration{Version: m.version, Name: m.description, SQL: d.render(m.sql), Down: d.render(m.down)}
	}
	return out, nil
}

// WriteMigrations writes Migrations(cfg) into dir as the files of `txbox
// migrate get` (docs/operations.md, "Migrations with your own tool").
func WriteMigrations(dir string, cfg Config) ([]string, error) {
	ms, err := Migrations(cfg)
	if err != nil {
		return nil, err
	}
	return migfiles.Write(dir, ms, Migration.file)
}

// file is m as migfiles writes it.
func (m Migration) file() migfiles.Migration {
	return migfiles.Migration{Version: m.Version, Name: m.Name, Up: m.SQL, Down: m.Down}
}

// RenderMigrations returns the SQL of every embedded migration with the
// table names cfg configures, in version order: the SQL of Migrations.
func RenderMigrations(cfg Config) ([]string, error) {
	ms, err := Migrations(cfg)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.SQL
	}
	return out, nil
}

var versionPattern = regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+)`)

// checkVersion refuses servers without SKIP LOCKED or expression defaults.
func checkVersion(ctx context.Context, conn *sql.Conn) error {
	var v string
	if err := conn.QueryRowContext(ctx, versionSQL).Scan(&v); err != nil {
		return wrap("migrate: version", err)
	}
	if !supportedVersion(v) {
		return fmt.Errorf("%w: server is %q", ErrUnsupportedServer, v)
	}
	return nil
}

// supportedVersion reports whether a VERSION() string names MariaDB 10.6+
// or MySQL 8.0.13+.
func supportedVersion(v string) bool {
	m := versionPattern.FindStringSubmatch(v)
	if m == nil {
		return false
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	patch, _ := strconv.Atoi(m[3])
	if strings.Contains(strings.ToLower(v), "mariadb") {
		return major > 10 || (major == 10 && minor >= 6)
	}
	return major > 8 || (major == 8 && (minor > 0 || patch >= 13))
}

// LatestSchemaVersion returns the version of the newest embedded
// migration: the one SchemaVersion reports once Migrate ran.
func (d *Driver) LatestSchemaVersion() int {
	ms, err := migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

var _ store.SchemaVersioner = (*Driver)(nil)
