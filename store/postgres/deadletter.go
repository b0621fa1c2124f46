package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// DeadLetterMove moves up to Limit FAILED rows to the dead-letter table in
// one statement (lock, delete, insert), so a row is always in exactly one
// of the two tables.
func (d *Driver) DeadLetterMove(ctx context.Context, params *store.DeadLetterMoveParams) (int, error) {
	if params == nil || params.Limit < 1 {
		return 0, errBadParams("dead-letter move", "limit must be at least 1")
	}
	var n int64
	if err := d.pool.QueryRow(ctx, d.q.dlMove, params.Limit).Scan(&n); err != nil {
		return 0, d.translate("dead-letter move", err)
	}
	return int(n), nil
}

func nullTime(t time.Time) pgtype.Timestamptz {
	return pgtype.Timestamptz{Time: t, Valid: !t.IsZero()}
}

// filterArgs are the arguments $1..$9 of the filter. Time bounds are
// rounded up to timestamptz's microseconds (store.FilterBound); no ids is
// NULL, not an empty array.
func filterArgs(f *store.DeadLetterFilter) []any {
	if f == nil {
		f = &store.DeadLetterFilter{}
	}
	var ids []pgtype.UUID
	if len(f.IDs) > 0 {
		ids = pgUUIDs(f.IDs)
	}
	bound := func(t time.Time) pgtype.Timestamptz {
		if t.IsZero() {
			return pgtype.Timestamptz{}
		}
		return nullTime(store.FilterBound(t, time.Microsecond))
	}
	return []any{f.EventType, f.Status, f.Key, f.ErrorContains, bound(f.FailedAfter), bound(f.FailedBefore), ids, f.Group, f.Route}
}

func checkFilter(op string, f *store.DeadLetterFilter) error {
	if err := f.Validate(); err != nil {
		return fmt.Errorf("postgres: %s: %w: %w", op, store.ErrInvalidParams, err)
	}
	return nil
}

// pageArgs are the filter's arguments, the cursor's ($10, $11) and the
// limit ($12) of a listing.
func pageArgs(op string, params *store.DeadLetterListParams) ([]any, error) {
	if params == nil || params.Limit < 1 {
		return nil, errBadParams(op, "limit must be at least 1")
	}
	if err := checkFilter(op, &params.Filter); err != nil {
		return nil, err
	}
	args := filterArgs(&params.Filter)
	if params.After != nil {
		args = append(args, pgtype.Timestamptz{Time: params.After.FailedAt, Valid: true}, pgUUID(params.After.ID))
	} else {
		args = append(args, pgtype.Timestamptz{}, pgUUID(uuid.UUID{}))
	}
	return append(args, params.Limit), nil
}

// DeadLetterList lists dead letters newest failure first (failed_at desc,
// id desc), after params.After, with their payload's size but not the
// payload.
func (d *Driver) DeadLetterList(ctx context.Context, params *store.DeadLetterListParams) ([]*store.DeadLetter, error) {
	args, err := pageArgs("dead-letter list", params)
	if err != nil {
		return nil, err
	}
	rows, err := d.pool.Query(ctx, d.q.dlList, args...)
	if err != nil {
		return nil, d.translate("dead-letter list", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*store.DeadLetter, error) { return scanDeadLetter(row, false) })
	if err != nil {
		return nil, d.translate("dead-letter list", err)
	}
	return out, nil
}

// DeadLetterListIDs lists the ids, failure times and statuses of the dead
// letters DeadLetterList would list.
func (d *Driver) DeadLetterListIDs(ctx context.Context, params *store.DeadLetterListParams) ([]store.DeadLetterEntry, error) {
	args, err := pageArgs("dead-letter list ids", params)
	if err != nil {
		return nil, err
	}
	rows, err := d.pool.Query(ctx, d.q.dlListIDs, args...)
	if err != nil {
		return nil, d.translate("dead-letter list ids", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.DeadLetterEntry, error) {
		var e store.DeadLetterEntry
		err := row.Scan(uuidDest{&e.ID}, &e.FailedAt, &e.Status)
		return e, err
	})
	if err != nil {
		return nil, d.translate("dead-letter list ids", err)
	}
	return out, nil
}

