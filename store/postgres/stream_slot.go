package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txbox/txbox/store"
)

// The replication slot and the publication of WAL mode (docs/concepts.md,
// "WAL mode"; docs/operations.md, "WAL mode"). `txbox migrate` creates
// them with CreateStream; DropStream removes the slot so that it can be
// created again, for example after PostgreSQL invalidated it.

// minStreamServerVersion is PostgreSQL 15: the publication's row filter
// (WHERE (stream_pos IS NULL)) needs it.
const minStreamServerVersion = 150000

// Table names of migration 6 that store.Tables does not carry.
const (
	walStateTable = "wal_state"
	walGuardTable = "wal_guard"
)

// createSlotHint tells an operator how to find the transaction a slot
// creation waits for.
const createSlotHint = "creating a logical replication slot waits for every transaction in the cluster that holds a transaction id to end; " +
	"find them with: SELECT pid, backend_xid, xact_start, state, query FROM pg_stat_activity WHERE backend_xid IS NOT NULL ORDER BY xact_start"

// recreateHint is the documented way to recreate a lost stream.
const recreateHint = "a relay with database.wal.on-slot-lost: recreate (the default) makes a new slot by itself, and so does `txbox migrate` (Driver.CreateStream); " +
	"the events written to the WAL since the last confirm are not recoverable from the stream (docs/operations.md, \"Failover\")"

func (d *Driver) walStateTable() string { return d.table(d.prefix + walStateTable) }

func (d *Driver) walGuardTable() string { return d.table(d.prefix + walGuardTable) }

// checkWALServer refuses a server that cannot stream: wal_level must be
// logical and the version at least 15. It returns server_version_num.
func (d *Driver) checkWALServer(ctx context.Context) (int, error) {
	var level string
	var version int
	err := d.pool.QueryRow(ctx, `SELECT current_setting('wal_level'), current_setting('server_version_num')::int`).Scan(&level, &version)
	if err != nil {
		return 0, translate("wal mode: read server settings", err)
	}
	return version, walServerError(level, version)
}

// walServerError is checkWALServer's verdict on the settings it read.
func walServerError(level string, version int) error {
	if level != "logical" {
		return fmt.Errorf("postgres: WAL mode needs wal_level = logical, the server has wal_level = %s: set wal_level = logical in postgresql.conf and restart PostgreSQL", level)
	}
	if version < minStreamServerVersion {
		return fmt.Errorf("postgres: WAL mode needs PostgreSQL 15 or later (publication row filters), the server is version %d", version)
	}
	return nil
}

// CreateStreamParams configure CreateStreamWith.
type CreateStreamParams struct {
	// Timeout bounds each wait: the slot's creation (which waits for
	// every transaction in the cluster that holds a transaction id), the
	// same wait when an existing slot is adopted, the change of an
	// existing slot's failover flag while a relay streams it, and the
	// wait for the standbys' copies of the slot. Required.
	Timeout time.Duration
	// RequireFailoverSafe makes CreateStreamWith fail with an error
	// matching ErrNotFailoverSafe when, after the wait, the slot is not
	// shown to be failover-safe (store.FailoverSafe). Defaults to false:
	// the verdict is only reported.
	RequireFailoverSafe bool
}

// StreamSetup is what CreateStreamWith did and found.
type StreamSetup struct {
	// ServerVersion is the primary's server_version_num.
	ServerVersion int
	// Created is true when the slot was created now; Adopted when a slot
	// that existed without its state row was taken over.
	Created, Adopted bool
	// FailoverChanged is true when an existing slot's failover flag was
	// changed to the configured one.
	FailoverChanged bool
	// Notes say what was done; Warnings what an operator should look
	// at. Both are sentences for people.
	Notes, Warnings []string
	// Failover is the slot's protection against a failover at the end.
	Failover store.StreamFailover
	// Waited is how long CreateStreamWith waited for the standbys'
	// copies of the slot.
	Waited time.Duration
	// Loss is what recreating a lost slot cost, nil when none was lost.
	Loss *store.StreamLoss
}

// CreateStream creates WAL mode's publication and replication slot when
// they are missing and brings them into shape; `txbox migrate` calls
// CreateStreamWith, which says what it did. CreateStream logs that
// instead. See CreateStreamWith.
func (d *Driver) CreateStream(ctx context.Context, timeout time.Duration) error {
	res, err := d.CreateStreamWith(ctx, CreateStreamParams{Timeout: timeout})
	if err != nil {
		return err
	}
	for _, n := range res.Notes {
		d.logger.Info("postgres: create stream: "+n, "slot", d.wal.Slot)
	}
	for _, w := range res.Warnings {
		d.logger.Warn("postgres: create stream: "+w, "slot", d.wal.Slot)
	}
	return nil
}

