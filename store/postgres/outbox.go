package postgres

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// OutboxInsert inserts params.Events inside the caller's transaction tx,
// in one round trip whatever the batch size: one event is one INSERT ...
// VALUES, a batch one INSERT ... SELECT FROM unnest(arrays) (NOTIFY folded
// into the same statement). A pgx transaction with copyMinRows or more
// events and no not-before time uses COPY instead, followed by one NOTIFY
// statement when asked. With Config.Source = SourceWAL the events are
// emitted into the WAL instead (walInsert). tx is a pgx.Tx, a *sql.Tx or
// an ORMTx with a Commit method; see store.Outbox.
func (d *Driver) OutboxInsert(ctx context.Context, tx any, params *store.OutboxInsertParams) error {
	ex, err := adaptTx(tx)
	if err != nil {
		return err
	}
	if params == nil || len(params.Events) == 0 {
		return nil
	}
	for i, ev := range params.Events {
		if ev == nil {
			return fmt.Errorf("postgres: insert: event %d is nil", i)
		}
		if ev.ID == (uuid.UUID{}) {
			return fmt.Errorf("postgres: insert: event %d has no id", i)
		}
	}
	if d.source == SourceWAL {
		return d.walInsert(ctx, ex, params.Events)
	}
	c, err := newInsertColumns(params.Events)
	if err != nil {
		return err
	}
	n := len(params.Events)
	if ex.native() && n >= copyMinRows && !anyValid(c.notBefore) {
		return d.copyInsert(ctx, ex.pgx, c.ids, c.types, c.keys, c.payloads, c.headers, params.Notify)
	}
	var args []any
	var query string
	if n == 1 {
		query = d.q.insertOne
		if params.Notify {
			query = d.q.insertOneNotify
		}
		var nb any
		if c.notBefore[0].Valid {
			nb = c.notBefore[0].Time
		}
		var id any = c.ids[0].String() // any database/sql driver binds text
		if ex.native() {
			id = pgUUID(c.ids[0])
		}
		args = []any{id, c.types[0], c.keys[0], c.payloads[0], c.headers[0], nb}
	} else {
		query = d.q.insertText
		if params.Notify {
			query = d.q.insertTextNotify
		}
		if ex.native() {
			query = d.q.insertNative
			if params.Notify {
				query = d.q.insertNativeNotify
			}
		}
		args = c.arrays(ex.native())
	}
	if params.Notify {
		args = append(args, d.channel)
	}
	if _, err := ex.exec(ctx, query, args...); err != nil {
		return d.translate("insert", err)
	}
	return nil
}

// insertColumns are a batch of events (checked non-nil, with ids) as one
// slice per column of the insert.
type insertColumns struct {
	ids       []uuid.UUID
	types     []string
	keys      []string
	payloads  [][]byte
	headers   []string
	notBefore []pgtype.Timestamptz
}

func newInsertColumns(events []*txbox.Event) (*insertColumns, error) {
	n := len(events)
	c := &insertColumns{
		ids:       make([]uuid.UUID, n),
		types:     make([]string, n),
		keys:      make([]string, n),
		payloads:  make([][]byte, n),
		headers:   make([]string, n),
		notBefore: make([]pgtype.Timestamptz, n),
	}
	for i, ev := range events {
		c.ids[i] = ev.ID
		c.types[i] = ev.Type
		c.keys[i] = ev.Key
		c.payloads[i] = ev.Payload
		if c.payloads[i] == nil {
			c.payloads[i] = []byte{} // nil would bind as NULL
		}
		h, err := encodeHeaders(ev.Headers)
		if err != nil {
			return nil, fmt.Errorf("postgres: insert: event %d headers: %w", i, err)
		}
		c.headers[i] = h
		if !ev.NotBefore.IsZero() {
			c.notBefore[i] = pgtype.Timestamptz{Time: ev.NotBefore, Valid: true}
		}
	}
	return c, nil
}

