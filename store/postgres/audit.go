package postgres

import (
	"context"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txbox/txbox/store"
)

// auditQueries are the statements of the audit trail (store.AuditLog).
type auditQueries struct {
	append, list, listAction, cleanup string
}

// auditSQL renders the audit trail's statements. A listing is one of two
// statements rather than one with optional conditions, so each keeps a
// plan that walks an index newest first: the primary key, or (action, id)
// for one action. Without a cursor, the id bound is the largest bigint.
func (d *Driver) auditSQL(q *queries) {
	t := d.table(d.tables.Audit)
	const cols = `id, at, who, action, selector, filter, dry_run, matched, changed, error`
	q.audit.append = `INSERT INTO ` + t + ` (who, action, selector, filter, dry_run, matched, changed, error)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id, at`
	q.audit.list = `SELECT ` + cols + ` FROM ` + t + ` WHERE id < $1 ORDER BY id DESC LIMIT $2`
	q.audit.listAction = `SELECT ` + cols + ` FROM ` + t + ` WHERE action = $3 AND id < $1 ORDER BY action DESC, id DESC LIMIT $2`
	q.audit.cleanup = `DELETE FROM ` + t + ` WHERE id IN (
		SELECT id FROM ` + t + `
		WHERE at < now() - $1::float8 * interval '1 microsecond'
		ORDER BY at
		LIMIT $2
		FOR UPDATE SKIP LOCKED)`
}

// AuditAppend writes e to the audit table and sets its ID and At. See
// store.AuditLog.
func (d *Driver) AuditAppend(ctx context.Context, e *store.AuditEntry) error {
	if err := e.Validate(); err != nil {
		return fmt.Errorf("postgres: audit append: %w", err)
	}
	e.Normalize()
	errText := pgtype.Text{String: e.Error, Valid: e.Error != ""}
	err := d.pool.QueryRow(ctx, d.q.audit.append, e.Who, e.Action, e.Selector, e.Filter, e.DryRun, e.Matched, e.Changed, errText).
		Scan(&e.ID, &e.At)
	if err != nil {
		return d.translate("audit append", err)
	}
	return nil
}

// AuditList lists audit entries newest first after params.After. See
// store.AuditLog.
func (d *Driver) AuditList(ctx context.Context, params *store.AuditListParams) ([]*store.AuditEntry, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("postgres: audit list: %w", err)
	}
	before := params.After
	if before == 0 {
		before = math.MaxInt64
	}
	query, args := d.q.audit.list, []any{before, params.Limit}
	if params.Action != "" {
		query, args = d.q.audit.listAction, append(args, params.Action)
	}
	rows, err := d.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, d.translate("audit list", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*store.AuditEntry, error) {
		e := &store.AuditEntry{}
		var errText pgtype.Text
		err := row.Scan(&e.ID, &e.At, &e.Who, &e.Action, &e.Selector, &e.Filter, &e.DryRun, &e.Matched, &e.Changed, &errText)
		e.Error = errText.String
		return e, err
	})
	if err != nil {
		return nil, d.translate("audit list", err)
	}
	return out, nil
}

// AuditCleanup deletes up to Limit audit entries written more than
// OlderThan ago, oldest first. See store.AuditLog.
func (d *Driver) AuditCleanup(ctx context.Context, params *store.CleanupParams) (int, error) {
	return d.cleanup(ctx, "audit cleanup", d.q.audit.cleanup, params)
}

var _ store.AuditLog = (*Driver)(nil)
