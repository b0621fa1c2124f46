package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"fmt"
	"strings"

	"github.com/txbox/txbox/internal/migfiles"
	"github.com/txbox/txbox/store"
)

//go:embed migrations/*.sql migrations/down/*.sql
var migrationFiles embed.FS

// Migration is one versioned step of the schema.
type Migration struct {
	// Version is the step's number, from its file name (0001_initial.sql
	// is version 1). Steps apply in increasing version order.
	Version int
	// Name is the file name.
	Name string
	// SQL is the step's text with the table prefix filled in.
	SQL string
	// Down reverts SQL's schema change, for tools that migrate down
	// (golang-migrate's NNNN_name.down.sql); Migrate never runs it.
	Down string
}

// Migrations returns the embedded migrations with the table prefix filled
// in (empty means store.DefaultTablePrefix), for users who apply schema
// changes with goose, golang-migrate or atlas instead of Migrate. The
// version table is Migrate's own bookkeeping and is not part of them.
func Migrations(prefix string) ([]Migration, error) {
	if _, err := store.NewTables("", prefix); err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	if prefix == "" {
		prefix = store.DefaultTablePrefix
	}
	ms, err := migfiles.Read(migrationFiles, "sqlite")
	if err != nil {
		return nil, err
	}
	// The prefix passed ValidateIdentifier ([A-Za-z_][A-Za-z0-9_]*), and
	// only placeholders inside double-quoted names are replaced.
	render := strings.NewReplacer(`"{prefix}`, `"`+prefix).Replace
	out := make([]Migration, len(ms))
	for i, m := range ms {
		out[i] = Migration{Version: m.Version, Name: fmt.Sprintf("%04d_%s.sql", m.Version, m.Name), SQL: render(m.Up), Down: render(m.Down)}
	}
	return out, nil
}

// WriteMigrations writes Migrations(prefix) into dir as the files of `txbox
// migrate get` (docs/operations.md, "Migrations with your own tool").
func WriteMigrations(dir, prefix string) ([]string, error) {
	ms, err := Migrations(prefix)
	if err != nil {
		return nil, err
	}
	return migfiles.Write(dir, ms, Migration.file)
}

// file is m as migfiles writes it: Name is the embedded file's name,
// 0001_initial.sql, and the file names are built from the name alone.
func (m Migration) file() migfiles.Migration {
	name := strings.TrimSuffix(strings.TrimPrefix(m.Name, fmt.Sprintf("%04d_", m.Version)), ".sql")
	return migfiles.Migration{Version: m.Version, Name: name, Up: m.SQL, Down: m.Down}
}

// Migrate applies the embedded migrations that are not applied yet, each
// recorded in the schema_version table, all inside one BEGIN IMMEDIATE
// transaction: a second Migrate, in this process or another, waits for the
// write lock (busy_timeout), then finds the versions applied and does
// nothing.
func (d *Driver) Migrate(ctx context.Context) error {
	if err := d.check(); err != nil {
		return err
	}
	migs, err := Migrations(d.prefix)
	if err != nil {
		return err
	}
	if err := d.lockWriter(ctx); err != nil {
		return err
	}
	defer d.unlockWriter()

	// A raw connection, because BEGIN IMMEDIATE must be the first statement
	// whatever the pool's DSN says, and the lock-grab write that begin
	// uses needs a table that may not exist yet.
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return d.translate(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return d.translate(fmt.Errorf("migrate: %w", err))
	}
	if err := d.migrate(ctx, conn, migs); err != nil {
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
			// The transaction may have been rolled back already (an
			// interrupted statement does that); if not, the connection is
			// in an unknown state: drop it instead of pooling it.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		return d.translate(fmt.Errorf("migrate: %w", err))
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		return d.translate(fmt.Errorf("migrate: commit: %w", err))
	}
	conn.Close() // back to the pool: warm may need it
	d.warm(ctx)
	return nil
}

func (d *Driver) migrate(ctx context.Context, conn *sql.Conn, migs []Migration) error {
	if _, err := conn.ExecContext(ctx, d.q.schemaVersionCreate); err != nil {
		return err
	}
	var current int
	if err := conn.QueryRowContext(ctx, d.q.schemaVersionMax).Scan(&current); err != nil {
		return err
	}
	for _, m := range migs {
		if m.Version <= current {
			continue
		}
		if _, err := conn.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
		if _, err := conn.ExecContext(ctx, d.q.schemaVersionInsert, m.Version, m.Name); err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
	}
	return nil
}

// SchemaVersion returns the highest applied migration version, 0 when
// none is.
func (d *Driver) SchemaVersion(ctx context.Context) (int, error) {
	if err := d.check(); err != nil {
		return 0, err
	}
	var exists int
	if err := d.db.QueryRowContext(ctx, d.q.schemaVersionExists, d.tables.SchemaVersion).Scan(&exists); err != nil {
		return 0, d.translate(err)
	}
	if exists == 0 {
		return 0, nil
	}
	var v int
	if err := d.db.QueryRowContext(ctx, d.q.schemaVersionMax).Scan(&v); err != nil {
		return 0, d.translate(err)
	}
	return v, nil
}

// LatestSchemaVersion returns the version of the newest embedded
// migration: the one SchemaVersion reports once Migrate ran.
func (d *Driver) LatestSchemaVersion() int {
	ms, err := Migrations("")
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

var _ store.SchemaVersioner = (*Driver)(nil)
