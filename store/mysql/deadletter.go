package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/internal/sqlstore"
)

// DeadLetterMove moves up to Limit FAILED outbox rows to the dead-letter
// table: candidates are read without locks, then, in one READ COMMITTED
// transaction, locked through the primary key in key order (SKIP LOCKED,
// so two movers take disjoint rows and neither waits), copied and deleted
// from the outbox (docs/schema/mysql.md, "Lock order"). The outbox row's
// processed_at (when it failed) becomes failed_at.
func (d *Driver) DeadLetterMove(ctx context.Context, params *store.DeadLetterMoveParams) (int, error) {
	if params == nil || params.Limit < 1 {
		return 0, fmt.Errorf("%w: dead-letter move needs Limit >= 1", ErrInvalidParams)
	}
	cand, err := queryIDs(ctx, d.db, d.q.dlMoveCandidates, params.Limit)
	if err != nil || len(cand) == 0 {
		return 0, wrap("dead-letter move", err)
	}
	cand = store.SortedIDs(cand)
	var moved int
	err = d.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		moved, err = d.moveIn(ctx, tx, cand)
		return err
	})
	if err != nil {
		return 0, wrap("dead-letter move", err)
	}
	return moved, nil
}

// moveIn moves those of the FAILED rows cand (sorted) it can lock into the
// dead-letter table inside tx and returns how many it moved. A lock
// claim's finish (lock.go) calls it for the rows it failed, which its
// transaction holds already.
func (d *Driver) moveIn(ctx context.Context, tx *sql.Tx, cand []txbox.ID) (int, error) {
	// Through the primary key and in key order, skipping rows another
	// mover holds, so it never waits.
	ids, err := queryIDs(ctx, tx, inIDs(d.q.dlMoveLock, len(cand)), idArgs(nil, cand)...)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	// An id dead-lettered before, retried, and failed again replaces its
	// old entry (a retry deletes it, but a plain-SQL producer may reuse
	// an id). Look first, without locks: almost always there is none.
	// Not INSERT ... ON DUPLICATE KEY UPDATE, whose duplicate check takes
	// next-key locks even at READ COMMITTED.
	old, err := queryIDs(ctx, tx, inIDs(d.q.dlMoveExisting, len(ids)), idArgs(nil, ids)...)
	if err != nil {
		return 0, err
	}
	if err := deleteEach(ctx, tx, d.q.dlDeleteOne, old); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, inIDs(d.q.dlMoveInsert, len(ids)), idArgs(nil, ids)...); err != nil {
		return 0, err
	}
	if err := deleteEach(ctx, tx, d.q.outboxDeleteOne, ids); err != nil {
		return 0, err
	}
	return len(ids), nil
}

