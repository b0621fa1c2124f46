package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// The relay's own writes in WAL mode (docs/concepts.md, "WAL mode"): the
// spill of events the stream could not deliver, the list of keys that
// have spilled rows, and the slot's health. Every row written here has
// stream_pos set, which the publication's row filter leaves out, so none
// of it comes back through the stream.

// MaxSpillItems bounds one StreamSpill call: the caller spills a few
// hundred events at a time, and the statement's arrays live in memory on
// both sides.
const MaxSpillItems = 10_000

// MaxSpilledKeys bounds the limit of one StreamSpilledKeys page.
const MaxSpilledKeys = 10_000

// ErrSpillTooLarge matches the error of StreamSpill for more than
// MaxSpillItems items; it also matches store.ErrInvalidParams.
var ErrSpillTooLarge = errors.New("postgres: too many events in one spill")

var _ interface {
	StreamSpill(context.Context, []*store.StreamSpillItem) error
	StreamSpilledKeys(context.Context, *store.StreamKey, int) ([]store.StreamKey, error)
	StreamStatus(context.Context) (*store.StreamStatus, error)
} = (*Driver)(nil)

// spillQueries are the statements of this file, rendered once in New.
type spillQueries struct {
	insert, update, keys, status string
}

// ownedSQL is the poller's share of the outbox in WAL mode, for the row
// alias a, and "" in table mode, where every row is the poller's (so the
// table mode statements stay as they are). The poller owns a row the
// relay wrote (stream_pos set: a spill, or 0 for an event that was the
// poller's from the start), a row older than txid (0), and a captured
// row visible in the slot's creation snapshot, which the stream never
// sees. Every later captured row belongs to the stream, however long it
// waits there, until StreamSpill hands it over by setting stream_pos. The
// snapshot is read by a sub-select, once per statement; without a
// wal_state row no captured row is the poller's.
func (d *Driver) ownedSQL(a string) string {
	if d.source != SourceWAL {
		return ""
	}
	// The slot name passed the slotName rule ([a-z0-9_]), so it is safe
	// as a literal; a literal keeps every claim's parameter list as it is.
	return ` AND (` + a + `.stream_pos IS NOT NULL OR ` + a + `.txid = '0' OR COALESCE(pg_visible_in_snapshot(` + a + `.txid,
			(SELECT ws.snapshot FROM ` + d.walStateTable() + ` ws WHERE ws.slot_name = '` + d.wal.Slot + `')), false))`
}

