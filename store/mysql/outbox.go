package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
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
	for i, ev := range params.Events {
		if ev == nil {
			return fmt.Errorf("%w: event %d is nil", ErrInvalidParams, i)
		}
		if ev.ID == (txbox.ID{}) {
			return fmt.Errorf("%w: event %d has no id", ErrInvalidParams, i)
		}
		if err := txbox.ValidateEventType(ev.Type); err != nil {
			return err
		}
		if len(ev.Key) > MaxKeyLength {
			return fmt.Errorf("%w: event %d: key of %d bytes exceeds %d", ErrInvalidParams, i, len(ev.Key), MaxKeyLength)
		}
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
	if err := q.QueryRowContext(ctx, "SELECT @@max_allowed_packet").Scan(&v); err != nil || v <= 0 {
		return 0
	}
	d.maxPacket.Store(v)
	return v
}

func (d *Driver) insertSQL(events []*txbox.Event) (string, []any, error) {
	var b strings.Builder
	b.Grow(80 + 48*len(events))
	b.WriteString("INSERT INTO ")
	b.WriteString(d.qOutbox)
	b.WriteString(" (id, event_type, event_key, payload, headers, due_at) VALUES ")
	args := make([]any, 0, 6*len(events))
	for i, ev := range events {
		if i > 0 {
			b.WriteString(", ")
		}
		headers, err := encodeHeaders(ev.Headers)
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
			b.WriteString("(?, ?, ?, ?, ?, UTC_TIMESTAMP(6))")
		} else {
			b.WriteString("(?, ?, ?, ?, ?, GREATEST(CAST(? AS DATETIME(6)), UTC_TIMESTAMP(6)))")
			args = append(args, dbTimeArg(ev.NotBefore))
		}
	}
	return b.String(), args, nil
}

func encodeHeaders(h map[string]string) (string, error) {
	if len(h) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return "", fmt.Errorf("mysql: encode headers: %w", err)
	}
	return string(b), nil
}

// decodeHeaders reads the headers column leniently. The library writes a
// JSON object of strings, but a plain-SQL producer may write numbers,
// booleans or nested values; failing the claim would wedge the whole
// event type behind one row, so non-string values are delivered as their
// JSON text (null as ""), and a value that is not a JSON object at all
// yields no headers.
func decodeHeaders(b []byte) map[string]string {
	if len(b) == 0 || string(b) == "{}" {
		return nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil || len(raw) == 0 {
		return nil
	}
	h := make(map[string]string, len(raw))
	for k, v := range raw {
		var s string
		switch {
		case json.Unmarshal(v, &s) == nil:
			h[k] = s
		case string(v) == "null":
			h[k] = ""
		default:
			h[k] = string(v)
		}
	}
	return h
}

// OutboxClaim claims up to Limit due PENDING rows of one type in one short
// READ COMMITTED transaction: SELECT ... ORDER BY due_at, id LIMIT n FOR
// UPDATE SKIP LOCKED through the claim index (forced, so the rows are
// locked in index order and never after a filesort), then one UPDATE by
// primary key that sets IN_PROCESS, the lease and one fresh token.
func (d *Driver) OutboxClaim(ctx context.Context, params *store.OutboxClaimParams) ([]*store.OutboxRow, error) {
	claimSQL, err := d.claimSQL(params)
	if err != nil {
		return nil, err
	}
	token := txbox.NewID()
	var out []*store.OutboxRow
	err = d.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = d.claimIn(ctx, tx, claimSQL, params, token)
		return err
	})
	if err != nil {
		return nil, wrap("claim", err)
	}
	return out, nil
}

// claimSQL validates params and returns the locking SELECT of a claim.
func (d *Driver) claimSQL(params *store.OutboxClaimParams) (string, error) {
	if params == nil || params.EventType == "" || params.Limit < 1 || params.LeaseDuration <= 0 {
		return "", fmt.Errorf("%w: claim needs an event type, Limit >= 1 and LeaseDuration > 0", ErrInvalidParams)
	}
	if err := txbox.ValidateEventType(params.EventType); err != nil {
		return "", err
	}
	var q strings.Builder
	q.WriteString("SELECT o.id, o.event_key, o.payload, o.headers, o.attempts, o.created_at FROM ")
	q.WriteString(d.qOutbox)
	q.WriteString(" o FORCE INDEX (txbox_claim) WHERE o.status = 'PENDING' AND o.event_type = ? AND o.due_at <= UTC_TIMESTAMP(6)")
	if params.KeyRun < 0 || params.KeyRun > maxKeyRun {
		return "", fmt.Errorf("%w: claim KeyRun must be between 0 and %d, got %d", ErrInvalidParams, maxKeyRun, params.KeyRun)
	}
	if params.OrderedByKey {
		return "", nil // claimOrderedIn builds its own statements
	}
	q.WriteString(" ORDER BY o.due_at, o.id LIMIT ? FOR UPDATE SKIP LOCKED")
	return q.String(), nil
}

