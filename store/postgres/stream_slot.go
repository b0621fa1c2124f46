package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
const recreateHint = "drop the stream (Driver.DropStream) and create it again (Driver.CreateStream, which `txbox migrate` runs); " +
	"the events written to the WAL since the last confirm are not recoverable from the stream (docs/operations.md, \"WAL mode\")"

func (d *Driver) walStateTable() string { return d.table(d.prefix + walStateTable) }
func (d *Driver) walGuardTable() string { return d.table(d.prefix + walGuardTable) }

// checkWALServer refuses a server that cannot stream: wal_level must be
// logical and the version at least 15.
func (d *Driver) checkWALServer(ctx context.Context) error {
	var level string
	var version int
	err := d.pool.QueryRow(ctx, `SELECT current_setting('wal_level'), current_setting('server_version_num')::int`).Scan(&level, &version)
	if err != nil {
		return translate("wal mode: read server settings", err)
	}
	return walServerError(level, version)
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

// CreateStream creates WAL mode's publication and replication slot when
// they are missing; `txbox migrate` calls it with database.source wal.
// It is idempotent. It must run outside any transaction of the caller:
// creating a slot waits for every transaction in the cluster that holds a
// transaction id, including the caller's own, so timeout bounds that wait
// and the error says how to find the transaction it waited for.
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
// every later one to the stream.
func (d *Driver) CreateStream(ctx context.Context, timeout time.Duration) error {
	if err := d.checkWALServer(ctx); err != nil {
		return err
	}
	if err := d.ensurePublication(ctx); err != nil {
		return err
	}
	var rowExists, slotExists bool
	err := d.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+d.walStateTable()+` WHERE slot_name = $1),
	                                    EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`,
		d.wal.Slot).Scan(&rowExists, &slotExists)
	if err != nil {
		return translate("create stream: read state", err)
	}
	switch {
	case rowExists && slotExists:
		return nil
	case rowExists:
		return fmt.Errorf("postgres: create stream: the slot %s recorded in %s no longer exists: %w; %s",
			d.wal.Slot, d.walStateTable(), store.ErrStreamLost, recreateHint)
	case slotExists:
		return fmt.Errorf("postgres: create stream: the slot %s exists but %s has no row for it "+
			"(another txbox migrate is creating it, or one stopped half-way, or the slot is not txbox's): "+
			"if no migrate is running, drop it (Driver.DropStream, or SELECT pg_drop_replication_slot('%s')) and migrate again",
			d.wal.Slot, d.walStateTable(), d.wal.Slot)
	}
	return d.createSlot(ctx, timeout)
}

