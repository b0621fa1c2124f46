package mysql

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

// fanoutQueries renders the statements of the expander (store.Expander).
func (d *Driver) fanoutQueries(q *queries) {
	// As the dead-letter mover (docs/schema/mysql.md, "Lock order"): the
	// candidates are read without locks through the claim index, then
	// locked through the primary key in id order, skipping rows another
	// expander holds, so the expander never waits for a lock.
	q.expandCandidates = d.render("SELECT id FROM {{outbox}} FORCE INDEX (txbox_claim)" +
		" WHERE status = 'PENDING' AND event_type = ? AND route = '' ORDER BY due_at, id LIMIT ?")
	q.expandLock = d.render("SELECT id FROM {{outbox}} FORCE INDEX (PRIMARY)" +
		" WHERE id IN ({{ids}}) AND status = 'PENDING' AND event_type = ? AND route = '' ORDER BY id FOR UPDATE SKIP LOCKED")
	q.expandTaken = d.render("SELECT id FROM {{outbox}} WHERE id IN ({{ids}})")
	// The event's own row: it takes the first route. The rows are this
	// transaction's already; by primary key only.
	q.expandFirst = updateByID(d.qOutbox) + " SET route = ? WHERE id IN ({{ids}}) AND status = 'PENDING' AND route = ''"
	// A split row route 0 acknowledged, on a type that keeps delivered
	// rows: route 0's row, PROCESSED as a finish leaves it.
	q.splitRetain = updateByID(d.qOutbox) + " SET route = ?, status = 'PROCESSED', processed_at = UTC_TIMESTAMP(6)," +
		" lease_until = NULL, lease_token = NULL WHERE id IN ({{ids}}) AND status = 'PENDING' AND route = ''"
	// An event whose route id is taken fails, as a finish fails a row
	// for good: the dead-letter mover takes it.
	q.expandFail = updateByID(d.qOutbox) + " SET status = 'FAILED', attempts = attempts + 1, last_error = ?," +
		" processed_at = UTC_TIMESTAMP(6), lease_until = NULL, lease_token = NULL WHERE id IN ({{ids}}) AND status = 'PENDING' AND route = ''"
	// The further routes' rows, one SELECT of the event's row per copy:
	// the type, key, payload, headers, due and creation times copied.
	q.expandInsert = d.render("INSERT INTO {{outbox}} (id, event_id, route, event_type, event_key, payload, headers, status, attempts, due_at, created_at) ")
	q.expandCopy = d.render("SELECT ?, e.id, ?, e.event_type, e.event_key, e.payload, e.headers, 'PENDING', 0, e.due_at, e.created_at FROM {{outbox}} e WHERE e.id = ?")
	// Every PENDING entry of the claim index is read: the count needs
	// them, and the routes' rows are a short range per type.
	q.pendingRoutes = d.render("SELECT event_type, route, COUNT(*) FROM {{outbox}} FORCE INDEX (txbox_claim)" +
		" WHERE status = 'PENDING' AND route <> '' GROUP BY event_type, route")
	q.dropRouteSelect = d.render("SELECT id FROM {{outbox}} FORCE INDEX (txbox_claim) WHERE status = 'PENDING' AND event_type = ? AND route = ? LIMIT ?")
	q.dropRouteWrite = updateByID(d.qOutbox) + " SET status = 'FAILED', last_error = ?, processed_at = UTC_TIMESTAMP(6)," +
		" lease_until = NULL, lease_token = NULL WHERE id IN ({{ids}}) AND status = 'PENDING' AND event_type = ? AND route = ?"
}

// maxExpand bounds OutboxExpandParams.Limit: the copies of one call are
// one INSERT of 3 placeholders each, at most MaxRoutes-1 per event.
// store.MaxSplitRows bounds an OutboxSplit's rows alike.
const maxExpand = 1000

