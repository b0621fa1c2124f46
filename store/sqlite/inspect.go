package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/internal/inspect"
)

var (
	_ store.Inspector = (*Driver)(nil)
	_ store.Instances = (*Driver)(nil)
)

// inspectQueries: the operators' views (store.Inspector) and the relay
// heartbeats (store.Instances). Ages are computed with julianday on the
// database clock, in milliseconds (the schema's precision).
func inspectQueries(q *queries, r *strings.Replacer) {
	const groups = `SELECT event_type, status, status = 'PENDING' AND due_at <= {now}, min(CAST(attempts AS INTEGER), %d), count(*),
    coalesce(CAST(round((julianday('now') - julianday(min(created_at))) * 86400000.0) AS INTEGER), 0),
    coalesce(CAST(round((julianday(min(due_at)) - julianday('now')) * 86400000.0) AS INTEGER), 0)
FROM {outbox} WHERE status = '%s' GROUP BY 1, 2, 3, 4`
	n := store.AttemptsBuckets - 1
	q.inspectGroups = r.Replace(fmt.Sprintf(groups, n, store.StatusPending) + "\nUNION ALL\n" +
		fmt.Sprintf(groups, n, store.StatusInProcess) + "\nUNION ALL\n" + fmt.Sprintf(groups, n, store.StatusFailed))
	q.inspectLastError = r.Replace(`SELECT event_type, last_error FROM (
    SELECT event_type, last_error, row_number() OVER (PARTITION BY event_type ORDER BY due_at DESC, id DESC) AS rn
    FROM {outbox} WHERE status IN ('PENDING', 'IN_PROCESS', 'FAILED') AND attempts > 0 AND last_error IS NOT NULL)
WHERE rn = 1`)
	q.parkedKeys = r.Replace(`SELECT x.event_type, x.event_key, x.id, x.failed_at, coalesce(x.last_error, ''), x.n,
    (SELECT count(*) FROM {outbox} o WHERE o.event_type = x.event_type AND o.event_key = x.event_key AND o.status = 'PENDING')
FROM (
    SELECT event_type, event_key, id, failed_at, last_error,
        row_number() OVER (PARTITION BY event_type, event_key ORDER BY id) AS rn,
        count(*) OVER (PARTITION BY event_type, event_key) AS n
    FROM {dead_letter}
    WHERE status = 'UNRESOLVED' AND event_key IS NOT NULL AND (?1 = '' OR event_type = ?1)) x
WHERE x.rn = 1
ORDER BY x.event_type, x.event_key
LIMIT ?2`)
	q.instanceForget = r.Replace(`DELETE FROM {instance} WHERE expires_at < {now+} AND instance_id <> ?`)
	q.instanceBeat = r.Replace(`INSERT INTO {instance} (instance_id, info, started_at, seen_at, expires_at)
VALUES (?, ?, {now}, {now}, {now+})
ON CONFLICT (instance_id) DO UPDATE SET info = excluded.info, seen_at = excluded.seen_at, expires_at = excluded.expires_at`)
	q.instanceList = r.Replace(`SELECT instance_id, info, started_at, seen_at,
    CAST(round((julianday('now') - julianday(seen_at)) * 86400000.0) AS INTEGER), expires_at <= {now}
FROM {instance} ORDER BY seen_at DESC, instance_id`)
	q.instanceRemove = r.Replace(`DELETE FROM {instance} WHERE instance_id = ?`)
}

// OutboxInspect returns per-type details of the unfinished rows. See
// store.Inspector.
func (d *Driver) OutboxInspect(ctx context.Context) ([]*store.OutboxTypeDetail, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	query := func(q string) (inspect.Rows, func(), error) {
		rows, err := d.db.QueryContext(ctx, q)
		return rows, func() { rows.Close() }, err
	}
	out, err := inspect.Outbox(query, d.q.inspectGroups, d.q.inspectLastError, func(rows inspect.Rows, g *inspect.Group) error {
		var attempts sql.NullInt64
		var age, next int64
		err := rows.Scan(&g.EventType, &g.Status, &g.Due, &attempts, &g.Count, &age, &next)
		g.Attempts = int(attempts.Int64)
		g.OldestAge, g.NextDueIn = time.Duration(age)*time.Millisecond, time.Duration(next)*time.Millisecond
		return err
	})
	if err != nil {
		return nil, d.translate(fmt.Errorf("inspect: %w", err))
	}
	return out, nil
}

// DeadLetterParkedKeys lists the keys held back by unresolved dead
// letters. See store.Inspector.
func (d *Driver) DeadLetterParkedKeys(ctx context.Context, params *store.ParkedKeysParams) ([]*store.ParkedKey, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	if params == nil || params.Limit < 1 {
		return nil, fmt.Errorf("%w: parked keys needs Limit >= 1", ErrInvalidParams)
	}
	rows, err := d.db.QueryContext(ctx, d.q.parkedKeys, params.EventType, params.Limit)
	if err != nil {
		return nil, d.translate(fmt.Errorf("parked keys: %w", err))
	}
	defer rows.Close()
	out, err := inspect.ScanAll(rows, func(p *store.ParkedKey) error {
		var id, failed string
		err := rows.Scan(&p.EventType, &p.Key, &id, &failed, &p.LastError, &p.DeadLetters, &p.Waiting)
		p.DeadLetterID, _ = txbox.ParseID(id)
		p.FailedAt, _ = parseTime(failed)
		return err
	})
	if err != nil {
		return nil, d.translate(fmt.Errorf("parked keys: %w", err))
	}
	return out, nil
}

// InstanceHeartbeat forgets long-expired rows of other instances and
// upserts this one's, in one write transaction. See store.Instances.
func (d *Driver) InstanceHeartbeat(ctx context.Context, params *store.InstanceHeartbeatParams) error {
	if err := d.check(); err != nil {
		return err
	}
	if err := params.Validate(); err != nil {
		return fmt.Errorf("sqlite: heartbeat: %w", err)
	}
	id := store.SanitizeText(params.ID)
	err := d.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, d.q.instanceForget, modifier(-store.InstanceForgetAfter), id); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, d.q.instanceBeat, id, store.SanitizeText(params.Info), modifier(params.TTL))
		return err
	})
	if err != nil {
		return d.translate(fmt.Errorf("heartbeat: %w", err))
	}
	return nil
}

// InstanceList lists the heartbeat rows, most recently seen first.
func (d *Driver) InstanceList(ctx context.Context) ([]*store.Instance, error) {
	rows, err := d.query(ctx, "instances", d.q.instanceList)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out, err := inspect.ScanAll(rows, func(in *store.Instance) error {
		var started, seen string
		var ago int64
		err := rows.Scan(&in.ID, &in.Info, &started, &seen, &ago, &in.Expired)
		in.StartedAt, _ = parseTime(started)
		in.SeenAt, _ = parseTime(seen)
		in.SeenAgo = max(0, time.Duration(ago)*time.Millisecond)
		return err
	})
	if err != nil {
		return nil, d.translate(fmt.Errorf("instances: %w", err))
	}
	return out, nil
}

// InstanceRemove deletes the instance's heartbeat row.
func (d *Driver) InstanceRemove(ctx context.Context, id string) error {
	if err := d.check(); err != nil {
		return err
	}
	if _, err := d.writeExec(ctx, d.q.instanceRemove, store.SanitizeText(id)); err != nil {
		return fmt.Errorf("instance remove: %w", err)
	}
	return nil
}