// CreateStreamWith creates WAL mode's publication and replication slot
// when they are missing; `txbox migrate` calls it with database.source
// wal. It is idempotent, and two at once run one after the other (an
// advisory lock). It must run outside any transaction of the caller:
// creating a slot waits for every transaction in the cluster that holds
// a transaction id, including the caller's own, so Timeout bounds that
// wait and the error says how to find the transaction it waited for.
//
// The publication publishes the inserts into the outbox table of rows
// whose stream_pos is NULL: the rows producers insert, never the relay's
// own writes. An existing publication is altered to that shape, never
// dropped: dropping it would break the slot, which reads the publication
// as of each transaction it decodes.
//
// The slot is created with an exported snapshot, and in the same instant
// (a transaction that imports that snapshot) the stream's state row is
// written with the snapshot's pg_current_snapshot(): a captured row
// visible in it was committed before the slot and belongs to the poller,
// every later one to the stream. A slot that exists without its state
// row (made by hand, or left by a migrate that stopped half-way) is
// adopted when it can be (adoptSlot), and refused with the reason
// otherwise.
//
// On PostgreSQL 17+ the slot is a failover slot unless
// WALConfig.DisableFailover says otherwise: created with failover = true,
// or an existing slot altered (ending the walsender of a relay that
// streams it, which streams again on its own). It then nudges the
// standbys' copies into a usable state (pg_log_standby_snapshot()) and
// waits up to Timeout for the standbys of the DSN to show them synced and
// persistent; StreamSetup.Failover has the verdict either way.
func (d *Driver) CreateStreamWith(ctx context.Context, p CreateStreamParams) (*StreamSetup, error) {
	if p.Timeout <= 0 {
		return nil, fmt.Errorf("postgres: create stream: the timeout %s must be positive", p.Timeout)
	}
	version, err := d.checkWALServer(ctx)
	if err != nil {
		return nil, err
	}
	unlock, err := d.lockStreamSetup(ctx, p.Timeout)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := d.ensurePublication(ctx); err != nil {
		return nil, err
	}
	res := &StreamSetup{ServerVersion: version}
	failover := version >= minFailoverServerVersion && !d.wal.DisableFailover
	st, err := d.readSlotSetup(ctx)
	if err != nil {
		return nil, err
	}
	switch {
	case st.rowExists && (st.slot == nil || (st.slot.WALStatus != nil && *st.slot.WALStatus == "lost")):
		// Lost: a failover to a standby without the slot, or an
		// invalidation. Recreate it as a relay would (StreamRecreate).
		loss, err := d.recreateLocked(ctx, p.Timeout)
		if err != nil {
			return nil, err
		}
		if loss != nil {
			res.Created, res.Loss = true, loss
			res.Warnings = append(res.Warnings, fmt.Sprintf("the slot %s was lost (%s) and is recreated: the events emitted between LSN %s (confirmed %s) and %s "+
				"cannot be recovered from the WAL; rows in the outbox table are delivered (docs/operations.md, \"Failover\")",
				d.wal.Slot, loss.Reason, pglogrepl.LSN(loss.From), loss.LastConfirm.Format(time.RFC3339), pglogrepl.LSN(loss.To)))
		}
	case st.rowExists:
	case st.slot != nil && d.wal.Shared:
		if err := d.joinSlot(ctx, st, p.Timeout, res); err != nil {
			return nil, err
		}
	case st.slot != nil:
		if err := d.adoptSlot(ctx, st, p.Timeout, res); err != nil {
			return nil, err
		}
	default:
		if err := d.createSlot(ctx, p.Timeout); err != nil {
			return nil, err
		}
		res.Created = true
		if failover {
			res.Notes = append(res.Notes, "created the slot "+d.wal.Slot+" with failover = true")
		} else {
			res.Notes = append(res.Notes, "created the slot "+d.wal.Slot)
		}
	}
	switch {
	case version < minFailoverServerVersion && !d.wal.DisableFailover:
		res.Notes = append(res.Notes, fmt.Sprintf("database.wal.failover is ignored: PostgreSQL %s has no failover slots (17+), "+
			"so the slot lives on the primary only and a promotion loses it (docs/operations.md, \"Failover\")", versionName(version)))
	case version >= minFailoverServerVersion && !res.Created:
		if err := d.shapeSlotFailover(ctx, failover, p.Timeout, res); err != nil {
			return nil, err
		}
	}
	if err := d.settleFailover(ctx, failover, p.Timeout, res); err != nil {
		return nil, err
	}
	if p.RequireFailoverSafe && !res.Failover.Safe() {
		return res, fmt.Errorf("%w (%s): %s", ErrNotFailoverSafe, res.Failover.Verdict, res.Failover.Note)
	}
	return res, nil
}

