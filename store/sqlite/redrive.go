package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/internal/sqlstore"
)

// redriveUpdate sets the page's rows that are still PROCESSED back to
// PENDING (+ id list): attempts 0, due now, lease, last error and
// processed_at cleared. The rows keep their id and rowid, so an ordered
// type's key order (rowid) puts them back where they were.
const redriveUpdate = `UPDATE {outbox} SET status = 'PENDING', attempts = 0, due_at = {now},
 lease_until = NULL, lease_token = NULL, last_error = NULL, processed_at = NULL
WHERE status = 'PROCESSED' AND id IN `

// OutboxRedrive reads one page of kept (PROCESSED) rows and, unless it is
// a dry run, sets them back to PENDING in the same write transaction, so
// with SQLite's single writer every selected row is changed. SQLite has
// no NOTIFY: a relay in another process takes the rows at its next poll,
// an in-process one when woken (relay.Relay.Wake). See
// store.OutboxRedriver.
func (d *Driver) OutboxRedrive(ctx context.Context, params *store.OutboxRedriveParams) (*store.OutboxRedriveResult, error) {
	query, args, err := sqlstore.RedriveSQL{
		Outbox: quote(d.tables.Outbox),
		KeyArg: func(key string) any { return key },
		// Text times, compared as text, rounded up to the schema's
		// milliseconds (as the dead-letter filter's).
		Time:      formatTime,
		Precision: time.Millisecond,
		InIDs:     func(n int) string { return "id IN " + placeholders(n) },
		Invalid:   ErrInvalidParams,
	}.Select(params)
	if err != nil {
		return nil, err
	}
	if err := d.check(); err != nil {
		return nil, err
	}
	res := &store.OutboxRedriveResult{}
	page := func(q interface {
		QueryContext(context.Context, string, ...any) (*sql.Rows, error)
	}) ([]any, error) {
		*res = store.OutboxRedriveResult{}
		rows, err := q.QueryContext(ctx, query, args...)
		if err != nil {
			return nil, err
		}
		return sqlstore.Collect(rows, nil, func(r *sql.Rows) (any, error) {
			var id string
			var processed sql.NullString
			if err := r.Scan(&id, &processed); err != nil {
				return nil, err
			}
			parsed, err := txbox.ParseID(id)
			if err != nil {
				return nil, fmt.Errorf("row id %q: %w", id, err)
			}
			t, _ := parseTime(processed.String)
			res.Add(parsed, t)
			return id, nil
		})
	}
	if params.DryRun {
		if _, err := page(d.db); err != nil {
			return nil, d.translate(fmt.Errorf("outbox redrive: %w", err))
		}
		return res, nil
	}
	update := buildRedriveUpdate(d.tables)
	err = d.write(ctx, func(tx *sql.Tx) error {
		ids, err := page(tx)
		if err != nil || len(ids) == 0 {
			return err
		}
		n, err := execChunked(ctx, tx, update, ids)
		res.Changed = n
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("outbox redrive: %w", err)
	}
	return res, nil
}

func buildRedriveUpdate(t store.Tables) string {
	return strings.NewReplacer("{outbox}", quote(t.Outbox), "{now}", nowSQL).Replace(redriveUpdate)
}

// Every txbox dialect redrives kept events.
var _ store.OutboxRedriver = (*Driver)(nil)
