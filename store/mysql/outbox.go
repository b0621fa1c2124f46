package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/internal/sqlstore"
)

// execCommitter is the method set OutboxInsert accepts besides *sql.Tx: the
// transaction types of sqlx, bun and similar libraries have it. Commit is
// required only to tell a transaction from a pool or a connection, which
// also have ExecContext but would autocommit the event.
type execCommitter interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	Commit() error
}

// nativer is implemented by wrappers around a native transaction, such as
// store.InboxTx and the conformance suite's transactions.
type nativer interface{ Native() any }

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// txExecer returns the executor of the caller's transaction tx.
func txExecer(tx any) (execer, error) {
	for range 4 { // unwrap at most a few Native() layers
		switch v := tx.(type) {
		case nil:
			return nil, fmt.Errorf("mysql: publish: %w (got nil)", txbox.ErrNoTransaction)
		case *sql.Tx:
			if v == nil {
				return nil, fmt.Errorf("mysql: publish: %w (got a nil *sql.Tx)", txbox.ErrNoTransaction)
			}
			return v, nil
		case *sql.DB:
			return nil, fmt.Errorf("mysql: publish: %w (got *sql.DB, which would autocommit)", txbox.ErrNoTransaction)
		case execCommitter:
			return v, nil
		case nativer:
			tx = v.Native()
		default:
			return nil, &txbox.UnsupportedTxError{Dialect: Dialect, Type: fmt.Sprintf("%T", tx)}
		}
	}
	return nil, &txbox.UnsupportedTxError{Dialect: Dialect, Type: fmt.Sprintf("%T", tx)}
}

// maxRowsPerInsert keeps one INSERT well below the protocol's 65,535
// placeholders (6 per row).
const maxRowsPerInsert = 5000