// ensurePublication creates the publication, or alters an existing one to
// the shape WAL mode needs.
func (d *Driver) ensurePublication(ctx context.Context) error {
	pub := pgx.Identifier{d.wal.Publication}.Sanitize()
	outbox := d.table(d.tables.Outbox)
	var exists, shaped bool
	err := d.pool.QueryRow(ctx, `
SELECT count(*) > 0,
       coalesce(bool_and(NOT p.puballtables AND p.pubinsert AND NOT p.pubupdate AND NOT p.pubdelete AND NOT p.pubtruncate
           AND NOT EXISTS (SELECT 1 FROM pg_publication_namespace pn WHERE pn.pnpubid = p.oid)
           AND (SELECT count(*) FROM pg_publication_rel pr WHERE pr.prpubid = p.oid) = 1
           AND EXISTS (SELECT 1 FROM pg_publication_rel pr WHERE pr.prpubid = p.oid AND pr.prrelid = to_regclass($2)
                       AND pg_get_expr(pr.prqual, pr.prrelid) = '(stream_pos IS NULL)')), false)
FROM pg_publication p WHERE p.pubname = $1`, d.wal.Publication, outbox).Scan(&exists, &shaped)
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
	if _, err := tx.Exec(ctx, `ALTER PUBLICATION `+pub+` SET TABLE `+outbox+` WHERE (stream_pos IS NULL)`); err != nil {
		return translate("create stream: alter publication", err)
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

// createSlot creates the slot over a replication connection and writes the
// state row with the slot's exported snapshot while that snapshot is
// valid (until the replication connection runs another command or
// closes).
func (d *Driver) createSlot(ctx context.Context, timeout time.Duration) error {
	if timeout <= 0 {
		return fmt.Errorf("postgres: create stream: the slot creation timeout %s must be positive", timeout)
	}
	rconn, err := pgconn.ConnectConfig(ctx, d.replicationConfig(map[string]string{"application_name": d.wal.ApplicationName + "-migrate"}))
	if err != nil {
		return fmt.Errorf("postgres: create stream: replication connection: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rconn.Close(cctx)
	}()
	res, err := createSlotBounded(ctx, rconn, d.wal.Slot, timeout)
	if err != nil {
		return err
	}
	if err := d.writeStreamState(ctx, res.SnapshotName); err != nil {
		// The slot exists without its state row, which CreateStream
		// refuses later: drop it now over the same connection.
		if derr := pglogrepl.DropReplicationSlot(ctx, rconn, d.wal.Slot, pglogrepl.DropReplicationSlotOptions{}); derr != nil {
			return fmt.Errorf("%w (and dropping the new slot failed: %v)", err, derr)
		}
		return err
	}
	return nil
}

// createSlotBounded runs CREATE_REPLICATION_SLOT, and when it takes longer
// than timeout (or ctx ends) sends the server a cancel request and waits
// for the server's answer. Cancelling through the server matters: a client
// that only hung up would leave the walsender waiting, and once the
// transactions it waits for ended it would persist the slot without a
// state row.
func createSlotBounded(ctx context.Context, rconn *pgconn.PgConn, slot string, timeout time.Duration) (pglogrepl.CreateReplicationSlotResult, error) {
	type result struct {
		res pglogrepl.CreateReplicationSlotResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := pglogrepl.CreateReplicationSlot(context.Background(), rconn, slot, "pgoutput",
			pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
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
}

// checkStream reads the slot and the stream's state and refuses to start
// when streaming could not work or would be unsafe.
func (d *Driver) checkStream(ctx context.Context) (*streamStart, error) {
	var (
		level, syncNames string
		nsp, rel         *string
		lsn              *string
		slotFound        bool
		walStatus        *string
		activePID        *int32
		plugin           *string
		flushed          *string
	)
	err := d.pool.QueryRow(ctx, `
SELECT current_setting('wal_level'), current_setting('synchronous_standby_names'),
       (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($2)),
       (SELECT c.relname FROM pg_class c WHERE c.oid = to_regclass($2)),
       (SELECT confirmed_lsn::text FROM `+d.walStateTable()+` WHERE slot_name = $1),
       s.slot_name IS NOT NULL, s.wal_status, s.active_pid, s.plugin, s.confirmed_flush_lsn::text
FROM (SELECT 1) one
LEFT JOIN pg_replication_slots s ON s.slot_name = $1 AND s.database = current_database()`,
		d.wal.Slot, d.table(d.tables.Outbox)).Scan(&level, &syncNames, &nsp, &rel, &lsn, &slotFound, &walStatus, &activePID, &plugin, &flushed)
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
	if activePID != nil {
		return nil, fmt.Errorf("postgres: open stream: the slot %s is streamed by backend %d: %w", d.wal.Slot, *activePID, store.ErrStreamBusy)
	}
	start, err := pglogrepl.ParseLSN(*lsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: open stream: confirmed_lsn %q: %w", *lsn, err)
	}
	st := &streamStart{confirmed: uint64(start), nsp: *nsp, rel: *rel}
	if flushed != nil {
		f, err := pglogrepl.ParseLSN(*flushed)
		if err != nil {
			return nil, fmt.Errorf("postgres: open stream: confirmed_flush_lsn %q: %w", *flushed, err)
		}
		st.flushed = uint64(f)
	}
	return st, nil
}

// matchesSyncStandby reports whether synchronous_standby_names (as read
// with current_setting) could choose a standby named app as synchronous.
// The forms are PostgreSQL's (docs/operations.md, "WAL mode"): '*', a plain
// list, "FIRST n (list)", "ANY n (list)" and the old "n (list)"; a name
// may be double-quoted and matches case-insensitively, like PostgreSQL's
// own comparison; '*' in a list matches every name. A setting that does
// not parse matches: PostgreSQL would not accept it either, and refusing
// is the safe answer.
func matchesSyncStandby(setting, app string) bool {
	names, ok := parseSyncStandbyNames(setting)
	if !ok {
		return true
	}
	for _, n := range names {
		if n == "*" || strings.EqualFold(n, app) {
			return true
		}
	}
	return false
}

// parseSyncStandbyNames returns the standby names of a
// synchronous_standby_names value, false when it does not parse.
func parseSyncStandbyNames(s string) ([]string, bool) {
	toks, ok := syncStandbyTokens(s)
	if !ok {
		return nil, false
	}
	if len(toks) == 0 {
		return nil, true
	}
	i := 0
	if !toks[0].quoted && (strings.EqualFold(toks[0].text, "first") || strings.EqualFold(toks[0].text, "any")) &&
		len(toks) > 1 && isNumber(toks[1]) {
		i = 1
	}
	if isNumber(toks[i]) && len(toks) > i+1 && toks[i+1].punct('(') {
		// n (list)
		if len(toks) < i+3 || !toks[len(toks)-1].punct(')') {
			return nil, false
		}
		return syncStandbyList(toks[i+2 : len(toks)-1])
	}
	if i != 0 {
		return nil, false
	}
	return syncStandbyList(toks)
}

// syncStandbyList reads "name, name, ...".
func syncStandbyList(toks []syncToken) ([]string, bool) {
	var names []string
	for j, t := range toks {
		if j%2 == 1 {
			if !t.punct(',') {
				return nil, false
			}
			continue
		}
		if !t.quoted && (t.text == "," || t.text == "(" || t.text == ")") {
			return nil, false
		}
		names = append(names, t.text)
	}
	if len(toks) == 0 || len(toks)%2 == 0 {
		return nil, false
	}
	return names, true
}

type syncToken struct {
	text   string
	quoted bool
}

func (t syncToken) punct(c byte) bool { return !t.quoted && len(t.text) == 1 && t.text[0] == c }

func isNumber(t syncToken) bool {
	if t.quoted {
		return false
	}
	n, err := strconv.Atoi(t.text)
	return err == nil && n >= 0
}

// syncStandbyTokens splits a synchronous_standby_names value into names,
// numbers, quoted names and the punctuation ( ) , as PostgreSQL's scanner
// does: white space separates, "" inside quotes is a quote.
func syncStandbyTokens(s string) ([]syncToken, bool) {
	var toks []syncToken
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '(' || c == ')' || c == ',' || c == '*':
			toks = append(toks, syncToken{text: string(c)})
			i++
		case c == '"':
			var b strings.Builder
			i++
			for {
				if i >= len(s) {
					return nil, false // unterminated
				}
				if s[i] == '"' {
					if i+1 < len(s) && s[i+1] == '"' {
						b.WriteByte('"')
						i += 2
						continue
					}
					i++
					break
				}
				b.WriteByte(s[i])
				i++
			}
			toks = append(toks, syncToken{text: b.String(), quoted: true})
		default:
			j := i
			for j < len(s) && !strings.ContainsRune(" \t\n\r\f\v(),\"*", rune(s[j])) {
				j++
			}
			toks = append(toks, syncToken{text: s[i:j]})
			i = j
		}
	}
	return toks, true
}

// CheckStream runs the checks OpenStream makes before it connects:
// wal_level, synchronous_standby_names against the application_name, and
// the slot (present in this database, not invalidated). A slot another
// relay streams passes. It opens no replication connection, so it cannot
// tell whether the role may replicate; `config check --connect` says so.
func (d *Driver) CheckStream(ctx context.Context) error {
	_, err := d.checkStream(ctx)
	if errors.Is(err, store.ErrStreamBusy) {
		return nil
	}
	return err
}
