package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/internal/inspect"
)

var (
	_ store.Inspector = (*Driver)(nil)
	_ store.Instances = (*Driver)(nil)
)

// inspectQueries: the operators' views (store.Inspector) and the relay
// heartbeats (store.Instances).
func (d *Driver) inspectQueries(q *queries) {
	// One branch per partial index, as the stats query, so the processed
	// history is never read.
	const groups = `
	SELECT event_type, status, status = 'PENDING' AND due_at <= now(), LEAST(attempts, %d), count(*),
		COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8,
		COALESCE(EXTRACT(EPOCH FROM min(due_at) - now()), 0)::float8
	FROM {{outbox}} WHERE status = '%s' GROUP BY 1, 2, 3, 4`
	q.inspectGroups = d.render(fmt.Sprintf(groups, store.AttemptsBuckets-1, store.StatusPending) + " UNION ALL " +
		fmt.Sprintf(groups, store.AttemptsBuckets-1, store.StatusInProcess) + " UNION ALL " +
		fmt.Sprintf(groups, store.AttemptsBuckets-1, store.StatusFailed))
	q.inspectLastError = d.render(`
	SELECT DISTINCT ON (event_type) event_type, last_error FROM {{outbox}}
	WHERE status IN ('PENDING', 'IN_PROCESS', 'FAILED') AND attempts > 0 AND last_error IS NOT NULL
	ORDER BY event_type, due_at DESC, id DESC`)
	// A key's waiting rows are counted route by route (the key index is
	// (event_type, route, event_key, ...)): a loose index scan finds the
	// type's routes, one probe each, and each route's count reads only
	// that key's entries.
	q.parkedKeys = d.render(`
	SELECT x.event_type, x.event_key, x.id, x.failed_at, COALESCE(x.last_error, ''), x.n,
		(WITH RECURSIVE r(route) AS (
			(SELECT e.route FROM {{outbox}} e
			 WHERE e.event_type = x.event_type AND e.event_key IS NOT NULL AND e.status IN ('PENDING', 'IN_PROCESS', 'FAILED')
			 ORDER BY e.route LIMIT 1)
		  UNION ALL
			SELECT (SELECT e.route FROM {{outbox}} e
			 WHERE e.event_type = x.event_type AND e.route > r.route
			   AND e.event_key IS NOT NULL AND e.status IN ('PENDING', 'IN_PROCESS', 'FAILED')
			 ORDER BY e.route LIMIT 1)
			FROM r WHERE r.route IS NOT NULL
		)
		SELECT COALESCE(sum((SELECT count(*) FROM {{outbox}} o
			WHERE o.event_type = x.event_type AND o.route = r.route AND o.event_key = x.event_key
			  AND o.event_key IS NOT NULL AND o.status = 'PENDING')), 0)::bigint
		FROM r WHERE r.route IS NOT NULL)
	FROM (
		SELECT DISTINCT ON (event_type, event_key) event_type, event_key, id, failed_at, last_error,
			count(*) OVER (PARTITION BY event_type, event_key) AS n
		FROM {{dead_letter}}
		WHERE status = 'UNRESOLVED' AND event_key IS NOT NULL AND ($1 = '' OR event_type = $1)
		ORDER BY event_type, event_key, id
	) x
	ORDER BY x.event_type, x.event_key
	LIMIT $2`)
	d.instanceQueries(q)
	// The oldest xid-holding transaction of the cluster (store.HorizonInspector):
	// sessions from pg_stat_activity (backend_xid is the top-level xid,
	// 32 bits: age() orders them), prepared transactions from
	// pg_prepared_xacts. The full xid8 is rebuilt from the snapshot's
	// xmax (the next xid, with its epoch): a transaction still in progress
	// is less than 2^31 xids older. Nothing here assigns this session an
	// xid, which would hold the horizon itself.
	q.horizonHolder = `
	SELECT h.pid, h.gid, h.db, h.usr, h.app, h.state,
		n.next - ((n.next % 4294967296) - h.xid32 + 4294967296) % 4294967296,
		COALESCE(EXTRACT(EPOCH FROM now() - h.since), 0)::float8
	FROM (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS next) n,
	(
		SELECT a.pid, '' AS gid, COALESCE(a.datname, '') AS db, COALESCE(a.usename, '') AS usr,
			COALESCE(a.application_name, '') AS app, COALESCE(a.state, '') AS state,
			a.backend_xid::text::bigint AS xid32, age(a.backend_xid) AS xid_age, a.xact_start AS since
		FROM pg_stat_activity a
		WHERE a.backend_xid IS NOT NULL AND a.pid <> pg_backend_pid()
	  UNION ALL
		SELECT 0, p.gid, p.database, p.owner::text, '', 'prepared',
			p.transaction::text::bigint, age(p.transaction), p.prepared
		FROM pg_prepared_xacts p
	) h
	ORDER BY h.xid_age DESC
	LIMIT 1`
}