func buildSpillQueries(d *Driver) spillQueries {
	var q spillQueries
	// An emitted event becomes a new row, with the route and event id of
	// its row (a stream event has none: "" and NULL). The same id already in the
	// table (a spill repeated after a failure) is left alone: the broker
	// sees one dedup id. txid is the column default, this transaction's
	// own xid (see StreamSpill). A FAILED row's processed_at is when it
	// failed, which the dead-letter mover copies into failed_at.
	//
	// A fan-out route's copy (event_id set) whose id (store.RouteRowID)
	// is another event's or another route's row, which a producer writing
	// dense ids of its own can cause, is not dropped by the conflict: it
	// is inserted under a fresh random id instead (docs/concepts.md,
	// "Fan-out"; its txid, this spill's, keeps its place in its key),
	// so the route still gets the event, under another delivery id. The
	// check reads the rows that were there before this statement by
	// primary key, and only for the copies the first insert skipped; a
	// spill repeated after such a fallback inserts the copy again, a
	// duplicate delivery, never a lost one.
	q.insert = d.render(`
	WITH u AS MATERIALIZED (
		SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::text[], $6::text[], $7::int[],
			$8::timestamptz[], $9::text[], $10::timestamptz[], $11::bigint[], $12::text[], $13::uuid[])
			AS u(id, event_type, event_key, payload, headers, status, attempts, due_at, last_error, created_at, stream_pos, route, event_id)
	),
	ins AS (
		INSERT INTO {{outbox}} (id, event_type, event_key, payload, headers, status, attempts, due_at, last_error, created_at, processed_at, stream_pos, route, event_id)
		SELECT u.id, u.event_type, NULLIF(u.event_key, ''), u.payload, u.headers::jsonb, u.status, u.attempts,
			COALESCE(u.due_at, now()), NULLIF(u.last_error, ''), COALESCE(u.created_at, now()),
			CASE WHEN u.status = 'FAILED' THEN now() END, u.stream_pos, u.route, u.event_id
		FROM u
		ON CONFLICT (id) DO NOTHING
		RETURNING id
	)
	INSERT INTO {{outbox}} (id, event_type, event_key, payload, headers, status, attempts, due_at, last_error, created_at, processed_at, stream_pos, route, event_id)
	SELECT gen_random_uuid(), u.event_type, NULLIF(u.event_key, ''), u.payload, u.headers::jsonb, u.status, u.attempts,
		COALESCE(u.due_at, now()), NULLIF(u.last_error, ''), COALESCE(u.created_at, now()),
		CASE WHEN u.status = 'FAILED' THEN now() END, u.stream_pos, u.route, u.event_id
	FROM u
	WHERE u.event_id IS NOT NULL
	  AND NOT EXISTS (SELECT 1 FROM ins WHERE ins.id = u.id)
	  AND EXISTS (SELECT 1 FROM {{outbox}} o WHERE o.id = u.id
	              AND (o.event_id IS DISTINCT FROM u.event_id OR o.route <> u.route))`)
	// A captured row spills in place: the publication publishes inserts
	// only, so the update never comes back. Only a row still the
	// stream's (stream_pos NULL, PENDING) is touched, so a repeated spill
	// never rewrites a row the poller may have claimed since. txid
	// becomes this transaction's xid like an emitted spill's: a key's
	// spills, captured or emitted, are then in stream order in the
	// ordered claim's (txid, id) order. The route is the item's: a
	// fanned-out type's captured row is its first route's copy (the
	// others are inserted), so it becomes that route's row, which the
	// expander (it takes route '' only) leaves alone.
	q.update = d.render(`
	UPDATE {{outbox}} o SET
		stream_pos = u.stream_pos, txid = pg_current_xact_id(), status = u.status, attempts = u.attempts,
		due_at = COALESCE(u.due_at, now()), last_error = NULLIF(u.last_error, ''),
		processed_at = CASE WHEN u.status = 'FAILED' THEN now() END, lease_until = NULL, lease_token = NULL,
		route = u.route
	FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::int[], $5::timestamptz[], $6::text[], $7::text[])
		AS u(id, stream_pos, status, attempts, due_at, last_error, route)
	WHERE o.id = u.id AND o.stream_pos IS NULL AND o.status = 'PENDING'`)
	d.spilledKeysQuery(&q)
	q.status = `
	SELECT s.active, COALESCE(s.active_pid, 0), COALESCE(s.wal_status, ''),
		COALESCE(pg_current_wal_lsn() - s.restart_lsn, 0)::bigint,
		COALESCE(pg_current_wal_lsn() - s.confirmed_flush_lsn, 0)::bigint,
		COALESCE(s.safe_wal_size, -1),
		COALESCE((SELECT st.spill_bytes FROM pg_stat_replication_slots st WHERE st.slot_name = s.slot_name), 0),
		ws.confirmed_at, ws.recreated_at, ws.lost_from::text, ws.lost_to::text, ws.lost_confirmed_at
	FROM pg_replication_slots s
	LEFT JOIN ` + d.walStateTable() + ` ws ON ws.slot_name = s.slot_name
	WHERE s.slot_name = $1 AND s.database = current_database()`
	return q
}