// streamTryLockSQL tries the advisory lock of the slot's setup. Its key
// is the slot's own, for whatever else creates or drops the slot to take
// too.
const streamTryLockSQL = `SELECT pg_try_advisory_lock(hashtext('txbox wal slot ' || $1))`

// lockStreamSetup takes a session advisory lock on a connection of its
// own, so that two CreateStreamWith calls for one slot run one after the
// other: one that found the slot without its state row must not adopt a
// slot another is about to write the row for. The lock is waited for up
// to timeout.
func (d *Driver) lockStreamSetup(ctx context.Context, timeout time.Duration) (unlock func(), err error) {
	conn, err := pgx.ConnectConfig(ctx, d.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, translate("create stream: connect", err)
	}
	closeConn := func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx) // ends the session, and its lock with it
	}
	deadline := time.Now().Add(timeout)
	for {
		var got bool
		if err := conn.QueryRow(ctx, streamTryLockSQL, d.wal.Slot).Scan(&got); err != nil {
			closeConn()
			return nil, translate("create stream: lock", err)
		}
		if got {
			return closeConn, nil
		}
		if time.Now().After(deadline) {
			closeConn()
			return nil, fmt.Errorf("postgres: create stream: another txbox migrate has been setting up the slot %s for %s: wait for it, or find it with "+
				"SELECT pid, application_name, query_start FROM pg_locks JOIN pg_stat_activity USING (pid) WHERE locktype = 'advisory'", d.wal.Slot, timeout)
		}
		select {
		case <-ctx.Done():
			closeConn()
			return nil, translate("create stream: lock", ctx.Err())
		case <-time.After(100 * time.Millisecond): // polling the lock up to the deadline
		}
	}
}

// slotRow is a pg_replication_slots row, read as JSON so that one query
// serves every version (failover and invalidation_reason are 17+).
type slotRow struct {
	SlotType           string  `json:"slot_type"`
	Plugin             *string `json:"plugin"`
	Database           *string `json:"database"`
	Temporary          bool    `json:"temporary"`
	ActivePID          *int32  `json:"active_pid"`
	TwoPhase           bool    `json:"two_phase"`
	WALStatus          *string `json:"wal_status"`
	ConfirmedFlushLSN  *string `json:"confirmed_flush_lsn"`
	InvalidationReason *string `json:"invalidation_reason"`
	Failover           *bool   `json:"failover"`
}

// slotSetup is what CreateStreamWith starts from.
type slotSetup struct {
	rowExists bool
	// slot is nil when no slot has the name.
	slot     *slotRow
	database string
}

func (d *Driver) readSlotSetup(ctx context.Context) (*slotSetup, error) {
	st := &slotSetup{}
	err := d.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+d.walStateTable()+` WHERE slot_name = $1),
	       (SELECT to_jsonb(s) FROM pg_replication_slots s WHERE s.slot_name = $1), current_database()`,
		d.wal.Slot).Scan(&st.rowExists, &st.slot, &st.database)
	if err != nil {
		return nil, translate("create stream: read state", err)
	}
	return st, nil
}

