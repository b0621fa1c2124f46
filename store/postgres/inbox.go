package postgres

// The inbox queries (store.Inbox). Written by the inbox engineer; the inbox
// table itself is created by this package's migration.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

var _ store.Inbox = (*Driver)(nil)

// inboxTx is the store.InboxTx of the PostgreSQL driver: a pgx.Tx from the
// driver's pool.
type inboxTx struct {
	tx pgx.Tx
	d  *Driver
}

func (t inboxTx) Native() any { return t.tx }
func (t inboxTx) Commit(ctx context.Context) error {
	return t.d.translate("inbox commit", t.tx.Commit(ctx))
}
func (t inboxTx) Rollback(ctx context.Context) error { return rollbackErr(t.tx.Rollback(ctx)) }

func rollbackErr(err error) error {
	if err == nil || errors.Is(err, pgx.ErrTxClosed) {
		return nil
	}
	return translate("inbox rollback", err)
}

// InboxBegin starts a READ COMMITTED transaction on the driver's pool. Its
// Native value is a pgx.Tx (see PgxTx). READ COMMITTED is pinned rather
// than inherited because at REPEATABLE READ a concurrent duplicate would
// fail with a serialization error instead of being reported as a
// duplicate.
func (d *Driver) InboxBegin(ctx context.Context) (store.InboxTx, error) {
	tx, err := d.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return nil, d.translate("inbox begin", err)
	}
	return inboxTx{tx: tx, d: d}, nil
}

// queryer is the part of *sql.Tx (and ORM transactions) InboxRecord needs:
// RETURNING tells which ids were new.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// InboxRecord records params.IDs for params.Consumer in tx with one
// INSERT … ON CONFLICT DO NOTHING RETURNING and returns the new ids in
// input order. A concurrent transaction that inserted the same id first
// makes this insert wait for its outcome: commit → not new, rollback → new.
// See store.Inbox.
func (d *Driver) InboxRecord(ctx context.Context, tx any, params *store.InboxRecordParams) ([]txbox.ID, error) {
	if it, ok := tx.(store.InboxTx); ok {
		tx = it.Native()
	}
	ex, err := adaptTx(tx)
	if err != nil {
		return nil, err
	}
	if params == nil {
		return nil, errBadParams("inbox record", "params are nil")
	}
	if err := store.ValidateConsumerName(params.Consumer); err != nil {
		return nil, fmt.Errorf("postgres: inbox record: %w", err)
	}
	ids := store.SortedIDs(params.IDs)
	if len(ids) == 0 {
		return nil, nil
	}
	fresh := make(map[uuid.UUID]bool, len(ids))
	if ex.native() {
		rows, err := ex.pgx.Query(ctx, d.q.inboxRecordNative, params.Consumer, ids)
		if err != nil {
			return nil, d.recordErr(err)
		}
		var id uuid.UUID
		_, err = pgx.ForEachRow(rows, []any{&id}, func() error { fresh[id] = true; return nil })
		if err != nil {
			return nil, d.recordErr(err)
		}
	} else {
		q, ok := ex.std.(queryer)
		if !ok {
			return nil, &txbox.UnsupportedTxError{Dialect: Dialect, Type: fmt.Sprintf("%T (no QueryContext)", tx)}
		}
		rows, err := q.QueryContext(ctx, d.q.inboxRecordText, params.Consumer, uuidArrayText(ids))
		if err != nil {
			return nil, d.recordErr(err)
		}
		defer rows.Close()
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				return nil, d.translate("inbox record", err)
			}
			id, err := uuid.Parse(s)
			if err != nil {
				return nil, fmt.Errorf("postgres: inbox record: %w", err)
			}
			fresh[id] = true
		}
		if err := rows.Err(); err != nil {
			return nil, d.recordErr(err)
		}
	}
	return store.InputOrder(params.IDs, fresh), nil
}

// recordErr marks deadlocks and serialization failures (a caller's
// REPEATABLE READ or SERIALIZABLE transaction) as store.ErrTxConflict, by
// SQLSTATE.
func (d *Driver) recordErr(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001") {
		return fmt.Errorf("postgres: inbox record: %w: %w", store.ErrTxConflict, err)
	}
	return d.translate("inbox record", err)
}

// InboxCleanup deletes up to Limit ids recorded more than OlderThan ago, on
// the database clock, using the processed_at index. See store.Inbox.
func (d *Driver) InboxCleanup(ctx context.Context, params *store.CleanupParams) (int, error) {
	return d.cleanup(ctx, "inbox cleanup", d.q.inboxCleanup, params)
}

// PgxTx returns the pgx.Tx inside the tx an inbox handler receives from a
// PostgreSQL store. It returns txbox.ErrNoTransaction for nil (a
// non-transactional inbox) and an *txbox.UnsupportedTxError for anything
// else. inbox.Typed does the same generically.
func PgxTx(tx any) (pgx.Tx, error) {
	if it, ok := tx.(store.InboxTx); ok {
		tx = it.Native()
	}
	switch v := tx.(type) {
	case nil:
		return nil, txbox.ErrNoTransaction
	case pgx.Tx:
		return v, nil
	default:
		return nil, &txbox.UnsupportedTxError{Dialect: Dialect, Type: fmt.Sprintf("%T", tx)}
	}
}
