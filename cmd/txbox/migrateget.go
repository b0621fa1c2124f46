package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/txbox/txbox/store/mysql"
	"github.com/txbox/txbox/store/postgres"
	"github.com/txbox/txbox/store/sqlite"
)

const migrateGetUsage = "migrate get --dialect postgres|mysql|sqlite --out DIR [--schema NAME] [--prefix PREFIX]"

// runMigrateGet writes the embedded migrations, rendered for a schema and
// a table prefix, as golang-migrate's NNNN_name.up.sql and .down.sql files
// for teams that apply schema changes with their own tool
// (docs/operations.md, "Migrations with your own tool"). It reads no
// configuration and opens no database: the files are the same whatever
// the server.
func runMigrateGet(_ context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "migrate get", migrateGetUsage)
	dialect := fs.String("dialect", "", "the database: postgres, mysql or sqlite")
	out := fs.String("out", "", "the `folder` to write the files into (created when missing; files of the same names are replaced)")
	schema := fs.String("schema", "", "the schema (PostgreSQL) or database (MySQL) the tables live in, as database.schema; default: unqualified names")
	prefix := fs.String("prefix", "", "the table prefix, as database.table-prefix; default txbox_")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return usagef("--out is required")
	}
	paths, err := writeMigrations(*dialect, *out, *schema, *prefix)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %d files for %s schema version %d to %s\n", len(paths), *dialect, len(paths)/2, *out)
	return nil
}

// writeMigrations writes dialect's migrations, rendered for schema and
// prefix, into dir.
func writeMigrations(dialect, dir, schema, prefix string) ([]string, error) {
	var (
		paths []string
		err   error
	)
	switch dialect {
	case "postgres":
		paths, err = postgres.WriteMigrations(dir, schema, prefix)
	case "mysql":
		paths, err = mysql.WriteMigrations(dir, mysql.Config{Schema: schema, TablePrefix: prefix})
	case "sqlite":
		if schema != "" {
			return nil, usagef("sqlite has no schemas: drop --schema")
		}
		paths, err = sqlite.WriteMigrations(dir, prefix)
	case "":
		return nil, usagef("--dialect is required (postgres, mysql or sqlite)")
	default:
		return nil, usagef("unknown --dialect %q (postgres, mysql or sqlite)", dialect)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return paths, fmt.Errorf("--out %s: %w", dir, err)
	}
	return paths, err
}