// OutboxExpand turns up to Limit PENDING rows of the type with route ""
// into one row per route (store.Expander), in one READ COMMITTED
// transaction: up to Limit candidates are read without locks in (due_at,
// id) order through the claim index (no index has them in id order
// without a sort of every unexpanded row), then locked through the
// primary key in id order, skipping those another expander holds. The
// order of expansion does not change a route's key order, which is by id
// (RouteRowID keeps it), and an event not expanded yet holds its key on
// every route meanwhile. The event's own row takes Routes[0] and one
// INSERT ... SELECT adds the further routes' rows. An event one of whose
// route ids is taken fails with store.ErrRouteIDTaken.
func (d *Driver) OutboxExpand(ctx context.Context, params *store.OutboxExpandParams) (int, error) {
	if err := params.Validate(); err != nil {
		return 0, fmt.Errorf("mysql: %w", err)
	}
	limit := min(params.Limit, maxExpand)
	var expanded int
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		expanded, err = d.expandIn(ctx, tx, params.EventType, params.Routes, limit)
		return err
	})
	if err != nil {
		return 0, wrap("expand", err)
	}
	return expanded, nil
}

func (d *Driver) expandIn(ctx context.Context, tx *sql.Tx, typ string, routes []string, limit int) (int, error) {
	cand, err := queryIDs(ctx, tx, d.q.expandCandidates, typ, limit)
	if err != nil || len(cand) == 0 {
		return 0, err
	}
	cand = store.SortedIDs(cand)
	ids, err := queryIDs(ctx, tx, inIDs(d.q.expandLock, len(cand)), append(idArgs(nil, cand), typ)...)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	return d.fanOutIn(ctx, tx, sqlstore.ExpandAll(ids, len(routes)), routes, false)
}

// OutboxSplit splits the given PENDING rows of route "" that a shared
// claim sent to every route (store.Expander): in one READ COMMITTED
// transaction, the rows are locked through the primary key in id order
// as the expander locks them, skipping those another transaction holds
// and those no longer PENDING of the type with route "". Each gets a copy
// for every route that did not acknowledge it, then takes Routes[0] or,
// when route 0 acknowledged it, is deleted (one DELETE per id, as
// deleteEach explains). A row one of whose needed route ids is taken
// fails with store.ErrRouteIDTaken and is kept.
func (d *Driver) OutboxSplit(ctx context.Context, params *store.OutboxSplitParams) (int, error) {
	if err := params.Validate(); err != nil {
		return 0, fmt.Errorf("mysql: %w", err)
	}
	ids := make([]txbox.ID, len(params.Rows))
	for j, r := range params.Rows {
		ids[j] = r.ID
	}
	ids = store.SortedIDs(ids)
	var split int
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		split = 0
		locked, err := queryIDs(ctx, tx, inIDs(d.q.expandLock, len(ids)), append(idArgs(nil, ids), params.EventType)...)
		if err != nil || len(locked) == 0 {
			return err
		}
		split, err = d.fanOutIn(ctx, tx, sqlstore.SplitPlan(locked, params.Rows, len(params.Routes)), params.Routes, params.Retain)
		return err
	})
	if err != nil {
		return 0, wrap("split", err)
	}
	return split, nil
}

