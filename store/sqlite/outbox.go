package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/internal/sqlstore"
)

// Execer is the method set OutboxInsert needs from a transaction, besides
// Commit: *sql.Tx has it, and so do the transactions of sqlx and bun.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// txCommitter is how OutboxInsert tells a transaction from a pool or a
// connection, which have ExecContext too but would autocommit.
type txCommitter interface {
	Execer
	Commit() error
}

// execerOf returns the Execer of a caller's transaction: a *sql.Tx, a
// store.InboxTx of this driver (a consumer publishing inside its inbox
// transaction), or any value with ExecContext and Commit (ORM
// transactions). nil, a nil pointer and a *sql.DB are
// txbox.ErrNoTransaction; other types are an *txbox.UnsupportedTxError.
func execerOf(tx any) (Execer, error) {
	if isNil(tx) {
		return nil, txbox.ErrNoTransaction
	}
	if it, ok := tx.(store.InboxTx); ok {
		if tx = it.Native(); isNil(tx) {
			return nil, txbox.ErrNoTransaction
		}
	}
	switch t := tx.(type) {
	case *sql.Tx:
		return t, nil
	case *sql.DB:
		return nil, fmt.Errorf("%w: got a *sql.DB, which would autocommit; pass the *sql.Tx of your business transaction", txbox.ErrNoTransaction)
	case txCommitter:
		return t, nil
	default:
		return nil, &txbox.UnsupportedTxError{Dialect: DialectName, Type: fmt.Sprintf("%T", tx)}
	}
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// OutboxInsert inserts params.Events inside the caller's transaction tx
// with one multi-row INSERT per 500 events. It never begins, commits or
// rolls back. A NotBefore in the past means due now; the row's created_at
// and (without NotBefore) due_at come from the database clock. In a *sql.Tx
// of the Driver's pool the statement is prepared once per connection.
//
// The write takes SQLite's write lock until tx ends: keep business
// transactions short, and begin them with BEGIN IMMEDIATE (pools from Open
// do) so they wait for the lock up front instead of failing with
// SQLITE_BUSY on their first write.
func (d *Driver) OutboxInsert(ctx context.Context, tx any, params *store.OutboxInsertParams) error {
	ex, err := execerOf(tx)
	if err != nil {
		return err
	}
	if params == nil {
		return fmt.Errorf("%w: nil OutboxInsertParams", ErrInvalidParams)
	}
	if err := d.check(); err != nil {
		return err
	}
	events := params.Events
	if len(events) == 0 {
		return nil
	}
	if err := sqlstore.CheckInsertEvents(ErrInvalidParams, events, nil); err != nil {
		return err
	}
	sqlTx, _ := ex.(*sql.Tx)
	for start := 0; start < len(events); start += maxInsertRows {
		chunk := events[start:min(start+maxInsertRows, len(events))]
		withDue := false
		for _, e := range chunk {
			if !e.NotBefore.IsZero() {
				withDue = true
				break
			}
		}
		per := insertParams
		if !withDue {
			per--
		}
		args := make([]any, 0, len(chunk)*per)
		for _, e := range chunk {
			h, err := sqlstore.EncodeHeaders("sqlite", e.Headers)
			if err != nil {
				return err
			}
			var key any
			if e.Key != "" {
				key = e.Key
			}
			payload := e.Payload
			if payload == nil {
				payload = []byte{}
			}
			args = append(args, e.ID.String(), e.Type, key, payload, h)
			if withDue {
				var due any
				if !e.NotBefore.IsZero() {
					due = formatTime(e.NotBefore)
				}
				args = append(args, due)
			}
		}
		q := d.insertSQL(len(chunk), withDue)
		var err error
		if sqlTx != nil {
			_, err = d.txExec(ctx, sqlTx, q, args...)
		} else {
			_, err = ex.ExecContext(ctx, q, args...)
		}
		if err != nil {
			if errors.Is(err, sql.ErrTxDone) {
				return fmt.Errorf("%w: %w", txbox.ErrNoTransaction, err)
			}
			return d.translate(fmt.Errorf("outbox insert: %w", err))
		}
	}
	return nil
}

// insertSQL returns the INSERT statement for n rows. The one-row form, by
// far the most common, is built once.
func (d *Driver) insertSQL(n int, withDue bool) string {
	prefix, row := d.q.insertPrefixNoDue, d.q.insertRowNoDue
	if withDue {
		prefix, row = d.q.insertPrefix, d.q.insertRow
	}
	if n == 1 {
		if withDue {
			return d.q.insertOne
		}
		return d.q.insertOneNoDue
	}
	var b strings.Builder
	b.Grow(len(prefix) + n*(len(row)+2))
	b.WriteString(prefix)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	return b.String()
}

// decodeHeaders reads the headers column leniently (see
// store.DecodeHeaders). Text that is not a JSON object is an error naming
// the reason; success always returns a non-nil map.
func decodeHeaders(s string) (map[string]string, error) {
	h, err := store.DecodeHeaders([]byte(s))
	if err != nil {
		return map[string]string{}, err
	}
	if h == nil {
		h = map[string]string{}
	}
	return h, nil
}

// OutboxClaim claims up to Limit due PENDING rows of one type in one
// UPDATE ... WHERE id IN (SELECT ... ORDER BY due_at, id LIMIT n) RETURNING
// statement under BEGIN IMMEDIATE. SQLite has one writer, so claimers are
// serialised by the write lock and never see each other's rows: there is
// nothing to skip. The rows come back in (due_at, id) order.
func (d *Driver) OutboxClaim(ctx context.Context, params *store.OutboxClaimParams) ([]*store.OutboxRow, error) {
	c, err := d.planClaim(params)
	if err != nil {
		return nil, err
	}
	err = d.write(ctx, func(tx *sql.Tx) error { return c.run(ctx, d, tx) })
	if err != nil {
		return nil, fmt.Errorf("outbox claim: %w", err)
	}
	return c.result(), nil
}

// claimRun is one validated claim: its statement, arguments and, once run
// inside a write transaction, its rows.
type claimRun struct {
	q     string
	args  []any
	token txbox.ID
	out   []claimedRow
	// ord is set for an ordered claim (see runOrdered).
	ord *orderedClaim
}

type claimedRow struct {
	row *store.OutboxRow
	due string
	id  string
}

func (d *Driver) planClaim(params *store.OutboxClaimParams) (*claimRun, error) {
	if params == nil {
		return nil, fmt.Errorf("%w: nil OutboxClaimParams", ErrInvalidParams)
	}
	if err := txbox.ValidateEventType(params.EventType); err != nil {
		return nil, err
	}
	if params.Limit < 1 {
		return nil, fmt.Errorf("%w: claim Limit must be ≥ 1, got %d", ErrInvalidParams, params.Limit)
	}
	if params.LeaseDuration <= 0 {
		return nil, fmt.Errorf("%w: claim LeaseDuration must be > 0, got %s", ErrInvalidParams, params.LeaseDuration)
	}
	if params.KeyRun < 0 || params.KeyRun > maxKeyRun {
		return nil, fmt.Errorf("%w: claim KeyRun must be between 0 and %d, got %d", ErrInvalidParams, maxKeyRun, params.KeyRun)
	}
	c := &claimRun{q: d.q.claim, token: txbox.NewID()}
	c.args = []any{modifier(params.LeaseDuration), c.token.String(), params.EventType, params.Route, params.Limit}
	if params.OrderedByKey {
		c.ord = &orderedClaim{typ: params.EventType, route: params.Route, limit: params.Limit, run: max(params.KeyRun, 1),
			lease: modifier(params.LeaseDuration), cur: d.orderedCursor(params.EventType)}
	}
	return c, nil
}

// run executes the claim in tx. It may run again if the transaction is
// retried, so it starts from an empty result.
//
// The claim has marked every returned row IN_PROCESS, so no row may fail
// the whole claim: it would come back with the same neighbours after every
// lease. SQLite stores whatever a plain-SQL producer writes, whatever the
// column's declared type, so each column is read loosely. A row whose
// headers, attempts or created_at cannot be read is handed out with
// OutboxRow.Invalid set, for the relay to dead-letter. A row whose id is
// not a canonical lower-case UUID cannot be finished by id at all; it is
// failed here, in the claim's transaction, with the reason, and the
// dead-letter mover takes it.
func (c *claimRun) run(ctx context.Context, d *Driver, tx *sql.Tx) error {
	c.out = c.out[:0]
	q, args := c.q, c.args
	if c.ord != nil {
		ids, err := c.ord.pick(ctx, d, tx)
		if err != nil || len(ids) == 0 {
			return err
		}
		q, args = d.q.claimIDs, []any{c.ord.lease, c.token.String(), idsJSON(ids)}
	}
	rows, err := d.txQuery(ctx, tx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	type badID struct{ raw, reason string }
	var bad []badID
	for rows.Next() {
		var (
			id, typ, headers, created, due string
			key, eventID                   sql.NullString
			route                          string
			payload                        []byte
			attempts                       any
			rowid                          int64
		)
		if err := rows.Scan(&id, &typ, &key, &payload, &headers, &attempts, &created, &due, &rowid, &route, &eventID); err != nil {
			return err
		}
		r := &store.OutboxRow{
			EventType:  typ,
			Key:        key.String,
			Payload:    payload,
			LeaseToken: c.token,
			Seq:        uint64(rowid), // a key's order (migration 4)
			Route:      route,
		}
		if eventID.String != "" {
			// Written by OutboxExpand, from an id it parsed.
			r.EventID, _ = txbox.ParseID(eventID.String)
		}
		parsed, err := txbox.ParseID(id)
		if err != nil || parsed.String() != id {
			bad = append(bad, badID{id, fmt.Sprintf("id %q is not a canonical lower-case UUID", store.SanitizeText(id))})
			continue
		}
		r.ID = parsed
		var invalid []string
		if r.Headers, err = decodeHeaders(headers); err != nil {
			invalid = append(invalid, err.Error())
		}
		if r.Attempts, err = intValue(attempts); err != nil {
			invalid = append(invalid, "attempts: "+err.Error())
		}
		if r.CreatedAt, err = parseTime(created); err != nil {
			invalid = append(invalid, "created_at: "+err.Error())
		}
		r.Invalid = strings.Join(invalid, "; ")
		if r.Payload == nil {
			r.Payload = []byte{}
		}
		c.out = append(c.out, claimedRow{row: r, due: due, id: id})
	}
	if err := rows.Err(); err != nil {
		return err
	}
	rows.Close()
	for _, b := range bad {
		// finishFailed binds the id as text, so it matches the raw value.
		if _, err := d.txExec(ctx, tx, d.q.finishFailed, b.reason, b.raw, c.token.String()); err != nil {
			return err
		}
	}
	return nil
}

// intValue reads an INTEGER column that a plain-SQL producer may have
// filled with anything SQLite accepts.
func intValue(v any) (int, error) {
	switch x := v.(type) {
	case nil:
		return 0, nil
	case int64:
		return int(x), nil
	case float64:
		if x == float64(int(x)) {
			return int(x), nil
		}
	case []byte:
		if n, err := strconv.Atoi(string(x)); err == nil {
			return n, nil
		}
	case string:
		if n, err := strconv.Atoi(x); err == nil {
			return n, nil
		}
	}
	return 0, fmt.Errorf("%s is not an integer", store.SanitizeText(fmt.Sprintf("%q", fmt.Sprint(v))))
}

// result returns the claimed rows in (due_at, id) order. RETURNING gives
// them in the order they were updated, which SQLite does not promise to be
// the subquery's order.
func (c *claimRun) result() []*store.OutboxRow {
	sort.Slice(c.out, func(i, j int) bool {
		if c.out[i].due != c.out[j].due {
			return c.out[i].due < c.out[j].due
		}
		return c.out[i].id < c.out[j].id
	})
	rows := make([]*store.OutboxRow, len(c.out))
	for i, cr := range c.out {
		rows[i] = cr.row
	}
	return rows
}

// OutboxFinish applies every item's outcome in one transaction. The acked
// items of one lease token go in one statement (ids as a JSON array); the
// others, which carry their own error and delay, one statement each.
func (d *Driver) OutboxFinish(ctx context.Context, params *store.OutboxFinishParams) (*store.OutboxFinishResult, error) {
	f, err := d.planFinish(params)
	if err != nil {
		return nil, err
	}
	if f.empty() {
		return &store.OutboxFinishResult{}, d.check()
	}
	if err := d.write(ctx, func(tx *sql.Tx) error { return f.run(ctx, d, tx) }); err != nil {
		return nil, fmt.Errorf("outbox finish: %w", err)
	}
	return f.result(), nil
}

// finishRun is one validated finish.
type finishRun struct {
	items    int
	ackSQL   string
	tokens   []txbox.ID
	ackIDs   map[txbox.ID]string // lease token → JSON array of ids
	others   []store.OutboxFinishItem
	finished int
}

func (f *finishRun) empty() bool { return f.items == 0 }

func (f *finishRun) result() *store.OutboxFinishResult {
	return &store.OutboxFinishResult{Finished: f.finished, Fenced: f.items - f.finished}
}

func (d *Driver) planFinish(params *store.OutboxFinishParams) (*finishRun, error) {
	if params == nil {
		return nil, fmt.Errorf("%w: nil OutboxFinishParams", ErrInvalidParams)
	}
	f := &finishRun{items: len(params.Items), ackSQL: d.q.finishAck}
	if params.DeleteAcked {
		f.ackSQL = d.q.finishDelete
	}
	acked := map[txbox.ID][]string{}
	for i, it := range params.Items {
		switch it.Outcome {
		case store.OutcomeAcked:
			if _, ok := acked[it.LeaseToken]; !ok {
				f.tokens = append(f.tokens, it.LeaseToken)
			}
			acked[it.LeaseToken] = append(acked[it.LeaseToken], it.ID.String())
		case store.OutcomeRetry, store.OutcomeFailed, store.OutcomeReleased:
			if it.RetryAfter < 0 {
				return nil, fmt.Errorf("%w: finish item %d: RetryAfter must be ≥ 0, got %s", ErrInvalidParams, i, it.RetryAfter)
			}
			f.others = append(f.others, it)
		default:
			return nil, fmt.Errorf("%w: finish item %d: unknown outcome %d", ErrInvalidParams, i, it.Outcome)
		}
	}
	// The acked ids of one token travel as one JSON array: one fixed,
	// prepared statement whatever the batch size.
	f.ackIDs = make(map[txbox.ID]string, len(f.tokens))
	for _, tok := range f.tokens {
		b, err := json.Marshal(acked[tok])
		if err != nil {
			return nil, fmt.Errorf("sqlite: outbox finish: %w", err)
		}
		f.ackIDs[tok] = string(b)
	}
	return f, nil
}

// run applies the finish in tx, from a zero count so a retried
// transaction counts once.
func (f *finishRun) run(ctx context.Context, d *Driver, tx *sql.Tx) error {
	f.finished = 0
	count := func(r sql.Result, err error) error {
		n, err := sqlstore.Affected(r, err)
		f.finished += int(n)
		return err
	}
	for _, tok := range f.tokens {
		if err := count(d.txExec(ctx, tx, f.ackSQL, tok.String(), f.ackIDs[tok])); err != nil {
			return err
		}
	}
	for _, it := range f.others {
		var (
			r   sql.Result
			err error
		)
		switch it.Outcome {
		case store.OutcomeRetry:
			r, err = d.txExec(ctx, tx, d.q.finishRetry, modifier(it.RetryAfter), store.SanitizeText(it.Error), it.ID.String(), it.LeaseToken.String())
		case store.OutcomeFailed:
			// Sanitised like every dialect (store.SanitizeText): SQLite
			// would store anything, but readers expect valid text.
			r, err = d.txExec(ctx, tx, d.q.finishFailed, store.SanitizeText(it.Error), it.ID.String(), it.LeaseToken.String())
		case store.OutcomeReleased:
			r, err = d.txExec(ctx, tx, d.q.finishReleas, modifier(it.RetryAfter), it.ID.String(), it.LeaseToken.String())
		}
		if err := count(r, err); err != nil {
			return err
		}
	}
	return nil
}

// OutboxRecover puts IN_PROCESS rows whose lease expired back to PENDING,
// due now, attempts unchanged, oldest lease first.
func (d *Driver) OutboxRecover(ctx context.Context, params *store.OutboxRecoverParams) (int, error) {
	if params == nil || params.Limit < 1 {
		return 0, fmt.Errorf("%w: recover Limit must be ≥ 1", ErrInvalidParams)
	}
	n, err := d.writeExec(ctx, d.q.recover, params.Limit)
	if err != nil {
		return 0, fmt.Errorf("outbox recover: %w", err)
	}
	return n, nil
}

// writeExec runs one statement in a write transaction and returns the
// rows it changed.
func (d *Driver) writeExec(ctx context.Context, query string, args ...any) (int, error) {
	var n int64
	err := d.write(ctx, func(tx *sql.Tx) error {
		var err error
		n, err = sqlstore.Affected(tx.ExecContext(ctx, query, args...))
		return err
	})
	return int(n), err
}

// query runs a read statement on the pool once the driver is usable
// (check); an error names op.
func (d *Driver) query(ctx context.Context, op, query string, args ...any) (*sql.Rows, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	rows, err := d.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, d.translate(fmt.Errorf("%s: %w", op, err))
	}
	return rows, nil
}

// OutboxPendingTypes lists the types with PENDING rows, sorted, with a
// loose index scan of the claim index.
func (d *Driver) OutboxPendingTypes(ctx context.Context) ([]string, error) {
	rows, err := d.query(ctx, "outbox pending types", d.q.pendingTypes)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	types := []string{}
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, d.translate(err)
		}
		types = append(types, t)
	}
	return types, d.translate(rows.Err())
}

