package sqlstore

import (
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/txbox/txbox/store"
)

// DeadLetterSQL is how a dialect writes the conditions of a dead-letter
// filter and of a listing's keyset cursor; Where puts them together the
// same way for every dialect.
type DeadLetterSQL struct {
	// KeyArg is the bound argument of the event_key = ? condition (the
	// column is text in one dialect, bytes in another).
	KeyArg func(key string) any
	// ErrorContains returns the condition and its argument of a
	// case-insensitive substring match on last_error.
	ErrorContains func(s string) (cond string, arg any)
	// Time renders a time as the dialect's failed_at text.
	Time func(t time.Time) string
	// Precision is the resolution failed_at stores: filter bounds are
	// rounded up to it (store.FilterBound).
	Precision time.Duration
	// InIDs returns the condition id IN (...) with n placeholders.
	InIDs func(n int) string
	// After is the keyset condition of a listing's cursor, with three
	// placeholders: failed_at, failed_at again and id.
	After string
	// Invalid is the dialect's ErrInvalidParams, which a filter that does
	// not validate wraps.
	Invalid error
}

// Where renders a filter (nil matches all) and a listing's cursor (nil:
// the first page) as " WHERE ..." (or "") and its arguments.
func (q DeadLetterSQL) Where(f *store.DeadLetterFilter, after *store.DeadLetterCursor) (string, []any, error) {
	if err := f.Validate(); err != nil {
		return "", nil, fmt.Errorf("%w: %w", q.Invalid, err)
	}
	if f == nil {
		f = &store.DeadLetterFilter{}
	}
	var conds []string
	var args []any
	add := func(cond string, arg ...any) {
		conds = append(conds, cond)
		args = append(args, arg...)
	}
	if f.EventType != "" {
		add("event_type = ?", f.EventType)
	}
	if f.Status != "" {
		add("status = ?", f.Status)
	}
	if f.Key != "" {
		add("event_key = ?", q.KeyArg(f.Key))
	}
	if f.ErrorContains != "" {
		cond, arg := q.ErrorContains(f.ErrorContains)
		add(cond, arg)
	}
	// Validate kept the bounds within four-digit years, so the text
	// compares (or converts) as the column's does.
	if !f.FailedAfter.IsZero() {
		add("failed_at >= ?", q.Time(store.FilterBound(f.FailedAfter, q.Precision)))
	}
	if !f.FailedBefore.IsZero() {
		add("failed_at < ?", q.Time(store.FilterBound(f.FailedBefore, q.Precision)))
	}
	if f.Group != "" {
		add("fingerprint = ?", f.Group)
	}
	if f.Route != "" {
		// The column compares bytes (utf8mb4_bin on MySQL, BINARY on
		// SQLite), as PostgreSQL's text does: route names are
		// case-sensitive everywhere.
		add("route = ?", f.Route)
	}
	if len(f.IDs) > 0 {
		conds = append(conds, q.InIDs(len(f.IDs)))
		for _, id := range f.IDs {
			args = append(args, id.String())
		}
	}
	if after != nil {
		t := q.Time(after.FailedAt)
		add(q.After, t, t, after.ID.String())
	}
	if len(conds) == 0 {
		return "", nil, nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args, nil
}

// Collect appends what scan reads from each of rows to out and closes
// rows. On an error it returns nil and the error, unwrapped: the dialect
// names the operation.
func Collect[T any](rows *sql.Rows, out []T, scan func(*sql.Rows) (T, error)) ([]T, error) {
	defer rows.Close()
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// Affected returns the rows a statement changed, taking ExecContext's two
// results as they come: Affected(tx.ExecContext(ctx, query, args...)).
func Affected(r sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}