// fanOutIn makes the route rows of rows, PENDING rows of route "" that tx
// has locked, in id order, and returns how many it fanned out. A route id
// is taken when another row has it already, or when two rows of the call
// (ids dense in the last byte) would share one; the later row then fails.
func (d *Driver) fanOutIn(ctx context.Context, tx *sql.Tx, rows []sqlstore.FanOut, routes []string, retain bool) (int, error) {
	taken := map[txbox.ID]bool{}
	if all := sqlstore.CopyIDs(rows); len(all) > 0 {
		takenIDs, err := queryIDs(ctx, tx, inIDs(d.q.expandTaken, len(all)), idArgs(nil, all)...)
		if err != nil {
			return 0, err
		}
		for _, id := range takenIDs {
			taken[id] = true
		}
	}
	ok, failed := sqlstore.Partition(rows, taken)
	if len(failed) > 0 {
		failed = store.SortedIDs(failed)
		args := append([]any{store.NotSentPrefix + store.ErrRouteIDTaken}, idArgs(nil, failed)...)
		if _, err := tx.ExecContext(ctx, inIDs(d.q.expandFail, len(failed)), args...); err != nil {
			return 0, err
		}
	}
	// The copies first, while the rows still have route "" (the SELECTs
	// read them by id alone).
	if err := d.insertCopies(ctx, tx, ok, routes); err != nil {
		return 0, err
	}
	keep, drop := sqlstore.Kept(ok)
	if len(keep) > 0 {
		args := append([]any{routes[0]}, idArgs(nil, keep)...)
		if _, err := tx.ExecContext(ctx, inIDs(d.q.expandFirst, len(keep)), args...); err != nil {
			return 0, err
		}
	}
	if retain && len(drop) > 0 {
		args := append([]any{routes[0]}, idArgs(nil, drop)...)
		_, err := tx.ExecContext(ctx, inIDs(d.q.splitRetain, len(drop)), args...)
		return len(ok), err
	}
	if err := deleteEach(ctx, tx, d.q.outboxDeleteOne, drop); err != nil {
		return 0, err
	}
	return len(ok), nil
}

// insertCopies adds the copies of rows with one INSERT ... SELECT ...
// UNION ALL ..., one SELECT of the row per copy.
func (d *Driver) insertCopies(ctx context.Context, tx *sql.Tx, rows []sqlstore.FanOut, routes []string) error {
	var q strings.Builder
	var args []any
	for _, f := range rows {
		for _, i := range f.Copies {
			if len(args) == 0 {
				q.WriteString(d.q.expandInsert)
			} else {
				q.WriteString(" UNION ALL ")
			}
			q.WriteString(d.q.expandCopy)
			args = append(args, store.RouteRowID(f.ID, i).String(), routes[i], f.ID.String())
		}
	}
	if len(args) == 0 {
		return nil
	}
	_, err := tx.ExecContext(ctx, q.String(), args...)
	return err
}

// OutboxPendingRoutes lists the (type, route) pairs of PENDING rows with a
// route, and how many rows each has (store.Expander).
func (d *Driver) OutboxPendingRoutes(ctx context.Context) ([]store.TypeRoute, error) {
	rows, err := d.db.QueryContext(ctx, d.q.pendingRoutes)
	if err != nil {
		return nil, wrap("pending routes", err)
	}
	defer rows.Close()
	var out []store.TypeRoute
	for rows.Next() {
		var tr store.TypeRoute
		if err := rows.Scan(&tr.EventType, &tr.Route, &tr.Pending); err != nil {
			return nil, wrap("pending routes", err)
		}
		out = append(out, tr)
	}
	return out, wrap("pending routes", rows.Err())
}

// OutboxDropRoute fails up to Limit PENDING rows of the type and route
// with the reason, attempts unchanged (store.Expander): a read of
// candidates, then one write by primary key that checks them again, the
// shape of readThenWrite.
func (d *Driver) OutboxDropRoute(ctx context.Context, params *store.OutboxDropRouteParams) (int, error) {
	if params == nil || params.Limit < 1 || params.Route == "" || params.EventType == "" {
		return 0, fmt.Errorf("%w: drop route needs an event type, a route and Limit >= 1", ErrInvalidParams)
	}
	ids, err := queryIDs(ctx, d.db, d.q.dropRouteSelect, params.EventType, params.Route, params.Limit)
	if err != nil || len(ids) == 0 {
		return 0, wrap("drop route", err)
	}
	ids = store.SortedIDs(ids)
	args := append([]any{cleanError(params.Reason)}, idArgs(nil, ids)...)
	n, err := d.exec(ctx, inIDs(d.q.dropRouteWrite, len(ids)), append(args, params.EventType, params.Route)...)
	if err != nil {
		return 0, wrap("drop route", err)
	}
	return int(n), nil
}
