package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// Fan-out routes (docs/concepts.md, "Fan-out"): the expander that turns a
// fan-out event's one row into one row per route, the list of routes with
// pending rows, and the drop of a route that left the configuration.

var _ store.Expander = (*Driver)(nil)

// fanoutQueries are the statements of this file, rendered once in New.
type fanoutQueries struct {
	expand, split, pendingRoutes, dropRoute string
}

// routeIDSQL is store.RouteRowID in SQL: the id p.id with its last byte
// XORed with the 0-based route index (r.i is WITH ORDINALITY's, 1-based).
const routeIDSQL = `encode(set_byte(uuid_send(p.id), 15, get_byte(uuid_send(p.id), 15) # (r.i - 1)::int), 'hex')::uuid`

// maxRouteCount bounds the count of one (type, route) pair of
// OutboxPendingRoutes: the count reads the claim index, one entry per
// row, and a removed route's backlog may be large, while the relay only
// needs to know that there are rows to drop (it drops them in bounded
// batches until none is left).
const maxRouteCount = 10_000

// takenSQL are the CTEs expandQuery and splitQuery share: the events one
// of whose copies' ids is already a row's, or another copy's of the
// statement (taken), and their failure (failed), with the last error the
// parameter errParam names.
func takenSQL(errParam string) string {
	return `	taken AS MATERIALIZED (
		SELECT c.event_id FROM copies c WHERE EXISTS (SELECT 1 FROM {{outbox}} o WHERE o.id = c.id)
		UNION
		SELECT c.event_id FROM copies c WHERE EXISTS (SELECT 1 FROM copies c2 WHERE c2.id = c.id AND c2.event_id <> c.event_id)
	),
	failed AS (
		UPDATE {{outbox}} o
		SET status = 'FAILED', attempts = o.attempts + 1, last_error = ` + errParam + `, processed_at = now()
		FROM taken t WHERE o.id = t.event_id
		RETURNING o.id
	),`
}

// expandQuery is OutboxExpand's statement.
func expandQuery(d *Driver) string {
	// One statement is one transaction. The rows are taken from the claim
	// index (event_type, route '', due_at, id), whatever their due time,
	// and locked; another expander skips them. Route i > 0 gets the id
	// store.RouteRowID(id, i): the last byte XORed with i. An event one
	// of whose route ids is already a row's, or another route row's of
	// this batch, is not expanded but fails like a finish would fail it
	// (processed_at is the failure time the dead-letter mover copies).
	// The copies keep the row's txid, so they stand in their key's order
	// where the event does, and stream_pos 0, so in WAL mode they are the
	// poller's and the publication leaves them out. A row another
	// transaction inserts with a route id meanwhile fails the insert,
	// and the whole statement with it: the next call sees the row and
	// fails that event instead.
	return d.render(`
	WITH picked AS MATERIALIZED (
		SELECT o.id FROM {{outbox}} o
		WHERE o.status = 'PENDING' AND o.event_type = $1 AND o.route = ''` + d.ownedSQL("o") + `
		ORDER BY o.due_at, o.id
		LIMIT $3
		FOR UPDATE SKIP LOCKED
	),
	copies AS MATERIALIZED (
		SELECT p.id AS event_id, r.route, ` + routeIDSQL + ` AS id
		FROM picked p CROSS JOIN unnest($2::text[]) WITH ORDINALITY AS r(route, i)
		WHERE r.i > 1
	),
` + takenSQL("$4") + `
	moved AS (
		UPDATE {{outbox}} o SET route = ($2::text[])[1]
		FROM picked p
		WHERE o.id = p.id AND NOT EXISTS (SELECT 1 FROM taken t WHERE t.event_id = p.id)
		RETURNING o.id, o.event_type, o.event_key, o.payload, o.headers, o.due_at, o.created_at, o.txid
	),
	ins AS (
		INSERT INTO {{outbox}} (id, event_id, route, event_type, event_key, payload, headers, status, attempts, due_at, created_at, txid, stream_pos)
		SELECT c.id, c.event_id, c.route, m.event_type, m.event_key, m.payload, m.headers, 'PENDING', 0, m.due_at, m.created_at, m.txid, 0
		FROM moved m JOIN copies c ON c.event_id = m.id
		RETURNING 1
	)
	SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM failed), (SELECT count(*) FROM ins)`)
}

