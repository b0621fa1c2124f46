package mysql

// The inbox queries (store.Inbox). Written by the inbox engineer; the inbox
// table itself is created by this package's migration.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/internal/sqlstore"
)

var _ store.Inbox = (*Driver)(nil)

// inboxTx is the store.InboxTx of the MySQL driver: a *sql.Tx at READ
// COMMITTED.
type inboxTx struct{ tx *sql.Tx }

func (t inboxTx) Native() any                    { return t.tx }
func (t inboxTx) Commit(context.Context) error   { return wrap("inbox commit", t.tx.Commit()) }
func (t inboxTx) Rollback(context.Context) error { return rollbackErr(t.tx.Rollback()) }

func rollbackErr(err error) error {
	if err == nil || errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return wrap("inbox rollback", err)
}

// InboxBegin starts a READ COMMITTED transaction whose Native value is a
// *sql.Tx. At READ COMMITTED InnoDB takes no gap locks, so deliveries of
// different ids never wait for each other; a duplicate of an uncommitted id
// waits on that row's lock.
func (d *Driver) InboxBegin(ctx context.Context) (store.InboxTx, error) {
	tx, err := d.begin(ctx)
	if err != nil {
		return nil, wrap("inbox begin", err)
	}
	return inboxTx{tx: tx}, nil
}

// InboxRecord records params.IDs for params.Consumer with INSERT IGNORE and
// returns the new ids in input order. MySQL has no RETURNING, so the
// affected-row count says how many were new: one multi-row INSERT answers
// when all or none were new (the common cases); a mixed batch is rolled
// back to a savepoint and recorded one id at a time. Ids are inserted in
// sorted order so overlapping batches lock in the same order. See
// store.Inbox.
func (d *Driver) InboxRecord(ctx context.Context, tx any, params *store.InboxRecordParams) ([]txbox.ID, error) {
	ex, err := txExecer(tx)
	if err != nil {
		return nil, err
	}
	if err := sqlstore.CheckInboxRecord("mysql", ErrInvalidParams, params); err != nil {
		return nil, err
	}
	ids := store.SortedIDs(params.IDs)
	if len(ids) == 0 {
		return nil, nil
	}
	insert := func(batch []txbox.ID) (int64, error) {
		var b strings.Builder
		b.WriteString(d.q.inboxInsert)
		args := make([]any, 0, 2*len(batch))
		for i, id := range batch {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(d.q.inboxRow)
			args = append(args, params.Consumer, id.String())
		}
		res, err := ex.ExecContext(ctx, b.String(), args...)
		if err != nil {
			return 0, recordErr(err)
		}
		return res.RowsAffected()
	}
	fresh := make(map[txbox.ID]bool, len(ids))
	if len(ids) == 1 {
		n, err := insert(ids)
		if err != nil {
			return nil, err
		}
		if n == 1 {
			fresh[ids[0]] = true
		}
		return store.InputOrder(params.IDs, fresh), nil
	}
	if _, err := ex.ExecContext(ctx, inboxSavepoint); err != nil {
		return nil, wrap("inbox record", err)
	}
	n, err := insert(ids)
	if err != nil {
		return nil, err
	}
	switch {
	case n == int64(len(ids)):
		for _, id := range ids {
			fresh[id] = true
		}
	case n == 0:
	default:
		if _, err := ex.ExecContext(ctx, inboxRollbackTo); err != nil {
			return nil, wrap("inbox record", err)
		}
		for _, id := range ids {
			n, err := insert([]txbox.ID{id})
			if err != nil {
				return nil, err
			}
			if n == 1 {
				fresh[id] = true
			}
		}
	}
	return store.InputOrder(params.IDs, fresh), nil
}

// recordErr marks a deadlock as store.ErrTxConflict: InnoDB rolled the
// whole transaction back, and the inbox retries it. INSERT IGNORE's
// duplicate check takes shared next-key locks even at READ COMMITTED, so
// overlapping batches (or three deliveries of one id when the first rolls
// back) can deadlock.
func recordErr(err error) error {
	if isDeadlock(err) {
		return fmt.Errorf("mysql: inbox record: %w: %w", store.ErrTxConflict, err)
	}
	return wrap("inbox record", err)
}

// InboxCleanup deletes up to Limit ids recorded more than OlderThan ago,
// oldest first, in one bounded DELETE on the processed_at index.
func (d *Driver) InboxCleanup(ctx context.Context, params *store.CleanupParams) (int, error) {
	if err := checkCleanup(params); err != nil {
		return 0, err
	}
	n, err := d.exec(ctx, d.q.inboxCleanup, micros(params.OlderThan), params.Limit)
	if err != nil {
		return 0, wrap("inbox cleanup", err)
	}
	return int(n), nil
}

// SQLTx returns the *sql.Tx inside the tx an inbox handler receives from a
// MySQL store. It returns txbox.ErrNoTransaction for nil (a
// non-transactional inbox) and an *txbox.UnsupportedTxError for anything
// else. inbox.Typed does the same generically.
func SQLTx(tx any) (*sql.Tx, error) {
	if n, ok := tx.(nativer); ok {
		tx = n.Native()
	}
	return sqlstore.SQLTx(Dialect, tx)
}