// instanceQueries are the relay heartbeats' (store.Instances).
func (d *Driver) instanceQueries(q *queries) {
	// One statement: forget long-expired rows of other instances, then
	// upsert this one's.
	q.instanceBeat = d.render(`
	WITH forgotten AS (
		DELETE FROM {{instance}}
		WHERE expires_at < now() - $4::float8 * interval '1 microsecond' AND instance_id <> $1
	)
	INSERT INTO {{instance}} (instance_id, info, started_at, seen_at, expires_at)
	VALUES ($1, $2, now(), now(), now() + $3::float8 * interval '1 microsecond')
	ON CONFLICT (instance_id) DO UPDATE SET info = EXCLUDED.info, seen_at = now(), expires_at = EXCLUDED.expires_at`)
	q.instanceList = d.render(`
	SELECT instance_id, info, started_at, seen_at, EXTRACT(EPOCH FROM now() - seen_at)::float8, expires_at <= now()
	FROM {{instance}} ORDER BY seen_at DESC, instance_id`)
	q.instanceRemove = d.render(`DELETE FROM {{instance}} WHERE instance_id = $1`)
}

var (
	_ store.HorizonInspector = (*Driver)(nil)
	_ store.FenceInspector   = (*Driver)(nil)
)

// OutboxHorizonHolder returns the oldest transaction of the cluster that
// holds a transaction id. See store.HorizonInspector.
func (d *Driver) OutboxHorizonHolder(ctx context.Context) (*store.HorizonHolder, error) {
	var (
		h   store.HorizonHolder
		xid int64
		age float64
	)
	err := d.pool.QueryRow(ctx, d.q.horizonHolder).Scan(&h.PID, &h.Prepared, &h.Database, &h.User, &h.Application, &h.State, &xid, &age)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, d.translate("horizon holder", err)
	}
	h.XID, h.Age = uint64(xid), time.Duration(age*float64(time.Second)).Round(time.Millisecond)
	return &h, nil
}

// OutboxFenceHolder is the former name of OutboxHorizonHolder.
//
// Deprecated: use OutboxHorizonHolder.
func (d *Driver) OutboxFenceHolder(ctx context.Context) (*store.HorizonHolder, error) {
	return d.OutboxHorizonHolder(ctx)
}

// OutboxInspect returns per-type details of the unfinished rows. See
// store.Inspector.
func (d *Driver) OutboxInspect(ctx context.Context) ([]*store.OutboxTypeDetail, error) {
	query := func(q string) (inspect.Rows, func(), error) {
		rows, err := d.pool.Query(ctx, q)
		return rows, func() { rows.Close() }, err
	}
	out, err := inspect.Outbox(query, d.q.inspectGroups, d.q.inspectLastError, func(rows inspect.Rows, g *inspect.Group) error {
		var age, next float64
		err := rows.Scan(&g.EventType, &g.Status, &g.Due, &g.Attempts, &g.Count, &age, &next)
		g.OldestAge, g.NextDueIn = inspect.Seconds(age), inspect.Seconds(next)
		return err
	})
	if err != nil {
		return nil, d.translate("inspect", err)
	}
	return out, nil
}

// DeadLetterParkedKeys lists the keys held back by unresolved dead
// letters. See store.Inspector.
func (d *Driver) DeadLetterParkedKeys(ctx context.Context, params *store.ParkedKeysParams) ([]*store.ParkedKey, error) {
	if params == nil || params.Limit < 1 {
		return nil, errBadParams("parked keys", "limit must be at least 1")
	}
	rows, err := d.pool.Query(ctx, d.q.parkedKeys, params.EventType, params.Limit)
	if err != nil {
		return nil, d.translate("parked keys", err)
	}
	defer rows.Close()
	out, err := inspect.ScanAll(rows, func(p *store.ParkedKey) error {
		return rows.Scan(&p.EventType, &p.Key, uuidDest{&p.DeadLetterID}, &p.FailedAt, &p.LastError, &p.DeadLetters, &p.Waiting)
	})
	if err != nil {
		return nil, d.translate("parked keys", err)
	}
	return out, nil
}

// InstanceHeartbeat upserts the instance's heartbeat row. See
// store.Instances.
func (d *Driver) InstanceHeartbeat(ctx context.Context, params *store.InstanceHeartbeatParams) error {
	if err := params.Validate(); err != nil {
		return errBadParams("heartbeat", "%v", err)
	}
	_, err := d.pool.Exec(ctx, d.q.instanceBeat, store.SanitizeText(params.ID), store.SanitizeText(params.Info),
		float64(params.TTL.Microseconds()), float64(store.InstanceForgetAfter.Microseconds()))
	return d.translate("heartbeat", err)
}

// InstanceList lists the heartbeat rows, most recently seen first.
func (d *Driver) InstanceList(ctx context.Context) ([]*store.Instance, error) {
	rows, err := d.pool.Query(ctx, d.q.instanceList)
	if err != nil {
		return nil, d.translate("instances", err)
	}
	defer rows.Close()
	out, err := inspect.ScanAll(rows, func(in *store.Instance) error {
		var ago float64
		err := rows.Scan(&in.ID, &in.Info, &in.StartedAt, &in.SeenAt, &ago, &in.Expired)
		in.SeenAgo = max(0, inspect.Seconds(ago))
		return err
	})
	if err != nil {
		return nil, d.translate("instances", err)
	}
	return out, nil
}

// InstanceRemove deletes the instance's heartbeat row.
func (d *Driver) InstanceRemove(ctx context.Context, id string) error {
	_, err := d.pool.Exec(ctx, d.q.instanceRemove, store.SanitizeText(id))
	return d.translate("instance remove", err)
}