// splitQuery is OutboxSplit's statement: expandQuery's, for the given
// rows only and the routes their done mask ($5, bit i for route i)
// leaves; the row itself takes the first route when route 0 is not
// done, and is deleted when it is (or, with $6, retention, kept as that
// route's PROCESSED row).
func splitQuery(d *Driver) string {
	return d.render(`
	WITH picked AS MATERIALIZED (
		SELECT o.id, w.done FROM {{outbox}} o
		JOIN unnest($4::uuid[], $5::int[]) AS w(id, done) ON w.id = o.id
		WHERE o.status = 'PENDING' AND o.event_type = $1 AND o.route = ''` + d.ownedSQL("o") + `
		ORDER BY o.id
		FOR UPDATE OF o SKIP LOCKED
	),
	copies AS MATERIALIZED (
		SELECT p.id AS event_id, r.route, ` + routeIDSQL + ` AS id
		FROM picked p CROSS JOIN unnest($2::text[]) WITH ORDINALITY AS r(route, i)
		WHERE r.i > 1 AND (p.done >> (r.i - 1)::int) & 1 = 0
	),
` + takenSQL("$3") + `
	moved AS (
		UPDATE {{outbox}} o SET route = ($2::text[])[1]
		FROM picked p
		WHERE o.id = p.id AND p.done & 1 = 0 AND NOT EXISTS (SELECT 1 FROM taken t WHERE t.event_id = p.id)
		RETURNING o.id, o.event_type, o.event_key, o.payload, o.headers, o.due_at, o.created_at, o.txid
	),
	gone AS (
		DELETE FROM {{outbox}} o USING picked p
		WHERE NOT $6::bool AND o.id = p.id AND p.done & 1 = 1 AND NOT EXISTS (SELECT 1 FROM taken t WHERE t.event_id = p.id)
		RETURNING o.id, o.event_type, o.event_key, o.payload, o.headers, o.due_at, o.created_at, o.txid
	),
	kept AS (
		UPDATE {{outbox}} o SET route = ($2::text[])[1], status = 'PROCESSED', processed_at = now(), lease_until = NULL, lease_token = NULL
		FROM picked p
		WHERE $6::bool AND o.id = p.id AND p.done & 1 = 1 AND NOT EXISTS (SELECT 1 FROM taken t WHERE t.event_id = p.id)
		RETURNING o.id, o.event_type, o.event_key, o.payload, o.headers, o.due_at, o.created_at, o.txid
	),
	src AS (SELECT * FROM moved UNION ALL SELECT * FROM gone UNION ALL SELECT * FROM kept),
	ins AS (
		INSERT INTO {{outbox}} (id, event_id, route, event_type, event_key, payload, headers, status, attempts, due_at, created_at, txid, stream_pos)
		SELECT c.id, c.event_id, c.route, m.event_type, m.event_key, m.payload, m.headers, 'PENDING', 0, m.due_at, m.created_at, m.txid, 0
		FROM src m JOIN copies c ON c.event_id = m.id
		RETURNING 1
	)
	SELECT (SELECT count(*) FROM src), (SELECT count(*) FROM ins)`)
}

func buildFanoutQueries(d *Driver) fanoutQueries {
	var q fanoutQueries
	q.expand = expandQuery(d)
	q.split = splitQuery(d)

	// A loose index scan over the claim index (event_type, route, ...):
	// one probe per distinct pair, route "" ones included (they are
	// stepped over, not filtered inside the probe, which would walk a
	// large route-less backlog entry by entry), then a bounded count of
	// each routed pair from the same index (in its order, so that the
	// planner reads the index rather than the table for a low bound).
	q.pendingRoutes = d.render(`
	WITH RECURSIVE t(event_type, route) AS (
		(SELECT o.event_type, o.route FROM {{outbox}} o WHERE o.status = 'PENDING' ORDER BY o.event_type, o.route LIMIT 1)
		UNION ALL
		SELECT s.event_type, s.route FROM t CROSS JOIN LATERAL (
			SELECT o.event_type, o.route FROM {{outbox}} o
			WHERE o.status = 'PENDING' AND (o.event_type, o.route) > (t.event_type, t.route)
			ORDER BY o.event_type, o.route LIMIT 1) s
	)
	SELECT t.event_type, t.route, (SELECT count(*) FROM (
		SELECT 1 FROM {{outbox}} o WHERE o.status = 'PENDING' AND o.event_type = t.event_type AND o.route = t.route
		ORDER BY o.due_at, o.id LIMIT $1) n)
	FROM t WHERE t.route <> ''`)

	// FAILED with the reason, as a finish fails a row (processed_at is
	// the failure time), so the dead-letter mover takes them; attempts
	// stay, nothing was tried.
	q.dropRoute = d.render(`
	WITH p AS (
		SELECT o.id FROM {{outbox}} o
		WHERE o.status = 'PENDING' AND o.event_type = $1 AND o.route = $2
		ORDER BY o.due_at, o.id
		LIMIT $4
		FOR UPDATE SKIP LOCKED
	)
	UPDATE {{outbox}} o SET status = 'FAILED', last_error = $3, processed_at = now()
	FROM p WHERE o.id = p.id`)
	return q
}

// validRoute reports whether route can be stored: text the database
// takes (UTF-8 without NUL).
func validRoute(route string) bool {
	return utf8.ValidString(route) && !strings.ContainsRune(route, 0)
}