// adoptSlot takes over a slot that exists without its state row: made by
// hand (as the way to a failover slot was before migrate made them), or
// left by a migrate that stopped between the slot and its row. It must be
// a pgoutput slot of this database that nobody streams, not temporary,
// not two-phase and not invalidated; anything else is refused with the
// reason.
//
// The slot's creation snapshot is gone, so the state row gets a snapshot
// of now, and the slot is moved to a position before which every
// transaction is visible in that snapshot: the captured rows of those
// transactions belong to the poller (their ownership rule), and the
// stream starts at that position. It skips nothing the stream needs: no
// emit can have happened since the slot was made, because the emit check
// fails while the state table has no row for a slot, and the decoder
// leaves the captured rows the snapshot shows to the poller (so the few
// transactions between the position and the snapshot are not delivered
// twice). Moving the slot also spares the stream transactions older than
// the publication, which pgoutput would refuse to decode.
//
// The position: pg_current_wal_lsn() first, then a wait until every
// transaction that held a transaction id at that moment has ended, then
// the snapshot. A transaction the snapshot does not see got its id after
// the position was read, so it commits after it.
func (d *Driver) adoptSlot(ctx context.Context, st *slotSetup, timeout time.Duration, res *StreamSetup) error {
	s := st.slot
	refuse := func(why string) error {
		return fmt.Errorf("postgres: create stream: the slot %s exists but %s has no row for it, and it cannot be adopted: %s; "+
			"if nothing uses it, drop it (SELECT pg_drop_replication_slot('%s')) and migrate again", d.wal.Slot, d.walStateTable(), why, d.wal.Slot)
	}
	switch {
	case s.SlotType != "logical":
		return refuse("it is a " + s.SlotType + " slot, not a logical one")
	case s.Database == nil || *s.Database != st.database:
		return refuse(fmt.Sprintf("it decodes the database %s, not %s", deref(s.Database, "(none)"), st.database))
	case s.Plugin == nil || *s.Plugin != "pgoutput":
		return refuse(fmt.Sprintf("it uses the output plugin %s, WAL mode needs pgoutput", deref(s.Plugin, "(none)")))
	case s.Temporary:
		return refuse("it is a temporary slot, which ends with its session")
	case s.ActivePID != nil:
		return refuse(fmt.Sprintf("backend %d streams it, so another program uses it", *s.ActivePID))
	case s.TwoPhase:
		return refuse("it was made with two_phase, which WAL mode never uses")
	case s.InvalidationReason != nil || s.WALStatus != nil && *s.WALStatus == "lost":
		return refuse(fmt.Sprintf("PostgreSQL invalidated it (%s)", deref(s.InvalidationReason, "wal_status lost")))
	case s.ConfirmedFlushLSN == nil:
		return refuse("it is not consistent yet (being created)")
	}
	pos, err := d.quietPosition(ctx, timeout, "adopt")
	if err != nil {
		return err
	}
	// Moved only forward: a slot already past the position (read after
	// it) stays where it is.
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err = d.pool.Exec(actx, `SELECT pg_replication_slot_advance($1, $2::pg_lsn) FROM pg_replication_slots
		WHERE slot_name = $1 AND confirmed_flush_lsn < $2::pg_lsn`, d.wal.Slot, pos)
	if err != nil {
		return translate("create stream: adopt: move the slot to "+pos, err)
	}
	if _, err := d.pool.Exec(ctx, `INSERT INTO `+d.walStateTable()+` (slot_name, publication, snapshot) VALUES ($1, $2, pg_current_snapshot())`,
		d.wal.Slot, d.wal.Publication); err != nil {
		return translate("create stream: adopt: state", err)
	}
	res.Adopted = true
	res.Warnings = append(res.Warnings, fmt.Sprintf("adopted the slot %s, which existed without its state row (made by hand, or left by a migrate that stopped): "+
		"it now starts at %s, the rows in the outbox table committed before belong to the poller and every later event to the stream; "+
		"if the slot was another program's, that program has lost it", d.wal.Slot, pos))
	return nil
}

