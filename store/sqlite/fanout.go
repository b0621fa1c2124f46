package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/internal/sqlstore"
)

var _ store.Expander = (*Driver)(nil)

// fanoutQueries are the statements of the expander (store.Expander).
type fanoutQueries struct {
	expandSelect, expandTaken, expandFail, expandCopy, expandFirst string
	expandUnreadable, splitSelect, splitDelete, splitRetain        string
	pendingRoutes, dropRoute                                       string
}

func buildFanoutQueries(r *strings.Replacer) fanoutQueries {
	return fanoutQueries{
		// The type's unexpanded rows in rowid order, their key order, and
		// whether the outbox triggers would accept a copy (rows written
		// before schema version 2 may not pass them).
		expandSelect: r.Replace(`SELECT id, coalesce(` + readableRow + `, 0) FROM {outbox}
WHERE status = 'PENDING' AND event_type = ? AND route = ''
ORDER BY rowid
LIMIT ?`),
		// The split's rows, as expandSelect reads them, by their ids.
		splitSelect: r.Replace(`SELECT id, coalesce(` + readableRow + `, 0) FROM {outbox}
WHERE status = 'PENDING' AND event_type = ? AND route = '' AND id IN (SELECT value FROM json_each(?))
ORDER BY rowid`),
		// A split row that every route acknowledged, or route 0.
		splitDelete: r.Replace(`DELETE FROM {outbox}
WHERE status = 'PENDING' AND route = '' AND id IN (SELECT value FROM json_each(?))`),
		// A split row route 0 acknowledged, on a type that keeps
		// delivered rows: route 0's row, PROCESSED as a finish leaves it.
		splitRetain: r.Replace(`UPDATE {outbox} SET route = ?, status = 'PROCESSED', processed_at = {now}, lease_until = NULL, lease_token = NULL
WHERE status = 'PENDING' AND route = '' AND id IN (SELECT value FROM json_each(?))`),
		// By the raw id text, which may not be canonical.
		expandUnreadable: r.Replace(`UPDATE {outbox}
SET status = 'FAILED', attempts = attempts + 1, last_error = ?, processed_at = {now}, lease_until = NULL, lease_token = NULL
WHERE status = 'PENDING' AND route = '' AND id = ?`),
		expandTaken: r.Replace(`SELECT id FROM {outbox} WHERE id IN (SELECT value FROM json_each(?))`),
		// As a finish fails a row for good: the dead-letter mover takes it.
		expandFail: r.Replace(`UPDATE {outbox}
SET status = 'FAILED', attempts = attempts + 1, last_error = ?, processed_at = {now}, lease_until = NULL, lease_token = NULL
WHERE status = 'PENDING' AND route = '' AND id IN (SELECT value FROM json_each(?))`),
		// One further route's row of one event: a new rowid, after every
		// row there is, so the copies keep the order they are inserted in.
		expandCopy: r.Replace(`INSERT INTO {outbox} (id, event_id, route, event_type, event_key, payload, headers, status, attempts, due_at, created_at)
SELECT ?, id, ?, event_type, event_key, payload, headers, 'PENDING', 0, due_at, created_at
FROM {outbox} WHERE id = ?`),
		expandFirst: r.Replace(`UPDATE {outbox} SET route = ?
WHERE status = 'PENDING' AND route = '' AND id IN (SELECT value FROM json_each(?))`),
		// Read from the claim index alone (partial on PENDING, route in
		// it): a covering scan.
		pendingRoutes: r.Replace(`SELECT event_type, route, count(*) FROM {outbox}
WHERE status = 'PENDING' AND route <> ''
GROUP BY event_type, route`),
		dropRoute: r.Replace(`UPDATE {outbox}
SET status = 'FAILED', last_error = ?, processed_at = {now}, lease_until = NULL, lease_token = NULL
WHERE id IN (
    SELECT id FROM {outbox}
    WHERE status = 'PENDING' AND event_type = ? AND route = ?
    ORDER BY rowid
    LIMIT ?)`),
	}
}

// maxExpand bounds OutboxExpandParams.Limit: one call is one write
// transaction, which holds the database's one write lock.
const maxExpand = 1000

