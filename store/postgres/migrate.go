package postgres

import (
	"context"
	"embed"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox/internal/migfiles"
	"github.com/txbox/txbox/store"
)

//go:embed migrations/*.sql migrations/down/*.sql
var migrationFS embed.FS

// Migration is one versioned schema change, rendered for a schema and
// table prefix.
type Migration struct {
	// Version numbers migrations from 1 with no gaps.
	Version int
	// Name is the file's name without the version and extension ("init").
	Name string
	// SQL is the rendered DDL, several statements separated by semicolons.
	SQL string
	// Down reverts SQL's schema change, for tools that migrate down
	// (golang-migrate's NNNN_name.down.sql); Migrate never runs it.
	Down string
}

var placeholder = regexp.MustCompile(`\{\{(table|index):([a-z0-9_]+)\}\}`)

// Migrations returns every embedded migration rendered for schema and
// prefix (empty = unqualified names / store.DefaultTablePrefix), in
// version order. Both names are validated first; plain-SQL migration tools
// can run the result as is.
func Migrations(schema, prefix string) ([]Migration, error) {
	tables, err := store.NewTables(schema, prefix)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if prefix == "" {
		prefix = store.DefaultTablePrefix
	}
	return renderMigrations(tables.Schema, prefix)
}

func renderMigrations(schema, prefix string) ([]Migration, error) {
	ms, err := migfiles.Read(migrationFS, "postgres")
	if err != nil {
		return nil, err
	}
	render := func(sql string) string {
		return placeholder.ReplaceAllStringFunc(sql, func(m string) string {
			sub := placeholder.FindStringSubmatch(m)
			ident := pgx.Identifier{prefix + sub[2]}
			if sub[1] == "table" && schema != "" {
				ident = pgx.Identifier{schema, prefix + sub[2]}
			}
			return ident.Sanitize()
		})
	}
	out := make([]Migration, len(ms))
	for i, m := range ms {
		out[i] = Migration{Version: m.Version, Name: m.Name, SQL: render(m.Up), Down: render(m.Down)}
	}
	return out, nil
}

// WriteMigrations writes Migrations(schema, prefix) into dir as the files of `txbox
// migrate get` (docs/operations.md, "Migrations with your own tool").
func WriteMigrations(dir, schema, prefix string) ([]string, error) {
	ms, err := Migrations(schema, prefix)
	if err != nil {
		return nil, err
	}
	return migfiles.Write(dir, ms, Migration.file)
}

// file is m as migfiles writes it.
func (m Migration) file() migfiles.Migration {
	return migfiles.Migration{Version: m.Version, Name: m.Name, Up: m.SQL, Down: m.Down}
}

// Migrate applies the embedded migrations not yet recorded in the schema
// version table, all in one transaction under a transaction-scoped
// advisory lock keyed by the table names: a second instance migrating at
// the same time waits, then finds nothing left to do. It creates the
// schema when one is configured and missing.
func (d *Driver) Migrate(ctx context.Context) error {
	migs, err := renderMigrations(d.tables.Schema, d.prefix)
	if err != nil {
		return err
	}
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return d.translate("migrate", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	sv := d.table(d.tables.SchemaVersion)
	if _, err := tx.Exec(ctx, d.q.migrateLock, "txbox:migrate:"+sv); err != nil {
		return d.translate("migrate: lock", err)
	}
	if d.tables.Schema != "" {
		if _, err := tx.Exec(ctx, d.q.createSchema); err != nil {
			return d.translate("migrate: create schema", err)
		}
	}
	if _, err := tx.Exec(ctx, d.q.schemaVersionCreate); err != nil {
		return d.translate("migrate: version table", err)
	}
	var current int
	if err := tx.QueryRow(ctx, d.q.schemaVersionMax).Scan(&current); err != nil {
		return d.translate("migrate: read version", err)
	}
	if current > len(migs) {
		return fmt.Errorf("postgres: migrate: database is at schema version %d, newer than this build's %d", current, len(migs))
	}
	for _, m := range migs[current:] {
		if _, err := tx.Exec(ctx, m.SQL, pgx.QueryExecModeSimpleProtocol); err != nil {
			return d.translate(fmt.Sprintf("migrate: version %d (%s)", m.Version, m.Name), err)
		}
		if _, err := tx.Exec(ctx, d.q.schemaVersionInsert, m.Version, m.Name); err != nil {
			return d.translate("migrate: record version", err)
		}
	}
	if d.notifyTrigger {
		if err := d.createNotifyTrigger(ctx, tx); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return d.translate("migrate: commit", err)
	}
	return nil
}

// notifyTriggerName is the wake-up trigger's name (without the prefix);
// trigger names belong to their table, so it is not schema-qualified.
const notifyTriggerName = "outbox_notify"

// NotifyTriggerSQL returns the statement that creates the opt-in wake-up
// trigger for d's tables (Config.NotifyTrigger), for migration tools that
// manage the schema themselves; it needs schema version 4, which creates
// the function the trigger calls. PostgreSQL 13 has no CREATE OR REPLACE
// TRIGGER, so run it once.
func (d *Driver) NotifyTriggerSQL() string {
	fn := d.table(d.prefix + notifyTriggerName)
	return `CREATE TRIGGER ` + pgx.Identifier{d.prefix + notifyTriggerName}.Sanitize() +
		` AFTER INSERT ON ` + d.table(d.tables.Outbox) +
		` REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ` + fn +
		`(` + quoteLiteral(d.channel) + `)`
}

// HasNotifyTrigger reports whether the outbox table has the wake-up
// trigger.
func (d *Driver) HasNotifyTrigger(ctx context.Context) (bool, error) {
	return d.hasNotifyTrigger(ctx, d.pool)
}

type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (d *Driver) hasNotifyTrigger(ctx context.Context, q queryRower) (bool, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname = $2`,
		d.table(d.tables.Outbox), d.prefix+notifyTriggerName).Scan(&n)
	if err != nil {
		return false, d.translate("notify trigger: look up", err)
	}
	return n > 0, nil
}

// createNotifyTrigger creates the wake-up trigger in the migration's
// transaction when it is missing. Creating it locks the outbox table
// against writes until the migration commits, so an existing trigger is
// left alone rather than replaced on every start.
func (d *Driver) createNotifyTrigger(ctx context.Context, tx pgx.Tx) error {
	has, err := d.hasNotifyTrigger(ctx, tx)
	if err != nil || has {
		return err
	}
	if _, err := tx.Exec(ctx, d.NotifyTriggerSQL()); err != nil {
		return d.translate("migrate: create notify trigger", err)
	}
	return nil
}

// quoteLiteral quotes s as an SQL string literal. The channel is made of
// validated identifiers (or a hex hash), so this is belt and braces.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// SchemaVersion returns the highest applied migration version, 0 when none.
func (d *Driver) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := d.pool.QueryRow(ctx, d.q.schemaVersionMax).Scan(&v)
	if err != nil {
		return 0, d.translate("schema version", err)
	}
	return v, nil
}

// LatestSchemaVersion returns the version of the newest embedded
// migration: the one SchemaVersion reports once Migrate ran.
func (d *Driver) LatestSchemaVersion() int {
	ms, err := renderMigrations(d.tables.Schema, store.DefaultTablePrefix)
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

var _ store.SchemaVersioner = (*Driver)(nil)