// claimIn runs a claim inside tx: the locking SELECT, then one UPDATE by
// primary key that sets IN_PROCESS, the lease and token.
func (d *Driver) claimIn(ctx context.Context, tx *sql.Tx, claimSQL string, params *store.OutboxClaimParams, token txbox.ID) ([]*store.OutboxRow, error) {
	if params.OrderedByKey {
		return d.claimOrderedIn(ctx, tx, params, token)
	}
	rows, err := tx.QueryContext(ctx, claimSQL, params.EventType, params.Limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.OutboxRow
	for rows.Next() {
		r := &store.OutboxRow{EventType: params.EventType, LeaseToken: token}
		var key, headers []byte
		if err := rows.Scan(idScan{&r.ID}, &key, &r.Payload, &headers, &r.Attempts, nullTime{&r.CreatedAt}); err != nil {
			return nil, err
		}
		r.Key = string(key)
		if r.Payload == nil {
			r.Payload = []byte{}
		}
		r.Headers = decodeHeaders(headers)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows.Close()
	if len(out) == 0 {
		return nil, nil
	}
	args := make([]any, 0, 2+len(out))
	args = append(args, micros(params.LeaseDuration), token.String())
	for _, r := range out {
		args = append(args, r.ID.String())
	}
	_, err = tx.ExecContext(ctx, updateByID(d.qOutbox)+" SET status = 'IN_PROCESS', lease_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, lease_token = ?"+
		" WHERE id IN ("+placeholders(len(out))+")", args...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

type statement struct {
	query string
	args  []any
}

// OutboxFinish applies the outcomes, fenced by lease token: every statement
// has WHERE status = 'IN_PROCESS' AND lease_token = ? AND id IN (...), so a
// relay whose lease was taken over changes nothing. Acked rows are one
// UPDATE (or DELETE); every other outcome of the same token is one UPDATE
// whose per-row values are CASE expressions. A call with one statement
// (the common all-acked batch) runs without a transaction when the session
// is READ COMMITTED; otherwise the statements share one short transaction.
func (d *Driver) OutboxFinish(ctx context.Context, params *store.OutboxFinishParams) (*store.OutboxFinishResult, error) {
	stmts, err := d.finishPlan(params)
	if err != nil {
		return nil, err
	}
	if len(stmts) == 0 {
		return &store.OutboxFinishResult{}, nil
	}
	var finished int64
	if len(stmts) == 1 {
		finished, err = d.exec(ctx, stmts[0].query, stmts[0].args...)
	} else {
		err = d.inTx(ctx, func(tx *sql.Tx) error {
			var err error
			finished, err = execAll(ctx, tx, stmts)
			return err
		})
	}
	if err != nil {
		return nil, wrap("finish", err)
	}
	return finishResult(params, finished), nil
}

// OutboxFinishAndClaim records the outcome of one batch and claims the
// next in a single READ COMMITTED transaction: one commit instead of two
// for a poller that has a full batch to finish and wants another. It is
// the same as OutboxFinish followed by OutboxClaim, fencing included, but
// the two are atomic together. It is not (yet) part of the store seam;
// see docs/benchmarks/mysql.md for what it saves.
func (d *Driver) OutboxFinishAndClaim(ctx context.Context, finish *store.OutboxFinishParams, claim *store.OutboxClaimParams) (*store.OutboxFinishResult, []*store.OutboxRow, error) {
	stmts, err := d.finishPlan(finish)
	if err != nil {
		return nil, nil, err
	}
	claimSQL, err := d.claimSQL(claim)
	if err != nil {
		return nil, nil, err
	}
	token := txbox.NewID()
	var finished int64
	var rows []*store.OutboxRow
	err = d.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		if finished, err = execAll(ctx, tx, stmts); err != nil {
			return err
		}
		rows, err = d.claimIn(ctx, tx, claimSQL, claim, token)
		return err
	})
	if err != nil {
		return nil, nil, wrap("finish and claim", err)
	}
	return finishResult(finish, finished), rows, nil
}

func execAll(ctx context.Context, tx *sql.Tx, stmts []statement) (int64, error) {
	var total int64
	for _, s := range stmts {
		res, err := tx.ExecContext(ctx, s.query, s.args...)
		if err != nil {
			return 0, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

func finishResult(params *store.OutboxFinishParams, finished int64) *store.OutboxFinishResult {
	n := 0
	if params != nil {
		n = len(params.Items)
	}
	return &store.OutboxFinishResult{Finished: int(finished), Fenced: n - int(finished)}
}

// finishPlan validates params and returns the fenced statements that apply
// them.
func (d *Driver) finishPlan(params *store.OutboxFinishParams) ([]statement, error) {
	if params == nil || len(params.Items) == 0 {
		return nil, nil
	}
	// Group by lease token, keeping the first-seen order; a relay finishes
	// one claim batch per call, so there is usually one group.
	var tokens []txbox.ID
	groups := map[txbox.ID][]store.OutboxFinishItem{}
	for i, it := range params.Items {
		switch it.Outcome {
		case store.OutcomeAcked, store.OutcomeRetry, store.OutcomeFailed, store.OutcomeReleased:
		default:
			return nil, fmt.Errorf("%w: item %d has unknown outcome %d", ErrInvalidParams, i, it.Outcome)
		}
		if it.RetryAfter < 0 {
			return nil, fmt.Errorf("%w: item %d has a negative RetryAfter", ErrInvalidParams, i)
		}
		if _, ok := groups[it.LeaseToken]; !ok {
			tokens = append(tokens, it.LeaseToken)
		}
		groups[it.LeaseToken] = append(groups[it.LeaseToken], it)
	}
	var stmts []statement
	for _, tok := range tokens {
		stmts = append(stmts, d.finishStatements(tok, groups[tok], params.DeleteAcked)...)
	}
	return stmts, nil
}

func (d *Driver) finishStatements(token txbox.ID, items []store.OutboxFinishItem, deleteAcked bool) []statement {
	var acked []txbox.ID
	var rest []store.OutboxFinishItem
	for _, it := range items {
		if it.Outcome == store.OutcomeAcked {
			acked = append(acked, it.ID)
		} else {
			rest = append(rest, it)
		}
	}
	fence := " WHERE status = 'IN_PROCESS' AND lease_token = ? AND id IN ("
	var out []statement
	if len(acked) > 0 {
		var q string
		if deleteAcked {
			q = deleteByID(d.qOutbox) + fence
		} else {
			q = updateByID(d.qOutbox) + " SET status = 'PROCESSED', processed_at = UTC_TIMESTAMP(6), lease_until = NULL, lease_token = NULL" + fence
		}
		args := idArgs([]any{token.String()}, acked)
		out = append(out, statement{q + placeholders(len(acked)) + ")", args})
	}
	if len(rest) == 0 {
		return out
	}
	// One UPDATE for every other outcome. Single-table UPDATE assigns left
	// to right and later expressions see earlier assignments, so every
	// CASE switches on id only and status is assigned last.
	var q strings.Builder
	var args []any
	q.WriteString(updateByID(d.qOutbox))
	q.WriteString(" SET")
	caseExpr := func(col string, pick func(it store.OutboxFinishItem) bool, value string, arg func(it store.OutboxFinishItem) []any, elseExpr string) {
		first := true
		for _, it := range rest {
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
	failed := func(it store.OutboxFinishItem) bool { return it.Outcome == store.OutcomeFailed }
	none := func(store.OutboxFinishItem) []any { return nil }
	caseExpr("attempts", counts, "attempts + 1", none, "attempts")
	caseExpr("last_error", counts, "?", func(it store.OutboxFinishItem) []any { return []any{cleanError(it.Error)} }, "last_error")
	caseExpr("due_at", delayed, "UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND", func(it store.OutboxFinishItem) []any { return []any{micros(it.RetryAfter)} }, "due_at")
	// processed_at of a FAILED row is when it failed: the dead-letter
	// mover copies it into failed_at.
	caseExpr("processed_at", failed, "UTC_TIMESTAMP(6)", none, "processed_at")
	anyFailed := false
	for _, it := range rest {
		anyFailed = anyFailed || failed(it)
	}
	if anyFailed {
		caseExpr("status", failed, "'FAILED'", none, "'PENDING'")
	} else {
		q.WriteString(" status = 'PENDING',")
	}
	q.WriteString(" lease_until = NULL, lease_token = NULL")
	q.WriteString(fence)
	args = append(args, token.String())
	ids := make([]txbox.ID, len(rest))
	for i, it := range rest {
		ids[i] = it.ID
	}
	args = idArgs(args, ids)
	q.WriteString(placeholders(len(rest)) + ")")
	return append(out, statement{q.String(), args})
}

// OutboxRecover puts up to Limit IN_PROCESS rows whose lease expired back
// to PENDING, due now, attempts unchanged. Like every range write of this
// driver it is a locking SELECT ... SKIP LOCKED through a forced index
// followed by a write by primary key, in one short transaction: a range
// UPDATE or DELETE would lock (and wait on) every entry it scans, which
// deadlocks against claims updating the same index.
func (d *Driver) OutboxRecover(ctx context.Context, params *store.OutboxRecoverParams) (int, error) {
	if params == nil || params.Limit < 1 {
		return 0, fmt.Errorf("%w: recover needs Limit >= 1", ErrInvalidParams)
	}
	n, err := d.lockThenWrite(ctx,
		"SELECT id FROM "+d.qOutbox+" FORCE INDEX (txbox_claim) WHERE status = 'IN_PROCESS' AND lease_until < UTC_TIMESTAMP(6) LIMIT ? FOR UPDATE SKIP LOCKED",
		[]any{params.Limit},
		updateByID(d.qOutbox)+" SET status = 'PENDING', due_at = UTC_TIMESTAMP(6), lease_until = NULL, lease_token = NULL WHERE id IN (%s)")
	if err != nil {
		return 0, wrap("recover", err)
	}
	return n, nil
}

// lockThenWrite runs, in one READ COMMITTED transaction, the locking
// SELECT of ids lockQuery (which must end with FOR UPDATE SKIP LOCKED) and
// then write, whose %s is replaced by the ids' placeholders. It returns the
// rows write affected.
func (d *Driver) lockThenWrite(ctx context.Context, lockQuery string, lockArgs []any, write string) (int, error) {
	var affected int
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		affected = 0
		ids, err := queryIDs(ctx, tx, lockQuery, lockArgs...)
		if err != nil || len(ids) == 0 {
			return err
		}
		res, err := tx.ExecContext(ctx, fmt.Sprintf(write, placeholders(len(ids))), idArgs(nil, ids)...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		affected = int(n)
		return err
	})
	return affected, err
}

// OutboxPendingTypes lists the types with PENDING rows by a loose index
// scan of the claim index driven from Go: each query jumps to the first
// PENDING entry after the previous type and reads one index entry, so the
// cost is one short query per type, not one row per pending event. (A
// recursive CTE does the same in one statement on PostgreSQL, but MySQL
// and MariaDB execute its correlated step with ref access on status alone
// and read the whole pending range.)
func (d *Driver) OutboxPendingTypes(ctx context.Context) ([]string, error) {
	q := "SELECT event_type FROM " + d.qOutbox + " FORCE INDEX (txbox_claim) WHERE status = 'PENDING' AND event_type > ? ORDER BY status, event_type LIMIT 1"
	var out []string
	last := ""
	for {
		var typ string
		err := d.db.QueryRowContext(ctx, q, last).Scan(&typ)
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
	q := "SELECT event_type, status, COUNT(*), " +
		"TIMESTAMPDIFF(MICROSECOND, MIN(CASE WHEN status = 'PENDING' THEN created_at END), UTC_TIMESTAMP(6)) FROM " +
		d.qOutbox + " FORCE INDEX (txbox_claim) WHERE status IN ('FAILED', 'IN_PROCESS', 'PENDING') GROUP BY event_type, status ORDER BY event_type"
	rows, err := d.db.QueryContext(ctx, q)
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
// index without locks, then deleted by one statement that checks the
// condition again. Holding no locks before the DELETE, it acquires its
// row locks in primary-key order like every other single-statement write,
// so it cannot close a deadlock cycle with them.
func (d *Driver) OutboxCleanup(ctx context.Context, params *store.CleanupParams) (int, error) {
	if err := checkCleanup(params); err != nil {
		return 0, err
	}
	cond := "status = 'PROCESSED' AND processed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND"
	n, err := d.selectThenDelete(ctx, d.qOutbox,
		"SELECT id FROM "+d.qOutbox+" FORCE INDEX (txbox_cleanup) WHERE "+cond+" ORDER BY processed_at LIMIT ?",
		[]any{micros(params.OlderThan), params.Limit}, cond, []any{micros(params.OlderThan)})
	if err != nil {
		return 0, wrap("cleanup", err)
	}
	return n, nil
}

// selectThenDelete reads candidate ids with sel (a plain consistent read)
// and deletes those that still satisfy cond with one DELETE.
func (d *Driver) selectThenDelete(ctx context.Context, table, sel string, selArgs []any, cond string, condArgs []any) (int, error) {
	ids, err := queryIDs(ctx, d.db, sel, selArgs...)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	args := idArgs(append([]any(nil), condArgs...), ids)
	n, err := d.exec(ctx, "DELETE FROM "+table+" WHERE "+cond+" AND id IN ("+placeholders(len(ids))+")", args...)
	return int(n), err
}

func checkCleanup(p *store.CleanupParams) error {
	if p == nil || p.Limit < 1 || p.OlderThan < 0 {
		return fmt.Errorf("%w: cleanup needs Limit >= 1 and OlderThan >= 0", ErrInvalidParams)
	}
	return nil
}
