package mysql

import (
	"context"
	"database/sql"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/internal/sqlstore"
)

// redriveUpdate sets the page's rows that are still PROCESSED back to
// PENDING: attempts 0, due now, lease, last error and processed_at
// cleared. The rows keep their id, so an ordered type's key order (by id
// on MySQL/MariaDB) puts them back where they were.
const redriveUpdate = "UPDATE {{outbox}} SET status = 'PENDING', attempts = 0, due_at = UTC_TIMESTAMP(6)," +
	" lease_until = NULL, lease_token = NULL, last_error = NULL, processed_at = NULL" +
	" WHERE status = 'PROCESSED' AND id IN ({{ids}})"

// OutboxRedrive reads one page of kept (PROCESSED) rows without locks and,
// unless it is a dry run, sets those still PROCESSED back to PENDING by
// primary key, in id order (docs/schema/mysql.md, "Lock order"); a row
// cleaned up or changed in between is matched but not changed. MySQL has
// no NOTIFY: a relay in another process takes the rows at its next poll,
// an in-process one when woken (relay.Relay.Wake). See
// store.OutboxRedriver.
func (d *Driver) OutboxRedrive(ctx context.Context, params *store.OutboxRedriveParams) (*store.OutboxRedriveResult, error) {
	query, args, err := sqlstore.RedriveSQL{
		Outbox:    d.qOutbox,
		KeyArg:    func(key string) any { return []byte(key) },
		Time:      dbTimeArg,
		Precision: time.Microsecond,
		InIDs:     func(n int) string { return inIDs("id IN ({{ids}})", n) },
		Invalid:   ErrInvalidParams,
	}.Select(params)
	if err != nil {
		return nil, err
	}
	rows, err := d.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, wrap("outbox redrive", err)
	}
	res := &store.OutboxRedriveResult{}
	var ids []txbox.ID
	_, err = sqlstore.Collect(rows, nil, func(r *sql.Rows) (struct{}, error) {
		var id txbox.ID
		var at time.Time
		if err := r.Scan(idScan{&id}, nullTime{&at}); err != nil {
			return struct{}{}, err
		}
		res.Add(id, at)
		ids = append(ids, id)
		return struct{}{}, nil
	})
	if err != nil {
		return nil, wrap("outbox redrive", err)
	}
	if params.DryRun || len(ids) == 0 {
		return res, nil
	}
	n, err := d.exec(ctx, inIDs(d.render(redriveUpdate), len(ids)), idArgs(nil, ids)...)
	if err != nil {
		return nil, wrap("outbox redrive", err)
	}
	res.Changed = int(n)
	return res, nil
}

// Every txbox dialect redrives kept events.
var _ store.OutboxRedriver = (*Driver)(nil)
