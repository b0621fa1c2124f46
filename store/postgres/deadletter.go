package postgres

import (
	"context"
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
		return 0, translate("dead-letter move", err)
	}
	return int(n), nil
}

func nullTime(t time.Time) pgtype.Timestamptz {
	return pgtype.Timestamptz{Time: t, Valid: !t.IsZero()}
}

func filterArgs(f *store.DeadLetterFilter) []any {
	if f == nil {
		f = &store.DeadLetterFilter{}
	}
	return []any{f.EventType, f.Status, f.Key, f.ErrorContains, nullTime(f.FailedAfter), nullTime(f.FailedBefore)}
}

func checkFilter(op string, f *store.DeadLetterFilter) error {
	if f == nil {
		return nil
	}
	switch f.Status {
	case "", store.DeadLetterUnresolved, store.DeadLetterResolved:
		return nil
	}
	return errBadParams(op, "status %q must be %s or %s", f.Status, store.DeadLetterUnresolved, store.DeadLetterResolved)
}

// DeadLetterList lists dead letters newest failure first (failed_at desc,
// id desc), after params.After.
func (d *Driver) DeadLetterList(ctx context.Context, params *store.DeadLetterListParams) ([]*store.DeadLetter, error) {
	if params == nil || params.Limit < 1 {
		return nil, errBadParams("dead-letter list", "limit must be at least 1")
	}
	if err := checkFilter("dead-letter list", &params.Filter); err != nil {
		return nil, err
	}
	args := filterArgs(&params.Filter)
	if params.After != nil {
		args = append(args, pgtype.Timestamptz{Time: params.After.FailedAt, Valid: true}, pgUUID(params.After.ID))
	} else {
		args = append(args, pgtype.Timestamptz{}, pgUUID(uuid.UUID{}))
	}
	args = append(args, params.Limit)
	rows, err := d.pool.Query(ctx, d.q.dlList, args...)
	if err != nil {
		return nil, translate("dead-letter list", err)
	}
	defer rows.Close()
	var out []*store.DeadLetter
	for rows.Next() {
		dl, err := scanDeadLetter(rows)
		if err != nil {
			return nil, translate("dead-letter list", err)
		}
		out = append(out, dl)
	}
	if err := rows.Err(); err != nil {
		return nil, translate("dead-letter list", err)
	}
	return out, nil
}

func scanDeadLetter(row pgx.Row) (*store.DeadLetter, error) {
	dl := &store.DeadLetter{}
	var resolved pgtype.Timestamptz
	var headers []byte
	if err := row.Scan(uuidDest{&dl.ID}, &dl.EventType, &dl.Key, &dl.Payload, &headers, &dl.Attempts,
		&dl.LastError, &dl.CreatedAt, &dl.FailedAt, &dl.Status, &resolved); err != nil {
		return nil, err
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
		return 0, translate("dead-letter count", err)
	}
	return n, nil
}

// DeadLetterGet returns one dead letter or an error matching
// txbox.ErrNotFound.
func (d *Driver) DeadLetterGet(ctx context.Context, id txbox.ID) (*store.DeadLetter, error) {
	dl, err := scanDeadLetter(d.pool.QueryRow(ctx, d.q.dlGet, pgUUID(id)))
	if err != nil {
		return nil, translate("dead-letter get", err)
	}
	return dl, nil
}

// DeadLetterRetry moves dead letters back to the outbox, same ids,
// attempts 0, due now, in one statement.
func (d *Driver) DeadLetterRetry(ctx context.Context, ids []txbox.ID) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	var n int64
	if err := d.pool.QueryRow(ctx, d.q.dlRetry, pgUUIDs(ids)).Scan(&n); err != nil {
		return 0, translate("dead-letter retry", err)
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
		return 0, translate(op, err)
	}
	return int(tag.RowsAffected()), nil
}

// DeadLetterCleanup deletes up to Limit RESOLVED dead letters resolved
// more than OlderThan ago.
func (d *Driver) DeadLetterCleanup(ctx context.Context, params *store.CleanupParams) (int, error) {
	if err := checkCleanup("dead-letter cleanup", params); err != nil {
		return 0, err
	}
	tag, err := d.pool.Exec(ctx, d.q.dlCleanup, params.OlderThan.Microseconds(), params.Limit)
	if err != nil {
		return 0, translate("dead-letter cleanup", err)
	}
	return int(tag.RowsAffected()), nil
}
