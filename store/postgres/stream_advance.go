package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

// advanceTimeout bounds one advanceIdleSlot.
const advanceTimeout = 5 * time.Second

// maxAdvanceDecode bounds the WAL advanceIdleSlot decodes: a slot further
// behind is left to the relays.
const maxAdvanceDecode = 64 << 20

// advanceIdleSlot moves the slot, when no relay streams it, over the WAL
// up to the server's current position as long as that WAL holds nothing
// the stream would deliver: it decodes it as the stream would
// (pg_logical_slot_peek_binary_changes, the same options and decoder) and
// moves the slot to the end of the last transaction before the first one
// with an event. That is what a streaming relay confirms when idle, and
// what lets the slot's catalog_xmin pass the standby's, without which the
// standby's copy stays temporary. It reports whether an event (or more WAL
// than maxAdvanceDecode) holds the slot back.
func (d *Driver) advanceIdleSlot(ctx context.Context) (held bool, err error) {
	if d.wal.Shared {
		return false, nil // one schema's decoder would pass the others' events
	}
	var (
		active              bool
		behind              int64
		flushed, to         string
		nsp, rel, lsn, snap *string
	)
	err = d.pool.QueryRow(ctx, `
SELECT s.active, coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn), 0)::bigint,
       coalesce(s.confirmed_flush_lsn, '0/0')::text, pg_current_wal_lsn()::text,
       (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($2)),
       (SELECT c.relname FROM pg_class c WHERE c.oid = to_regclass($2)),
       (SELECT confirmed_lsn::text FROM `+d.walStateTable()+` WHERE slot_name = $1),
       (SELECT snapshot::text FROM `+d.walStateTable()+` WHERE slot_name = $1)
FROM pg_replication_slots s WHERE s.slot_name = $1`, d.wal.Slot, d.table(d.tables.Outbox)).
		Scan(&active, &behind, &flushed, &to, &nsp, &rel, &lsn, &snap)
	if err != nil {
		return false, translate("create stream: read the slot", err)
	}
	if active || nsp == nil || rel == nil || lsn == nil {
		return false, nil // a relay streams it and confirms what it passes
	}
	if behind > maxAdvanceDecode {
		return true, nil
	}
	skipTo, err := pglogrepl.ParseLSN(*lsn)
	if err != nil {
		return false, fmt.Errorf("postgres: create stream: confirmed_lsn %q: %w", *lsn, err)
	}
	dec := newStreamDecoder(d.messagePrefix(), *nsp, *rel, uint64(skipTo))
	if snap != nil {
		s, err := parseXidSnapshot(*snap)
		if err != nil {
			return false, fmt.Errorf("postgres: create stream: the snapshot of %s: %w", d.walStateTable(), err)
		}
		dec.ownedBy(s)
	}
	passed, held, err := d.peekForEvents(ctx, dec, to)
	if err != nil {
		return false, err
	}
	target := passed
	if !held && !dec.partial() {
		end, err := pglogrepl.ParseLSN(to)
		if err != nil {
			return false, fmt.Errorf("postgres: create stream: %w", err)
		}
		target = uint64(end)
	}
	cur, err := pglogrepl.ParseLSN(flushed)
	if err != nil {
		return false, fmt.Errorf("postgres: create stream: %w", err)
	}
	if target > uint64(cur) {
		if _, err := d.pool.Exec(ctx, `SELECT pg_replication_slot_advance($1, $2::pg_lsn)`, d.wal.Slot, pglogrepl.LSN(target).String()); err != nil {
			return held, advanceError(err)
		}
	}
	return held, nil
}

// peekForEvents decodes the slot's WAL up to to with dec, as the stream
// would, until the first transaction with an event (held). passed is the
// end of the last transaction before it.
func (d *Driver) peekForEvents(ctx context.Context, dec *streamDecoder, to string) (passed uint64, held bool, err error) {
	rows, err := d.pool.Query(ctx, `SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes($1, $2::pg_lsn, NULL,
		'proto_version', '1', 'publication_names', $3, 'messages', 'true', 'binary', 'true')`, d.wal.Slot, to, d.wal.Publication)
	if err != nil {
		return 0, false, advanceError(err)
	}
	defer rows.Close()
	for rows.Next() && !held {
		var at string
		var data []byte
		if err := rows.Scan(&at, &data); err != nil {
			return 0, false, translate("create stream: decode the slot", err)
		}
		pos, err := pglogrepl.ParseLSN(at)
		if err != nil {
			return 0, false, fmt.Errorf("postgres: create stream: decode the slot: %w", err)
		}
		r, err := dec.handle(uint64(pos), data)
		switch {
		case err != nil:
			held = true // the stream dead-letters what does not decode: leave it to a relay
		case r.tx != nil:
			held = true
		case r.passed != 0:
			passed = r.passed
		}
	}
	rows.Close()
	return passed, held, advanceError(rows.Err())
}

// advanceError is nil for a slot a relay took meanwhile, which then
// confirms what it passes.
func advanceError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == codeObjectInUse {
		return nil
	}
	return translate("create stream: move the idle slot", err)
}