// scanDeadLetter reads the columns of dlCols, and the payload after them
// when withPayload.
func scanDeadLetter(row pgx.Row, withPayload bool) (*store.DeadLetter, error) {
	dl := &store.DeadLetter{}
	var resolved pgtype.Timestamptz
	var headers []byte
	dest := []any{uuidDest{&dl.ID}, &dl.EventType, &dl.Key, &dl.PayloadSize, &headers, &dl.Attempts,
		&dl.LastError, &dl.CreatedAt, &dl.FailedAt, &dl.Status, &resolved, &dl.Route, uuidDest{&dl.EventID}}
	if withPayload {
		dest = append(dest, &dl.Payload)
	}
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	if withPayload && dl.Payload == nil {
		dl.Payload = []byte{}
	}
	// Leniently, like the claim: a dead letter whose headers are not a
	// JSON object (the reason it is here) lists with none, its last error
	// saying why, rather than failing the whole listing.
	dl.Headers, _ = store.DecodeHeaders(headers)
	if resolved.Valid {
		dl.ResolvedAt = resolved.Time
	}
	return dl, nil
}

// DeadLetterCount counts dead letters matching filter.
func (d *Driver) DeadLetterCount(ctx context.Context, filter *store.DeadLetterFilter) (int64, error) {
	if err := checkFilter("dead-letter count", filter); err != nil {
		return 0, err
	}
	var n int64
	if err := d.pool.QueryRow(ctx, d.q.dlCount, filterArgs(filter)...).Scan(&n); err != nil {
		return 0, d.translate("dead-letter count", err)
	}
	return n, nil
}

// DeadLetterGet returns one dead letter or an error matching
// txbox.ErrNotFound.
func (d *Driver) DeadLetterGet(ctx context.Context, id txbox.ID) (*store.DeadLetter, error) {
	dl, err := scanDeadLetter(d.pool.QueryRow(ctx, d.q.dlGet, pgUUID(id)), true)
	if err != nil {
		return nil, d.translate("dead-letter get", err)
	}
	return dl, nil
}

// DeadLetterRetry moves dead letters back to the outbox, same ids,
// attempts 0, due now, in one statement, which also sends one NOTIFY per
// event type on NotifyChannel: a listening relay sends a retried event at
// once instead of at its next poll, whichever process made the retry.
func (d *Driver) DeadLetterRetry(ctx context.Context, ids []txbox.ID) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	var n, types int64
	if err := d.pool.QueryRow(ctx, d.q.dlRetry, pgUUIDs(ids), d.channel).Scan(&n, &types); err != nil {
		return 0, d.translate("dead-letter retry", err)
	}
	return int(n), nil
}

// DeadLetterResolve marks unresolved dead letters RESOLVED.
func (d *Driver) DeadLetterResolve(ctx context.Context, ids []txbox.ID) (int, error) {
	return d.execIDs(ctx, "dead-letter resolve", d.q.dlResolve, ids)
}

// DeadLetterDelete deletes dead letters.
func (d *Driver) DeadLetterDelete(ctx context.Context, ids []txbox.ID) (int, error) {
	return d.execIDs(ctx, "dead-letter delete", d.q.dlDelete, ids)
}

func (d *Driver) execIDs(ctx context.Context, op, query string, ids []txbox.ID) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	tag, err := d.pool.Exec(ctx, query, pgUUIDs(ids))
	if err != nil {
		return 0, d.translate(op, err)
	}
	return int(tag.RowsAffected()), nil
}

// DeadLetterCleanup deletes up to Limit RESOLVED dead letters resolved
// more than OlderThan ago.
func (d *Driver) DeadLetterCleanup(ctx context.Context, params *store.CleanupParams) (int, error) {
	return d.cleanup(ctx, "dead-letter cleanup", d.q.dlCleanup, params)
}