// spilledKeysQuery: two loose index scans, one over the outbox's route
// key index and one over the dead letters' park index, each stepping
// from one index entry to the next after the keyset cursor ($1, $2) with
// one index probe per step; their union, in (type, key) order, is the
// page of $3 pairs. An outbox pair counts only for a row the poller owns
// (ownedSQL): a captured row the stream still holds is not a spill.
//
// The dead letters' index is (event_type, event_key, route): a pair is
// one probe. The outbox's is (event_type, route, event_key, ...), where
// a type's keys are split by fan-out route, so its walk goes route by
// route (a segment): in the cursor's type it starts each segment after
// the cursor's key (a step that lands on a key at or below it is a skip,
// which moves to the cursor's key in that segment), takes at most $3
// keys of a segment before it jumps to the next one, and stops on
// reaching a new type once the types it finished hold $3 pairs for
// certain: acc counts, for each finished type, the keys of its longest
// segment, cmax those of the current type, a lower bound of the distinct
// pairs. Every pair of the page is then among the pairs walked: a pair
// is within the first $3 keys of each segment that holds it. Once the
// bound is reached the probes stay within the current type (an equality
// on the type ends the index scan there), so the walk never reads on
// past the page, through rows the stream owns say, to find where the
// next type starts. A walk is at most (segments of a type) x $3 steps;
// with one route per type it is the former walk.
func (d *Driver) spilledKeysQuery(q *spillQueries) {
	const outboxNext = `SELECT e.event_type, e.route, e.event_key FROM {{outbox}} e
		WHERE %s
		  AND e.event_key IS NOT NULL AND e.status IN ('PENDING', 'IN_PROCESS', 'FAILED')%s
		ORDER BY e.event_type, e.route, e.event_key LIMIT 1`
	const deadNext = `SELECT x.event_type, x.event_key FROM {{dead_letter}} x
		WHERE (x.event_type, x.event_key) > (%s)
		  AND x.event_key IS NOT NULL AND x.status = 'UNRESOLVED'
		ORDER BY x.event_type, x.event_key LIMIT 1`
	owned := d.ownedSQL("e")
	q.keys = d.render(`
	WITH RECURSIVE
	ob(t, r, k, n, acc, cmax, out) AS (
		SELECT $1::text, ''::text, $2::text, 0, 0, 0, false
	  UNION ALL
		SELECT c.t, c.r, CASE WHEN s.skip THEN $2::text ELSE c.k END,
			CASE WHEN s.skip THEN 0 WHEN s.seg THEN 1 ELSE ob.n + 1 END,
			CASE WHEN s.typ THEN ob.acc + ob.cmax ELSE ob.acc END,
			CASE WHEN s.skip THEN ob.cmax WHEN s.typ THEN 1 ELSE GREATEST(ob.cmax, CASE WHEN s.seg THEN 1 ELSE ob.n + 1 END) END,
			NOT s.skip
		FROM ob
		LEFT JOIN LATERAL (` + fmt.Sprintf(outboxNext, `ob.n < $3 AND ob.acc + ob.cmax < $3
			AND (e.event_type, e.route, e.event_key) > (ob.t, ob.r, ob.k)`, owned) + `) a ON true
		LEFT JOIN LATERAL (` + fmt.Sprintf(outboxNext, `ob.n < $3 AND ob.acc + ob.cmax >= $3
			AND e.event_type = ob.t AND (e.event_type, e.route, e.event_key) > (ob.t, ob.r, ob.k)`, owned) + `) a2 ON true
		LEFT JOIN LATERAL (` + fmt.Sprintf(outboxNext, `ob.n >= $3 AND ob.acc + ob.cmax < $3
			AND (e.event_type, e.route) > (ob.t, ob.r)`, owned) + `) b ON true
		LEFT JOIN LATERAL (` + fmt.Sprintf(outboxNext, `ob.n >= $3 AND ob.acc + ob.cmax >= $3
			AND e.event_type = ob.t AND (e.event_type, e.route) > (ob.t, ob.r)`, owned) + `) b2 ON true
		CROSS JOIN LATERAL (SELECT COALESCE(a.event_type, a2.event_type, b.event_type, b2.event_type) AS t,
			COALESCE(a.route, a2.route, b.route, b2.route) AS r,
			COALESCE(a.event_key, a2.event_key, b.event_key, b2.event_key) AS k OFFSET 0) c
		CROSS JOIN LATERAL (SELECT c.t = $1::text AND c.k <= $2::text AS skip, c.t <> ob.t AS typ,
			c.t <> ob.t OR c.r <> ob.r AS seg OFFSET 0) s
		WHERE c.t IS NOT NULL AND NOT (s.typ AND ob.acc + ob.cmax >= $3)
	),
	dl(t, k, n) AS (
		(SELECT s.event_type, s.event_key, 1 FROM (` + fmt.Sprintf(deadNext, `$1::text, $2::text`) + `) s)
	  UNION ALL
		SELECT s.event_type, s.event_key, dl.n + 1 FROM dl CROSS JOIN LATERAL (` + fmt.Sprintf(deadNext, `dl.t, dl.k`) + `) s
		WHERE dl.n < $3
	)
	SELECT t, k FROM (SELECT t, k FROM ob WHERE out UNION SELECT t, k FROM dl) u
	ORDER BY t, k LIMIT $3`)
}