type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func queryIDs(ctx context.Context, q queryer, query string, args ...any) ([]txbox.ID, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []txbox.ID
	for rows.Next() {
		var id txbox.ID
		if err := rows.Scan(idScan{&id}); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// scanDeadLetter reads the columns of deadLetterColumns, and the payload
// after them when withPayload.
func scanDeadLetter(sc interface{ Scan(...any) error }, withPayload bool) (*store.DeadLetter, error) {
	dl := &store.DeadLetter{}
	var key, headers []byte
	var lastErr sql.NullString
	dest := []any{idScan{&dl.ID}, &dl.EventType, &key, &dl.PayloadSize, &headers, &dl.Attempts, &lastErr,
		nullTime{&dl.CreatedAt}, nullTime{&dl.FailedAt}, &dl.Status, nullTime{&dl.ResolvedAt}, &dl.Route, idScan{&dl.EventID}}
	if withPayload {
		dest = append(dest, &dl.Payload)
	}
	if err := sc.Scan(dest...); err != nil {
		return nil, err
	}
	dl.Key = string(key)
	dl.LastError = lastErr.String
	if withPayload && dl.Payload == nil {
		dl.Payload = []byte{}
	}
	// Leniently, like the claim: headers that are not a JSON object (the
	// reason such a row is here) list as none rather than failing.
	dl.Headers, _ = store.DecodeHeaders(headers)
	return dl, nil
}

// likeEscaper escapes LIKE wildcards with '!', an escape character that
// does not depend on the NO_BACKSLASH_ESCAPES SQL mode.
var likeEscaper = strings.NewReplacer("!", "!!", "%", "!%", "_", "!_")

// deadLetterWhere renders a filter (and a listing's cursor) as
// " WHERE ..." (or "") and its args.
func (d *Driver) deadLetterWhere(f *store.DeadLetterFilter, after *store.DeadLetterCursor) (string, []any, error) {
	return sqlstore.DeadLetterSQL{
		KeyArg: func(key string) any { return []byte(key) },
		ErrorContains: func(s string) (string, any) {
			// Case-insensitive substring match.
			return "last_error COLLATE utf8mb4_general_ci LIKE ? ESCAPE '!'",
				"%" + likeEscaper.Replace(strings.ToValidUTF8(s, "")) + "%"
		},
		// Bounds in UTC, rounded up to DATETIME(6)'s microseconds, so the
		// text is never a five-digit year MySQL would misread.
		Time:      dbTimeArg,
		Precision: time.Microsecond,
		InIDs:     func(n int) string { return inIDs("id IN ({{ids}})", n) },
		After:     d.q.dlListAfter,
		Invalid:   ErrInvalidParams,
	}.Where(f, after)
}

// listPage runs a listing statement (columns FROM the dead-letter table)
// with the filter, cursor, order and limit of params.
func (d *Driver) listPage(ctx context.Context, op, query string, params *store.DeadLetterListParams) (*sql.Rows, error) {
	if params == nil || params.Limit < 1 {
		return nil, fmt.Errorf("%w: %s needs Limit >= 1", ErrInvalidParams, op)
	}
	where, args, err := d.deadLetterWhere(&params.Filter, params.After)
	if err != nil {
		return nil, err
	}
	rows, err := d.db.QueryContext(ctx, query+where+d.q.dlListOrder, append(args, params.Limit)...)
	return rows, wrap(op, err)
}

// DeadLetterList lists dead letters matching the filter, newest failure
// first (failed_at desc, id desc), after the keyset cursor, with their
// payload's size but not the payload.
func (d *Driver) DeadLetterList(ctx context.Context, params *store.DeadLetterListParams) ([]*store.DeadLetter, error) {
	rows, err := d.listPage(ctx, "dead-letter list", d.q.dlList, params)
	if err != nil {
		return nil, err
	}
	out, err := sqlstore.Collect(rows, nil, func(r *sql.Rows) (*store.DeadLetter, error) { return scanDeadLetter(r, false) })
	return out, wrap("dead-letter list", err)
}

// DeadLetterListIDs lists the ids, failure times and statuses of the dead
// letters DeadLetterList would list.
func (d *Driver) DeadLetterListIDs(ctx context.Context, params *store.DeadLetterListParams) ([]store.DeadLetterEntry, error) {
	rows, err := d.listPage(ctx, "dead-letter list ids", d.q.dlListIDs, params)
	if err != nil {
		return nil, err
	}
	out, err := sqlstore.Collect(rows, nil, func(r *sql.Rows) (store.DeadLetterEntry, error) {
		var e store.DeadLetterEntry
		err := r.Scan(idScan{&e.ID}, nullTime{&e.FailedAt}, &e.Status)
		return e, err
	})
	return out, wrap("dead-letter list ids", err)
}

// DeadLetterCount counts dead letters matching the filter.
func (d *Driver) DeadLetterCount(ctx context.Context, filter *store.DeadLetterFilter) (int64, error) {
	where, args, err := d.deadLetterWhere(filter, nil)
	if err != nil {
		return 0, err
	}
	var n int64
	if err := d.db.QueryRowContext(ctx, d.q.dlCount+where, args...).Scan(&n); err != nil {
		return 0, wrap("dead-letter count", err)
	}
	return n, nil
}

// DeadLetterGet returns one dead letter, or an error matching
// txbox.ErrNotFound.
func (d *Driver) DeadLetterGet(ctx context.Context, id txbox.ID) (*store.DeadLetter, error) {
	row := d.db.QueryRowContext(ctx, d.q.dlGet, id.String())
	dl, err := scanDeadLetter(row, true)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("mysql: dead letter %s: %w", id, txbox.ErrNotFound)
	}
	if err != nil {
		return nil, wrap("dead-letter get", err)
	}
	return dl, nil
}

// DeadLetterRetry moves the given dead letters back to the outbox in one
// transaction: PENDING, due now, attempts 0, same id and created_at, so
// ordered delivery keeps their place in their key.
func (d *Driver) DeadLetterRetry(ctx context.Context, ids []txbox.ID) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	var moved int
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		moved = 0
		// A dead letter whose headers are not a JSON object (dead-lettered
		// for that reason) stays: the outbox's CHECK would refuse it and
		// fail the whole retry.
		locked, err := queryIDs(ctx, tx, inIDs(d.q.dlRetryLock, len(ids)), idArgs(nil, ids)...)
		if err != nil || len(locked) == 0 {
			return err
		}
		// An id already back in the outbox (a producer re-published it)
		// stays dead-lettered rather than failing the whole batch on a
		// duplicate key.
		present, err := queryIDs(ctx, tx, inIDs(d.q.dlRetryPresent, len(locked)), idArgs(nil, locked)...)
		if err != nil {
			return err
		}
		locked = slices.DeleteFunc(locked, func(id txbox.ID) bool { return slices.Contains(present, id) })
		if len(locked) == 0 {
			return nil
		}
		if _, err := tx.ExecContext(ctx, inIDs(d.q.dlRetryInsert, len(locked)), idArgs(nil, locked)...); err != nil {
			return err
		}
		if err := deleteEach(ctx, tx, d.q.dlDeleteOne, locked); err != nil {
			return err
		}
		moved = len(locked)
		return nil
	})
	if err != nil {
		return 0, wrap("dead-letter retry", err)
	}
	return moved, nil
}