// arrays are the batch insert's parameters: binary arrays for pgx,
// PostgreSQL array literals for database/sql drivers.
func (c *insertColumns) arrays(native bool) []any {
	if native {
		return []any{pgUUIDs(c.ids), c.types, c.keys, c.payloads, c.headers, c.notBefore}
	}
	return []any{uuidArrayText(c.ids), textArrayText(c.types), textArrayText(c.keys),
		byteaArrayText(c.payloads), textArrayText(c.headers), timeArrayText(c.notBefore)}
}

// copyMinRows is the batch size from which a native pgx transaction
// inserts with COPY: the server writes COPY rows in multi-row heap and WAL
// records, which beats INSERT ... SELECT FROM unnest by about a third at
// 100 rows, and is worth the extra round trip (two, three with a NOTIFY)
// only for batches of this size.
const copyMinRows = 32

func anyValid(ts []pgtype.Timestamptz) bool {
	for _, t := range ts {
		if t.Valid {
			return true
		}
	}
	return false
}

var copyColumns = []string{"id", "event_type", "event_key", "payload", "headers"}

// copyInsert inserts with COPY FROM STDIN (binary). due_at and created_at
// take their defaults, now(), from the database clock. Events with a
// not-before time never come here: COPY cannot compute GREATEST(now(),
// not_before) on the server. The NOTIFY, if asked for, is a second
// statement in the same transaction, so it still fires only on commit.
func (d *Driver) copyInsert(ctx context.Context, tx pgx.Tx, ids []uuid.UUID, types, keys []string, payloads [][]byte, headers []string, notify bool) error {
	rows := make([][]any, len(ids))
	var distinct []string
	for i := range ids {
		var key any
		if keys[i] != "" {
			key = keys[i]
		}
		rows[i] = []any{pgUUID(ids[i]), types[i], key, payloads[i], headers[i]}
		if !slices.Contains(distinct, types[i]) {
			distinct = append(distinct, types[i])
		}
	}
	if _, err := tx.CopyFrom(ctx, d.copyTable, copyColumns, pgx.CopyFromRows(rows)); err != nil {
		return d.translate("insert (copy)", err)
	}
	if notify {
		if _, err := tx.Exec(ctx, d.q.notify, d.channel, distinct); err != nil {
			return d.translate("insert (notify)", err)
		}
	}
	return nil
}

