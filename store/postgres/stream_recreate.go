package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txbox/txbox/store"
)

// Recreating a lost slot (docs/operations.md, "Failover"). A failover to a
// standby that has no copy of the slot (PostgreSQL 15/16 never copy one;
// 17+ copies only a failover slot that was synced), or an invalidation by
// max_slot_wal_keep_size, leaves the stream's state row without its slot.
// The relay (database.wal.on-slot-lost: recreate) and txbox migrate then
// make a new slot: the rows in the outbox table are delivered (the new
// slot's snapshot hands them to the poller), the events emitted since the
// last confirm are not (they were in WAL no slot decodes), and the state
// row records that range for status, health and the operator.

var _ interface {
	StreamRecreate(context.Context, time.Duration) (*store.StreamLoss, error)
} = (*Driver)(nil)

// StreamRecreate recreates the slot when its state row is there and the
// slot is missing or invalidated (see store.Streamer); it returns nil, nil
// when there is nothing to recreate. It must run outside any transaction
// of the caller (creating a slot waits for every transaction in the
// cluster that holds a transaction id). It takes the slot's setup lock
// (lockStreamSetup), which txbox migrate and DropStream take too.
func (d *Driver) StreamRecreate(ctx context.Context, timeout time.Duration) (*store.StreamLoss, error) {
	unlock, err := d.lockStreamSetup(ctx, timeout)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return d.recreateLocked(ctx, timeout)
}

// recreateLocked is StreamRecreate with the setup lock held.
func (d *Driver) recreateLocked(ctx context.Context, timeout time.Duration) (*store.StreamLoss, error) {
	loss, err := d.dropLostSlot(ctx)
	if err != nil || loss == nil {
		return nil, err
	}
	if d.wal.Shared {
		// The other schemas' state rows would keep the lost slot's
		// snapshots, and their captured rows written since would belong
		// to no one.
		return nil, fmt.Errorf("postgres: recreate stream: the slot %s was lost (%s), and it is shared by the schemas of the database: txbox does not recreate a shared slot yet; "+
			"drop the slot if it is still there, delete its row in every tenant schema's wal_state (DELETE FROM <schema>.%swal_state WHERE slot_name = '%s') and run txbox migrate, "+
			"which creates the slot for the first schema and joins the others to it (docs/multi-tenant.md, \"WAL mode\"): %w", d.wal.Slot, loss.Reason, d.prefix, d.wal.Slot, store.ErrStreamLost)
	}
	if err := d.createSlot(ctx, timeout); err != nil {
		return nil, fmt.Errorf("postgres: recreate stream: %w", err)
	}
	var to string
	var at time.Time
	err = d.pool.QueryRow(ctx, `UPDATE `+d.walStateTable()+` w SET recreated_at = now(), lost_from = $2::text::pg_lsn, lost_to = s.confirmed_flush_lsn,
		lost_confirmed_at = $3
	FROM pg_replication_slots s WHERE w.slot_name = $1 AND s.slot_name = $1
	RETURNING w.lost_to::text, w.recreated_at`, d.wal.Slot, pglogrepl.LSN(loss.From).String(), pgtype.Timestamptz{Time: loss.LastConfirm, Valid: !loss.LastConfirm.IsZero()}).Scan(&to, &at)
	if err != nil {
		return nil, translate("recreate stream: record the loss", err)
	}
	lsn, err := pglogrepl.ParseLSN(to)
	if err != nil {
		return nil, fmt.Errorf("postgres: recreate stream: the new slot's start %q: %w", to, err)
	}
	loss.To, loss.At = uint64(lsn), at
	return loss, nil
}

// dropLostSlot reads the state and the slot with the emit guard locked
// (a DropStream in progress holds it until it commits), and returns the
// loss to recreate the slot for: nil when the slot is usable or the state
// is gone. An invalidated slot is dropped here, under the guard, so that
// no emit is accepted for it meanwhile; its state row stays for
// createSlot to overwrite.
func (d *Driver) dropLostSlot(ctx context.Context) (*store.StreamLoss, error) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return nil, translate("recreate stream", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE `+d.walGuardTable()+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		return nil, translate("recreate stream: lock the emit guard", err)
	}
	var (
		confirmed   string
		confirmedAt pgtype.Timestamptz
		slotFound   bool
		walStatus   *string
		activePID   *int32
		rowFound    bool
	)
	err = tx.QueryRow(ctx, `
SELECT w.slot_name IS NOT NULL, COALESCE(w.confirmed_lsn::text, '0/0'), w.confirmed_at,
       s.slot_name IS NOT NULL, s.wal_status, s.active_pid
FROM (SELECT 1) one
LEFT JOIN `+d.walStateTable()+` w ON w.slot_name = $1
LEFT JOIN pg_replication_slots s ON s.slot_name = $1 AND s.database = current_database()`, d.wal.Slot).
		Scan(&rowFound, &confirmed, &confirmedAt, &slotFound, &walStatus, &activePID)
	if err != nil {
		return nil, translate("recreate stream: read the state", err)
	}
	invalidated := slotFound && walStatus != nil && *walStatus == "lost"
	if !rowFound || (slotFound && !invalidated) {
		return nil, nil
	}
	from, err := pglogrepl.ParseLSN(confirmed)
	if err != nil {
		return nil, fmt.Errorf("postgres: recreate stream: confirmed_lsn %q: %w", confirmed, err)
	}
	loss := &store.StreamLoss{Slot: d.wal.Slot, From: uint64(from), Reason: "the slot does not exist on this server (a failover to a standby without it, or it was dropped)"}
	if confirmedAt.Valid {
		loss.LastConfirm = confirmedAt.Time
	}
	if invalidated {
		if activePID != nil {
			return nil, fmt.Errorf("postgres: recreate stream: the invalidated slot %s is still streamed by backend %d", d.wal.Slot, *activePID)
		}
		loss.Reason = "PostgreSQL invalidated the slot (wal_status lost: it needed WAL beyond max_slot_wal_keep_size)"
		if _, err := tx.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, d.wal.Slot); err != nil {
			return nil, translate("recreate stream: drop the invalidated slot", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, translate("recreate stream", err)
	}
	return loss, nil
}