// quietPosition reads pg_current_wal_lsn(), then waits up to timeout
// until every transaction that held a transaction id at that moment has
// ended: a transaction that a snapshot taken afterwards does not see got
// its id after the position, so it commits after it (adoptSlot,
// joinSlot). op names the caller in errors.
func (d *Driver) quietPosition(ctx context.Context, timeout time.Duration, op string) (string, error) {
	var pos, snap string
	if err := d.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&pos); err != nil {
		return "", translate("create stream: "+op+": read the position", err)
	}
	if err := d.pool.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&snap); err != nil {
		return "", translate("create stream: "+op+": read the running transactions", err)
	}
	deadline := time.Now().Add(timeout)
	for {
		var ended bool
		err := d.pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot()) >= pg_snapshot_xmax($1::pg_snapshot)`, snap).Scan(&ended)
		if err != nil {
			return "", translate("create stream: "+op+": wait for the running transactions", err)
		}
		if ended {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("postgres: create stream: %s: the slot %s waited %s for the transactions open at %s to end: %s", op, d.wal.Slot, timeout, pos, adoptHint)
		}
		select {
		case <-ctx.Done():
			return "", translate("create stream: "+op, ctx.Err())
		case <-time.After(50 * time.Millisecond): // polling the transactions up to the deadline
		}
	}
	return pos, nil
}

// joinSlot gives a schema a state row for a shared slot (WALConfig.Shared)
// that other schemas of the database stream: its outbox table is already
// in the publication (ensurePublication), and the slot is not moved (the
// others' unconfirmed events are behind it). The row's position is a
// quiet position read after the table joined the publication, and its
// snapshot is taken after that: a captured row that the snapshot does not
// show was written after the position, by a transaction that sees the
// publication with the table in it, and the stream delivers it; the rows
// the snapshot shows are the poller's. The stream keeps the slot from
// moving while a table of the publication has no state row
// (sharedFloor), so nothing of this schema after the position is
// confirmed before its relay attaches.
func (d *Driver) joinSlot(ctx context.Context, st *slotSetup, timeout time.Duration, res *StreamSetup) error {
	if sl := st.slot; sl.SlotType != "logical" || sl.Database == nil || *sl.Database != st.database || deref(sl.Plugin, "") != "pgoutput" ||
		sl.InvalidationReason != nil || deref(sl.WALStatus, "") == "lost" {
		return fmt.Errorf("postgres: create stream: the shared slot %s cannot be joined: it must be a pgoutput slot of the database %s, not invalidated "+
			"(a %s slot of %s, plugin %s, wal_status %s); if it is lost, drop it and the other schemas' state rows of it, and migrate again (docs/multi-tenant.md, \"WAL mode\")",
			d.wal.Slot, st.database, sl.SlotType, deref(sl.Database, "(none)"), deref(sl.Plugin, "(none)"), deref(sl.WALStatus, "(none)"))
	}
	pos, err := d.quietPosition(ctx, timeout, "join")
	if err != nil {
		return err
	}
	if _, err := d.pool.Exec(ctx, `INSERT INTO `+d.walStateTable()+` (slot_name, publication, snapshot, confirmed_lsn) VALUES ($1, $2, pg_current_snapshot(), $3::text::pg_lsn)`,
		d.wal.Slot, d.wal.Publication, pos); err != nil {
		return translate("create stream: join: state", err)
	}
	res.Notes = append(res.Notes, fmt.Sprintf("joined the shared slot %s at %s", d.wal.Slot, pos))
	return nil
}

// adoptHint tells an operator what an adoption waits for.
const adoptHint = "adopting a slot waits for every transaction that held a transaction id when it started to end; " +
	"find them with: SELECT pid, backend_xid, xact_start, state, query FROM pg_stat_activity WHERE backend_xid IS NOT NULL ORDER BY xact_start"

func deref(s *string, def string) string {
	if s == nil {
		return def
	}
	return *s
}

// ensurePublication creates the publication, or alters an existing one to
// the shape WAL mode needs. A shared one (WALConfig.Shared) gets the
// outbox table added, the other schemas' tables left in place; a table
// there with another row filter is dropped and added again in one
// transaction.
func (d *Driver) ensurePublication(ctx context.Context) error {
	pub := pgx.Identifier{d.wal.Publication}.Sanitize()
	outbox := d.table(d.tables.Outbox)
	var exists, listed, shaped bool
	// A shared publication (WALConfig.Shared) holds the other schemas'
	// outbox tables too: only this one's is checked.
	err := d.pool.QueryRow(ctx, `
SELECT count(*) > 0,
       coalesce(bool_or(EXISTS (SELECT 1 FROM pg_publication_rel pr WHERE pr.prpubid = p.oid AND pr.prrelid = to_regclass($2))), false),
       coalesce(bool_and(NOT p.puballtables AND p.pubinsert AND NOT p.pubupdate AND NOT p.pubdelete AND NOT p.pubtruncate
           AND ($3 OR NOT EXISTS (SELECT 1 FROM pg_publication_namespace pn WHERE pn.pnpubid = p.oid)
               AND (SELECT count(*) FROM pg_publication_rel pr WHERE pr.prpubid = p.oid) = 1)
           AND EXISTS (SELECT 1 FROM pg_publication_rel pr WHERE pr.prpubid = p.oid AND pr.prrelid = to_regclass($2)
                       AND pg_get_expr(pr.prqual, pr.prrelid) = '(stream_pos IS NULL)')), false)