func encodeHeaders(h map[string]string) (string, error) {
	if len(h) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// PostgreSQL array text literals, for database/sql drivers that cannot bind
// Go slices. Every element is double-quoted with \ and " escaped.
func textArrayText(vs []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, v := range vs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for _, r := range v {
			if r == '"' || r == '\\' {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

func uuidArrayText(ids []uuid.UUID) string {
	var b strings.Builder
	b.Grow(len(ids)*37 + 2)
	b.WriteByte('{')
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(id.String())
	}
	b.WriteByte('}')
	return b.String()
}

func byteaArrayText(ps [][]byte) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		// "\\x..." : the array parser turns \\ into \, bytea input reads \x hex.
		b.WriteString(`"\\x`)
		b.WriteString(hex.EncodeToString(p))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

func timeArrayText(ts []pgtype.Timestamptz) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, t := range ts {
		if i > 0 {
			b.WriteByte(',')
		}
		if !t.Valid {
			b.WriteString("NULL")
			continue
		}
		b.WriteByte('"')
		b.WriteString(t.Time.UTC().Format("2006-01-02 15:04:05.999999Z07:00"))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// errBadParams reports invalid call parameters; the error matches
// store.ErrInvalidParams.
func errBadParams(op, format string, args ...any) error {
	return fmt.Errorf("postgres: %s: %w: %s", op, store.ErrInvalidParams, fmt.Sprintf(format, args...))
}

// OutboxClaim claims up to params.Limit due PENDING rows of one type in
// one statement. See store.Outbox.
func (d *Driver) OutboxClaim(ctx context.Context, params *store.OutboxClaimParams) ([]*store.OutboxRow, error) {
	c, err := d.prepareClaim(params)
	if err != nil {
		return nil, err
	}
	rows, err := d.pool.Query(ctx, c.query, c.args...)
	if err != nil {
		return nil, d.translate("claim", err)
	}
	return c.scan(rows)
}

// claimCall is one prepared claim: its statement, arguments and what is
// needed to read the rows back and move the cursor.
type claimCall struct {
	d     *Driver
	query string
	args  []any
	token txbox.ID
	limit int
	// eventType is the claimed type, which every row returned has.
	eventType string
	cur       *claimCursor
	ord       *orderedCursor
	catchUp   bool
	// horizon is the ordered claim's commit horizon; params receives
	// how many keys it cut (store.OutboxClaimParams.HorizonCut).
	horizon bool
	params  *store.OutboxClaimParams
}

// maxKeyRun bounds OutboxClaimParams.KeyRun: a longer run would only be
// sent in more waves than a lease allows for.
const maxKeyRun = 10_000

func (d *Driver) prepareClaim(params *store.OutboxClaimParams) (*claimCall, error) {
	if params == nil {
		return nil, errBadParams("claim", "params are nil")
	}
	if err := txbox.ValidateEventType(params.EventType); err != nil {
		return nil, fmt.Errorf("postgres: claim: %w: %w", store.ErrInvalidParams, err)
	}
	if params.Limit < 1 {
		return nil, errBadParams("claim", "limit %d must be at least 1", params.Limit)
	}
	if params.LeaseDuration <= 0 {
		return nil, errBadParams("claim", "lease duration %s must be positive", params.LeaseDuration)
	}
	if !validRoute(params.Route) {
		return nil, errBadParams("claim", "route %q is not valid text", params.Route)
	}
	if params.KeyRun < 0 || params.KeyRun > maxKeyRun {
		return nil, errBadParams("claim", "key run %d must be between 0 and %d", params.KeyRun, maxKeyRun)
	}
	c := &claimCall{d: d, query: d.q.claim, token: txbox.NewID(), limit: params.Limit, eventType: params.EventType}
	lowerDue := pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	var lowerID uuid.UUID
	if params.OrderedByKey {
		// No claim-index lower bound for ordered types: a row the scan
		// passed while its key was blocked becomes the head later, below
		// any cursor. The ordered claim walks keys instead.
		run := max(params.KeyRun, 1)
		c.horizon = !params.HorizonOff && !params.FenceOff // FenceOff: the former name, honoured for one release
		c.params = params
		c.query = d.claimOrdered(run, false, c.horizon)
		c.ord = d.orderedCursor(routeCursorKey(params.EventType, params.Route))
		key, hasKey, due, id := c.ord.start(time.Now(), d.rescan)
		var after pgtype.Text
		if hasKey {
			after = pgtype.Text{String: key, Valid: true}
		}
		if !due.IsZero() {
			lowerDue, lowerID = pgtype.Timestamptz{Time: due, Valid: true}, id
		}
		c.args = []any{params.EventType, params.Limit, params.LeaseDuration.Microseconds(), pgUUID(c.token),
			after, run, maxWalk(params.Limit), lowerDue, pgUUID(lowerID), params.Route}
		return c, nil
	}
	c.cur = d.cursor(routeCursorKey(params.EventType, params.Route))
	due, id, bounded, catchUp := c.cur.lowerBound(time.Now(), d.lookback)
	if bounded {
		lowerDue, lowerID = pgtype.Timestamptz{Time: due, Valid: true}, id
	}
	c.catchUp = catchUp
	c.args = []any{params.EventType, params.Limit, params.LeaseDuration.Microseconds(), pgUUID(c.token),
		lowerDue, pgUUID(lowerID), max(d.lookback, 0).Microseconds(), params.Route}
	return c, nil
}

// routeCursorKey names the claim cursor of one type and route: each route
// of a fan-out type is claimed on its own, so it moves its own cursor. A
// type's route "" keeps the type's name; NUL is in no type or route.
func routeCursorKey(eventType, route string) string {
	if route == "" {
		return eventType
	}
	return eventType + "\x00" + route
}

// maxWalk bounds the keys one ordered claim visits: every claimable key
// yields at least one row, so only blocked keys (head in flight, failed,
// parked or not due) make a walk longer than limit. Past the bound the
// claim returns what it found and the next one continues after the last
// key visited.
func maxWalk(limit int) int { return 4*limit + 64 }

// scan reads the claimed rows in claim order and moves the cursor.
func (c *claimCall) scan(rows pgx.Rows) ([]*store.OutboxRow, error) {
	if c.ord != nil {
		return c.scanOrdered(rows)
	}
	defer rows.Close()
	type claimed struct {
		row *store.OutboxRow
		due time.Time
	}
	// The rows are allocated in one block of the claim's limit rather than
	// one by one: a batch lives and dies as a whole.
	out := make([]claimed, 0, c.limit)
	block := make([]store.OutboxRow, c.limit)
	var headers []byte
	for rows.Next() {
		if len(out) == len(block) { // the statement returns at most limit rows; be safe anyway
			block = append(block, store.OutboxRow{})
			block = block[:cap(block)]
		}
		r := &block[len(out)]
		// Every claimed row is of the claimed type (the statement's
		// event_type = $1): the column is skipped, not copied per row.
		r.LeaseToken, r.EventType = c.token, c.eventType
		var due time.Time
		if err := rows.Scan(uuidDest{&r.ID}, nil, &r.Key, &r.Payload, &headers, &r.Attempts, &r.CreatedAt, &due, &r.Route, uuidDest{&r.EventID}); err != nil {
			return nil, c.d.translate("claim", err)
		}
		// The claim has committed: a row that cannot be turned into a
		// message must not fail the batch (it would stay IN_PROCESS and
		// come back with the same neighbours after every lease). It is
		// handed out Invalid and the relay dead-letters it.
		var herr error
		if r.Headers, herr = store.DecodeHeaders(headers); herr != nil {
			r.Invalid = herr.Error()
		}
		out = append(out, claimed{r, due})
	}
	if err := rows.Err(); err != nil {
		return nil, c.d.translate("claim", err)
	}
	sortClaimed(out, func(x claimed) (time.Time, txbox.ID) { return x.due, x.row.ID })
	res := make([]*store.OutboxRow, len(out))
	for i, o := range out {
		res[i] = o.row
	}
	if c.cur != nil {
		var lastDue time.Time
		var lastID uuid.UUID
		if len(out) > 0 {
			lastDue, lastID = out[len(out)-1].due, out[len(out)-1].row.ID
		}
		c.cur.claimed(time.Now(), lastDue, lastID, len(out) == c.limit, c.catchUp, c.d.rescan)
	}
	return res, nil
}

// sortClaimed sorts rows in claim order, (due_at, id): RETURNING has no
// order.
func sortClaimed[T any](xs []T, key func(T) (time.Time, txbox.ID)) {
	slices.SortFunc(xs, func(a, b T) int {
		da, ia := key(a)
		db, ib := key(b)
		if c := da.Compare(db); c != 0 {
			return c
		}
		return strings.Compare(string(ia[:]), string(ib[:]))
	})
}

// scanOrdered reads an ordered claim: the claimed rows, then the marker
// row that moves the ordered cursor (see claimOrderedSQL).
func (c *claimCall) scanOrdered(rows pgx.Rows) ([]*store.OutboxRow, error) {
	defer rows.Close()
	type claimed struct {
		row *store.OutboxRow
		due time.Time
	}
	var (
		out    []claimed
		marker bool
		mKey   pgtype.Text
		mID    uuid.UUID
		mCount int
		mDue   pgtype.Timestamptz
		mCut   int64
	)
	for rows.Next() {
		var (
			isMarker bool
			r        = &store.OutboxRow{LeaseToken: c.token}
			key      pgtype.Text
			due      pgtype.Timestamptz
			headers  []byte
			seq      int64
		)
		if err := rows.Scan(&isMarker, uuidDest{&r.ID}, &r.EventType, &key, &r.Payload, &headers, &r.Attempts, &r.CreatedAt, &due, &seq, &r.Route, uuidDest{&r.EventID}); err != nil {
			return nil, c.d.translate("claim", err)
		}
		if isMarker {
			marker, mKey, mID, mCount, mDue, mCut = true, key, r.ID, r.Attempts, due, seq
			continue
		}
		r.Seq = uint64(seq)
		r.Key = key.String
		// As in scan: an undecodable row is handed out Invalid.
		var herr error
		if r.Headers, herr = store.DecodeHeaders(headers); herr != nil {
			r.Invalid = herr.Error()
		}
		out = append(out, claimed{r, due.Time})
	}
	if err := rows.Err(); err != nil {
		return nil, c.d.translate("claim", err)
	}
	if !marker {
		return nil, fmt.Errorf("postgres: claim: the ordered claim returned no cursor row")
	}
	var lastDue time.Time
	if mDue.Valid && mDue.InfinityModifier == pgtype.Finite {
		lastDue = mDue.Time
	}
	c.ord.claimed(time.Now(), mKey.String, mKey.Valid, mCount, c.limit, lastDue, mID, c.d.rescan)
	if c.params != nil {
		c.params.HorizonCut = int(mCut)
		c.params.FenceCut = c.params.HorizonCut // the former name, set for one release
	}
	sortClaimed(out, func(x claimed) (time.Time, txbox.ID) { return x.due, x.row.ID })
	res := make([]*store.OutboxRow, len(out))
	for i, o := range out {
		res[i] = o.row
	}
	return res, nil
}

// OutboxFinish applies every outcome of params.Items in one statement,
// each fenced by its lease token. See store.Outbox.
func (d *Driver) OutboxFinish(ctx context.Context, params *store.OutboxFinishParams) (*store.OutboxFinishResult, error) {
	f, err := prepareFinish(params)
	if err != nil {
		return nil, err
	}
	if f.args == nil {
		return f.result(0), nil
	}
	var finished int64
	if err := d.pool.QueryRow(ctx, d.q.finish, f.args...).Scan(&finished); err != nil {
		return nil, d.translate("finish", err)
	}
	return f.result(finished), nil
}

// finishCall is one prepared finish.
type finishCall struct {
	args []any // nil when there is nothing to apply
	n    int
}

func (f *finishCall) result(finished int64) *store.OutboxFinishResult {
	return &store.OutboxFinishResult{Finished: int(finished), Fenced: f.n - int(finished)}
}

func prepareFinish(params *store.OutboxFinishParams) (*finishCall, error) {
	if params == nil {
		return nil, errBadParams("finish", "params are nil")
	}
	n := len(params.Items)
	ids := make([]pgtype.UUID, 0, n)
	tokens := make([]pgtype.UUID, 0, n)
	outcomes := make([]int32, 0, n)
	delays := make([]int64, 0, n)
	errs := make([]string, 0, n)
	seen := make(map[uuid.UUID]struct{}, n)
	for i, it := range params.Items {
		if it.Outcome < store.OutcomeAcked || it.Outcome > store.OutcomeReleased {
			return nil, errBadParams("finish", "item %d has unknown outcome %d", i, it.Outcome)
		}
		if it.RetryAfter < 0 {
			return nil, errBadParams("finish", "item %d has negative retry delay %s", i, it.RetryAfter)
		}
		// A row can only be finished once per claim; a repeated id is
		// treated like a fenced one rather than applied twice.
		if _, ok := seen[it.ID]; ok {
			continue
		}
		seen[it.ID] = struct{}{}
		ids = append(ids, pgUUID(it.ID))
		tokens = append(tokens, pgUUID(it.LeaseToken))
		outcomes = append(outcomes, int32(it.Outcome))
		delays = append(delays, it.RetryAfter.Microseconds())
		// Text the database refuses (NUL, invalid UTF-8: SQLSTATE 22021)
		// would fail the whole statement and leave every row of the group
		// IN_PROCESS, to be delivered again after its lease.
		errs = append(errs, store.SanitizeText(it.Error))
	}
	f := &finishCall{n: n}
	if len(ids) > 0 {
		f.args = []any{ids, tokens, outcomes, delays, errs, params.DeleteAcked}
	}
	return f, nil
}

// OutboxRecover puts IN_PROCESS rows whose lease expired back to PENDING
// without counting an attempt. See store.Outbox.
func (d *Driver) OutboxRecover(ctx context.Context, params *store.OutboxRecoverParams) (int, error) {
	if params == nil || params.Limit < 1 {
		return 0, errBadParams("recover", "limit must be at least 1")
	}
	tag, err := d.pool.Exec(ctx, d.q.recover, params.Limit)
	if err != nil {
		return 0, d.translate("recover", err)
	}
	return int(tag.RowsAffected()), nil
}

// OutboxPendingTypes lists types with PENDING rows by a loose index scan.
func (d *Driver) OutboxPendingTypes(ctx context.Context) ([]string, error) {
	rows, err := d.pool.Query(ctx, d.q.pendingTypes)
	if err != nil {
		return nil, d.translate("pending types", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, d.translate("pending types", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, d.translate("pending types", err)
	}
	return out, nil
}

// OutboxStats returns per-type counts, sorted by type.
func (d *Driver) OutboxStats(ctx context.Context) ([]*store.OutboxTypeStats, error) {
	rows, err := d.pool.Query(ctx, d.q.stats)
	if err != nil {
		return nil, d.translate("stats", err)
	}
	defer rows.Close()
	byType := map[string]*store.OutboxTypeStats{}
	for rows.Next() {
		var (
			typ, kind string
			count     int64
			ageSec    float64
		)
		if err := rows.Scan(&typ, &kind, &count, &ageSec); err != nil {
			return nil, d.translate("stats", err)
		}
		s := byType[typ]
		if s == nil {
			s = &store.OutboxTypeStats{EventType: typ}
			byType[typ] = s
		}
		switch kind {
		case "P":
			s.Pending = count
			s.OldestPendingAge = max(0, time.Duration(ageSec*float64(time.Second)))
		case "I":
			s.InProcess = count
		case "F":
			s.Failed = count
		}
	}
	if err := rows.Err(); err != nil {
		return nil, d.translate("stats", err)
	}
	out := make([]*store.OutboxTypeStats, 0, len(byType))
	for _, s := range byType {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *store.OutboxTypeStats) int { return strings.Compare(a.EventType, b.EventType) })
	return out, nil
}

// OutboxCleanup deletes up to Limit PROCESSED rows older than the TTL.
func (d *Driver) OutboxCleanup(ctx context.Context, params *store.CleanupParams) (int, error) {
	return d.cleanup(ctx, "outbox cleanup", d.q.cleanup, params)
}

// cleanup runs one of the cleanup deletes, which take the age in
// microseconds and the limit, after checking params; op names it in
// errors. The outbox, the dead letters and the inbox share it.
func (d *Driver) cleanup(ctx context.Context, op, query string, params *store.CleanupParams) (int, error) {
	if err := checkCleanup(op, params); err != nil {
		return 0, err
	}
	tag, err := d.pool.Exec(ctx, query, params.OlderThan.Microseconds(), params.Limit)
	if err != nil {
		return 0, d.translate(op, err)
	}
	return int(tag.RowsAffected()), nil
}

func checkCleanup(op string, p *store.CleanupParams) error {
	if p == nil {
		return errBadParams(op, "params are nil")
	}
	if p.Limit < 1 {
		return errBadParams(op, "limit %d must be at least 1", p.Limit)
	}
	if p.OlderThan < 0 {
		return errBadParams(op, "older-than %s must not be negative", p.OlderThan)
	}
	return nil
}