// OutboxExpand turns up to params.Limit route-less PENDING rows of
// params.EventType into one row per route, in one statement. See
// store.Expander.
func (d *Driver) OutboxExpand(ctx context.Context, params *store.OutboxExpandParams) (int, error) {
	if params == nil {
		return 0, errBadParams("expand", "params are nil")
	}
	if err := txbox.ValidateEventType(params.EventType); err != nil {
		return 0, fmt.Errorf("postgres: expand: %w: %w", store.ErrInvalidParams, err)
	}
	if params.Limit < 1 {
		return 0, errBadParams("expand", "limit %d must be at least 1", params.Limit)
	}
	if n := len(params.Routes); n < 2 || n > store.MaxRoutes {
		return 0, errBadParams("expand", "%d routes, want 2 to %d", n, store.MaxRoutes)
	}
	for i, r := range params.Routes {
		if r == "" || !validRoute(r) {
			return 0, errBadParams("expand", "route %d (%q) must be non-empty text", i, r)
		}
		if slices.Contains(params.Routes[:i], r) {
			return 0, errBadParams("expand", "route %q appears twice", r)
		}
	}
	var moved, failed, inserted int64
	err := d.pool.QueryRow(ctx, d.fanout.expand, params.EventType, params.Routes, params.Limit,
		store.NotSentPrefix+store.ErrRouteIDTaken).Scan(&moved, &failed, &inserted)
	if err != nil {
		return 0, d.translate("expand", err)
	}
	if inserted != moved*int64(len(params.Routes)-1) {
		// Cannot happen: every moved row has its copies. Said loudly
		// rather than returned as a count the caller trusts.
		return 0, fmt.Errorf("postgres: expand: %d events expanded into %d route rows, want %d", moved, inserted, moved*int64(len(params.Routes)-1))
	}
	return int(moved), nil
}

// OutboxSplit gives the not-done routes of the given route-less PENDING
// rows their rows, in one statement. See store.Expander.
func (d *Driver) OutboxSplit(ctx context.Context, params *store.OutboxSplitParams) (int, error) {
	if err := params.Validate(); err != nil {
		return 0, fmt.Errorf("postgres: split: %w", err)
	}
	for i, r := range params.Routes {
		if !validRoute(r) {
			return 0, errBadParams("split", "route %d (%q) must be text", i, r)
		}
	}
	ids := make([]pgtype.UUID, len(params.Rows))
	done := make([]int32, len(params.Rows))
	for i, r := range params.Rows {
		ids[i], done[i] = pgUUID(r.ID), int32(r.Done)
	}
	var split, inserted int64
	err := d.pool.QueryRow(ctx, d.fanout.split, params.EventType, params.Routes,
		store.NotSentPrefix+store.ErrRouteIDTaken, ids, done, params.Retain).Scan(&split, &inserted)
	if err != nil {
		return 0, d.translate("split", err)
	}
	return int(split), nil
}

// OutboxPendingRoutes lists the (type, route) pairs of PENDING rows with
// a route, by a loose index scan over the claim index. Pending is exact
// up to maxRouteCount and saturates there. See store.Expander.
func (d *Driver) OutboxPendingRoutes(ctx context.Context) ([]store.TypeRoute, error) {
	rows, err := d.pool.Query(ctx, d.fanout.pendingRoutes, maxRouteCount)
	if err != nil {
		return nil, d.translate("pending routes", err)
	}
	defer rows.Close()
	var out []store.TypeRoute
	for rows.Next() {
		var tr store.TypeRoute
		if err := rows.Scan(&tr.EventType, &tr.Route, &tr.Pending); err != nil {
			return nil, d.translate("pending routes", err)
		}
		out = append(out, tr)
	}
	if err := rows.Err(); err != nil {
		return nil, d.translate("pending routes", err)
	}
	return out, nil
}

// OutboxDropRoute fails up to params.Limit PENDING rows of one type and
// route with params.Reason, for the dead-letter mover. See
// store.Expander.
func (d *Driver) OutboxDropRoute(ctx context.Context, params *store.OutboxDropRouteParams) (int, error) {
	if params == nil {
		return 0, errBadParams("drop route", "params are nil")
	}
	if err := txbox.ValidateEventType(params.EventType); err != nil {
		return 0, fmt.Errorf("postgres: drop route: %w: %w", store.ErrInvalidParams, err)
	}
	if params.Route == "" || !validRoute(params.Route) {
		return 0, errBadParams("drop route", "route %q must be non-empty text", params.Route)
	}
	if params.Limit < 1 {
		return 0, errBadParams("drop route", "limit %d must be at least 1", params.Limit)
	}
	tag, err := d.pool.Exec(ctx, d.fanout.dropRoute, params.EventType, params.Route, store.SanitizeText(params.Reason), params.Limit)
	if err != nil {
		return 0, d.translate("drop route", err)
	}
	return int(tag.RowsAffected()), nil
}