FROM pg_publication p WHERE p.pubname = $1`, d.wal.Publication, outbox, d.wal.Shared).Scan(&exists, &listed, &shaped)
	if err != nil {
		return translate("create stream: read publication", err)
	}
	if shaped {
		return nil
	}
	if !exists {
		_, err := d.pool.Exec(ctx, `CREATE PUBLICATION `+pub+` FOR TABLE `+outbox+` WHERE (stream_pos IS NULL) WITH (publish = 'insert')`)
		var pe *pgconn.PgError
		if err == nil {
			return nil
		}
		if !errors.As(err, &pe) || pe.Code != "42710" { // duplicate_object: another migrate created it meanwhile
			return translate("create stream: create publication", err)
		}
	}
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return translate("create stream: alter publication", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	alter := []string{`SET TABLE ` + outbox + ` WHERE (stream_pos IS NULL)`}
	if d.wal.Shared { // the others' tables stay
		alter = []string{`ADD TABLE ` + outbox + ` WHERE (stream_pos IS NULL)`}
		if listed {
			alter = append([]string{`DROP TABLE ` + outbox}, alter...)
		}
	}
	for _, a := range alter {
		if _, err := tx.Exec(ctx, `ALTER PUBLICATION `+pub+` `+a); err != nil {
			return translate("create stream: alter publication", err)
		}
	}
	if _, err := tx.Exec(ctx, `ALTER PUBLICATION `+pub+` SET (publish = 'insert')`); err != nil {
		return translate("create stream: alter publication", err)
	}
	return translate("create stream: alter publication", tx.Commit(ctx))
}

// replicationConfig is the pool's connection configuration for a
// replication connection (replication=database) with extra startup
// parameters.
func (d *Driver) replicationConfig(params map[string]string) *pgconn.Config {
	cfg := d.pool.Config().ConnConfig.Config.Copy()
	rp := make(map[string]string, len(cfg.RuntimeParams)+len(params)+1)
	for k, v := range cfg.RuntimeParams {
		rp[k] = v
	}
	rp["replication"] = "database"
	for k, v := range params {
		rp[k] = v
	}
	cfg.RuntimeParams = rp
	return cfg
}

// createSlot creates the slot over a replication connection, a failover
// slot on PostgreSQL 17+ unless WALConfig.DisableFailover, and writes the
// state row with the slot's exported snapshot while that snapshot is
// valid (until the replication connection runs another command or
// closes).
func (d *Driver) createSlot(ctx context.Context, timeout time.Duration) error {
	var version int
	if err := d.pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return translate("create stream: read the server version", err)
	}
	failover := version >= minFailoverServerVersion && !d.wal.DisableFailover
	rconn, err := d.migrateReplication(ctx)
	if err != nil {
		return err
	}
	defer closeReplication(rconn)
	res, err := createSlotBounded(ctx, rconn, d.wal.Slot, failover, timeout)
	if err != nil {
		return err
	}
	if err := d.writeStreamState(ctx, res.SnapshotName); err != nil {
		// The slot exists without its state row, which CreateStream
		// would adopt later: drop it now over the same connection.
		if derr := pglogrepl.DropReplicationSlot(ctx, rconn, d.wal.Slot, pglogrepl.DropReplicationSlotOptions{}); derr != nil {
			return fmt.Errorf("%w (and dropping the new slot failed: %v)", err, derr)
		}
		return err
	}
	return nil
}

// createSlotCommand is the CREATE_REPLICATION_SLOT command: the option
// list of PostgreSQL 15+ (pglogrepl's form has no FAILOVER).
func createSlotCommand(slot string, failover bool) string {
	opts := "SNAPSHOT 'export'"
	if failover {
		opts += ", FAILOVER true"
	}
	return "CREATE_REPLICATION_SLOT " + slot + " LOGICAL pgoutput ( " + opts + " )"
}

// createSlotBounded runs CREATE_REPLICATION_SLOT, and when it takes longer
// than timeout (or ctx ends) sends the server a cancel request and waits
// for the server's answer. Cancelling through the server matters: a client
// that only hung up would leave the walsender waiting, and once the
// transactions it waits for ended it would persist the slot without a
// state row.
func createSlotBounded(ctx context.Context, rconn *pgconn.PgConn, slot string, failover bool, timeout time.Duration) (pglogrepl.CreateReplicationSlotResult, error) {
	type result struct {
		res pglogrepl.CreateReplicationSlotResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := pglogrepl.ParseCreateReplicationSlot(rconn.Exec(context.Background(), createSlotCommand(slot, failover)))
		done <- result{r, err}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var why string
	select {
	case r := <-done:
		if r.err != nil {
			return r.res, fmt.Errorf("postgres: create stream: create slot %s: %w", slot, r.err)
		}
		return r.res, nil
	case <-timer.C:
		why = fmt.Sprintf("the slot %s was not created within %s: %s", slot, timeout, createSlotHint)
	case <-ctx.Done():
		why = fmt.Sprintf("creating the slot %s: %v", slot, ctx.Err())
	}
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cerr := rconn.CancelRequest(cctx)
	select {
	case r := <-done:
		if r.err == nil { // it finished as the cancel went out: the slot is there, and so is its snapshot
			return r.res, nil
		}
		return r.res, fmt.Errorf("postgres: create stream: %s: %w", why, r.err)
	case <-cctx.Done():
		_ = rconn.Conn().Close() // unblocks the goroutine
		<-done
		return pglogrepl.CreateReplicationSlotResult{}, fmt.Errorf("postgres: create stream: %s; the cancel request got no answer (%v): check pg_replication_slots for a slot %s without a state row", why, cerr, slot)
	}
}

// writeStreamState inserts the state row in a transaction that imports the
// slot's exported snapshot.
func (d *Driver) writeStreamState(ctx context.Context, snapshot string) error {
	tx, err := d.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return translate("create stream: state", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SET TRANSACTION SNAPSHOT `+quoteLiteral(snapshot)); err != nil {
		return translate("create stream: import the slot's snapshot", err)
	}
	// A state row left from a lost slot (StreamRecreate) is overwritten:
	// the new slot starts afresh, with its own snapshot.
	if _, err := tx.Exec(ctx, `INSERT INTO `+d.walStateTable()+` (slot_name, publication, snapshot) VALUES ($1, $2, pg_current_snapshot())
		ON CONFLICT (slot_name) DO UPDATE SET publication = EXCLUDED.publication, snapshot = EXCLUDED.snapshot,
			confirmed_lsn = '0/0', created_at = now(), confirmed_at = NULL`,
		d.wal.Slot, d.wal.Publication); err != nil {
		return translate("create stream: state", err)
	}
	return translate("create stream: state", tx.Commit(ctx))
}