// StreamSpill writes items into the outbox table (see store.Streamer):
// an emitted event as a new row with its stream position, a captured row
// in place. Each transaction commits with synchronous_commit on, so a
// spill the caller confirms past is on disk.
//
// Order: the ordered claim takes a key's rows in (txid, id) order, and
// every row a transaction writes here gets that transaction's xid, so
// the rows of one key in one transaction go in id order. A key's events
// in stream order need not be in id order (their producers' ids come
// from different clocks), so the items are written in stream order in as
// many sequential transactions as it takes for each key's ids to rise
// within each: one, unless a key's ids go backwards in the batch.
//
// An error matching store.ErrDataRefused is the database refusing an
// item's data (a NUL or invalid UTF-8 in a key, a constraint of the
// table): the transaction that held it wrote nothing, the earlier ones
// stay, and the same items fail the same way again. An undecodable
// stream event (store.UndecodableEventType, its raw bytes as payload) is
// written like any other, as a FAILED row for the dead-letter mover.
func (d *Driver) StreamSpill(ctx context.Context, items []*store.StreamSpillItem) error {
	if len(items) > MaxSpillItems {
		return fmt.Errorf("postgres: stream spill: %w: %w: %d events, at most %d", ErrSpillTooLarge, store.ErrInvalidParams, len(items), MaxSpillItems)
	}
	rows, err := spillRows(items)
	if err != nil {
		return err
	}
	for _, g := range spillGroups(rows) {
		if err := d.spillTx(ctx, g); err != nil {
			return err
		}
	}
	return nil
}

// spillRow is one validated item, as the statements bind it.
type spillRow struct {
	id             uuid.UUID
	eventType, key string
	payload        []byte
	headers        string
	status         string
	attempts       int32
	dueAt          pgtype.Timestamptz
	lastError      string
	createdAt      pgtype.Timestamptz
	pos            int64
	captured       bool
	route          string
	eventID        pgtype.UUID
}

// spillRows validates items and returns them in stream order, each id
// once (the first item wins: a repeated id is the same event).
func spillRows(items []*store.StreamSpillItem) ([]spillRow, error) {
	out := make([]spillRow, 0, len(items))
	seen := make(map[uuid.UUID]struct{}, len(items))
	for i, it := range items {
		if it == nil || it.Event == nil {
			return nil, errBadParams("stream spill", "item %d has no event", i)
		}
		ev := it.Event
		r := spillRow{id: ev.Row.ID, eventType: ev.Row.EventType, key: ev.Row.Key, payload: ev.Row.Payload,
			lastError: store.SanitizeText(it.Error), captured: ev.Captured, route: store.SanitizeText(ev.Row.Route)}
		if ev.Row.EventID != (txbox.ID{}) {
			r.eventID = pgUUID(ev.Row.EventID)
		}
		switch it.Outcome {
		case store.OutcomeRetry, store.OutcomeReleased:
			r.status = store.StatusPending
		case store.OutcomeFailed:
			r.status = store.StatusFailed
		default:
			return nil, errBadParams("stream spill", "item %d has outcome %d, not retry, released or failed", i, it.Outcome)
		}
		if r.id == (uuid.UUID{}) {
			return nil, errBadParams("stream spill", "item %d has no id", i)
		}
		// A captured row is only updated: its type is the table's.
		if err := txbox.ValidateEventType(r.eventType); err != nil && !r.captured {
			return nil, fmt.Errorf("postgres: stream spill: %w: item %d: %w", store.ErrInvalidParams, i, err)
		}
		// stream_pos is a bigint, and 0 means "the poller's from the
		// start" (migration 6): a spill's position is 1..MaxInt64.
		if ev.Pos == 0 || ev.Pos > math.MaxInt64 {
			return nil, errBadParams("stream spill", "item %d has stream position %d, not in 1..%d", i, ev.Pos, int64(math.MaxInt64))
		}
		r.pos = int64(ev.Pos)
		if it.Attempts < 0 || it.Attempts > math.MaxInt32 {
			return nil, errBadParams("stream spill", "item %d has %d attempts", i, it.Attempts)
		}
		r.attempts = int32(it.Attempts)
		if _, ok := seen[r.id]; ok {
			continue
		}
		seen[r.id] = struct{}{}
		h, err := encodeHeaders(ev.Row.Headers)
		if err != nil {
			return nil, fmt.Errorf("postgres: stream spill: %w: item %d headers: %w", store.ErrInvalidParams, i, err)
		}
		r.headers = h
		if r.payload == nil {
			r.payload = []byte{} // nil would bind as NULL
		}
		if !it.DueAt.IsZero() {
			r.dueAt = pgtype.Timestamptz{Time: it.DueAt, Valid: true}
		}
		if !ev.Row.CreatedAt.IsZero() {
			r.createdAt = pgtype.Timestamptz{Time: ev.Row.CreatedAt, Valid: true}
		}
		out = append(out, r)
	}
	slices.SortStableFunc(out, func(a, b spillRow) int {
		switch {
		case a.pos < b.pos:
			return -1
		case a.pos > b.pos:
			return 1
		}
		return 0
	})
	return out, nil
}

