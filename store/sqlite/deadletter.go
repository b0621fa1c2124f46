package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/internal/sqlstore"
)

// DeadLetterMove moves up to Limit FAILED rows, lowest id first, into the
// dead-letter table in one transaction: INSERT ... SELECT ... RETURNING id,
// then DELETE of exactly the returned ids. A dead letter that already has
// the id (a row dead-lettered, retried and failed again while its old dead
// letter was kept) is overwritten and unresolved again.
func (d *Driver) DeadLetterMove(ctx context.Context, params *store.DeadLetterMoveParams) (int, error) {
	if params == nil || params.Limit < 1 {
		return 0, fmt.Errorf("%w: dead-letter move Limit must be ≥ 1", ErrInvalidParams)
	}
	var moved int
	err := d.write(ctx, func(tx *sql.Tx) error {
		ids, err := queryIDs(ctx, tx, d.q.deadLetterMove, params.Limit)
		if err != nil {
			return err
		}
		n, err := execChunked(ctx, tx, d.q.deadLetterMoveDelete, ids)
		if err != nil {
			return err
		}
		if n != len(ids) {
			return fmt.Errorf("moved %d rows but deleted %d", len(ids), n)
		}
		moved = n
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("dead-letter move: %w", err)
	}
	return moved, nil
}

// queryIDs runs a statement returning one text column and collects it.
func queryIDs(ctx context.Context, tx *sql.Tx, query string, args ...any) ([]any, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []any
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// execChunked runs prefix + "(?, ...)" for the ids, at most maxListIDs at a
// time, and returns the rows changed in total.
func execChunked(ctx context.Context, tx *sql.Tx, prefix string, ids []any) (int, error) {
	total := 0
	for start := 0; start < len(ids); start += maxListIDs {
		chunk := ids[start:min(start+maxListIDs, len(ids))]
		n, err := sqlstore.Affected(tx.ExecContext(ctx, prefix+placeholders(len(chunk)), chunk...))
		if err != nil {
			return 0, err
		}
		total += int(n)
	}
	return total, nil
}

// deadLetterSQL is how the filter (and cursor) of a dead-letter listing
// are written for SQLite.
var deadLetterSQL = sqlstore.DeadLetterSQL{
	KeyArg: func(key string) any { return key },
	ErrorContains: func(s string) (string, any) {
		// instr, not LIKE: the user's text has no wildcards to escape.
		// Case-insensitive for ASCII, like a search box.
		return "instr(lower(coalesce(last_error, '')), lower(?)) > 0", s
	},
	// Times are text, compared as text, rounded up to the schema's
	// milliseconds so that, say, 12:00:00.0005 does not select a row
	// stored at 12:00:00.000.
	Time:      formatTime,
	Precision: time.Millisecond,
	InIDs:     func(n int) string { return "id IN " + placeholders(n) },
	After:     "(failed_at < ? OR (failed_at = ? AND id < ?))",
	Invalid:   ErrInvalidParams,
}

// listPage runs a listing statement (columns FROM the dead-letter table)
// with the filter, cursor, order and limit of params.
func (d *Driver) listPage(ctx context.Context, op, query string, params *store.DeadLetterListParams) (*sql.Rows, error) {
	if params == nil || params.Limit < 1 {
		return nil, fmt.Errorf("%w: %s Limit must be ≥ 1", ErrInvalidParams, op)
	}
	if err := d.check(); err != nil {
		return nil, err
	}
	where, args, err := deadLetterSQL.Where(&params.Filter, params.After)
	if err != nil {
		return nil, err
	}
	args = append(args, params.Limit)
	rows, err := d.db.QueryContext(ctx, query+where+" ORDER BY failed_at DESC, id DESC LIMIT ?", args...)
	if err != nil {
		return nil, d.translate(fmt.Errorf("%s: %w", op, err))
	}
	return rows, nil
}

// DeadLetterList lists dead letters matching the filter, newest failure
// first (failed_at desc, id desc), after the cursor, with their payload's
// size but not the payload.
func (d *Driver) DeadLetterList(ctx context.Context, params *store.DeadLetterListParams) ([]*store.DeadLetter, error) {
	rows, err := d.listPage(ctx, "dead-letter list", d.q.deadLetterSelect, params)
	if err != nil {
		return nil, err
	}
	out, err := sqlstore.Collect(rows, []*store.DeadLetter{}, func(r *sql.Rows) (*store.DeadLetter, error) { return scanDeadLetter(r, false) })
	if err != nil {
		return nil, d.translate(fmt.Errorf("dead-letter list: %w", err))
	}
	return out, nil
}

// DeadLetterListIDs lists the ids, failure times and statuses of the dead
// letters DeadLetterList would list. Like the listing, it reads leniently:
// an unreadable id or time comes back as the zero value.
func (d *Driver) DeadLetterListIDs(ctx context.Context, params *store.DeadLetterListParams) ([]store.DeadLetterEntry, error) {
	rows, err := d.listPage(ctx, "dead-letter list ids", d.q.deadLetterSelectIDs, params)
	if err != nil {
		return nil, err
	}
	out, err := sqlstore.Collect(rows, nil, func(r *sql.Rows) (store.DeadLetterEntry, error) {
		var id, failed string
		var e store.DeadLetterEntry
		err := r.Scan(&id, &failed, &e.Status)
		e.ID, _ = txbox.ParseID(id)
		e.FailedAt, _ = parseTime(failed)
		return e, err
	})
	if err != nil {
		return nil, d.translate(fmt.Errorf("dead-letter list ids: %w", err))
	}
	return out, nil
}

type scanner interface{ Scan(dest ...any) error }

// scanDeadLetter reads a dead letter leniently: a row can be here because
// a plain-SQL producer wrote something the relay could not read (its
// last error says what), so an unreadable id, headers value or time is
// returned as the zero value rather than failing the whole listing. It
// reads the columns of the listing, and the payload after them when
// withPayload.
func scanDeadLetter(s scanner, withPayload bool) (*store.DeadLetter, error) {
	var (
		id, typ, headers, created, failed, status string
		key, lastErr, resolved                    sql.NullString
		route, eventID                            string
		payload                                   []byte
		attempts, size                            any
		dl                                        store.DeadLetter
	)
	dest := []any{&id, &typ, &key, &size, &headers, &attempts, &lastErr, &created, &failed, &status, &resolved, &route, &eventID}
	if withPayload {
		dest = append(dest, &payload)
	}
	if err := s.Scan(dest...); err != nil {
		return nil, err
	}
	dl.ID, _ = txbox.ParseID(id)
	dl.EventType, dl.Key, dl.LastError, dl.Status = typ, key.String, lastErr.String, status
	dl.Route = route
	if eventID != "" {
		dl.EventID, _ = txbox.ParseID(eventID)
	}
	if withPayload {
		dl.Payload = payload
		if dl.Payload == nil {
			dl.Payload = []byte{}
		}
	}
	dl.PayloadSize, _ = intValue(size)
	dl.Headers, _ = decodeHeaders(headers)
	dl.Attempts, _ = intValue(attempts)
	dl.CreatedAt, _ = parseTime(created)
	dl.FailedAt, _ = parseTime(failed)
	if resolved.Valid {
		dl.ResolvedAt, _ = parseTime(resolved.String)
	}
	return &dl, nil
}

// DeadLetterCount counts dead letters matching the filter (nil matches
// all).
func (d *Driver) DeadLetterCount(ctx context.Context, filter *store.DeadLetterFilter) (int64, error) {
	if err := d.check(); err != nil {
		return 0, err
	}
	where, args, err := deadLetterSQL.Where(filter, nil)
	if err != nil {
		return 0, err
	}
	var n int64
	if err := d.db.QueryRowContext(ctx, d.q.deadLetterCount+where, args...).Scan(&n); err != nil {
		return 0, d.translate(fmt.Errorf("dead-letter count: %w", err))
	}
	return n, nil
}

// DeadLetterGet returns one dead letter, or an error matching
// txbox.ErrNotFound.
func (d *Driver) DeadLetterGet(ctx context.Context, id txbox.ID) (*store.DeadLetter, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	dl, err := scanDeadLetter(d.db.QueryRowContext(ctx, d.q.deadLetterGet, id.String()), true)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlite: dead letter %s: %w", id, txbox.ErrNotFound)
	}
	if err != nil {
		return nil, d.translate(fmt.Errorf("dead-letter get: %w", err))
	}
	return dl, nil
}

// DeadLetterRetry moves the dead letters back to the outbox as PENDING, due
// now, attempts 0, same id and created_at, in one transaction. An id that
// is unknown, or already back in the outbox, is skipped and not counted.
func (d *Driver) DeadLetterRetry(ctx context.Context, ids []txbox.ID) (int, error) {
	if len(ids) == 0 {
		return 0, d.check()
	}
	args := idArgs(dedupe(ids))
	var moved int
	err := d.write(ctx, func(tx *sql.Tx) error {
		moved = 0
		for start := 0; start < len(args); start += maxListIDs {
			chunk := args[start:min(start+maxListIDs, len(args))]
			// A WHERE clause before ON CONFLICT: see deadLetterMove. A
			// dead letter the outbox triggers of schema version 2 would
			// refuse stays (it could only fail again), rather than
			// failing the whole retry.
			back, err := queryIDs(ctx, tx, d.q.deadLetterRetry+placeholders(len(chunk))+
				" AND "+readableRow+" ON CONFLICT (id) DO NOTHING RETURNING id", chunk...)
			if err != nil {
				return err
			}
			n, err := execChunked(ctx, tx, d.q.deadLetterRetryDel, back)
			if err != nil {
				return err
			}
			moved += n
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("dead-letter retry: %w", err)
	}
	return moved, nil
}

// DeadLetterResolve marks UNRESOLVED dead letters RESOLVED and returns how
// many changed; already resolved or unknown ids are not counted.
func (d *Driver) DeadLetterResolve(ctx context.Context, ids []txbox.ID) (int, error) {
	return d.changeIDs(ctx, "dead-letter resolve", d.q.deadLetterResolve, ids)
}

// DeadLetterDelete deletes dead letters at once, whatever their status.
func (d *Driver) DeadLetterDelete(ctx context.Context, ids []txbox.ID) (int, error) {
	return d.changeIDs(ctx, "dead-letter delete", d.q.deadLetterDelete, ids)
}

func (d *Driver) changeIDs(ctx context.Context, what, prefix string, ids []txbox.ID) (int, error) {
	if len(ids) == 0 {
		return 0, d.check()
	}
	args := idArgs(dedupe(ids))
	var n int
	err := d.write(ctx, func(tx *sql.Tx) error {
		var err error
		n, err = execChunked(ctx, tx, prefix, args)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return n, nil
}

// DeadLetterCleanup deletes up to Limit RESOLVED dead letters resolved more
// than OlderThan ago.
func (d *Driver) DeadLetterCleanup(ctx context.Context, params *store.CleanupParams) (int, error) {
	return d.cleanup(ctx, "dead-letter cleanup", d.q.deadLetterCleanup, params)
}

func dedupe(ids []txbox.ID) []txbox.ID {
	seen := make(map[txbox.ID]struct{}, len(ids))
	out := make([]txbox.ID, 0, len(ids))
	for _, id := range ids {
		if _, ok := seen[id]; !ok {
			seen[id] = struct{}{}
			out = append(out, id)
		}
	}
	return out
}