// OutboxInsert inserts the events inside the caller's transaction with one
// multi-row INSERT (more only when the payloads exceed
// Config.MaxInsertBytes, all in the same transaction). It never begins,
// commits or rolls back. created_at and, without NotBefore, due_at come
// from the database clock (UTC_TIMESTAMP(6)).
func (d *Driver) OutboxInsert(ctx context.Context, tx any, params *store.OutboxInsertParams) error {
	ex, err := txExecer(tx)
	if err != nil {
		return err
	}
	if params == nil || len(params.Events) == 0 {
		return nil
	}
	err = sqlstore.CheckInsertEvents(ErrInvalidParams, params.Events, func(i int, ev *txbox.Event) error {
		if err := txbox.ValidateEventType(ev.Type); err != nil {
			return err
		}
		if len(ev.Key) > MaxKeyLength {
			return fmt.Errorf("%w: event %d: key of %d bytes exceeds %d", ErrInvalidParams, i, len(ev.Key), MaxKeyLength)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if limit := d.maxAllowedPacket(ctx, ex); limit > 0 {
		for i, ev := range params.Events {
			// A payload travels as one parameter, which the server bounds
			// by max_allowed_packet; refuse it here, typed, rather than
			// with a generic server error (MariaDB: 1105) or a reset
			// connection.
			if int64(len(ev.Payload))+packetOverhead > limit {
				return fmt.Errorf("mysql: publish: event %d: payload of %d bytes: %w (%d bytes)", i, len(ev.Payload), ErrPacketTooLarge, limit)
			}
		}
	}
	events := params.Events
	for len(events) > 0 {
		n, size := 0, 0
		for n < len(events) && n < maxRowsPerInsert {
			size += len(events[n].Payload)
			if n > 0 && size > d.maxInsert {
				break
			}
			n++
		}
		q, args, err := d.insertSQL(events[:n])
		if err != nil {
			return err
		}
		if _, err := ex.ExecContext(ctx, q, args...); err != nil {
			return wrap("publish", err)
		}
		events = events[n:]
	}
	return nil
}

// packetOverhead is what one event's other columns and the statement
// around it may add to its payload in a packet.
const packetOverhead = 64 << 10

// maxAllowedPacket returns the server's max_allowed_packet, read once and
// cached; 0 when it is unknown (the server then decides). It reads it
// through the caller's transaction, never from the pool: a caller holding
// the pool's last connection would otherwise wait on itself.
func (d *Driver) maxAllowedPacket(ctx context.Context, ex execer) int64 {
	if v := d.maxPacket.Load(); v > 0 {
		return v
	}
	q, ok := ex.(interface {
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	})
	if !ok {
		return 0
	}
	var v int64
	if err := q.QueryRowContext(ctx, maxAllowedPacketSQL).Scan(&v); err != nil || v <= 0 {
		return 0
	}
	d.maxPacket.Store(v)
	return v
}

func (d *Driver) insertSQL(events []*txbox.Event) (string, []any, error) {
	var b strings.Builder
	b.Grow(80 + 48*len(events))
	b.WriteString(d.q.insert)
	args := make([]any, 0, 6*len(events))
	for i, ev := range events {
		if i > 0 {
			b.WriteString(", ")
		}
		headers, err := sqlstore.EncodeHeaders("mysql", ev.Headers)
		if err != nil {
			return "", nil, err
		}
		var key any // NULL for no key
		if ev.Key != "" {
			key = []byte(ev.Key)
		}
		payload := ev.Payload
		if payload == nil {
			payload = []byte{}
		}
		args = append(args, ev.ID.String(), ev.Type, key, payload, headers)
		if ev.NotBefore.IsZero() {
			b.WriteString(d.q.insertRow)
		} else {
			b.WriteString(d.q.insertRowNotBefore)
			args = append(args, dbTimeArg(ev.NotBefore))
		}
	}
	return b.String(), args, nil
}

// OutboxClaim claims up to Limit due PENDING rows of one type in one short
// READ COMMITTED transaction: SELECT ... ORDER BY due_at, id LIMIT n FOR
// UPDATE SKIP LOCKED through the claim index (forced, so the rows are
// locked in index order and never after a filesort), then one UPDATE by
// primary key that sets IN_PROCESS, the lease and one fresh token.
func (d *Driver) OutboxClaim(ctx context.Context, params *store.OutboxClaimParams) ([]*store.OutboxRow, error) {
	if err := checkClaim(params); err != nil {
		return nil, err
	}
	token := txbox.NewID()
	var out []*store.OutboxRow
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = d.claimIn(ctx, tx, params, token, false)
		return err
	})
	if err != nil {
		return nil, wrap("claim", err)
	}
	return out, nil
}

// checkClaim validates a claim's params.
func checkClaim(params *store.OutboxClaimParams) error {
	if params == nil || params.EventType == "" || params.Limit < 1 || params.LeaseDuration <= 0 {
		return fmt.Errorf("%w: claim needs an event type, Limit >= 1 and LeaseDuration > 0", ErrInvalidParams)
	}
	if err := txbox.ValidateEventType(params.EventType); err != nil {
		return err
	}
	if params.KeyRun < 0 || params.KeyRun > maxKeyRun {
		return fmt.Errorf("%w: claim KeyRun must be between 0 and %d, got %d", ErrInvalidParams, maxKeyRun, params.KeyRun)
	}
	return nil
}

// claimIn runs a claim inside tx: the locking SELECT, then one UPDATE by
// primary key that sets IN_PROCESS, the lease and token.
//
// With lock (the lock claim, lock.go) it stops after the SELECT: the rows
// stay PENDING, held by tx's locks.
func (d *Driver) claimIn(ctx context.Context, tx *sql.Tx, params *store.OutboxClaimParams, token txbox.ID, lock bool) ([]*store.OutboxRow, error) {
	if params.OrderedByKey {
		return d.claimOrderedIn(ctx, tx, params, token, lock)
	}
	rows, err := tx.QueryContext(ctx, d.q.claim, params.EventType, params.Route, params.Limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.OutboxRow
	for rows.Next() {
		r := &store.OutboxRow{EventType: params.EventType, LeaseToken: token}
		var key, headers []byte
		if err := rows.Scan(idScan{&r.ID}, &key, &r.Payload, &headers, &r.Attempts, nullTime{&r.CreatedAt}, &r.Route, idScan{&r.EventID}); err != nil {
			return nil, err
		}
		claimedRow(r, key, headers)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows.Close()
	if len(out) == 0 || lock {
		return out, nil
	}
	if err := d.markInProcess(ctx, tx, out, params.LeaseDuration, token); err != nil {
		return nil, err
	}
	return out, nil
}

// claimedRow completes a claimed row from its key and headers columns. A
// row that cannot be turned into a message is handed out Invalid, for the
// relay to dead-letter, instead of failing the claim: the whole type would
// wedge behind it.
func claimedRow(r *store.OutboxRow, key, headers []byte) {
	r.Key = string(key)
	if r.Payload == nil {
		r.Payload = []byte{}
	}
	var herr error
	if r.Headers, herr = store.DecodeHeaders(headers); herr != nil {
		r.Invalid = herr.Error()
	}
}

// markInProcess sets the claimed rows IN_PROCESS with the lease and token,
// by primary key only, in key order (docs/schema/mysql.md, "Lock order"): the claim's
// transaction already holds the rows' locks, taken in claim order, so its
// UPDATE must not lock anything else. Without the forced key MariaDB was
// seen waiting here on rows outside the list, held by a concurrent cleanup
// or finish waiting on this claim: a deadlock.
func (d *Driver) markInProcess(ctx context.Context, tx *sql.Tx, rows []*store.OutboxRow, lease time.Duration, token txbox.ID) error {
	ids := make([]txbox.ID, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	ids = store.SortedIDs(ids)
	args := make([]any, 0, 2+len(ids))
	args = append(args, micros(lease), token.String())
	args = idArgs(args, ids)
	_, err := tx.ExecContext(ctx, inIDs(d.q.claimUpdate, len(ids)), args...)
	return err
}

type statement struct {
	query string
	args  []any
}

// OutboxFinish applies the outcomes, fenced by lease token: a relay whose
// lease was taken over changes nothing. Every item, whatever its outcome
// and lease token, goes into one UPDATE whose per-row values are CASE
// expressions; with DeleteAcked the acked rows are one DELETE instead and
// the rest one UPDATE. Each statement runs on its own, at READ COMMITTED,
// holding no lock before it starts and taking its row locks through the
// primary key in key order, so no finish can close a deadlock cycle with
// another statement of this driver (docs/schema/mysql.md, "Lock order"). The two
// statements of a DeleteAcked finish are not one transaction: every row's
// outcome is fenced on its own, so a finish retried after the first
// succeeded counts those rows as fenced and changes nothing twice.
func (d *Driver) OutboxFinish(ctx context.Context, params *store.OutboxFinishParams) (*store.OutboxFinishResult, error) {
	stmts, err := d.finishPlan(params, false)
	if err != nil {
		return nil, err
	}
	var finished int64
	for _, st := range stmts {
		n, err := d.exec(ctx, st.query, st.args...)
		if err != nil {
			return nil, wrap("finish", err)
		}
		finished += n
	}
	return finishResult(params, finished), nil
}

func finishResult(params *store.OutboxFinishParams, finished int64) *store.OutboxFinishResult {
	n := 0
	if params != nil {
		n = len(params.Items)
	}
	return &store.OutboxFinishResult{Finished: int(finished), Fenced: n - int(finished)}
}

// finishPlan validates params and returns the fenced statements that apply
// them: at most one DELETE (acked rows, DeleteAcked) and one UPDATE (the
// rest). lock fences them for a lock claim's finish instead (lock.go).
func (d *Driver) finishPlan(params *store.OutboxFinishParams, lock bool) ([]statement, error) {
	if params == nil || len(params.Items) == 0 {
		return nil, nil
	}
	var acked, rest []store.OutboxFinishItem
	seen := make(map[txbox.ID]struct{}, len(params.Items))
	for i, it := range params.Items {
		switch it.Outcome {
		case store.OutcomeAcked, store.OutcomeRetry, store.OutcomeFailed, store.OutcomeReleased:
		default:
			return nil, fmt.Errorf("%w: item %d has unknown outcome %d", ErrInvalidParams, i, it.Outcome)
		}
		if it.RetryAfter < 0 {
			return nil, fmt.Errorf("%w: item %d has a negative RetryAfter", ErrInvalidParams, i)
		}
		// A row is finished once per call; a repeated id (the same row
		// claimed again after its lease, in a group finish) is counted as
		// fenced rather than applied twice, as on PostgreSQL.
		if _, dup := seen[it.ID]; dup {
			continue
		}
		seen[it.ID] = struct{}{}
		if it.Outcome == store.OutcomeAcked && params.DeleteAcked {
			acked = append(acked, it)
		} else {
			rest = append(rest, it)
		}
	}
	var stmts []statement
	if len(acked) > 0 {
		q, args := d.fencedWrite(d.q.finishDelete, nil, acked, lock)
		stmts = append(stmts, statement{q, args})
	}
	if len(rest) > 0 {
		stmts = append(stmts, d.finishUpdate(rest, lock))
	}
	return stmts, nil
}

// fencedWrite completes a write (head is "UPDATE t SET ..." or "DELETE
// FROM t", headArgs its arguments) with the fence of items: WHERE id IN
// (...) AND lease_token = the item's token. The fence is lease_token
// alone: a claim sets it together with IN_PROCESS and every transition
// out of IN_PROCESS clears it, so a matching token implies the row is
// still ours. With no status predicate no secondary index can drive the
// statement: it reads and locks by primary key only, in key order.
func (d *Driver) fencedWrite(head string, headArgs []any, items []store.OutboxFinishItem, lock bool) (string, []any) {
	var q strings.Builder
	q.WriteString(head)
	args := headArgs
	tokens := map[txbox.ID]struct{}{}
	for _, it := range items {
		tokens[it.LeaseToken] = struct{}{}
	}
	q.WriteString(" WHERE id IN (" + placeholders(len(items)) + ")")
	for _, it := range items {
		args = append(args, it.ID.String())
	}
	if lock {
		// A lock claim's rows are ours by the transaction's locks
		// (lock.go): the fence is "still the PENDING row we locked".
		q.WriteString(" AND lease_token IS NULL AND status = 'PENDING'")
		return q.String(), args
	}
	if len(tokens) == 1 {
		q.WriteString(" AND lease_token = ?")
		args = append(args, items[0].LeaseToken.String())
		return q.String(), args
	}
	// A group finish of several claims: each row against its own token.
	q.WriteString(" AND lease_token = CASE id")
	for _, it := range items {
		q.WriteString(" WHEN ? THEN ?")
		args = append(args, it.ID.String(), it.LeaseToken.String())
	}
	q.WriteString(" END")
	return q.String(), args
}

// finishUpdate is the one UPDATE of a finish. Single-table UPDATE assigns
// left to right and later expressions see earlier assignments, so every
// CASE switches on id only and status is assigned last.
func (d *Driver) finishUpdate(items []store.OutboxFinishItem, lock bool) statement {
	var q strings.Builder
	var args []any
	q.WriteString(d.q.finishUpdate)
	caseExpr := func(col string, pick func(it store.OutboxFinishItem) bool, value string, arg func(it store.OutboxFinishItem) []any, elseExpr string) {
		// The same value for every row (an all-acked batch): no CASE.
		all := true
		for _, it := range items {
			all = all && pick(it) && len(arg(it)) == 0
		}
		if all {
			q.WriteString(" " + col + " = " + value + ",")
			return
		}
		first := true
		for _, it := range items {
			if !pick(it) {
				continue
			}
			if first {
				q.WriteString(" " + col + " = CASE id")
				first = false
			}
			q.WriteString(" WHEN ? THEN " + value)
			args = append(args, it.ID.String())
			args = append(args, arg(it)...)
		}
		if !first {
			q.WriteString(" ELSE " + elseExpr + " END,")
		}
	}
	counts := func(it store.OutboxFinishItem) bool {
		return it.Outcome == store.OutcomeRetry || it.Outcome == store.OutcomeFailed
	}
	delayed := func(it store.OutboxFinishItem) bool {
		return it.Outcome == store.OutcomeRetry || it.Outcome == store.OutcomeReleased
	}
	done := func(it store.OutboxFinishItem) bool {
		return it.Outcome == store.OutcomeAcked || it.Outcome == store.OutcomeFailed
	}
	none := func(store.OutboxFinishItem) []any { return nil }
	caseExpr("attempts", counts, "attempts + 1", none, "attempts")
	caseExpr("last_error", counts, "?", func(it store.OutboxFinishItem) []any { return []any{cleanError(it.Error)} }, "last_error")
	caseExpr("due_at", delayed, "UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND", func(it store.OutboxFinishItem) []any { return []any{micros(it.RetryAfter)} }, "due_at")
	// processed_at is when a row was acked (retention) or failed: the
	// dead-letter mover copies it into failed_at.
	caseExpr("processed_at", done, "UTC_TIMESTAMP(6)", none, "processed_at")
	statusOf := func(o store.Outcome) string {
		switch o {
		case store.OutcomeAcked:
			return "'PROCESSED'"
		case store.OutcomeFailed:
			return "'FAILED'"
		}
		return "'PENDING'"
	}
	same := true
	for _, it := range items {
		same = same && statusOf(it.Outcome) == statusOf(items[0].Outcome)
	}
	if same {
		q.WriteString(" status = " + statusOf(items[0].Outcome) + ",")
	} else {
		q.WriteString(" status = CASE id")
		for _, it := range items {
			if st := statusOf(it.Outcome); st != "'PENDING'" {
				q.WriteString(" WHEN ? THEN " + st)
				args = append(args, it.ID.String())
			}
		}
		q.WriteString(" ELSE 'PENDING' END,")
	}
	q.WriteString(" lease_until = NULL, lease_token = NULL")
	query, args := d.fencedWrite(q.String(), args, items, lock)
	return statement{query, args}
}

// OutboxRecover puts up to Limit IN_PROCESS rows whose lease expired back
// to PENDING, due now, attempts unchanged. Like every range write of this
// driver it reads its candidates without locks through a forced index,
// then writes them with one statement driven by the primary key alone
// that checks the condition again (readThenWrite).
func (d *Driver) OutboxRecover(ctx context.Context, params *store.OutboxRecoverParams) (int, error) {
	if params == nil || params.Limit < 1 {
		return 0, fmt.Errorf("%w: recover needs Limit >= 1", ErrInvalidParams)
	}
	n, err := d.readThenWrite(ctx, d.q.recoverSelect, []any{params.Limit}, d.q.recoverWrite, nil)
	if err != nil {
		return 0, wrap("recover", err)
	}
	return n, nil
}

// readThenWrite is the shape of every range write of this driver, so that
// all of them take their row locks in one order, through the primary key
// in key order, holding none before (docs/schema/mysql.md, "Lock order"):
//
//  1. sel, a plain consistent read (no locks), finds candidate ids;
//  2. write, one statement on its own, whose {{ids}} is replaced by the sorted
//     ids' placeholders, changes those that still satisfy its condition
//     (writeArgs bind after the ids). It forces the primary key
//     (updateByID, deleteByID), or it could lock secondary index entries
//     first.
//
// A locking read of a secondary index (SELECT ... FOR UPDATE SKIP LOCKED
// through txbox_claim) followed by the write, as recovery did, locks index
// entries before rows, the reverse of the finish, and deadlocked against
// it on MariaDB.
func (d *Driver) readThenWrite(ctx context.Context, sel string, selArgs []any, write string, writeArgs []any) (int, error) {
	ids, err := queryIDs(ctx, d.db, sel, selArgs...)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	ids = store.SortedIDs(ids)
	args := append(idArgs(nil, ids), writeArgs...)
	n, err := d.exec(ctx, inIDs(write, len(ids)), args...)
	return int(n), err
}

// OutboxPendingTypes lists the types with PENDING rows by a loose index
// scan of the claim index driven from Go: each query jumps to the first
// PENDING entry after the previous type and reads one index entry, so the
// cost is one short query per type, not one row per pending event. (A
// recursive CTE does the same in one statement on PostgreSQL, but MySQL
// and MariaDB execute its correlated step with ref access on status alone
// and read the whole pending range.)
func (d *Driver) OutboxPendingTypes(ctx context.Context) ([]string, error) {
	var out []string
	last := ""
	for {
		var typ string
		err := d.db.QueryRowContext(ctx, d.q.pendingTypes, last).Scan(&typ)
		if errors.Is(err, sql.ErrNoRows) {
			return out, nil
		}
		if err != nil {
			return nil, wrap("pending types", err)
		}
		out = append(out, typ)
		last = typ
	}
}

// OutboxStats counts PENDING, IN_PROCESS and FAILED rows per type and the
// age of the oldest PENDING row on the database clock. The counts read the
// claim index only; the oldest age reads the pending rows themselves, so
// callers should cache the result (the relay's metrics do).
func (d *Driver) OutboxStats(ctx context.Context) ([]*store.OutboxTypeStats, error) {
	rows, err := d.db.QueryContext(ctx, d.q.stats)
	if err != nil {
		return nil, wrap("stats", err)
	}
	defer rows.Close()
	var out []*store.OutboxTypeStats
	for rows.Next() {
		var typ, status string
		var n int64
		var age sql.NullInt64
		if err := rows.Scan(&typ, &status, &n, &age); err != nil {
			return nil, wrap("stats", err)
		}
		if len(out) == 0 || out[len(out)-1].EventType != typ {
			out = append(out, &store.OutboxTypeStats{EventType: typ})
		}
		s := out[len(out)-1]
		switch status {
		case store.StatusPending:
			s.Pending = n
			if age.Valid && age.Int64 > 0 {
				s.OldestPendingAge = time.Duration(age.Int64) * time.Microsecond
			}
		case store.StatusInProcess:
			s.InProcess = n
		case store.StatusFailed:
			s.Failed = n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("stats", err)
	}
	return out, nil
}

// OutboxCleanup deletes up to Limit PROCESSED rows processed before
// now - OlderThan, oldest first: candidates are read through the cleanup
// index without locks, then deleted by one statement driven by the
// primary key that checks the condition again (readThenWrite).
func (d *Driver) OutboxCleanup(ctx context.Context, params *store.CleanupParams) (int, error) {
	if err := checkCleanup(params); err != nil {
		return 0, err
	}
	age := micros(params.OlderThan)
	n, err := d.readThenWrite(ctx, d.q.cleanupSelect, []any{age, params.Limit}, d.q.cleanupWrite, []any{age})
	if err != nil {
		return 0, wrap("cleanup", err)
	}
	return n, nil
}

func checkCleanup(p *store.CleanupParams) error {
	if p == nil || p.Limit < 1 || p.OlderThan < 0 {
		return fmt.Errorf("%w: cleanup needs Limit >= 1 and OlderThan >= 0", ErrInvalidParams)
	}
	return nil
}
