package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store/postgres/internal/walmsg"
)

// The producer side of WAL mode (docs/schema/postgres.md, "WAL mode
// messages"): each event is one transactional logical decoding message,
// written by the statement that also runs the emit check of migration 6.

// ErrNoSlot matches the error of a WAL mode emit when there is no slot to
// keep the message: no slot recorded (txbox migrate with database.source
// wal has not run), or the recorded slot was dropped. The emit did not
// happen and the caller's transaction is aborted.
var ErrNoSlot = errors.New("postgres: WAL mode has no replication slot")

// ErrSlotNotReady matches the error of a WAL mode emit when the slot
// exists but could lose the message: it decodes another database, is not
// consistent yet (still being created), or its WAL is no longer reserved
// (wal_status unreserved or lost). The emit did not happen and the
// caller's transaction is aborted.
var ErrSlotNotReady = errors.New("postgres: WAL mode's replication slot is not ready")

// walCheckConstraint tags every error of the emit check (the CONSTRAINT
// field of its RAISE), so that the driver tells them from any other
// 42704 or 55000.
const walCheckConstraint = "txbox_wal_check"

// SlotError is the error of an emit that the emit check refused. It
// matches ErrNoSlot or ErrSlotNotReady with errors.Is, and the server's
// *pgconn.PgError (SQLSTATE 42704 or 55000, constraint txbox_wal_check)
// with errors.As.
type SlotError struct {
	// Op is the driver operation that emitted.
	Op string
	// Kind is ErrNoSlot or ErrSlotNotReady.
	Kind error
	// Err is the server's error, with the reason and a hint.
	Err *pgconn.PgError
}

func (e *SlotError) Error() string {
	msg := "postgres: " + e.Op + ": " + e.Err.Message
	if e.Err.Hint != "" {
		msg += " (" + e.Err.Hint + ")"
	}
	return msg
}

// Unwrap returns the sentinel and the server's error.
func (e *SlotError) Unwrap() []error { return []error{e.Kind, e.Err} }

// slotError returns the SlotError of pe, nil when pe is not the check's.
func slotError(op string, pe *pgconn.PgError) error {
	if pe.ConstraintName != walCheckConstraint {
		return nil
	}
	kind := ErrSlotNotReady
	if pe.Code == codeUndefinedObject {
		kind = ErrNoSlot
	}
	return &SlotError{Op: op, Kind: kind, Err: pe}
}

// walQueries renders WAL mode's statements. The check returns the message
// prefix, so each emit depends on it: the one-event statement evaluates
// it as an argument, the batch once in a materialized CTE (not once per
// event: each check locks the guard and reads the slot list; a check per
// message took 2.6 times as long at 100 events, BenchmarkEmitVsInsert).
func (d *Driver) walQueries(q *queries) {
	check := d.table(d.prefix+"wal_check") + `()`
	q.walEmitOne = `SELECT pg_logical_emit_message(true, ` + check + `, $1::bytea)`
	batch := `WITH c AS MATERIALIZED (SELECT ` + check + ` AS prefix)
	SELECT pg_logical_emit_message(true, c.prefix, m) FROM c, unnest(%s) AS m`
	q.walEmitNative = fmt.Sprintf(batch, `$1::bytea[]`)
	q.walEmitText = fmt.Sprintf(batch, `$1::text::bytea[]`)
}

// walInsert emits events (checked non-nil, with ids) in the caller's
// transaction: one statement for all the messages, encoded here. An event
// with a future not-before is emitted like any other, its not-before in
// the message: the relay writes it into the outbox table itself, for the
// poller, at its place in the stream, so a key's later events cannot pass
// it (before schema version 7 it went into the table at once, which the
// stream never saw). No NOTIFY: the stream needs none.
func (d *Driver) walInsert(ctx context.Context, ex txExec, events []*txbox.Event) error {
	now := time.Now()
	var buf []byte
	ends := make([]int, len(events))
	for i, ev := range events {
		if err := txbox.ValidateEventType(ev.Type); err != nil {
			return fmt.Errorf("postgres: emit: event %d: %w", i, err)
		}
		var h []byte
		if len(ev.Headers) > 0 {
			var err error
			if h, err = json.Marshal(ev.Headers); err != nil {
				return fmt.Errorf("postgres: emit: event %d headers: %w", i, err)
			}
		}
		buf = walmsg.Append(buf, ev.ID, now, ev.NotBefore, ev.Type, ev.Key, h, ev.Payload)
		ends[i] = len(buf)
	}
	msgs := make([][]byte, len(ends))
	start := 0
	for i, end := range ends {
		msgs[i], start = buf[start:end:end], end
	}
	var err error
	switch {
	case len(msgs) == 1:
		_, err = ex.exec(ctx, d.q.walEmitOne, msgs[0])
	case ex.native():
		_, err = ex.exec(ctx, d.q.walEmitNative, msgs)
	default:
		_, err = ex.exec(ctx, d.q.walEmitText, byteaArrayText(msgs))
	}
	return d.translate("emit", err)
}

// LockEmits takes the emit guard exclusively in tx, until tx ends: it
// waits for every emit in flight to commit or roll back, and every emit
// after it waits for tx. Drop the slot in tx after it (DropStream does all
// of it); an emit that waited then fails with ErrNoSlot instead of
// writing a message that nothing keeps.
func (d *Driver) LockEmits(ctx context.Context, tx pgx.Tx) error {
	if tx == nil {
		return txbox.ErrNoTransaction
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE `+d.table(d.prefix+"wal_guard")+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		return d.translate("lock emits", err)
	}
	return nil
}

// DropSlotSQL returns the statements that drop the configured slot
// safely, for tooling that runs SQL: in one transaction, lock the emit
// guard, stop the slot's walsender, forget the slot's state and drop it.
// The walsender takes a moment to exit after pg_terminate_backend: if the
// drop reports the slot active, roll back and run it again. The
// publication is left alone.
func (d *Driver) DropSlotSQL() string {
	slot := quoteLiteral(d.wal.Slot)
	return `BEGIN;
LOCK TABLE ` + d.table(d.prefix+"wal_guard") + ` IN ACCESS EXCLUSIVE MODE;
SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = ` + slot + ` AND active_pid IS NOT NULL;
DELETE FROM ` + d.table(d.prefix+"wal_state") + ` WHERE slot_name = ` + slot + `;
SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = ` + slot + `;
COMMIT;
`
}
