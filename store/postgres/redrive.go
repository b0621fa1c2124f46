package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// redriveSQL selects one page of PROCESSED rows of type $1 in id order
// after $6 and, unless $8, sets them back to PENDING in the same
// statement. The UPDATE rechecks status = 'PROCESSED' on the row it
// finds: a row that the cleanup deleted or another redrive changed after
// the page was read is matched but not changed (under READ COMMITTED the
// UPDATE waits for a concurrent writer and re-reads the row).
//
// The row keeps its id, payload, headers, key and txid: on an ordered
// type it goes back to its place in its key's order, ahead of the key's
// rows still pending. stream_pos 0 makes it the table poller's in WAL mode
// (the publication's row filter leaves it out, and the stream's delete of
// captured rows skips it), as a retried dead letter is. One pg_notify on
// the type, delivered when the statement commits, wakes the relays that
// listen, whichever process redrove.
const redriveSQL = `
	WITH picked AS (
		SELECT o.id, o.processed_at FROM {{outbox}} o
		WHERE o.status = 'PROCESSED' AND o.event_type = $1
		  AND ($2 = '' OR o.event_key = $2)
		  AND ($3::timestamptz IS NULL OR o.processed_at >= $3)
		  AND ($4::timestamptz IS NULL OR o.processed_at < $4)
		  AND ($5::uuid[] IS NULL OR o.id = ANY($5))
		  AND o.id > $6::uuid
		ORDER BY o.id
		LIMIT $7
	),
	upd AS (
		UPDATE {{outbox}} o SET status = 'PENDING', attempts = 0, due_at = now(),
			lease_until = NULL, lease_token = NULL, last_error = NULL, processed_at = NULL, stream_pos = 0
		FROM picked p
		WHERE NOT $8::bool AND o.id = p.id AND o.status = 'PROCESSED'
		RETURNING o.id
	),
	woke AS (
		SELECT pg_notify($9, $1) WHERE EXISTS (SELECT 1 FROM upd)
	)
	SELECT p.id, p.processed_at, u.id IS NOT NULL, (SELECT count(*) FROM woke)
	FROM picked p LEFT JOIN upd u ON u.id = p.id
	ORDER BY p.id`

// OutboxRedrive sets one page of kept (PROCESSED) rows back to PENDING,
// in one statement that also wakes listening relays. See
// store.OutboxRedriver.
func (d *Driver) OutboxRedrive(ctx context.Context, params *store.OutboxRedriveParams) (*store.OutboxRedriveResult, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("postgres: outbox redrive: %w", err)
	}
	var ids []pgtype.UUID
	if len(params.IDs) > 0 {
		ids = pgUUIDs(params.IDs)
	}
	bound := func(t time.Time) pgtype.Timestamptz {
		if t.IsZero() {
			return pgtype.Timestamptz{}
		}
		return nullTime(store.FilterBound(t, time.Microsecond))
	}
	rows, err := d.pool.Query(ctx, d.render(redriveSQL), params.EventType, params.Key,
		bound(params.ProcessedAfter), bound(params.ProcessedBefore), ids, pgUUID(params.After),
		params.Limit, params.DryRun, d.channel)
	if err != nil {
		return nil, d.translate("outbox redrive", err)
	}
	defer rows.Close()
	res := &store.OutboxRedriveResult{}
	for rows.Next() {
		var (
			id      txbox.ID
			at      pgtype.Timestamptz
			changed bool
			woke    int64
		)
		if err := rows.Scan(uuidDest{&id}, &at, &changed, &woke); err != nil {
			return nil, d.translate("outbox redrive", err)
		}
		res.Add(id, at.Time)
		if changed {
			res.Changed++
		}
	}
	if err := rows.Err(); err != nil {
		return nil, d.translate("outbox redrive", err)
	}
	return res, nil
}

// Every txbox dialect redrives kept events.
var _ store.OutboxRedriver = (*Driver)(nil)
