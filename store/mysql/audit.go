package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"math"

	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/internal/sqlstore"
)

// auditQueries are the statements of the audit trail (store.AuditLog).
type auditQueries struct {
	append, at, list, listAction, cleanup string
}

// auditSQL renders the audit trail's statements. A listing is one of two
// statements rather than one with optional conditions, so each walks an
// index newest first: the primary key, or (action, id) for one action.
// Without a cursor, the id bound is the largest BIGINT.
func (d *Driver) auditSQL(q *queries) {
	t := d.qualify(d.tables.Audit)
	const cols = "id, at, who, action, selector, filter, dry_run, matched, changed, error"
	q.audit.append = "INSERT INTO " + t + " (at, who, action, selector, filter, dry_run, matched, changed, error)" +
		" VALUES (UTC_TIMESTAMP(6), ?, ?, ?, ?, ?, ?, ?, ?)"
	q.audit.at = "SELECT at FROM " + t + " WHERE id = ?"
	q.audit.list = "SELECT " + cols + " FROM " + t + " WHERE id < ? ORDER BY id DESC LIMIT ?"
	q.audit.listAction = "SELECT " + cols + " FROM " + t + " FORCE INDEX (txbox_audit_action) WHERE action = ? AND id < ? ORDER BY action DESC, id DESC LIMIT ?"
	// A single-table DELETE with ORDER BY and LIMIT, as the inbox's
	// cleanup: the at index gives the oldest rows, and the limit bounds
	// the locks one statement takes.
	q.audit.cleanup = "DELETE FROM " + t + " WHERE at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND ORDER BY at LIMIT ?"
}

// AuditAppend writes e to the audit table and sets its ID and At. See
// store.AuditLog.
func (d *Driver) AuditAppend(ctx context.Context, e *store.AuditEntry) error {
	if err := e.Validate(); err != nil {
		return fmt.Errorf("%w: audit append: %w", ErrInvalidParams, err)
	}
	e.Normalize()
	errText := sql.NullString{String: e.Error, Valid: e.Error != ""}
	res, err := d.db.ExecContext(ctx, d.q.audit.append, e.Who, e.Action, e.Selector, e.Filter, e.DryRun, e.Matched, e.Changed, errText)
	if err != nil {
		return wrap("audit append", err)
	}
	if e.ID, err = res.LastInsertId(); err != nil {
		return wrap("audit append", err)
	}
	if err := d.db.QueryRowContext(ctx, d.q.audit.at, e.ID).Scan(nullTime{&e.At}); err != nil {
		return wrap("audit append: read its time", err)
	}
	return nil
}

// AuditList lists audit entries newest first after params.After. See
// store.AuditLog.
func (d *Driver) AuditList(ctx context.Context, params *store.AuditListParams) ([]*store.AuditEntry, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("%w: audit list: %w", ErrInvalidParams, err)
	}
	before := params.After
	if before == 0 {
		before = math.MaxInt64
	}
	query, args := d.q.audit.list, []any{before, params.Limit}
	if params.Action != "" {
		query, args = d.q.audit.listAction, []any{params.Action, before, params.Limit}
	}
	rows, err := d.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, wrap("audit list", err)
	}
	defer rows.Close()
	out := []*store.AuditEntry{}
	for rows.Next() {
		e := &store.AuditEntry{}
		var errText sql.NullString
		if err := rows.Scan(&e.ID, nullTime{&e.At}, &e.Who, &e.Action, &e.Selector, &e.Filter, &e.DryRun, &e.Matched, &e.Changed, &errText); err != nil {
			return nil, wrap("audit list", err)
		}
		e.Error = errText.String
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("audit list", err)
	}
	return out, nil
}

// AuditCleanup deletes up to Limit audit entries written more than
// OlderThan ago, oldest first. See store.AuditLog.
func (d *Driver) AuditCleanup(ctx context.Context, params *store.CleanupParams) (int, error) {
	if err := checkCleanup(params); err != nil {
		return 0, err
	}
	n, err := sqlstore.Affected(d.db.ExecContext(ctx, d.q.audit.cleanup, micros(params.OlderThan), params.Limit))
	if err != nil {
		return 0, wrap("audit cleanup", err)
	}
	return int(n), nil
}

var _ store.AuditLog = (*Driver)(nil)