// spillGroups cuts rows (in stream order) into the transactions of
// StreamSpill: a new one starts where a key's id does not rise over the
// last one of that key and route in the current transaction. Rows without a key
// have no order and never start one.
func spillGroups(rows []spillRow) [][]spillRow {
	var groups [][]spillRow
	start := 0
	// A key's order is per fan-out route: the copies of one event for
	// two routes need no transaction of their own.
	type routeKey struct{ eventType, key, route string }
	last := map[routeKey]uuid.UUID{}
	for i, r := range rows {
		if r.key == "" {
			continue
		}
		k := routeKey{r.eventType, r.key, r.route}
		if prev, ok := last[k]; ok && strings.Compare(string(r.id[:]), string(prev[:])) <= 0 {
			groups = append(groups, rows[start:i])
			start = i
			clear(last)
		}
		last[k] = r.id
	}
	if start < len(rows) {
		groups = append(groups, rows[start:])
	}
	return groups
}

// spillTx writes one group in one durable transaction.
func (d *Driver) spillTx(ctx context.Context, rows []spillRow) error {
	var (
		ins               spillArrays
		capIDs            []pgtype.UUID
		capPos            []int64
		capStatus, capErr []string
		capAttempts       []int32
		capDue            []pgtype.Timestamptz
		capRoutes         []string
	)
	for i := range rows {
		r := &rows[i]
		if r.captured {
			capIDs = append(capIDs, pgUUID(r.id))
			capPos = append(capPos, r.pos)
			capStatus = append(capStatus, r.status)
			capAttempts = append(capAttempts, r.attempts)
			capDue = append(capDue, r.dueAt)
			capErr = append(capErr, r.lastError)
			capRoutes = append(capRoutes, r.route)
			continue
		}
		ins.add(r)
	}
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(`SET LOCAL synchronous_commit = on`)
		if len(ins.ids) > 0 {
			b.Queue(d.spill.insert, ins.ids, ins.types, ins.keys, ins.payloads, ins.headers, ins.status,
				ins.attempts, ins.due, ins.errs, ins.created, ins.pos, ins.routes, ins.eventIDs)
		}
		if len(capIDs) > 0 {
			b.Queue(d.spill.update, capIDs, capPos, capStatus, capAttempts, capDue, capErr, capRoutes)
		}
		return tx.SendBatch(ctx, b).Close()
	})
	return d.translate("stream spill", err)
}

