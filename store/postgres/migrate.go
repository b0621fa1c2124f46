package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox/store"
)

//go:embed migrations/*.sql
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
	files, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []Migration
	for i, f := range files {
		base := strings.TrimSuffix(path.Base(f), ".sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v != i+1 {
			return nil, fmt.Errorf("postgres: migration file %s is not numbered %04d_name.sql", f, i+1)
		}
		raw, err := migrationFS.ReadFile(f)
		if err != nil {
			return nil, err
		}
		sql := placeholder.ReplaceAllStringFunc(string(raw), func(m string) string {
			sub := placeholder.FindStringSubmatch(m)
			ident := pgx.Identifier{prefix + sub[2]}
			if sub[1] == "table" && schema != "" {
				ident = pgx.Identifier{schema, prefix + sub[2]}
			}
			return ident.Sanitize()
		})
		out = append(out, Migration{Version: v, Name: name, SQL: sql})
	}
	return out, nil
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
		return translate("migrate", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	sv := d.table(d.tables.SchemaVersion)
	if _, err := tx.Exec(ctx, d.q.migrateLock, "txbox:migrate:"+sv); err != nil {
		return translate("migrate: lock", err)
	}
	if d.tables.Schema != "" {
		if _, err := tx.Exec(ctx, d.q.createSchema); err != nil {
			return translate("migrate: create schema", err)
		}
	}
	if _, err := tx.Exec(ctx, d.q.schemaVersionCreate); err != nil {
		return translate("migrate: version table", err)
	}
	var current int
	if err := tx.QueryRow(ctx, d.q.schemaVersionMax).Scan(&current); err != nil {
		return translate("migrate: read version", err)
	}
	if current > len(migs) {
		return fmt.Errorf("postgres: migrate: database is at schema version %d, newer than this build's %d", current, len(migs))
	}
	for _, m := range migs[current:] {
		if _, err := tx.Exec(ctx, m.SQL, pgx.QueryExecModeSimpleProtocol); err != nil {
			return translate(fmt.Sprintf("migrate: version %d (%s)", m.Version, m.Name), err)
		}
		if _, err := tx.Exec(ctx, d.q.schemaVersionInsert, m.Version, m.Name); err != nil {
			return translate("migrate: record version", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return translate("migrate: commit", err)
	}
	return nil
}

// SchemaVersion returns the highest applied migration version, 0 when none.
func (d *Driver) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := d.pool.QueryRow(ctx, d.q.schemaVersionMax).Scan(&v)
	if err != nil {
		return 0, translate("schema version", err)
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
