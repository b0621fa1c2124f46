// Package pgdrop drops a PostgreSQL database that may have logical
// replication slots, which DROP DATABASE refuses to drop, even WITH
// (FORCE): WAL mode's tests and the benchmark's relays create them
// (docs/concepts.md, "WAL mode"). Tests reach it through
// testenv.PostgresDatabase; tools that are not tests (the benchmark) call
// it directly, without importing package testing.
package pgdrop

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Exec runs one statement on a connection to any database of the
// cluster other than the one to drop.
type Exec func(ctx context.Context, query string, args ...any) error

// DB adapts a *sql.DB.
func DB(db *sql.DB) Exec {
	return func(ctx context.Context, query string, args ...any) error {
		_, err := db.ExecContext(ctx, query, args...)
		return err
	}
}

// Timeout bounds DropDatabase's retries when its ctx has no deadline of
// its own.
const Timeout = 30 * time.Second

// DropDatabase drops database name if it exists: it ends the walsenders
// streaming the database's slots, drops the slots, then runs DROP
// DATABASE ... WITH (FORCE), which ends every other session. A terminated
// walsender may hold its slot for a moment after pg_terminate_backend
// returns, and a client may reconnect and take the slot again, so each
// step is retried, every 50ms, until all three succeed in turn or the
// deadline (ctx's, or Timeout) passes.
func DropDatabase(ctx context.Context, exec Exec, name string) error {
	if name == "" || strings.ContainsRune(name, 0) {
		return fmt.Errorf("pgdrop: invalid database name %q", name)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, Timeout)
		defer cancel()
	}
	steps := []struct {
		what, sql string
		args      []any
	}{
		// pg_terminate_backend with a timeout waits for the backend to
		// exit, so the slot is usually free when it returns.
		{"end the walsenders", `SELECT pg_terminate_backend(active_pid, 5000) FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL`, []any{name}},
		{"drop the slots", `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, []any{name}},
		{"drop the database", `DROP DATABASE IF EXISTS "` + strings.ReplaceAll(name, `"`, `""`) + `" WITH (FORCE)`, nil},
	}
	for {
		var err error
		for _, s := range steps {
			if err = exec(ctx, s.sql, s.args...); err != nil {
				err = fmt.Errorf("pgdrop: %s of %s: %w", s.what, name, err)
				break
			}
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