// OutboxStats returns per-type counts of unfinished rows and the age of
// the oldest PENDING row on the database clock, sorted by type. Types with
// only PROCESSED rows are not listed.
func (d *Driver) OutboxStats(ctx context.Context) ([]*store.OutboxTypeStats, error) {
	rows, err := d.query(ctx, "outbox stats", d.q.stats)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []*store.OutboxTypeStats{}
	for rows.Next() {
		s := &store.OutboxTypeStats{}
		var ageMS int64
		if err := rows.Scan(&s.EventType, &s.Pending, &s.InProcess, &s.Failed, &ageMS); err != nil {
			return nil, d.translate(err)
		}
		if ageMS > 0 && s.Pending > 0 {
			s.OldestPendingAge = msToDuration(ageMS)
		}
		out = append(out, s)
	}
	return out, d.translate(rows.Err())
}

// OutboxCleanup deletes up to Limit PROCESSED rows processed more than
// OlderThan ago, oldest first.
func (d *Driver) OutboxCleanup(ctx context.Context, params *store.CleanupParams) (int, error) {
	return d.cleanup(ctx, "outbox cleanup", d.q.cleanup, params)
}

// cleanup runs a cleanup statement, whose arguments are the age modifier
// and the limit, in a write transaction.
func (d *Driver) cleanup(ctx context.Context, op, query string, params *store.CleanupParams) (int, error) {
	if err := validCleanup(params); err != nil {
		return 0, err
	}
	n, err := d.writeExec(ctx, query, modifier(-params.OlderThan), params.Limit)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	return n, nil
}

func validCleanup(p *store.CleanupParams) error {
	if p == nil {
		return fmt.Errorf("%w: nil CleanupParams", ErrInvalidParams)
	}
	if p.OlderThan < 0 {
		return fmt.Errorf("%w: cleanup OlderThan must be ≥ 0, got %s", ErrInvalidParams, p.OlderThan)
	}
	if p.Limit < 1 {
		return fmt.Errorf("%w: cleanup Limit must be ≥ 1, got %d", ErrInvalidParams, p.Limit)
	}
	return nil
}

// idArgs renders ids as bound arguments.
func idArgs(ids []txbox.ID) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}

func msToDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
