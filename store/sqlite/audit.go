package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strings"

	"github.com/txbox/txbox/store"
)

// auditQueries are the statements of the audit trail (store.AuditLog).
type auditQueries struct {
	append, list, listAction, cleanup string
}

// auditSQL renders the audit trail's statements for table. A listing is
// one of two statements rather than one with optional conditions, so each
// walks an index newest first: the rowid, or (action, id) for one action.
// Without a cursor, the id bound is the largest integer.
func auditSQL(q *queries, table string) {
	r := strings.NewReplacer("{audit}", quote(table), "{now}", nowSQL, "{now+}", nowPlusSQL)
	const cols = `id, at, who, action, selector, filter, dry_run, matched, changed, error`
	q.audit.append = r.Replace(`INSERT INTO {audit} (at, who, action, selector, filter, dry_run, matched, changed, error)
VALUES ({now}, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id, at`)
	q.audit.list = r.Replace(`SELECT ` + cols + ` FROM {audit} WHERE id < ? ORDER BY id DESC LIMIT ?`)
	q.audit.listAction = r.Replace(`SELECT ` + cols + ` FROM {audit} WHERE action = ? AND id < ? ORDER BY action DESC, id DESC LIMIT ?`)
	q.audit.cleanup = r.Replace(`DELETE FROM {audit}
WHERE id IN (
    SELECT id FROM {audit}
    WHERE at < {now+}
    ORDER BY at
    LIMIT ?)`)
}

// AuditAppend writes e to the audit table and sets its ID and At. See
// store.AuditLog.
func (d *Driver) AuditAppend(ctx context.Context, e *store.AuditEntry) error {
	if err := e.Validate(); err != nil {
		return fmt.Errorf("%w: audit append: %w", ErrInvalidParams, err)
	}
	e.Normalize()
	errText := sql.NullString{String: e.Error, Valid: e.Error != ""}
	var at string
	err := d.write(ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, d.q.audit.append, e.Who, e.Action, e.Selector, e.Filter, e.DryRun, e.Matched, e.Changed, errText).
			Scan(&e.ID, &at)
	})
	if err != nil {
		return fmt.Errorf("audit append: %w", err)
	}
	e.At, err = parseTime(at)
	return err
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
	rows, err := d.query(ctx, "audit list", query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []*store.AuditEntry{}
	for rows.Next() {
		e := &store.AuditEntry{}
		var at string
		var errText sql.NullString
		if err := rows.Scan(&e.ID, &at, &e.Who, &e.Action, &e.Selector, &e.Filter, &e.DryRun, &e.Matched, &e.Changed, &errText); err != nil {
			return nil, d.translate(fmt.Errorf("audit list: %w", err))
		}
		// Leniently, like the dead-letter listing: an unreadable time
		// (a row written by hand) lists as the zero time.
		e.At, _ = parseTime(at)
		e.Error = errText.String
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, d.translate(fmt.Errorf("audit list: %w", err))
	}
	return out, nil
}

// AuditCleanup deletes up to Limit audit entries written more than
// OlderThan ago, oldest first. See store.AuditLog.
func (d *Driver) AuditCleanup(ctx context.Context, params *store.CleanupParams) (int, error) {
	return d.cleanup(ctx, "audit cleanup", d.q.audit.cleanup, params)
}

var _ store.AuditLog = (*Driver)(nil)