// DeadLetterResolve marks the given unresolved dead letters RESOLVED.
func (d *Driver) DeadLetterResolve(ctx context.Context, ids []txbox.ID) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	n, err := d.exec(ctx, inIDs(d.q.dlResolve, len(ids)), idArgs(nil, ids)...)
	if err != nil {
		return 0, wrap("dead-letter resolve", err)
	}
	return int(n), nil
}

// DeadLetterDelete deletes the given dead letters.
func (d *Driver) DeadLetterDelete(ctx context.Context, ids []txbox.ID) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	n, err := d.exec(ctx, inIDs(d.q.dlDelete, len(ids)), idArgs(nil, ids)...)
	if err != nil {
		return 0, wrap("dead-letter delete", err)
	}
	return int(n), nil
}

// DeadLetterCleanup deletes up to Limit RESOLVED dead letters resolved
// before now - OlderThan, oldest first: candidates are read without locks,
// then deleted by one statement driven by the primary key that checks the
// condition again (readThenWrite, OutboxCleanup).
func (d *Driver) DeadLetterCleanup(ctx context.Context, params *store.CleanupParams) (int, error) {
	if err := checkCleanup(params); err != nil {
		return 0, err
	}
	age := micros(params.OlderThan)
	n, err := d.readThenWrite(ctx, d.q.dlCleanupSelect, []any{age, params.Limit}, d.q.dlCleanupWrite, []any{age})
	if err != nil {
		return 0, wrap("dead-letter cleanup", err)
	}
	return n, nil
}

// deleteEach deletes ids one statement per id (query deletes one id),
// inside tx.
//
// Why not one DELETE ... WHERE id IN (...): in a transaction that already
// holds row locks (taken by SELECT ... FOR UPDATE), an IN-list DELETE on
// MariaDB also locks primary-key records next to the ones it deletes, and
// two such transactions holding interleaved ids deadlock (measured: ~2
// deadlocks per round of 4 concurrent dead-letter movers on a small
// table; 0 with one statement per id). A DELETE by a single key locks that
// key only. The paths that use this (dead-letter move and retry) are rare
// and bounded by their Limit.
func deleteEach(ctx context.Context, tx *sql.Tx, query string, ids []txbox.ID) error {
	for _, id := range ids {
		if _, err := tx.ExecContext(ctx, query, id.String()); err != nil {
			return err
		}
	}
	return nil
}