// spillArrays are the insert's columns.
type spillArrays struct {
	ids                                []pgtype.UUID
	types, keys, headers, status, errs []string
	payloads                           [][]byte
	attempts                           []int32
	due, created                       []pgtype.Timestamptz
	pos                                []int64
	routes                             []string
	eventIDs                           []pgtype.UUID
}

func (a *spillArrays) add(r *spillRow) {
	a.ids = append(a.ids, pgUUID(r.id))
	a.types = append(a.types, r.eventType)
	a.keys = append(a.keys, r.key)
	a.payloads = append(a.payloads, r.payload)
	a.headers = append(a.headers, r.headers)
	a.status = append(a.status, r.status)
	a.attempts = append(a.attempts, r.attempts)
	a.due = append(a.due, r.dueAt)
	a.errs = append(a.errs, r.lastError)
	a.created = append(a.created, r.createdAt)
	a.pos = append(a.pos, r.pos)
	a.routes = append(a.routes, r.route)
	a.eventIDs = append(a.eventIDs, r.eventID)
}

// StreamSpilledKeys lists the (type, key) pairs with rows the poller
// owns not yet finished, or with an unresolved dead letter, after after
// in (type, key) order, at most limit (1..MaxSpilledKeys). See
// store.Streamer.
func (d *Driver) StreamSpilledKeys(ctx context.Context, after *store.StreamKey, limit int) ([]store.StreamKey, error) {
	if limit < 1 || limit > MaxSpilledKeys {
		return nil, errBadParams("stream spilled keys", "limit %d must be between 1 and %d", limit, MaxSpilledKeys)
	}
	// ('', '') sorts before every pair: a type is never empty.
	var t, k string
	if after != nil {
		t, k = after.EventType, after.Key
	}
	rows, err := d.pool.Query(ctx, d.spill.keys, t, k, limit)
	if err != nil {
		return nil, d.translate("stream spilled keys", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.StreamKey, error) {
		var sk store.StreamKey
		err := row.Scan(&sk.EventType, &sk.Key)
		return sk, err
	})
	if err != nil {
		return nil, d.translate("stream spilled keys", err)
	}
	return out, nil
}

// StreamStatus reads the slot's health from pg_replication_slots and
// pg_stat_replication_slots, the time of the relay's last persisted
// confirm from the stream's state, and whether the slot survives a
// failover from the primary and the standbys of the DSN
// (stream_failover.go). A slot that does not exist in this
// database is an error matching ErrNoSlot.
func (d *Driver) StreamStatus(ctx context.Context) (*store.StreamStatus, error) {
	s := &store.StreamStatus{Slot: d.wal.Slot}
	var confirmed, recreated, lostConfirmed pgtype.Timestamptz
	var lostFrom, lostTo *string
	err := d.pool.QueryRow(ctx, d.spill.status, d.wal.Slot).Scan(&s.Active, &s.ActivePID, &s.WALStatus,
		&s.RestartLag, &s.FlushLag, &s.SafeWALSize, &s.SpillBytes, &confirmed, &recreated, &lostFrom, &lostTo, &lostConfirmed)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("postgres: stream status: %w: %q", ErrNoSlot, d.wal.Slot)
	}
	if err != nil {
		return nil, d.translate("stream status", err)
	}
	if confirmed.Valid {
		s.LastConfirm = confirmed.Time
	}
	if recreated.Valid && lostFrom != nil && lostTo != nil {
		from, ferr := pglogrepl.ParseLSN(*lostFrom)
		to, terr := pglogrepl.ParseLSN(*lostTo)
		if ferr == nil && terr == nil {
			s.LastLoss = &store.StreamLoss{Slot: d.wal.Slot, From: uint64(from), To: uint64(to), At: recreated.Time,
				Reason: "the slot was lost and recreated"}
			if lostConfirmed.Valid {
				s.LastLoss.LastConfirm = lostConfirmed.Time
			}
		}
	}
	j, err := d.streamFailover(ctx, nil)
	if err != nil {
		s.Failover = store.StreamFailover{Verdict: store.FailoverUnknown, Note: "could not read the slot's protection against a failover: " + err.Error(),
			Disabled: d.wal.DisableFailover}
	} else {
		s.Failover = j.StreamFailover
	}
	return s, nil
}