// OutboxExpand turns up to Limit PENDING rows of the type with route ""
// into one row per route (store.Expander), in one write transaction (the
// database's write lock, so no other expander runs meanwhile). The rows
// are taken in rowid order, their key order; the event's own row takes
// Routes[0] and keeps its rowid, and the further routes' rows are
// inserted event by event in that order, so every route's rows of a key
// keep the events' order. An event one of whose route ids is taken fails
// with store.ErrRouteIDTaken.
func (d *Driver) OutboxExpand(ctx context.Context, params *store.OutboxExpandParams) (int, error) {
	if err := params.Validate(); err != nil {
		return 0, fmt.Errorf("sqlite: %w", err)
	}
	var expanded int
	err := d.write(ctx, func(tx *sql.Tx) error {
		var err error
		expanded, err = d.expandIn(ctx, tx, params.EventType, params.Routes, min(params.Limit, maxExpand))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("outbox expand: %w", err)
	}
	return expanded, nil
}

func (d *Driver) expandIn(ctx context.Context, tx *sql.Tx, typ string, routes []string, limit int) (int, error) {
	ids, err := d.expandable(ctx, tx, d.q.fanout.expandSelect, typ, limit)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	return d.fanOutIn(ctx, tx, sqlstore.ExpandAll(ids, len(routes)), routes, false)
}

// OutboxSplit splits the given PENDING rows of route "" that a shared
// claim sent to every route (store.Expander), in one write transaction
// (no other transaction holds a row meanwhile; a row claimed again is no
// longer PENDING and is skipped). The rows are taken in rowid order, as
// OutboxExpand takes them, and unreadable ones fail as there. Each gets a
// copy for every route that did not acknowledge it, then takes Routes[0]
// (keeping its rowid) or, when route 0 acknowledged it, is deleted. A row
// one of whose needed route ids is taken fails with
// store.ErrRouteIDTaken and is kept.
func (d *Driver) OutboxSplit(ctx context.Context, params *store.OutboxSplitParams) (int, error) {
	if err := params.Validate(); err != nil {
		return 0, fmt.Errorf("sqlite: %w", err)
	}
	want := make([]string, len(params.Rows))
	for j, r := range params.Rows {
		want[j] = r.ID.String()
	}
	var split int
	err := d.write(ctx, func(tx *sql.Tx) error {
		ids, err := d.expandable(ctx, tx, d.q.fanout.splitSelect, params.EventType, idsJSON(want))
		if err != nil || len(ids) == 0 {
			return err
		}
		split, err = d.fanOutIn(ctx, tx, sqlstore.SplitPlan(ids, params.Rows, len(params.Routes)), params.Routes, params.Retain)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("outbox split: %w", err)
	}
	return split, nil
}

// fanOutIn makes the route rows of rows, PENDING rows of route "" in
// rowid order, and returns how many it fanned out. A route id is taken
// when another row has it already, or when two rows of the call (ids
// dense in the last byte) would share one; the later row then fails.
func (d *Driver) fanOutIn(ctx context.Context, tx *sql.Tx, rows []sqlstore.FanOut, routes []string, retain bool) (int, error) {
	taken := map[txbox.ID]bool{}
	if all := sqlstore.CopyIDs(rows); len(all) > 0 {
		takenIDs, err := queryStrings(ctx, d, tx, d.q.fanout.expandTaken, idsJSON(idStrings(all)))
		if err != nil {
			return 0, err
		}
		for _, s := range takenIDs {
			if id, err := txbox.ParseID(s); err == nil {
				taken[id] = true
			}
		}
	}
	ok, failed := sqlstore.Partition(rows, taken)
	if len(failed) > 0 {
		if _, err := d.txExec(ctx, tx, d.q.fanout.expandFail, store.NotSentPrefix+store.ErrRouteIDTaken, idsJSON(idStrings(failed))); err != nil {
			return 0, err
		}
	}
	// The copies first, in the rows' rowid order (ok keeps it), while
	// the rows still have route "".
	for _, f := range ok {
		for _, i := range f.Copies {
			if _, err := d.txExec(ctx, tx, d.q.fanout.expandCopy, store.RouteRowID(f.ID, i).String(), routes[i], f.ID.String()); err != nil {
				return 0, err
			}
		}
	}
	keep, drop := sqlstore.Kept(ok)
	if len(keep) > 0 {
		if _, err := d.txExec(ctx, tx, d.q.fanout.expandFirst, routes[0], idsJSON(idStrings(keep))); err != nil {
			return 0, err
		}
	}
	switch {
	case retain && len(drop) > 0:
		if _, err := d.txExec(ctx, tx, d.q.fanout.splitRetain, routes[0], idsJSON(idStrings(drop))); err != nil {
			return 0, err
		}
	case len(drop) > 0:
		if _, err := d.txExec(ctx, tx, d.q.fanout.splitDelete, idsJSON(idStrings(drop))); err != nil {
			return 0, err
		}
	}
	return len(ok), nil
}

// idStrings returns the text form of ids.
func idStrings(ids []txbox.ID) []string {
	out := make([]string, len(ids))
	for j, id := range ids {
		out[j] = id.String()
	}
	return out
}

// expandable reads the rows to expand or split (query, whose columns are
// expandSelect's), in rowid order, and returns the ids of those that can
// be. A row that cannot (written by plain SQL before schema version 2: an
// id that is not canonical, or headers or a created_at the outbox
// triggers would refuse in its copies) fails with the reason, as the
// claim fails it, so it neither wedges the expansion of its type nor is
// lost.
func (d *Driver) expandable(ctx context.Context, tx *sql.Tx, query string, args ...any) ([]txbox.ID, error) {
	rows, err := d.txQuery(ctx, tx, query, args...)
	if err != nil {
		return nil, err
	}
	type unreadable struct{ raw, reason string }
	var (
		ids []txbox.ID
		bad []unreadable
	)
	for rows.Next() {
		var raw string
		var readable bool
		if err := rows.Scan(&raw, &readable); err != nil {
			rows.Close()
			return nil, err
		}
		id, perr := txbox.ParseID(raw)
		switch {
		case perr != nil || id.String() != raw:
			bad = append(bad, unreadable{raw, fmt.Sprintf("id %q is not a canonical lower-case UUID", store.SanitizeText(raw))})
		case !readable:
			bad = append(bad, unreadable{raw, "fan-out: the row's headers are not a JSON object or its created_at is not a UTC 'YYYY-MM-DD HH:MM:SS' time"})
		default:
			ids = append(ids, id)
		}
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, b := range bad {
		if _, err := d.txExec(ctx, tx, d.q.fanout.expandUnreadable, store.NotSentPrefix+b.reason, b.raw); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// queryStrings runs a query of one text column in tx.
func queryStrings(ctx context.Context, d *Driver, tx *sql.Tx, q string, args ...any) ([]string, error) {
	rows, err := d.txQuery(ctx, tx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// OutboxPendingRoutes lists the (type, route) pairs of PENDING rows with a
// route, and how many rows each has (store.Expander).
func (d *Driver) OutboxPendingRoutes(ctx context.Context) ([]store.TypeRoute, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	rows, err := d.db.QueryContext(ctx, d.q.fanout.pendingRoutes)
	if err != nil {
		return nil, d.translate(fmt.Errorf("outbox pending routes: %w", err))
	}
	defer rows.Close()
	var out []store.TypeRoute
	for rows.Next() {
		var tr store.TypeRoute
		if err := rows.Scan(&tr.EventType, &tr.Route, &tr.Pending); err != nil {
			return nil, fmt.Errorf("outbox pending routes: %w", err)
		}
		out = append(out, tr)
	}
	if err := rows.Err(); err != nil {
		return nil, d.translate(fmt.Errorf("outbox pending routes: %w", err))
	}
	return out, nil
}

// OutboxDropRoute fails up to Limit PENDING rows of the type and route
// with the reason, attempts unchanged (store.Expander), in rowid order.
func (d *Driver) OutboxDropRoute(ctx context.Context, params *store.OutboxDropRouteParams) (int, error) {
	if params == nil || params.Limit < 1 || params.Route == "" || params.EventType == "" {
		return 0, fmt.Errorf("%w: drop route needs an event type, a route and Limit >= 1", ErrInvalidParams)
	}
	var n int64
	err := d.write(ctx, func(tx *sql.Tx) error {
		res, err := d.txExec(ctx, tx, d.q.fanout.dropRoute, store.SanitizeText(params.Reason), params.EventType, params.Route, params.Limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("outbox drop route: %w", err)
	}
	return int(n), nil
}
