package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/internal/inspect"
)

var (
	_ store.Inspector = (*Driver)(nil)
	_ store.Instances = (*Driver)(nil)
)

// inspectQueries: the operators' views (store.Inspector) and the relay
// heartbeats (store.Instances). The outbox reads go through the claim
// index, which leads with the status, so the PROCESSED history kept for
// retention is never read.
func (d *Driver) inspectQueries(q *queries) {
	const unfinished = " FORCE INDEX (txbox_claim) WHERE status IN ('PENDING', 'IN_PROCESS', 'FAILED')"
	q.inspectGroups = d.render(fmt.Sprintf("SELECT event_type, status, status = 'PENDING' AND due_at <= UTC_TIMESTAMP(6), LEAST(attempts, %d), COUNT(*),"+
		" TIMESTAMPDIFF(MICROSECOND, MIN(created_at), UTC_TIMESTAMP(6)), TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), MIN(due_at))"+
		" FROM {{outbox}}"+unfinished+" GROUP BY 1, 2, 3, 4", store.AttemptsBuckets-1))
	q.inspectLastError = d.render("SELECT event_type, last_error FROM (SELECT event_type, last_error," +
		" ROW_NUMBER() OVER (PARTITION BY event_type ORDER BY due_at DESC, id DESC) AS rn FROM {{outbox}}" + unfinished +
		" AND attempts > 0 AND last_error IS NOT NULL) x WHERE rn = 1")
	q.parkedKeys = d.render("SELECT x.event_type, x.event_key, x.id, x.failed_at, COALESCE(x.last_error, ''), x.n," +
		" (SELECT COUNT(*) FROM {{outbox}} o WHERE o.event_type = x.event_type AND o.status = 'PENDING' AND o.event_key = x.event_key)" +
		" FROM (SELECT event_type, event_key, id, failed_at, last_error," +
		" ROW_NUMBER() OVER (PARTITION BY event_type, event_key ORDER BY id) AS rn," +
		" COUNT(*) OVER (PARTITION BY event_type, event_key) AS n" +
		" FROM {{dead_letter}} WHERE status = 'UNRESOLVED' AND event_key IS NOT NULL AND (? = '' OR event_type = ?)) x" +
		" WHERE x.rn = 1 ORDER BY x.event_type, x.event_key LIMIT ?")
	q.instanceForget = d.render("DELETE FROM {{instance}} WHERE expires_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND AND instance_id <> ?")
	q.instanceBeat = d.render("INSERT INTO {{instance}} (instance_id, info, started_at, seen_at, expires_at)" +
		" VALUES (?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)" +
		" ON DUPLICATE KEY UPDATE info = VALUES(info), seen_at = VALUES(seen_at), expires_at = VALUES(expires_at)")
	q.instanceList = d.render("SELECT instance_id, info, started_at, seen_at, TIMESTAMPDIFF(MICROSECOND, seen_at, UTC_TIMESTAMP(6))," +
		" expires_at <= UTC_TIMESTAMP(6) FROM {{instance}} ORDER BY seen_at DESC, instance_id")
	q.instanceRemove = d.render("DELETE FROM {{instance}} WHERE instance_id = ?")
}

// OutboxInspect returns per-type details of the unfinished rows. See
// store.Inspector.
func (d *Driver) OutboxInspect(ctx context.Context) ([]*store.OutboxTypeDetail, error) {
	query := func(q string) (inspect.Rows, func(), error) {
		rows, err := d.db.QueryContext(ctx, q)
		return rows, func() { rows.Close() }, err
	}
	out, err := inspect.Outbox(query, d.q.inspectGroups, d.q.inspectLastError, func(rows inspect.Rows, g *inspect.Group) error {
		var age, next sql.NullInt64
		err := rows.Scan(&g.EventType, &g.Status, &g.Due, &g.Attempts, &g.Count, &age, &next)
		g.OldestAge = time.Duration(age.Int64) * time.Microsecond
		g.NextDueIn = time.Duration(next.Int64) * time.Microsecond
		return err
	})
	if err != nil {
		return nil, wrap("inspect", err)
	}
	return out, nil
}

// DeadLetterParkedKeys lists the keys held back by unresolved dead
// letters. See store.Inspector.
func (d *Driver) DeadLetterParkedKeys(ctx context.Context, params *store.ParkedKeysParams) ([]*store.ParkedKey, error) {
	if params == nil || params.Limit < 1 {
		return nil, fmt.Errorf("%w: parked keys needs Limit >= 1", ErrInvalidParams)
	}
	rows, err := d.db.QueryContext(ctx, d.q.parkedKeys, params.EventType, params.EventType, params.Limit)
	if err != nil {
		return nil, wrap("parked keys", err)
	}
	defer rows.Close()
	out, err := inspect.ScanAll(rows, func(p *store.ParkedKey) error {
		return rows.Scan(&p.EventType, &p.Key, idScan{&p.DeadLetterID}, nullTime{&p.FailedAt}, &p.LastError, &p.DeadLetters, &p.Waiting)
	})
	if err != nil {
		return nil, wrap("parked keys", err)
	}
	return out, nil
}

// InstanceHeartbeat forgets long-expired rows of other instances and
// upserts this one's. See store.Instances.
func (d *Driver) InstanceHeartbeat(ctx context.Context, params *store.InstanceHeartbeatParams) error {
	if err := params.Validate(); err != nil {
		return fmt.Errorf("mysql: heartbeat: %w", err)
	}
	id := store.SanitizeText(params.ID)
	if _, err := d.exec(ctx, d.q.instanceForget, micros(store.InstanceForgetAfter), id); err != nil {
		return wrap("heartbeat", err)
	}
	_, err := d.exec(ctx, d.q.instanceBeat, id, store.SanitizeText(params.Info), micros(params.TTL))
	return wrap("heartbeat", err)
}

// InstanceList lists the heartbeat rows, most recently seen first.
func (d *Driver) InstanceList(ctx context.Context) ([]*store.Instance, error) {
	rows, err := d.db.QueryContext(ctx, d.q.instanceList)
	if err != nil {
		return nil, wrap("instances", err)
	}
	defer rows.Close()
	out, err := inspect.ScanAll(rows, func(in *store.Instance) error {
		var ago int64
		err := rows.Scan(&in.ID, &in.Info, nullTime{&in.StartedAt}, nullTime{&in.SeenAt}, &ago, &in.Expired)
		in.SeenAgo = max(0, time.Duration(ago)*time.Microsecond)
		return err
	})
	if err != nil {
		return nil, wrap("instances", err)
	}
	return out, nil
}

// InstanceRemove deletes the instance's heartbeat row.
func (d *Driver) InstanceRemove(ctx context.Context, id string) error {
	_, err := d.exec(ctx, d.q.instanceRemove, store.SanitizeText(id))
	return wrap("instance remove", err)
}