// DropStream drops WAL mode's replication slot and its state row, so that
// CreateStream can create both again (the way back from an invalidated
// slot). It must run outside any transaction of the caller. It first locks
// the emit guard table exclusively, so that every emit in flight ends
// before the slot goes and no emit starts until the drop commits; a
// walsender streaming the slot is terminated.
//
// The publication is left in place: it costs nothing without a slot, a
// new slot needs it to exist before its start (a slot reads the
// publication as of each transaction it decodes), and other slots an
// operator made on it keep working.
func (d *Driver) DropStream(ctx context.Context) error {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return translate("drop stream", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	// A relay recreating a lost slot (StreamRecreate) holds this lock
	// from its check to its new state row: the drop waits, and a
	// recreate that comes after the drop finds no state and does nothing.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('txbox wal slot ' || $1))`, d.wal.Slot); err != nil {
		return translate("drop stream: lock", err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE `+d.walGuardTable()+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		return translate("drop stream: lock the emit guard", err)
	}
	for {
		var pid *int32
		err := tx.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, d.wal.Slot).Scan(&pid)
		if errors.Is(err, pgx.ErrNoRows) {
			break // no slot: only the state row is left to delete
		}
		if err != nil {
			return translate("drop stream: read slot", err)
		}
		if pid == nil {
			if _, err := tx.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, d.wal.Slot); err != nil {
				return translate("drop stream: drop slot", err)
			}
			break
		}
		// Terminate the walsender and wait (up to 5s) until it is gone,
		// which releases the slot.
		if _, err := tx.Exec(ctx, `SELECT pg_terminate_backend($1, 5000)`, *pid); err != nil {
			return translate("drop stream: terminate the walsender", err)
		}
		select {
		case <-ctx.Done():
			return translate("drop stream", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if _, err := tx.Exec(ctx, `DELETE FROM `+d.walStateTable()+` WHERE slot_name = $1`, d.wal.Slot); err != nil {
		return translate("drop stream: state", err)
	}
	return translate("drop stream", tx.Commit(ctx))
}

// streamStart is what OpenStream reads before it connects.
type streamStart struct {
	confirmed uint64
	// flushed is the slot's confirmed_flush_lsn.
	flushed uint64
	// nsp and rel are the outbox table's schema and name as the
	// replication stream names its relation.
	nsp, rel string
	// snapshot is the state row's snapshot: the captured rows it shows
	// are the poller's.
	snapshot xidSnapshot
}

// checkStream reads the slot and the stream's state and refuses to start
// when streaming could not work or would be unsafe.
func (d *Driver) checkStream(ctx context.Context, busyOK bool) (*streamStart, error) {
	var (
		level, syncNames string
		nsp, rel         *string
		lsn              *string
		slotFound        bool
		walStatus        *string
		activePID        *int32
		plugin           *string
		flushed          *string
		snapshot         *string
	)
	err := d.pool.QueryRow(ctx, `
SELECT current_setting('wal_level'), current_setting('synchronous_standby_names'),
       (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($2)),
       (SELECT c.relname FROM pg_class c WHERE c.oid = to_regclass($2)),
       (SELECT confirmed_lsn::text FROM `+d.walStateTable()+` WHERE slot_name = $1),
       s.slot_name IS NOT NULL, s.wal_status, s.active_pid, s.plugin, s.confirmed_flush_lsn::text,
       (SELECT snapshot::text FROM `+d.walStateTable()+` WHERE slot_name = $1)
FROM (SELECT 1) one
LEFT JOIN pg_replication_slots s ON s.slot_name = $1 AND s.database = current_database()`,
		d.wal.Slot, d.table(d.tables.Outbox)).Scan(&level, &syncNames, &nsp, &rel, &lsn, &slotFound, &walStatus, &activePID, &plugin, &flushed, &snapshot)
	if err != nil {
		return nil, translate("open stream: read the slot", err)
	}
	if level != "logical" {
		return nil, walServerError(level, minStreamServerVersion)
	}
	if nsp == nil || rel == nil {
		return nil, fmt.Errorf("%w (open stream: the outbox table %s is missing)", ErrNotMigrated, d.table(d.tables.Outbox))
	}
	switch {
	case lsn == nil && !slotFound:
		return nil, fmt.Errorf("postgres: open stream: the slot %s does not exist: run txbox migrate (with database.source wal) to create it", d.wal.Slot)
	case lsn == nil:
		return nil, fmt.Errorf("postgres: open stream: the slot %s exists but has no row in %s: run txbox migrate, which says how to repair it", d.wal.Slot, d.walStateTable())
	case !slotFound:
		return nil, fmt.Errorf("postgres: open stream: the slot %s recorded in %s no longer exists: %w; %s", d.wal.Slot, d.walStateTable(), store.ErrStreamLost, recreateHint)
	}
	if walStatus != nil && *walStatus == "lost" {
		return nil, fmt.Errorf("postgres: open stream: PostgreSQL invalidated the slot %s (wal_status lost: it needed WAL beyond max_slot_wal_keep_size): %w; %s",
			d.wal.Slot, store.ErrStreamLost, recreateHint)
	}
	if plugin != nil && *plugin != "pgoutput" {
		return nil, fmt.Errorf("postgres: open stream: the slot %s uses the plugin %s, WAL mode needs pgoutput", d.wal.Slot, *plugin)
	}
	if matchesSyncStandby(syncNames, d.wal.ApplicationName) {
		return nil, fmt.Errorf("postgres: open stream: synchronous_standby_names = %q would choose the relay's replication connection (application_name %q) as a synchronous standby, "+
			"and every commit would then wait for the relay: take the name out of synchronous_standby_names or set a different WAL.ApplicationName",
			syncNames, d.wal.ApplicationName)
	}
	if activePID != nil && !busyOK {
		return nil, fmt.Errorf("postgres: open stream: the slot %s is streamed by backend %d: %w", d.wal.Slot, *activePID, store.ErrStreamBusy)
	}
	start, err := pglogrepl.ParseLSN(*lsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: open stream: confirmed_lsn %q: %w", *lsn, err)
	}
	st := &streamStart{confirmed: uint64(start), nsp: *nsp, rel: *rel}
	if snapshot != nil {
		if st.snapshot, err = parseXidSnapshot(*snapshot); err != nil {
			return nil, fmt.Errorf("postgres: open stream: the snapshot of %s: %w", d.walStateTable(), err)
		}
	}
	if flushed != nil {
		f, err := pglogrepl.ParseLSN(*flushed)
		if err != nil {
			return nil, fmt.Errorf("postgres: open stream: confirmed_flush_lsn %q: %w", *flushed, err)
		}
		st.flushed = uint64(f)
	}
	return st, nil
}

// CheckStream runs the checks OpenStream makes before it connects:
// wal_level, synchronous_standby_names against the application_name, and
// the slot (present in this database, not invalidated). A slot another
// relay streams passes. It opens no replication connection, so it cannot
// tell whether the role may replicate; `config check --connect` says so.
func (d *Driver) CheckStream(ctx context.Context) error {
	_, err := d.checkStream(ctx, false)
	if errors.Is(err, store.ErrStreamBusy) {
		return nil
	}
	return err
}
